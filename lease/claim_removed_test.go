package lease_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A claim that is waiting when its agent is removed gets no task: the
// agent's key stopped working at the removal's answer, and a grant to it
// would only end at once (agent removed) and use up the task's attempt,
// failing a task of one attempt nobody worked on.
func TestAWaitingClaimOfARemovedAgentGetsNoTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "gone", Name: "gone"}))
	done := make(chan error, 1)
	go func() {
		_, err := e.store.Claim(c, lease.ClaimParams{AgentID: "gone", Queues: []string{"removal"}, Wait: 10 * time.Second, Timeout: time.Minute})
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // the claim is waiting
	if err := e.store.RemoveAgent(c, "gone"); err != nil {
		t.Fatal(err)
	}
	e.create(t, lease.CreateTaskParams{TaskID: "fresh", Queue: "removal", MaxAttempts: new(1)})
	select {
	case err := <-done:
		if !errors.Is(err, lease.ErrUnauthorized) {
			t.Fatalf("the removed agent's waiting claim: %v, want unauthorized", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the claim did not return")
	}
	if got := e.get(t, "fresh"); got.Status != lease.StatusTodo || got.Attempts != 0 {
		t.Fatalf("the task after the removed agent's claim: %s, %d attempts; want todo, none used", got.Status, got.Attempts)
	}
}

// A named claim of an id removed and registered again is the new agent's:
// the receipt the removed agent's claim of the same run id left (kept 48 h)
// is not its own. Before, the new agent's claim read that receipt and
// answered the removed agent's ended lease, a lease it never held, and
// took no task. Its retry must then answer the lease it got.
func TestAClaimOfAnIdRegisteredAgainIgnoresTheRemovedAgentsReceipt(t *testing.T) {
	t.Parallel()
	for _, kept := range []string{"grant kept", "grant lost"} {
		t.Run(kept, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			q := lease.CreateTaskParams{Queue: "again"}
			for _, id := range []string{"x", "y"} {
				q.TaskID = id
				e.create(t, q)
			}
			claim := lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute, Queues: []string{"again"}}
			must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "a", Name: "a"}))
			e.caughtUp(t) // the claim finds the tasks through an index
			var first lease.Checkout
			if kept == "grant lost" {
				lossy := e.lossyStore()
				first = unkeptClaim(t, lossy, claim, "x", "y")
			} else {
				first = must[lease.Checkout](t)(e.store.Claim(c, claim))
			}
			e.clock.Advance(time.Second)
			e.caughtUp(t) // the removal finds the claimed lease through an index
			if err := e.store.RemoveAgent(c, "a"); err != nil {
				t.Fatal(err)
			}
			e.clock.Advance(time.Second)
			must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "a", Name: "a again"}))
			registered := e.clock.Now()
			e.clock.Advance(time.Second)
			e.caughtUp(t) // the claim finds the tasks through an index

			got := must[lease.Checkout](t)(e.store.Claim(c, claim))
			if got.Fence == first.Fence && got.TaskID == first.TaskID || got.LockedAt.Before(registered) {
				t.Fatalf("the claim of the agent registered again answered %s/%d locked %v, the removed agent's lease; want a lease of its own",
					got.TaskID, got.Fence, got.LockedAt)
			}
			if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, got.TaskID)); lock == nil || lock.Fence != got.Fence || lock.AgentID != "a" {
				t.Fatalf("%s holds %+v, want the new claim's lease %d", got.TaskID, lock, got.Fence)
			}
			e.clock.Advance(time.Second)
			e.caughtUp(t) // a claim in a row: its index shows the new lease
			again := must[lease.Checkout](t)(e.store.Claim(c, claim))
			if again.TaskID != got.TaskID || again.Fence != got.Fence || !again.LockedAt.Equal(got.LockedAt) {
				t.Fatalf("the retry answered %s/%d, want the new agent's lease %s/%d", again.TaskID, again.Fence, got.TaskID, got.Fence)
			}
			if live := must[[]lease.Checkout](t)(e.store.ListCheckouts(c, "a")); len(live) != 1 {
				t.Fatalf("the agent registered again holds %d leases, want 1: %+v", len(live), live)
			}
		})
	}
}

// A receipt written before receipts were stamped (no created) is judged
// by its ttl, which its last note set to that note's time plus 48 h: one
// whose last note came before the id was registered again is the removed
// agent's, and the new agent's claim of its run id is a fresh one.
func TestAClaimOfAnIdRegisteredAgainIgnoresAnUnstampedReceiptOfTheRemovedAgent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "x", Queue: "unstamped"})
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "a", Name: "a"}))
	old := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "x", AgentID: "a", RunID: "run-1", Timeout: time.Minute}))
	ttl := strconv.FormatInt(e.clock.Now().Add(2*lease.MaxTimeout).Unix(), 10)
	if _, err := e.db.PutItem(c, &dynamodb.PutItemInput{TableName: aws.String(e.names.Table(schema.HeartbeatsTable)), Item: map[string]types.AttributeValue{
		"agent_id": &types.AttributeValueMemberS{Value: "#claim#a#run-1"},
		"tried":    &types.AttributeValueMemberSS{Value: []string{"x"}},
		"ttl":      &types.AttributeValueMemberN{Value: ttl},
	}}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	e.caughtUp(t) // the removal finds the lease through an index
	if err := e.store.RemoveAgent(c, "a"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "a", Name: "a again"}))
	e.clock.Advance(time.Second)
	e.drain(t)
	e.caughtUp(t) // the claim finds x through an index
	got := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute, Queues: []string{"unstamped"}}))
	if got.Fence == old.Fence {
		t.Fatalf("the claim of the agent registered again answered the removed agent's lease (fence %d)", old.Fence)
	}
	if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, "x")); lock == nil || lock.Fence != got.Fence {
		t.Fatalf("x holds %+v, want the new claim's lease %d", lock, got.Fence)
	}
}

