package lease_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

func TestExpiryIsExact(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	held := e.checkout(t, "t", "a", time.Minute)

	e.clock.Advance(time.Minute - time.Millisecond)
	var ce *lease.ConflictError
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b"}); !errors.As(err, &ce) {
		t.Fatalf("1ms before expiry: %v, want conflict", err)
	}
	if rem := ce.Holder.Remaining(e.clock.Now()); rem != time.Millisecond {
		t.Fatalf("remaining %v", rem)
	}

	e.clock.Advance(time.Millisecond) // exactly at expiry: no sweep has run
	task := must[lease.Task](t)(e.store.GetTask(c, "t"))
	if task.Checkout != nil || task.Status != lease.StatusTodo {
		t.Fatalf("expired lease shown live: %+v", task)
	}
	if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, "t")); lock != nil {
		t.Fatalf("expired lease locked: %+v", lock)
	}
	if live := must[[]lease.Checkout](t)(e.store.ListCheckouts(c, "")); len(live) != 0 {
		t.Fatalf("expired lease listed: %+v", live)
	}
	if _, err := e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a"}); !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Fatalf("renew after expiry: %v", err)
	}
	if _, err := e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"}); !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Fatalf("release after expiry: %v", err)
	}
	// An ended lease leaves its task todo in all but name: expecting only
	// in_progress or done is a status mismatch, not a takeover.
	for _, want := range [][]lease.Status{{lease.StatusDone}, {lease.StatusInProgress}} {
		var sm *lease.StatusMismatchError
		if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", ExpectedStatuses: want}); !errors.As(err, &sm) || sm.Status != lease.StatusTodo {
			t.Fatalf("expired lease, expecting %v: %v", want, err)
		}
	}
	// Takeover at once, with a timeout event for the old lease.
	b := e.checkout(t, "t", "b", time.Minute)
	if b.Fence != held.Fence+1 {
		t.Fatalf("fence %d after takeover of %d", b.Fence, held.Fence)
	}
	evs := e.events(t, "t")
	if got := kinds(evs); !slices.Equal(got, []lease.EventType{"checkout", "timeout", "checkout"}) {
		t.Fatalf("events %v", got)
	}
	if to := evs[1]; to.AgentID != "a" || to.Fence != held.Fence || to.Held == nil || *to.Held != time.Minute || to.By != lease.BySystem {
		t.Fatalf("timeout event %+v", to)
	}
	if e.noticeCount(t, lease.NoticeTaskAvailable, "t") != 0 {
		t.Fatal("a takeover must not announce the task")
	}
}

func TestRenewKeepsLeaseAlive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	held := e.checkout(t, "t", "a", time.Minute)
	for range 5 {
		e.clock.Advance(50 * time.Second)
		must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a", Fence: held.Fence}))
	}
	e.clock.Advance(59 * time.Second)
	var ce *lease.ConflictError
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b"}); !errors.As(err, &ce) || ce.Holder.Fence != held.Fence {
		t.Fatalf("renewed lease: %v, want conflict", err)
	}
}

func TestHeartbeatDeath(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	for _, id := range []string{"t", "u", "v"} {
		e.task(t, id)
	}
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", 30*time.Second))
	held := e.checkout(t, "t", "a", time.Hour)
	e.checkout(t, "u", "a", time.Hour)
	if err := e.store.Watch(c, "u", "w"); err != nil {
		t.Fatal(err)
	}

	e.clock.Advance(29 * time.Second)
	var ce *lease.ConflictError
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b"}); !errors.As(err, &ce) {
		t.Fatalf("holder alive: %v, want conflict", err)
	}

	e.clock.Advance(time.Second) // a's heartbeat has expired: a is dead
	if task := must[lease.Task](t)(e.store.GetTask(c, "t")); task.Checkout != nil {
		t.Fatalf("dead holder's lease shown live: %+v", task.Checkout)
	}
	b := e.checkout(t, "t", "b", time.Hour)
	if b.Fence != held.Fence+1 {
		t.Fatalf("takeover fence %d", b.Fence)
	}
	if got := kinds(e.events(t, "t")); !slices.Equal(got, []lease.EventType{"checkout", "agent_death", "checkout"}) {
		t.Fatalf("events %v", got)
	}
	if _, err := e.store.Renew(c, lease.RenewParams{TaskID: "u", AgentID: "a"}); !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Fatalf("dead holder renews: %v", err)
	}

	// The sweep ends u (nobody took it over), frees it and tells w once.
	e.caughtUp(t) // the sweep finds the death through an index
	res := must[lease.SweepResult](t)(e.store.Sweep(c))
	if res.AgentDeaths != 1 || res.Timeouts != 0 {
		t.Fatalf("sweep %+v", res)
	}
	if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res != (lease.SweepResult{}) {
		t.Fatalf("second sweep %+v", res)
	}
	if task := must[lease.Task](t)(e.store.GetTask(c, "u")); task.Status != lease.StatusTodo || task.Checkout != nil {
		t.Fatalf("swept task %+v", task)
	}
	if msgs := e.inbox(t, "w"); len(msgs) != 1 || msgs[0].Reason != "agent_death" {
		t.Fatalf("watcher inbox %+v", msgs)
	}

	// A lease taken while dead can be taken over at once.
	a2 := e.checkout(t, "v", "a", time.Hour)
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "v", AgentID: "b"}); err != nil {
		t.Fatalf("lease of a dead agent blocks: %v", err)
	}
	// Back to life: ended leases stay ended, new ones are live.
	e.clock.Advance(time.Second)
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", 30*time.Second))
	if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, "v")); lock == nil || lock.AgentID != "b" {
		t.Fatalf("v after a's return: %+v (a's lease was %d)", lock, a2.Fence)
	}
	// A lease locked in the very millisecond of the return counts as taken
	// while dead: a checkout that read a as dead may be taking it over.
	e.task(t, "w0")
	e.checkout(t, "w0", "a", time.Hour)
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "w0", AgentID: "b"}); err != nil {
		t.Fatalf("lease locked in the millisecond of the return: %v, want a takeover", err)
	}
	e.clock.Advance(time.Millisecond)
	e.task(t, "w1")
	e.checkout(t, "w1", "a", time.Hour)
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "w1", AgentID: "b"}); !errors.As(err, &ce) {
		t.Fatalf("live agent's new lease: %v, want conflict", err)
	}
}

