package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// DueSince answers true exactly when a lease expiry or a heartbeat expiry
// lies in (since, now]: not before either passes, and not again for a
// window that starts after it.
func TestDueSinceSeesExpiriesInItsWindowOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "t"}))
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", 5*time.Second))
	e.checkout(t, "t", "a", 2*time.Second)
	e.caughtUp(t) // DueSince reads the expiry indexes
	due := func(since time.Time, want bool, what string) time.Time {
		t.Helper()
		now, got, err := e.store.DueSince(c, since)
		if err != nil || got != want {
			t.Fatalf("%s: DueSince = %v, %v; want %v", what, got, err, want)
		}
		return now
	}
	start := e.store.Now()
	due(start, false, "nothing has expired")
	e.clock.Advance(time.Second)
	due(start, false, "a second on")
	e.clock.Advance(1500 * time.Millisecond)
	seen := due(start, true, "the lease has expired")
	due(seen, false, "after the lease's expiry was seen")
	e.clock.Advance(3 * time.Second)
	due(seen, true, "the heartbeat has expired")
	now := due(e.store.Now(), false, "a window that starts after both")
	if !now.Equal(e.store.Now()) {
		t.Fatalf("DueSince judged by %v, want the store's clock %v", now, e.store.Now())
	}
}
