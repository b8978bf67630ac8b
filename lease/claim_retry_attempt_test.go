package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A named claim whose grant applied but whose receipt keeps no grant (the
// write that keeps it failed: the first attempt's process died, or its
// answer was lost), retried after its lease ended, answers that lease as
// the claim got it: the task's second attempt, the agent's name, and the
// task's title, queue and priority; and a further retry, which the
// receipt then answers, the same. Before, the retry built the lease from
// the task's record of its ending (or of its takeover, or from the trail)
// with attempt 0 and the agent's id as its name (taken over, or found in
// the trail: no title, queue or priority either), and kept that in the
// receipt for every retry after.
func TestAClaimRetriedAfterItsUnkeptLeaseEndedAnswersItsAttempt(t *testing.T) {
	t.Parallel()
	const (
		q     = "q-retry-attempt"
		title = "the task as granted"
		prio  = 7
	)
	for _, tc := range []struct {
		name string
		// after ends a's lease (first), and moves the task on.
		after func(t *testing.T, e *env, first lease.Checkout)
	}{
		// Held still: the task names it (as it did before).
		{name: "still held", after: func(*testing.T, *env, lease.Checkout) {}},
		// The task's record of its last ending.
		{name: "released", after: func(t *testing.T, e *env, first lease.Checkout) {
			must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: first.TaskID, AgentID: "a", RunID: first.RunID, Fence: first.Fence}))
		}},
		// As granted, not as PATCHed since (grant_was).
		{name: "released, then PATCHed", after: func(t *testing.T, e *env, first lease.Checkout) {
			c := ctx(t)
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: first.TaskID, AgentID: "a", RunID: first.RunID, Fence: first.Fence}))
			e.clock.Advance(time.Second)
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: first.TaskID, AgentID: "admin", Admin: true,
				Title: new("patched since"), Priority: new(2)}))
		}},
		{name: "expired and swept", after: func(t *testing.T, e *env, first lease.Checkout) {
			e.clock.Advance(2 * time.Minute)
			e.caughtUp(t) // the sweep finds the lease through an index
			must[lease.SweepResult](t)(e.store.Sweep(ctx(t)))
		}},
		// The task's record of the lease its latest checkout took over.
		{name: "taken over by a named checkout", after: func(t *testing.T, e *env, first lease.Checkout) {
			e.clock.Advance(2 * time.Minute)
			e.checkout(t, first.TaskID, "b", time.Minute)
		}},
		// The record of its ending, one grant on (b's, the third attempt).
		{name: "released, then granted to b", after: func(t *testing.T, e *env, first lease.Checkout) {
			must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: first.TaskID, AgentID: "a", RunID: first.RunID, Fence: first.Fence}))
			e.clock.Advance(time.Second)
			e.checkout(t, first.TaskID, "b", time.Minute)
		}},
		// Moved on: the grant is in the trail alone.
		{name: "released, then granted to b and released", after: func(t *testing.T, e *env, first lease.Checkout) {
			c := ctx(t)
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: first.TaskID, AgentID: "a", RunID: first.RunID, Fence: first.Fence}))
			e.clock.Advance(time.Second)
			b := e.checkout(t, first.TaskID, "b", time.Minute)
			e.clock.Advance(time.Second)
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: first.TaskID, AgentID: "b", RunID: b.RunID, Fence: b.Fence}))
			e.drain(t)
		}},
		// A reopen since counts the attempts anew: it kept a's on its
		// grant's record.
		{name: "completed and reopened", after: func(t *testing.T, e *env, first lease.Checkout) {
			e.completedAndReopened(t, first)
		}},
		// Reopened by an earlier version, which kept no attempt: the
		// trail counts it.
		{name: "completed and reopened by an earlier version", after: func(t *testing.T, e *env, first lease.Checkout) {
			e.completedAndReopened(t, first)
			e.reopenedByAnEarlierVersion(t, first.TaskID, false)
			e.drain(t)
		}},
		// Reopened, then granted twice (the reopen's mark of a's attempt
		// gone with the second): the trail counts it.
		{name: "completed, reopened, then granted twice", after: func(t *testing.T, e *env, first lease.Checkout) {
			c := ctx(t)
			e.completedAndReopened(t, first)
			for _, agent := range []string{"b", "d"} {
				e.clock.Advance(time.Second)
				co := e.checkout(t, first.TaskID, agent, time.Minute)
				e.clock.Advance(time.Second)
				must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: first.TaskID, AgentID: agent, RunID: co.RunID, Fence: co.Fence}))
			}
			e.drain(t)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.create(t, lease.CreateTaskParams{TaskID: "x", Title: title, Queue: q, Priority: new(prio)})
			e.attemptedOnce(t, "x") // a's grant is the task's second attempt
			e.caughtUp(t)           // the claim finds x through an index
			p := lease.ClaimParams{AgentID: "a", AgentName: "Agent A", RunID: "run-1", Timeout: time.Minute, Queues: []string{q}}
			lossy := e.lossyStore()
			first := unkeptClaim(t, lossy, p, "x")
			if first.Attempt != 2 || first.AgentName != p.AgentName || first.Title != title || first.Queue != q || first.Priority != prio {
				t.Fatalf("a's lease, unkept: %+v; want attempt 2 of %q (%s, priority %d) for %q", first, title, q, prio, p.AgentName)
			}
			e.clock.Advance(time.Second)
			tc.after(t, e, first)
			e.clock.Advance(time.Second)
			for _, retry := range []string{"the retry", "a further retry"} {
				again := must[lease.Checkout](t)(e.store.Claim(c, p))
				if again.TaskID != first.TaskID || again.Fence != first.Fence || !again.LockedAt.Equal(first.LockedAt) {
					t.Fatalf("%s answered %s fence %d locked %v; want a's lease, %s fence %d locked %v",
						retry, again.TaskID, again.Fence, again.LockedAt, first.TaskID, first.Fence, first.LockedAt)
				}
				if again.Attempt != 2 || again.AgentName != p.AgentName || again.Title != title || again.Queue != q || again.Priority != prio {
					t.Errorf("%s answered attempt %d for %q, of %q (%s, priority %d); want attempt 2 for %q, of %q (%s, priority %d)",
						retry, again.Attempt, again.AgentName, again.Title, again.Queue, again.Priority, p.AgentName, title, q, prio)
				}
			}
		})
	}
}

// completedAndReopened completes first, a's lease, and reopens its task
// (a PATCH to todo).
func (e *env) completedAndReopened(t *testing.T, first lease.Checkout) {
	t.Helper()
	c := ctx(t)
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: first.TaskID, AgentID: "a", RunID: first.RunID, Fence: first.Fence}))
	e.clock.Advance(time.Second)
	todo := lease.StatusTodo
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: first.TaskID, AgentID: "admin", Admin: true, Status: &todo}))
}
