package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// The death cache is said to be exact for ever: "an agent dead at r has
// ended every lease locked at or before r". With clocks d apart (doc.go
// allows it: a lease may then end "up to d before its holder expected"),
// process A, whose clock is ahead, reads x dead at r; process B, whose
// clock is behind, takes x's heartbeat as an ordinary one (not a return:
// alive_since does not move) and x checks a task out there at L <= r. A's
// death cache then holds that lease ended for ever: an hour later, with x
// heartbeating all along, A still shows it free and takes it over, where
// any other process (and A's own consistent read) says it is live.
func TestTheDeathCacheKeepsALiveLeaseUnderSkew(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t0", "t1")
	const skew = 5 * time.Millisecond
	a := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: func() time.Time { return e.clock.Now().Add(skew) }})
	b := e.store // clock behind A's by skew

	must[lease.Heartbeat](t)(b.Heartbeat(c, "x", time.Second)) // expires epoch+1s
	e.checkout(t, "t0", "x", time.Hour)
	e.clock.Advance(time.Second - 2*time.Millisecond) // B: 998 ms, A: 1003 ms
	if got := must[*lease.Checkout](t)(a.LockStatus(c, "t0")); got != nil {
		t.Fatalf("A: t0 live, want x dead by A's clock")
	}
	// B: x is alive (expires 1000 > 998): an ordinary heartbeat, then a checkout.
	must[lease.Heartbeat](t)(b.Heartbeat(c, "x", time.Minute))
	e.clock.Advance(time.Millisecond)
	co := e.checkout(t, "t1", "x", time.Hour) // locked at 999 ms by B's clock

	// Much later, x heartbeating all along.
	for range 10 {
		e.clock.Advance(30 * time.Second)
		must[lease.Heartbeat](t)(b.Heartbeat(c, "x", time.Minute))
	}
	fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: func() time.Time { return e.clock.Now().Add(skew) }})
	if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")); got == nil || got.Fence != co.Fence {
		t.Fatalf("a fresh process with A's clock: t1 = %+v, want x's live lease", got)
	}
	if got := must[*lease.Checkout](t)(a.LockStatus(c, "t1")); got == nil {
		t.Errorf("A shows x's lease on t1 ended, 5 minutes after it was granted to an agent alive throughout")
	}
	if got, err := a.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "y", Timeout: time.Hour}); err == nil {
		t.Errorf("A took x's live lease over: y holds t1 at fence %d", got.Fence)
	}
}
