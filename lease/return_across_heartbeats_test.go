package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// takenWhileDead: x dead; the return's first write is on its way while
// x's other process takes t1 (x dead) and seen sees x dead, t1 ended.
func takenWhileDead(t *testing.T, e *env, c context.Context, other, seen *lease.Store) func() {
	return func() {
		e.clock.Advance(100 * time.Millisecond)
		must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "x", Timeout: time.Hour}))
		e.clock.Advance(100 * time.Millisecond)
		if got := must[*lease.Checkout](t)(seen.LockStatus(c, "t1")); got != nil {
			t.Fatalf("t1 live while x is dead: %+v", got)
		}
	}
}

// A return sent twice across other heartbeats of x: a third heartbeat,
// a lowering (a shorter ttl: arm, then stamp), and x dead again by the
// other heartbeat's expiry before the second sending. t1 (taken while x
// was dead, after the return's first time) ends everywhere, and a lease
// x takes once its heartbeat has answered is live.
func TestAReturnSentTwiceAcrossOtherHeartbeatsIsMadeOnceMore(t *testing.T) {
	cases := map[string]func(t *testing.T, e *env, c context.Context, other *lease.Store){
		"two-heartbeats": func(t *testing.T, e *env, c context.Context, other *lease.Store) {
			e.clock.Advance(50 * time.Millisecond)
			must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second))
			e.clock.Advance(50 * time.Millisecond)
			must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second))
		},
		"lowering": func(t *testing.T, e *env, c context.Context, other *lease.Store) {
			e.clock.Advance(50 * time.Millisecond)
			must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second)) // x's return has 2s
		},
		"dead-again": func(t *testing.T, e *env, c context.Context, other *lease.Store) {
			e.clock.Advance(50 * time.Millisecond)
			must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second))
			e.clock.Advance(1500 * time.Millisecond)
		},
	}
	for name, within := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t1")
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second))
			e.clock.Advance(2 * time.Second)
			other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			seen := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			db := &resendAcrossDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), n: 2,
				before: takenWhileDead(t, e, c, other, seen), within: func() { within(t, e, c, other) }}
			x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			must[lease.Heartbeat](t)(x.Heartbeat(c, "x", 2*time.Second))
			e.clock.Advance(10 * time.Millisecond)
			fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")); got != nil {
				t.Errorf("t1 live in a fresh process (fence %d)", got.Fence)
			}
			if got := must[*lease.Checkout](t)(seen.LockStatus(c, "t1")); got != nil {
				t.Errorf("t1 live for seen: %+v", got)
			}
			// x is alive by its own answer: a lease it takes now is live.
			e.task(t, "t3")
			must[lease.Checkout](t)(x.Checkout(c, lease.CheckoutParams{TaskID: "t3", AgentID: "x", Timeout: time.Hour}))
			e.clock.Advance(time.Millisecond)
			if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t3")); got == nil {
				t.Errorf("t3, taken by x after its heartbeat answered, is not live")
			}
		})
	}
}