// A lease taken before its holder died stays ended after the holder comes
// back, even if nobody took it over and no sweep ran.
func TestDeathOutlivesResurrection(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", 10*time.Second))
	e.checkout(t, "t", "a", time.Hour)
	e.clock.Advance(11 * time.Second)
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", 10*time.Second))
	if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, "t")); lock != nil {
		t.Fatalf("lease survived its holder's death: %+v", lock)
	}
	if _, err := e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a"}); !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Fatalf("renew of a lease ended by death: %v", err)
	}
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b"}); err != nil {
		t.Fatalf("takeover: %v", err)
	}
}

func TestFenceStrictlyIncreases(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	var fences []int64
	grant := func(agent string) lease.Checkout {
		got := e.checkout(t, "t", agent, time.Minute)
		fences = append(fences, got.Fence)
		return got
	}
	grant("a")
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"})) // release
	grant("b")
	e.clock.Advance(time.Minute) // expiry, taken over at checkout
	grant("c")
	e.clock.Advance(time.Minute) // expiry, ended by the sweep
	must[lease.SweepResult](t)(e.store.Sweep(c))
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "d", time.Second))
	grant("d")
	e.clock.Advance(time.Second) // holder death, taken over
	grant("e")
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true}))

	// TTL deletes old records: every event, every heartbeat, every message.
	e.drain(t)
	deleteAll(t, e, schema.EventsTable, "t")
	if _, err := e.db.DeleteItem(c, &dynamodb.DeleteItemInput{
		TableName: aws.String(e.names.Table(schema.HeartbeatsTable)),
		Key:       map[string]types.AttributeValue{"agent_id": &types.AttributeValueMemberS{Value: "d"}},
	}); err != nil {
		t.Fatal(err)
	}
	grant("f")
	for i := 1; i < len(fences); i++ {
		if fences[i] <= fences[i-1] {
			t.Fatalf("fences %v do not strictly increase", fences)
		}
	}
	if len(fences) != 6 {
		t.Fatalf("fences %v", fences)
	}
}

// deleteAll deletes every item of a partition, as TTL would.
func deleteAll(t *testing.T, e *env, table, pk string) {
	t.Helper()
	name := e.names.Table(table)
	expr, _ := expression.NewBuilder().WithKeyCondition(expression.Key("task_id").Equal(expression.Value(pk))).Build()
	out, err := e.db.Query(context.Background(), &dynamodb.QueryInput{
		TableName: &name, KeyConditionExpression: expr.KeyCondition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range out.Items {
		key := map[string]types.AttributeValue{"task_id": item["task_id"], "seq": item["seq"]}
		if _, err := e.db.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: &name, Key: key}); err != nil {
			t.Fatal(err)
		}
	}
	if len(out.Items) == 0 {
		t.Fatal("nothing to delete")
	}
}

// A holder read alive is remembered only while no fresh read could say
// otherwise: a later heartbeat that shortens the ttl still ends the lease on
// time.
func TestAliveHolderIsNotRememberedPastItsDeath(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Hour))
	e.checkout(t, "t", "a", time.Hour)
	var ce *lease.ConflictError
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b"}); !errors.As(err, &ce) {
		t.Fatalf("holder alive for an hour: %v", err)
	}
	// Another process shortens a's ttl to one second.
	other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	must[lease.Heartbeat](t)(other.Heartbeat(c, "a", time.Second))
	e.clock.Advance(time.Second)
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b"}); err != nil {
		t.Fatalf("holder dead by its latest heartbeat: %v, want a takeover", err)
	}
}
