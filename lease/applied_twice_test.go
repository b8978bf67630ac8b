package lease_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
)

// sentTwiceDB sends the first UpdateItem that sets attribute name twice,
// and answers with the second answer: what the SDK does when its first
// attempt applied but the answer was lost (a timeout, a stalled server),
// and it retries.
type sentTwiceDB struct {
	lease.DB
	name string
	sent atomic.Bool
}

func (d *sentTwiceDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if slices.Contains(mapValues(in.ExpressionAttributeNames), d.name) && d.sent.CompareAndSwap(false, true) {
		if _, err := d.DB.UpdateItem(ctx, in, opts...); err != nil {
			return nil, err
		}
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// A claim whose grant applied but whose answer was lost, and whose retry
// then failed its condition (the task is taken: by this very claim),
// answers with that lease. It used to take the task for another claimer's
// and grant the next one too: two live leases under one run id, one of
// which nobody was told of, held until it timed out (a failed attempt,
// and a lease_lost for a lease the agent never knew).
func TestAClaimWhoseGrantWasSentTwiceHoldsOneLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	for _, id := range []string{"c1", "c2", "c3"} {
		e.create(t, lease.CreateTaskParams{TaskID: id, Queue: "q"})
	}
	e.caughtUp(t)                                    // the claim finds the tasks through an index
	db := &sentTwiceDB{DB: e.db, name: "prev_agent"} // set by every grant
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	got, err := s.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "r1", Queues: []string{"q"}, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if !db.sent.Load() {
		t.Fatal("no grant was sent twice")
	}
	e.caughtUp(t) // the leases are listed through an index
	held := must[[]lease.Checkout](t)(e.store.ListCheckouts(c, "a"))
	if len(held) != 1 || held[0].TaskID != got.TaskID || held[0].RunID != "r1" || held[0].Fence != got.Fence {
		t.Fatalf("the claim answered %s (fence %d); a holds %d leases: %+v; want that one alone", got.TaskID, got.Fence, len(held), held)
	}
	if got.Attempt != 1 {
		t.Errorf("attempt %d, want 1", got.Attempt)
	}
}

// sentTwicePutDB sends the first PutItem whose item has attribute name
// twice, as sentTwiceDB does for UpdateItem.
type sentTwicePutDB struct {
	lease.DB
	name string
	sent atomic.Bool
}

func (d *sentTwicePutDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if _, ok := in.Item[d.name]; ok && d.sent.CompareAndSwap(false, true) {
		if _, err := d.DB.PutItem(ctx, in, opts...); err != nil {
			return nil, err
		}
	}
	return d.DB.PutItem(ctx, in, opts...)
}

// Registering an agent whose put applied but whose answer was lost, the
// SDK's retry then failing its condition, answers with the agent and its
// key, which works. It used to answer agent_exists, leaving the agent
// registered with no key item: its only key was lost, and every retry
// answered agent_exists.
func TestARegistrationSentTwiceAnswersWithAWorkingKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	db := &sentTwicePutDB{DB: e.db, name: "kind"} // the agent's item, not its key's
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	reg, err := s.RegisterAgent(c, lease.RegisterParams{AgentID: "newag", Name: "n"})
	if err != nil {
		t.Fatalf("a registration sent twice: %v, want the agent and its key", err)
	}
	if !db.sent.Load() {
		t.Fatal("no put was sent twice")
	}
	p, err := e.store.Authenticate(c, reg.APIKey)
	if err != nil || p.AgentID != "newag" {
		t.Fatalf("its key: %+v, %v; want it to name newag", p, err)
	}
	// Another registration of the id is still refused.
	if _, err := e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "newag", Name: "other"}); !errors.Is(err, lease.ErrAgentExists) {
		t.Fatalf("a second registration: %v, want agent_exists", err)
	}
}

// everyTwiceDB sends every PutItem and UpdateItem twice and answers with
// the second answer: every write applied with its answer lost, and sent
// again by the SDK.
type everyTwiceDB struct{ lease.DB }

