package lease_test

import (
	"slices"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A page of live leases is walked in the lease index's order (locked_at,
// then task id) and shows each lease as its task item holds it. While the
// index still holds a task's earlier lease, the item's lease, granted
// since, was shown at the earlier lease's place, before the cursor; once
// the index caught up, its entry came after the cursor and the next page
// showed the same lease again. A lease locked past the page's cursor is
// left for the page its entry falls in.
func TestACheckoutsWalkShowsALeaseOnceWhileTheIndexHoldsItsTasksEarlierLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x", "a", "b")
	for _, id := range []string{"x", "a", "b"} {
		e.checkout(t, id, "agent", time.Hour)
		e.clock.Advance(time.Millisecond)
	}
	e.caughtUp(t)
	e.lag(t, schema.TasksTable, indexLag)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "agent"}))
	e.clock.Advance(time.Millisecond)
	e.checkout(t, "x", "other", time.Hour) // locked after a's and b's

	first := must[lease.CheckoutPage](t)(e.store.ListCheckoutsPage(c, lease.ListCheckoutsParams{Limit: 2}))
	var listed []string
	for _, co := range first.Checkouts {
		listed = append(listed, co.TaskID)
	}
	e.caughtUp(t)
	for p := (lease.ListCheckoutsParams{Cursor: first.NextCursor, Limit: 2}); p.Cursor != "" && len(listed) < 10; {
		page := must[lease.CheckoutPage](t)(e.store.ListCheckoutsPage(c, p))
		for _, co := range page.Checkouts {
			listed = append(listed, co.TaskID)
		}
		p.Cursor = page.NextCursor
	}
	if want := []string{"a", "b", "x"}; !slices.Equal(listed, want) {
		t.Errorf("the walk listed %v, want %v (oldest lease first, each once)", listed, want)
	}
}
