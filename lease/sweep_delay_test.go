package lease_test

import (
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
)

// A not_before PATCHed onto a held task takes effect when the lease ends.
// A release gives the task its delayed claim key at once (keepDelay); the
// sweep's ending did not (its index entry does not carry not_before): the
// task was listed, and ranked for claims, among the ready tasks at its
// priority until a claim found it not ready. Each case ends the lease by
// the sweep, by a timeout and by its holder's death.
func TestASweptHeldNotBeforeIsListedAfterTheReady(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"timeout", "death"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			s, clock := newShardEnv(t)
			c := ctx(t)
			nine, zero := 9, 0
			must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "later", Priority: &nine}))
			if end == "death" {
				must[lease.Heartbeat](t)(s.Heartbeat(c, "a", time.Minute))
			}
			must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "later", AgentID: "a", Timeout: 10 * time.Minute}))
			nb := clock.Now().Add(time.Hour)
			must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "later", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
			if end == "death" {
				clock.Advance(2 * time.Minute) // the heartbeat has run out; the lease has not
			} else {
				clock.Advance(11 * time.Minute)
			}
			storeCaughtUp(t, s) // the sweep finds the lease or the death through an index
			res := must[lease.SweepResult](t)(s.Sweep(c))
			if res.Timeouts+res.AgentDeaths != 1 {
				t.Fatalf("sweep %+v: want the one lease ended by its %s", res, end)
			}
			clock.Advance(time.Millisecond)
			must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "ready", Priority: &zero}))
			storeCaughtUp(t, s) // the listing, and the sweep after, find the tasks through indexes
			if ids := todoIDs(t, s); !slices.Equal(ids, []string{"ready", "later"}) {
				t.Fatalf("todo listed %v; want [ready later]: later waits for its not_before an hour ahead", ids)
			}
			if got := must[lease.Task](t)(s.GetTask(c, "later")); got.NotBefore == nil || !got.NotBefore.Equal(nb) || got.Status != lease.StatusTodo {
				t.Fatalf("later after the sweep: status %s, not_before %v; want todo, %v", got.Status, got.NotBefore, nb)
			}
			// Its delay has its expiry entry: once not_before has passed, a
			// sweep ranks it ready again, ahead of the priority-0 task.
			clock.Advance(time.Hour)
			if res := must[lease.SweepResult](t)(s.Sweep(c)); res.Ready != 1 {
				t.Fatalf("sweep after not_before %+v; want later ranked ready", res)
			}
			storeCaughtUp(t, s) // the listing and the claim find later ranked ready
			if ids := todoIDs(t, s); !slices.Equal(ids, []string{"later", "ready"}) {
				t.Fatalf("todo listed %v after not_before passed; want [later ready]", ids)
			}
			got := must[lease.Checkout](t)(s.Claim(c, lease.ClaimParams{AgentID: "b"}))
			if got.TaskID != "later" {
				t.Fatalf("claim got %s; want later (priority 9, ready again)", got.TaskID)
			}
		})
	}
}

// A PATCH that clears the not_before between the sweep's two writes (the
// one that found the task waiting, and the one pinned to its delay): the
// lease still ends, and the task ranks as ready.
func TestASweptHeldNotBeforeClearedInBetweenEndsTheLeaseReady(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	nine, zero := 9, 0
	e.create(t, lease.CreateTaskParams{TaskID: "later", Priority: &nine})
	e.checkout(t, "later", "a", time.Minute)
	nb := e.clock.Now().Add(time.Hour)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "later", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	e.clock.Advance(2 * time.Minute)
	e.caughtUp(t) // the sweep finds the lease through an index
	slow, db := delayed(e)
	db.armAfter(func() { // the ending that found the task waiting
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "later", AgentID: "admin", Admin: true, SetNotBefore: true}); err != nil {
			t.Errorf("clear not_before: %v", err)
		}
	})
	if res := must[lease.SweepResult](t)(slow.Sweep(c)); res.Timeouts != 1 {
		t.Fatalf("sweep %+v; want the lease ended", res)
	}
	e.clock.Advance(time.Millisecond)
	e.create(t, lease.CreateTaskParams{TaskID: "ready", Priority: &zero})
	e.caughtUp(t) // the listing finds the tasks through an index
	if ids := todoIDs(t, e.store); !slices.Equal(ids, []string{"later", "ready"}) {
		t.Fatalf("todo listed %v; want [later ready]: later's not_before was cleared", ids)
	}
}

// A task on its last attempt fails when the sweep ends its lease, whatever
// not_before it was PATCHed to while held.
func TestASweptLastAttemptWithAHeldNotBeforeFails(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	one := 1
	e.create(t, lease.CreateTaskParams{TaskID: "t", MaxAttempts: &one})
	e.checkout(t, "t", "a", time.Minute)
	nb := e.clock.Now().Add(time.Hour)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	e.clock.Advance(2 * time.Minute)
	e.caughtUp(t) // the sweep finds the lease through an index
	if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res.Timeouts != 1 {
		t.Fatalf("sweep %+v; want the lease ended", res)
	}
	if got := e.get(t, "t"); got.Status != lease.StatusFailed {
		t.Fatalf("status %s after its last attempt timed out; want failed", got.Status)
	}
}

