package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A grant whose answer was lost, known when the SDK sends it again by the
// next grant's record of it (prev_write), with a PATCH of the task's
// title, queue and priority after that next grant: it answered them as
// the PATCH left them, though README says a checkout or claim sent again
// answers them as its grant found them, and the item keeps them (the
// PATCH kept what the next grant found, grant_was, which is what this
// grant found when no PATCH came between the two grants). (A PATCH
// between the two grants is answered as the next grant found it: README,
// "Known limits".)
func TestAGrantSentTwiceOneGrantOnAcrossAPatchAnswersTheTaskAsGranted(t *testing.T) {
	t.Parallel()
	for _, claim := range []bool{false, true} {
		name := "checkout"
		if claim {
			name = "named claim"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t")
			e.drain(t)
			before := e.get(t, "t")
			co, _, err := e.aGrantSentTwice(t, claim, func() {
				// a's lease is released by another worker of its run, b
				// is granted the task, and an orchestrator PATCHes it.
				e.clock.Advance(time.Second)
				must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: "r-a", Fence: 1}))
				e.clock.Advance(time.Second)
				must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r-b", Timeout: time.Hour}))
				e.clock.Advance(time.Second)
				must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true,
					Title: new("a new title"), Queue: new("q2"), Priority: new(8)}))
			})
			if got := e.get(t, "t"); got.Checkout == nil || got.Checkout.AgentID != "b" || got.Title != "a new title" || got.Queue != "q2" || got.Priority != 8 {
				t.Fatalf("the task after a's grant, b's and a PATCH: %+v, title %q, queue %q, priority %d; want b's lease, the PATCH's values", got.Checkout, got.Title, got.Queue, got.Priority)
			}
			if err != nil || co.AgentID != "a" || co.Fence != 1 || co.Attempt != 1 || co.Title != before.Title || co.Queue != before.Queue || co.Priority != before.Priority {
				t.Errorf("a's grant, sent twice with the next grant and a PATCH after it in between: %+v, %v; want fence 1, attempt 1, the task as granted (title %q, queue %q, priority %d)",
					co, err, before.Title, before.Queue, before.Priority)
			}
		})
	}
}
