package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A completion repeated (its answer lost) after the task was reopened is
// answered as the first one was: the task, done. Found by the whole-store
// linearizability check.
func TestCompletionRepeatedAfterReopenAnswersDone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := e.checkout(t, "t", "a", time.Minute)
	first := must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "a", RunID: co.RunID}))
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", Status: new(lease.StatusTodo)}))
	again := must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "a", RunID: co.RunID}))
	if again.Status != lease.StatusDone || again.Checkout != nil || again.CompletedAt == nil || !again.CompletedAt.Equal(*first.CompletedAt) {
		t.Fatalf("repeated completion answered %+v, want the task done at %v", again, first.CompletedAt)
	}
}
