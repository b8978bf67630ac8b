package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// DueSince finds a lease expiry or a heartbeat expiry, and says which,
// exactly when it lies in (since, now]: not before it passes, and not
// again for a window that starts after it.
func TestDueSinceSeesExpiriesInItsWindowOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "t"}))
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", 5*time.Second))
	e.checkout(t, "t", "a", 2*time.Second)
	e.caughtUp(t) // DueSince reads the expiry indexes
	due := func(since time.Time, want lease.Due, what string) time.Time {
		t.Helper()
		now, got, err := e.store.DueSince(c, since)
		if err != nil || got != want {
			t.Fatalf("%s: DueSince = %+v, %v; want %+v", what, got, err, want)
		}
		return now
	}
	start := e.store.Now()
	due(start, lease.Due{}, "nothing has expired")
	e.clock.Advance(time.Second)
	due(start, lease.Due{}, "a second on")
	e.clock.Advance(1500 * time.Millisecond)
	seen := due(start, lease.Due{Leases: true}, "the lease has expired")
	due(seen, lease.Due{}, "after the lease's expiry was seen")
	e.clock.Advance(3 * time.Second)
	due(seen, lease.Due{Agents: true}, "the heartbeat has expired")
	due(start, lease.Due{Leases: true, Agents: true}, "both, since the start")
	now := due(e.store.Now(), lease.Due{}, "a window that starts after both")
	if !now.Equal(e.store.Now()) {
		t.Fatalf("DueSince judged by %v, want the store's clock %v", now, e.store.Now())
	}
}
