package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// The alive cache is exact: a process that read an agent alive agrees
// with a fresh read for as long as it trusts that read. A heartbeat that
// shortens the ttl (1 h to 1 s) is on its way while process A reads the
// agent alive; A reads before each of the heartbeat's writes in turn.
// Before, the heartbeat's one write, its time read before A's read and
// landing after it, made the agent dead sooner than A's cache entry lapsed:
// A reported the dead holder's lease live and let it be renewed while any
// other process took it over. An agent's first heartbeat shortens "never
// sent one" (its leases end by time alone) the same way.
func TestTheAliveCacheEndsBeforeAShortenedHeartbeat(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first bool
		n     int
	}{
		{"read before write 1", false, 1}, {"read before write 2", false, 2}, {"read before write 3", false, 3},
		{"first heartbeat, read before write 1", true, 1}, {"first heartbeat, read before write 3", true, 3},
	} {
		n := tc.n
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t1")
			if !tc.first {
				must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Hour))
			}
			co := e.checkout(t, "t1", "x", time.Hour)

			// Process A: its own store (its own caches).
			a := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			// Process B: x's heartbeat, now with ttl 1 s; A reads x's
			// heartbeat 500 ms after B read its time, before B's n-th
			// write lands.
			e.clock.Advance(10 * time.Second)
			ran := false
			b := lease.New(lease.Config{DB: &heartbeatWritesDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), before: map[int]func(){n: func() {
				ran = true
				e.clock.Advance(500 * time.Millisecond)
				if got := must[*lease.Checkout](t)(a.LockStatus(c, "t1")); got == nil {
					t.Fatalf("t1 not live in A before x's heartbeat landed")
				}
			}}}, Tables: e.names, Now: e.clock.Now})
			hb := must[lease.Heartbeat](t)(b.Heartbeat(c, "x", time.Second))
			if !ran {
				t.Fatalf("the heartbeat made fewer than %d writes: the case tests nothing", n)
			}
			// A agrees with a fresh process at every moment up to x's death
			// by the heartbeat it stated, and after.
			for e.clock.Now().Before(hb.ExpiresAt.Add(200 * time.Millisecond)) {
				e.clock.Advance(100 * time.Millisecond)
				fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
				want := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")) != nil
				if got := must[*lease.Checkout](t)(a.LockStatus(c, "t1")) != nil; got != want {
					t.Fatalf("at %v (x expires %v): process A shows t1 live=%v, a fresh process %v", e.clock.Now(), hb.ExpiresAt, got, want)
				}
			}
			if r, err := a.Renew(c, lease.RenewParams{TaskID: "t1", AgentID: "x", Fence: co.Fence}); err == nil {
				t.Errorf("process A renewed the lease of a holder dead since %v: %+v; want not_checked_out", hb.ExpiresAt, r)
			}
		})
	}
}
