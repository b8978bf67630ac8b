package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A lease that has expired, or whose holder has died, unswept, is never
// shown as live: a listing of in_progress tasks leaves its task out, and a
// listing of every status shows it as todo.
func TestListingsNeverShowAnEndedLeaseAsLive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t", "d")
	e.checkout(t, "t", "x", time.Minute)
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "y", 10*time.Second))
	e.checkout(t, "d", "y", time.Hour)
	e.caughtUp(t) // the listings read the indexes
	held := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusInProgress, Limit: 100}))
	if len(held.Tasks) != 2 {
		t.Fatalf("in_progress listing while the leases are live: %d tasks, want 2", len(held.Tasks))
	}
	e.clock.Advance(2 * time.Minute)
	page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusInProgress, Limit: 100}))
	for _, task := range page.Tasks {
		t.Errorf("in_progress listing shows %s as %s (checkout %v)", task.TaskID, task.Status, task.Checkout)
	}
	all := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Limit: 100}))
	if len(all.Tasks) != 2 || all.Tasks[0].Status != lease.StatusTodo || all.Tasks[0].Checkout != nil || all.Tasks[1].Status != lease.StatusTodo || all.Tasks[1].Checkout != nil {
		t.Errorf("listing of every status: %+v, want t and d as todo with no checkout", all.Tasks)
	}
}
