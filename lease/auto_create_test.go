package lease_test

import (
	"errors"
	"testing"

	"github.com/checkout-dev/checkout/lease"
)

// A checkout that creates unknown tasks creates one only when it would
// take it: one that expects no todo task (a review's "done" only, say)
// answers that the task does not exist, and leaves none behind.
func TestAutoCreateMakesNoTaskACheckoutWouldNotTake(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	for _, expected := range [][]lease.Status{{lease.StatusDone}, {lease.StatusFailed, lease.StatusCancelled}} {
		_, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "review", AgentID: "a", CreateIfMissing: true, ExpectedStatuses: expected})
		if !errors.Is(err, lease.ErrTaskNotFound) {
			t.Fatalf("checkout expecting %v of an unknown task: %v, want task not found", expected, err)
		}
		if _, err := e.store.GetTask(c, "review"); !errors.Is(err, lease.ErrTaskNotFound) {
			t.Fatalf("after a checkout expecting %v: the task is there (%v)", expected, err)
		}
	}
	// Expecting todo among others, it is created and taken.
	got := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "review", AgentID: "a", CreateIfMissing: true,
		ExpectedStatuses: []lease.Status{lease.StatusDone, lease.StatusTodo}}))
	if got.Fence != 1 || got.AgentID != "a" {
		t.Fatalf("auto-created checkout %+v", got)
	}
}