// beforeGrantKeptDB runs hook (once) right before the write that keeps a
// named claim's grant in its receipt.
type beforeGrantKeptDB struct {
	lease.DB
	hook func()
	ran  atomic.Bool
}

func (d *beforeGrantKeptDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	for _, name := range in.ExpressionAttributeNames {
		if name == "granted" && d.ran.CompareAndSwap(false, true) {
			d.hook()
		}
	}
	return d.DB.UpdateItem(ctx, in, opt...)
}

// A receipt deleted as the removed agent's while a claim of its run is
// about to keep its grant there (a claim in flight across the removal and
// the registration of the id again) is written again by that grant: it
// still expires, like every receipt, rather than stay for good.
func TestAReceiptWrittenAgainByAGrantAfterItsDeletionExpires(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "x", Queue: "inflight"})
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "a", Name: "a"}))
	db := &beforeGrantKeptDB{DB: e.db}
	db.hook = func() {
		e.clock.Advance(time.Second)
		e.caughtUp(t) // the removal finds the claim's lease through an index
		if err := e.store.RemoveAgent(c, "a"); err != nil {
			t.Error(err)
		}
		e.clock.Advance(time.Second)
		if _, err := e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "a", Name: "a again"}); err != nil {
			t.Error(err)
		}
		e.clock.Advance(time.Second)
		// The new agent's claim of the run finds the removed agent's
		// receipt, deletes it, and finds no task of its own.
		_, err := e.store.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute, Queues: []string{"nothing"}})
		if !errors.Is(err, lease.ErrNoTaskAvailable) {
			t.Errorf("the new agent's claim: %v, want no task available", err)
		}
	}
	inflight := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	e.caughtUp(t) // the claim finds x through an index
	must[lease.Checkout](t)(inflight.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute, Queues: []string{"inflight"}}))
	if !db.ran.Load() {
		t.Fatal("the claim kept no grant")
	}
	out, err := e.db.GetItem(c, &dynamodb.GetItemInput{
		TableName:      aws.String(e.names.Table(schema.HeartbeatsTable)),
		Key:            map[string]types.AttributeValue{"agent_id": &types.AttributeValueMemberS{Value: "#claim#a#run-1"}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	if out.Item == nil {
		return // not written again: nothing left behind
	}
	ttl, ok := out.Item["ttl"].(*types.AttributeValueMemberN)
	if !ok {
		t.Fatalf("the receipt left behind has no ttl, so never expires: %v", out.Item)
	}
	if at, latest := must[int64](t)(strconv.ParseInt(ttl.Value, 10, 64)), e.clock.Now().Add(2*lease.MaxTimeout).Unix(); at > latest {
		t.Fatalf("the receipt left behind expires at %d, after %d", at, latest)
	}
}

// A named claim of an id removed a second time does not answer a receipt
// its removed self made before the id was registered again: that receipt
// is an earlier agent's, whichever incarnation of the id claims now.
// Before, the second removal's tombstone dropped the registration's time,
// so the claim answered the earlier agent's ended lease as its own (a
// linearizability run of the work graph under index lag found it: a claim
// retry answered a lease 91 s past its expiry).
func TestAClaimOfAnIdRemovedAgainIgnoresAReceiptFromBeforeItsRegistration(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	for _, id := range []string{"x", "y"} {
		e.create(t, lease.CreateTaskParams{TaskID: id, Queue: "twice"})
	}
	claim := lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute, Queues: []string{"twice"}}
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "a", Name: "a"}))
	e.caughtUp(t) // the claim finds the tasks through an index
	first := must[lease.Checkout](t)(e.store.Claim(c, claim))
	e.clock.Advance(time.Second)
	e.caughtUp(t) // the removal finds the claimed lease through an index
	if err := e.store.RemoveAgent(c, "a"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "a", Name: "a again"}))
	registered := e.clock.Now()
	e.clock.Advance(time.Second)
	if err := e.store.RemoveAgent(c, "a"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	e.caughtUp(t)
	got, err := e.store.Claim(c, claim)
	if err == nil && (got.TaskID == first.TaskID && got.Fence == first.Fence || got.LockedAt.Before(registered)) {
		t.Fatalf("the claim of the id removed again answered %s/%d locked %v, the lease of the agent removed before its registration at %v",
			got.TaskID, got.Fence, got.LockedAt, registered)
	}
}