func (d everyTwiceDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if _, err := d.DB.UpdateItem(ctx, in, opts...); err != nil {
		return nil, err
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}

func (d everyTwiceDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if _, err := d.DB.PutItem(ctx, in, opts...); err != nil {
		return nil, err
	}
	return d.DB.PutItem(ctx, in, opts...)
}

// Every operation whose writes are each applied and then sent again is
// answered as if sent once: the second sending fails its condition on
// the first's own result, which is not another writer's. A create used to
// answer task_exists; a release, completion or failed release that named
// no lease, not_checked_out; a PATCH with If-Match, version_mismatch; a
// PATCH of blocked_by waited 20 s for the graph's lock it held itself; a
// renewal was made twice, with two events.
func TestEveryWriteSentTwiceIsAnsweredAsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	s := lease.New(lease.Config{DB: everyTwiceDB{e.db}, Tables: e.names, Now: e.clock.Now})
	lease.WaitForGraphLock(s, time.Second)
	step := func(name string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	_, err := s.RegisterAgent(c, lease.RegisterParams{AgentID: "ag", Name: "n"})
	step("register", err)
	_, err = s.CreateTask(c, lease.CreateTaskParams{TaskID: "t1", Description: "a body of its own"})
	step("create", err)
	_, err = s.CreateTasks(c, []lease.CreateTaskParams{{TaskID: "t2"}, {TaskID: "t3"}, {TaskID: "t4"}, {TaskID: "t5"}})
	step("batch", err)
	_, err = s.Heartbeat(c, "ag", time.Minute)
	step("heartbeat", err)
	co, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "ag", Timeout: time.Hour})
	step("checkout", err)
	_, err = s.Renew(c, lease.RenewParams{TaskID: "t1", AgentID: "ag", RunID: co.RunID})
	step("renew", err)
	_, err = s.Release(c, lease.ReleaseParams{TaskID: "t1", AgentID: "ag"})
	step("release naming no lease", err)
	_, err = s.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "ag", Timeout: time.Hour})
	step("checkout again", err)
	done, err := s.Complete(c, lease.CompleteParams{TaskID: "t1", AgentID: "ag"})
	step("complete naming no lease", err)
	if err == nil && done.Status != lease.StatusDone {
		t.Errorf("complete answered %s", done.Status)
	}
	_, err = s.Checkout(c, lease.CheckoutParams{TaskID: "t2", AgentID: "ag", Timeout: time.Hour})
	step("checkout t2", err)
	_, err = s.Release(c, lease.ReleaseParams{TaskID: "t2", AgentID: "ag", Outcome: lease.OutcomeFailed, Error: "broke"})
	step("failed release naming no lease", err)
	title, d := "new", "new body"
	patched, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t3", AgentID: "ag", Title: &title, Description: &d, IfVersion: 1})
	step("PATCH with If-Match", err)
	if err == nil && (patched.Version != 2 || patched.Title != "new" || patched.Description != "new body") {
		t.Errorf("PATCH answered version %d, %q, %q", patched.Version, patched.Title, patched.Description)
	}
	_, err = s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t3", AgentID: "ag", BlockedBy: &[]string{"t4"}})
	step("PATCH of blocked_by", err)
	st := lease.StatusCancelled
	_, err = s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t4", AgentID: "ag", Status: &st})
	step("cancel", err)
	e.caughtUp(t) // the claim finds its task through an index
	_, err = s.Claim(c, lease.ClaimParams{AgentID: "ag", Timeout: time.Hour})
	step("claim", err)
	step("watch", s.Watch(c, "t3", "ag"))
	e.caughtUp(t) // the removal finds the claimed lease through an index
	step("remove", s.RemoveAgent(c, "ag"))

	// Each transition is in the trail once.
	for id, want := range map[string][]lease.EventType{
		"t1": {lease.EventCheckout, lease.EventRenew, lease.EventRelease, lease.EventCheckout, lease.EventComplete},
		"t2": {lease.EventCheckout, lease.EventRelease},
	} {
		var got []lease.EventType
		for _, ev := range e.events(t, id) {
			got = append(got, ev.Type)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s's trail %v, want %v", id, got, want)
		}
	}
}

// An admin's force release whose write applied, whose answer was lost
// and which the SDK sent again was answered 404 not_checked_out from the
// second sending's refusal, though it had ended the lease: the admin was
// told nothing was released. It is answered as released, with its own
// ending.
func TestAForceReleaseSentTwiceIsAnsweredAsReleased(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	e.checkout(t, "x", "ag", time.Hour)
	e.clock.Advance(time.Minute)
	s := lease.New(lease.Config{DB: everyTwiceDB{e.db}, Tables: e.names, Now: e.clock.Now})
	r, err := s.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "admin", Force: true})
	if err != nil {
		t.Fatalf("force release sent twice: %v, want it released", err)
	}
	if r.ReleasedBy != "admin" || r.Held != time.Minute {
		t.Fatalf("force release answered %+v, want released by admin after a minute held", r)
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "x")); got.Status != lease.StatusTodo || got.Checkout != nil {
		t.Fatalf("task after the force release: %s, lease %v", got.Status, got.Checkout)
	}
}
