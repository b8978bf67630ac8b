package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A grant whose answer was lost, known when the SDK sends it again by the
// next grant's record of it (prev_write), with a reopen AFTER that next
// grant (the task reopened once the next lease finished): the reopen kept
// the next grant's fence and attempt (in an attempt_was of the task,
// overwriting whatever an earlier reopen kept of this one), and the
// task's attempts, counted anew, say nothing of it. It was read from the
// trail, and with the change stream held up, answered as attempt 1 where
// it had counted the task's second. A reopen now keeps the attempt on the
// grant's own record (grant_write, which the next grant copies to
// prev_write), so each grant's stays with it; a reopen after the next
// grant keeps that grant's, one more than this one's.
func TestAGrantSentTwiceOneGrantOnReopenedAfterTheNextGrantAnswersItsAttempt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// between: how a's lease ends and b is granted the task.
		between string
		// want: b's grant's attempt.
		wantB int
		// priority: after b's grant, a PATCH of the priority (the item
		// still names a's grant, one grant on) instead of a reopen.
		priority bool
		// claim: a's grant is a named claim's.
		claim bool
	}{
		// cancelled and reopened by a PATCH, then b's grant: attempt 1.
		{name: "a PATCH reopens between the grants", between: "patch", wantB: 1},
		// cancelled, and b's checkout reopens it: attempt 1.
		{name: "the next grant reopens the task", between: "reopening", wantB: 1},
		// a's lease expires and b takes it over: no reopen in between,
		// b's grant is the task's third attempt.
		{name: "the next grant takes the expired lease over", between: "takeover", wantB: 3},
		// A PATCH while the item still names a's grant leaves what the
		// reopen before b's grant kept of it.
		{name: "a PATCH reopens between the grants, a PATCH of the priority after", between: "patch", wantB: 1, priority: true},
		{name: "a named claim, a PATCH reopens between the grants", between: "patch", wantB: 1, claim: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t")
			e.attemptedOnce(t, "t")
			e.drain(t)

			var bAttempt int
			co, trailReads, err := e.aGrantSentTwice(t, tc.claim, func() {
				cancelled, todo := lease.StatusCancelled, lease.StatusTodo
				var expect []lease.Status
				e.clock.Advance(time.Second)
				switch tc.between {
				case "patch":
					must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Status: &cancelled}))
					must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Status: &todo}))
				case "reopening":
					must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Status: &cancelled}))
					expect = []lease.Status{lease.StatusCancelled}
				case "takeover":
					e.clock.Advance(2 * time.Hour) // a's lease (1 h) expired
				}
				e.clock.Advance(time.Second)
				b := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r-b", Timeout: time.Hour, ExpectedStatuses: expect}))
				bAttempt = b.Attempt
				e.clock.Advance(time.Second)
				if tc.priority {
					must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Priority: new(8)}))
					return
				}
				// b's lease is cancelled, and the task reopened.
				must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Status: &cancelled}))
				must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Status: &todo}))
			})
			if got := e.get(t, "t"); tc.priority && (got.Checkout == nil || got.Checkout.AgentID != "b" || got.Priority != 8) {
				t.Fatalf("the task after a's grant, b's and a PATCH: %+v at priority %d; want b's lease, priority 8", got.Checkout, got.Priority)
			} else if !tc.priority && (got.Checkout != nil || got.Status != lease.StatusTodo || got.Attempts != 0 || bAttempt != tc.wantB) {
				t.Fatalf("the task after a's grant, b's and a reopen: %+v, %s after %d attempts (b's attempt %d); want todo, no lease, 0 attempts (b's attempt %d)",
					got.Checkout, got.Status, got.Attempts, bAttempt, tc.wantB)
			}
			if err != nil || co.AgentID != "a" || co.Fence != 2 || co.Attempt != 2 {
				t.Errorf("a's grant (fence 2, the task's second attempt), sent twice with the next grant and a reopen after it in between, the stream held up: %+v, %v; want fence 2, attempt 2", co, err)
			}
			if n := trailReads; n != 0 {
				t.Errorf("the grant sent twice read the trail %d times; want none (the item keeps the attempt)", n)
			}
		})
	}
}
