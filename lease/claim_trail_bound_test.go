package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A named claim whose grant could not be kept in its receipt, retried
// after its task has moved on, finds the grant in the task's trail reading
// only the events made since the receipt: a task with thousands of events
// before it costs the retry the requests and read units a task with a
// short history does, and the answer is the run's lease either way.
func TestClaimRetryReadsOnlyTheTrailSinceItsReceipt(t *testing.T) {
	t.Parallel()
	type cost struct {
		ops  int
		read float64
	}
	costs := map[int]cost{}
	for _, history := range []int{20, 2000} {
		e := newEnv(t)
		c := ctx(t)
		e.longTrail(t, "x", history) // a checkout by "a" and its renewals
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a"}))
		e.clock.Advance(time.Second)
		e.caughtUp(t) // the claim finds x through an index
		lossy := e.lossyStore()
		first := unkeptClaim(t, lossy, lease.ClaimParams{AgentID: "c", RunID: "run-1", Timeout: time.Minute}, "x")
		e.clock.Advance(time.Second)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "admin", Force: true}))
		e.clock.Advance(time.Second)
		e.checkout(t, "x", "b", time.Minute)
		e.clock.Advance(time.Second)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "b"}))
		e.drain(t)

		meter := testenv.NewMeter(t, e.names.Prefix)
		e.count.Take()
		again := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "c", RunID: "run-1", Timeout: time.Minute}))
		ops, units := e.count.Take(), meter.Take().Total()
		t.Logf("retry after a history of %d renewals: %v, %g read units", history, ops, units.Read)
		if again.TaskID != first.TaskID || again.Fence != first.Fence || !again.LockedAt.Equal(first.LockedAt) {
			t.Fatalf("history %d: retry got %+v, want the first lease %+v", history, again, first)
		}
		if want := first.LockedAt.Add(time.Second); !again.ExpiresAt.Equal(want) {
			t.Fatalf("history %d: retry got the lease expiring %v, want %v (its force release)", history, again.ExpiresAt, want)
		}
		costs[history] = cost{ops: ops.Total(), read: units.Read}
	}
	if short, long := costs[20], costs[2000]; long != short {
		t.Errorf("the retry cost %d requests and %g read units after 2,000 renewals, %d and %g after 20: it grows with the trail",
			long.ops, long.read, short.ops, short.read)
	}
}

// The read is bounded: a retry whose task has had more events since the
// claim than it reads (a later holder's renewals) stops there, and is
// answered as a fresh claim, the first lease having ended. Its trail read
// is two Queries, whatever the task's history.
func TestClaimRetryPastItsTrailBoundIsAFreshClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	e.caughtUp(t) // the claim finds x through an index
	lossy := e.lossyStore()
	first := unkeptClaim(t, lossy, lease.ClaimParams{AgentID: "c", RunID: "run-1", Timeout: time.Minute}, "x")
	e.clock.Advance(time.Second)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "admin", Force: true}))
	e.clock.Advance(time.Second)
	e.checkout(t, "x", "b", time.Hour)
	for range 150 {
		e.clock.Advance(time.Millisecond)
		must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "x", AgentID: "b"}))
	}
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "b"}))
	e.drain(t)
	e.caughtUp(t) // the fresh claim finds x through an index

	e.count.Take()
	again := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "c", RunID: "run-1", Timeout: time.Minute}))
	ops := e.count.Take()
	t.Logf("retry past the bound: %v", ops)
	if again.TaskID != "x" || again.Fence == first.Fence {
		t.Fatalf("retry got %+v, want a fresh lease of x (the first, fence %d, ended)", again, first.Fence)
	}
	// The receipt, the heartbeat, the task twice (its lease, then its
	// trail), two Queries of the trail; then the fresh claim: its look at
	// the claim index (one Query a shard), its note, grant and receipt.
	if want := 2 + schema.ClaimShards; ops["Query"] != want {
		t.Errorf("retry made %d Queries, want %d: two of the trail, one a claim shard", ops["Query"], want)
	}
}
