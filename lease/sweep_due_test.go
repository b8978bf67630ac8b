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

// NextDue finds the earliest lease expiry or heartbeat expiry in (since,
// before], and says which kinds have fallen due by then (or by now, when
// it already has): one Query of one entry per shard of each expiry index.
func TestNextDueFindsTheEarliestExpiryInItsWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "t"}))
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", 5*time.Second))
	e.checkout(t, "t", "a", 2*time.Second)
	e.caughtUp(t) // NextDue reads the expiry indexes
	start := e.store.Now()
	next := func(since, before time.Time, wantAt time.Time, want lease.Due, what string) {
		t.Helper()
		e.count.Take()
		now, at, got, err := e.store.NextDue(c, since, before)
		if err != nil || !at.Equal(wantAt) || got != want {
			t.Fatalf("%s: NextDue = %v %+v, %v; want %v %+v", what, at, got, err, wantAt, want)
		}
		if !now.Equal(e.store.Now()) {
			t.Fatalf("%s: NextDue judged by %v, want the store's clock %v", what, now, e.store.Now())
		}
		if ops := e.count.Take(); ops.Total() != 2*16 || ops["Query"] != 2*16 {
			t.Fatalf("%s: %v requests, want one Query per shard of each expiry index (32)", what, ops)
		}
	}
	none := time.Time{}
	next(start, start.Add(time.Second), none, lease.Due{}, "nothing before the lease's expiry")
	next(start, start.Add(2*time.Second), start.Add(2*time.Second), lease.Due{Leases: true}, "the lease's expiry, the window's end")
	next(start, start.Add(time.Minute), start.Add(2*time.Second), lease.Due{Leases: true}, "the lease's expiry, the earliest")
	next(start.Add(2*time.Second), start.Add(time.Minute), start.Add(5*time.Second), lease.Due{Agents: true}, "the heartbeat's, after the lease's")
	e.clock.Advance(3 * time.Second)
	next(start, start.Add(time.Minute), start.Add(2*time.Second), lease.Due{Leases: true}, "the lease's, fallen due")
	e.clock.Advance(3 * time.Second)
	next(start, start.Add(time.Minute), start.Add(2*time.Second), lease.Due{Leases: true, Agents: true}, "both fallen due")
	next(e.store.Now(), e.store.Now().Add(time.Minute), none, lease.Due{}, "a window after both")
	if _, at, got, err := e.store.NextDue(c, start, start); err != nil || !at.IsZero() || got.Any() || e.count.Take().Total() != 0 {
		t.Fatalf("an empty window: NextDue = %v %+v, %v; want nothing, and no request", at, got, err)
	}
}