// leaveReadyKeyed puts a task whose lease has ended and that waits for a
// not_before PATCHed while it was held back under its ready claim key,
// with no entry in the expiry index: as a release whose keepDelay write
// did not land leaves it (and as the sweep's ending did before it gave
// such a task its delay). Tests of keepDelay start from it.
func leaveReadyKeyed(t testing.TB, db lease.DB, table, id string) {
	t.Helper()
	_, err := db.UpdateItem(ctx(t), &dynamodb.UpdateItemInput{
		TableName: aws.String(table), Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: id}},
		ConditionExpression: aws.String("attribute_not_exists(holder) AND attribute_exists(claim_rank)"),
		UpdateExpression:    aws.String("SET claim_key = claim_rank REMOVE lease_expires, lease_shard"),
	})
	if err != nil {
		t.Fatalf("leave %s under its ready key: %v", id, err)
	}
}

// A PATCH of the status, blocked_by or max_attempts ends a lease that has
// expired, or whose holder is dead, as the sweep would (endEnded), before
// it decides the change. That ending gave a task waiting for a not_before
// PATCHed while it was held its ready key, as the sweep's did; the PATCH's
// own write gave it its delay after, but a PATCH refused once the lease
// had ended (a max_attempts the attempts made reach) wrote nothing more,
// and the task was listed, and ranked for claims, among the ready tasks.
func TestAPatchThatEndsAnExpiredLeaseKeepsTheHeldNotBefore(t *testing.T) {
	t.Parallel()
	s, clock := newShardEnv(t)
	c := ctx(t)
	nine, zero, one := 9, 0, 1
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "later", Priority: &nine}))
	must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "later", AgentID: "a", Timeout: time.Minute}))
	nb := clock.Now().Add(time.Hour)
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "later", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	clock.Advance(2 * time.Minute)
	if _, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "later", AgentID: "b", MaxAttempts: &one}); err == nil {
		t.Fatal("max_attempts 1 after one attempt was accepted")
	}
	if got := must[lease.Task](t)(s.GetTask(c, "later")); got.Status != lease.StatusTodo || got.NotBefore == nil || !got.NotBefore.Equal(nb) {
		t.Fatalf("after the PATCH: status %s, not_before %v; want todo, %v", got.Status, got.NotBefore, nb)
	}
	clock.Advance(time.Millisecond)
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "ready", Priority: &zero}))
	storeCaughtUp(t, s) // the listing, and the sweep after, find the tasks through indexes
	if ids := todoIDs(t, s); !slices.Equal(ids, []string{"ready", "later"}) {
		t.Fatalf("todo listed %v; want [ready later]: later waits for its not_before an hour ahead", ids)
	}
	clock.Advance(time.Hour)
	if res := must[lease.SweepResult](t)(s.Sweep(c)); res.Ready != 1 {
		t.Fatalf("sweep after not_before %+v; want later ranked ready", res)
	}
	storeCaughtUp(t, s) // the listing finds later ranked ready
	if ids := todoIDs(t, s); !slices.Equal(ids, []string{"later", "ready"}) {
		t.Fatalf("todo listed %v after not_before passed; want [later ready]", ids)
	}
}

// A dependent in progress whose blocker is reopened is marked, and the
// sweep's ending of its lease makes it blocked (endLease). With a
// not_before ahead PATCHed while it was held, that ending cost 4 writes
// instead of 2: the sweep's first try was conditioned on the task being
// ready, the blocked write too, so both failed, and both were sent again
// pinned to the delay. The not_before costs no write: the freeing write
// is refused on the mark, and the blocked one takes the delay from the
// item that refusal returned.
func TestASweptMarkedLeaseWithANotBeforeCostsNoMoreWrites(t *testing.T) {
	t.Parallel()
	for _, end := range []string{"timeout", "death"} {
		t.Run(end, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "b")
			e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"b"}})
			e.complete(t, "b", "x")
			e.drain(t) // b's completion unblocks d
			if end == "death" {
				must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Minute))
			}
			e.checkout(t, "d", "a", 10*time.Minute)
			nb := e.clock.Now().Add(time.Hour)
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "b", AgentID: "x", Status: new(lease.StatusTodo)}))
			e.drain(t) // b's reopening marks d
			if end == "death" {
				e.clock.Advance(2 * time.Minute) // the heartbeat has run out; the lease has not
			} else {
				e.clock.Advance(11 * time.Minute)
			}
			e.caughtUp(t) // the sweep finds the lease or the death through an index
			e.count.Take()
			res := must[lease.SweepResult](t)(e.store.Sweep(c))
			if res.Timeouts+res.AgentDeaths != 1 {
				t.Fatalf("sweep %+v: want d's lease ended by its %s", res, end)
			}
			if n := e.count.Count("UpdateItem"); n != 2 {
				t.Errorf("the sweep sent %d writes; want 2: the freeing one, refused on the mark, and the blocked one", n)
			}
			if st := e.get(t, "d").Status; st != lease.StatusBlocked {
				t.Errorf("d after the sweep: %s; want blocked (b was reopened)", st)
			}
		})
	}
}
