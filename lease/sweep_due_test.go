package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// dueEnv is an env with one lease expiring 2 s from its clock's start and
// its holder's heartbeat 5 s from it, both in the expiry indexes.
func dueEnv(t *testing.T) (*env, context.Context) {
	t.Helper()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "t"}))
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", 5*time.Second))
	e.checkout(t, "t", "a", 2*time.Second)
	e.caughtUp(t) // DueSince and NextDue read the expiry indexes
	return e, c
}

// DueSince finds a lease expiry or a heartbeat expiry, and says which,
// exactly when it lies in (since, now]: not before it passes, and not
// again for a window that starts after it.
func TestDueSinceSeesExpiriesInItsWindowOnly(t *testing.T) {
	t.Parallel()
	e, c := dueEnv(t)
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

// NextDue finds the earliest lease expiry in (since.Leases, before] and
// the earliest heartbeat expiry in (since.Agents, before]: one Query of
// one entry per shard of each expiry index, none for an empty window (a
// window within one millisecond too, which DynamoDB would refuse).
func TestNextDueFindsTheEarliestExpiryInItsWindow(t *testing.T) {
	t.Parallel()
	e, c := dueEnv(t)
	start := e.store.Now()
	both := func(t time.Time) lease.Expiries { return lease.Expiries{Leases: t, Agents: t} }
	next := func(since lease.Expiries, before time.Time, want lease.Expiries, queries int, what string) {
		t.Helper()
		e.count.Take()
		now, got, err := e.store.NextDue(c, since, before)
		if err != nil || !got.Leases.Equal(want.Leases) || !got.Agents.Equal(want.Agents) {
			t.Fatalf("%s: NextDue = %+v, %v; want %+v", what, got, err, want)
		}
		if !now.Equal(e.store.Now()) {
			t.Fatalf("%s: NextDue judged by %v, want the store's clock %v", what, now, e.store.Now())
		}
		if ops := e.count.Take(); ops.Total() != queries || ops["Query"] != queries {
			t.Fatalf("%s: %v requests, want %d Queries (one per shard of each index looked at)", what, ops, queries)
		}
	}
	lease2, hb := start.Add(2*time.Second), start.Add(5*time.Second)
	next(both(start), start.Add(time.Second), lease.Expiries{}, 32, "nothing before the lease's expiry")
	next(both(start), lease2, lease.Expiries{Leases: lease2}, 32, "the lease's expiry, the window's end")
	next(both(start), start.Add(time.Minute), lease.Expiries{Leases: lease2, Agents: hb}, 32, "each index's earliest")
	next(lease.Expiries{Leases: lease2, Agents: start}, start.Add(time.Minute), lease.Expiries{Agents: hb}, 32, "the leases' window past the lease")
	next(lease.Expiries{Leases: start, Agents: hb}, start.Add(time.Minute), lease.Expiries{Leases: lease2}, 32, "the agents' window past the heartbeat")
	e.clock.Advance(6 * time.Second)
	next(both(start), start.Add(time.Minute), lease.Expiries{Leases: lease2, Agents: hb}, 32, "both, fallen due")
	next(both(e.store.Now()), e.store.Now().Add(time.Minute), lease.Expiries{}, 32, "a window after both")
	next(both(start), start, lease.Expiries{}, 0, "an empty window")
	ms := time.UnixMilli(start.UnixMilli())
	next(both(ms.Add(200*time.Microsecond)), ms.Add(700*time.Microsecond), lease.Expiries{}, 0, "a window within one millisecond")
	next(lease.Expiries{Leases: start, Agents: start.Add(time.Hour)}, start.Add(time.Minute), lease.Expiries{Leases: lease2}, 16, "the agents' window empty")
}
