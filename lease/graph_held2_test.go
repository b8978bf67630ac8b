package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/lease"
)

// oneByOne makes e's stream hand its changes over one per batch, as the
// stream may (a failed batch is handed again bisected, down to one).
func (e *env) oneByOne() {
	handle := e.poller.Handle
	e.poller.Handle = func(ctx context.Context, ev events.DynamoDBEvent) error {
		for _, r := range ev.Records {
			if err := handle(ctx, events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{r}}); err != nil {
				return err
			}
		}
		return nil
	}
}

// A reopen of a blocker handed over in a batch of its own, read by the
// stream when the blocker is done again, blocks no dependent, even for a
// moment: the completion that left it done comes later and would unblock
// them again, with an unblocked event each.
func TestAReopenAloneInItsBatchSeenAfterTheBlockerIsDoneAgainBlocksNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.oneByOne()
	c := ctx(t)
	e.task(t, "a")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"a"}})
	e.complete(t, "a", "x")
	e.drain(t)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", AgentID: "x", Status: new(lease.StatusTodo)}))
	e.complete(t, "a", "x")
	e.drain(t)
	if st := e.get(t, "d").Status; st != lease.StatusTodo {
		t.Fatalf("d: %s, want todo", st)
	}
	if n := count(e.events(t, "d"), lease.EventUnblocked); n != 1 {
		t.Errorf("d has %d unblocked events, want 1: it never waited again", n)
	}
}

// A todo task blocked again by its blocker's reopen leaves the claim
// index, as a task created blocked is never in it: a claim over its queue
// finds nothing to try, and writes nothing.
func TestATaskBlockedAgainLeavesTheClaimIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a")
	e.create(t, lease.CreateTaskParams{TaskID: "d", Queue: "reblocked", BlockedBy: []string{"a"}})
	e.complete(t, "a", "x")
	e.drain(t)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", AgentID: "x", Status: new(lease.StatusTodo)}))
	e.drain(t)
	if st := e.get(t, "d").Status; st != lease.StatusBlocked {
		t.Fatalf("d once a was reopened: %s, want blocked", st)
	}
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "y", time.Hour))
	e.caughtUp(t) // the claim reads the index
	e.count.Take()
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "y", Queues: []string{"reblocked"}}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("claim: %v, want no task available", err)
	}
	if ops := e.count.Take(); ops["UpdateItem"] != 0 {
		t.Errorf("the claim wrote %d times (%v): a blocked task was in the claim index", ops["UpdateItem"], ops)
	}
}
