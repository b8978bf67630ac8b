package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A sweep whose expiry index still shows a lease's old expiry (the index
// lags a renewal) does not end the renewed lease: its timeout is
// conditioned on the expiry as the item has it, not as the index showed
// it.
func TestASweepUnderIndexLagDoesNotEndARenewedLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	co := e.checkout(t, "t1", "a", time.Minute)
	eventually(t, "the lease in the index", func() bool {
		return len(must[[]lease.Checkout](t)(e.store.ListCheckouts(c, ""))) == 1
	})
	e.lag(t, schema.TasksTable, indexLag)

	e.clock.Advance(time.Minute - time.Millisecond) // 1 ms before the old expiry
	renewed := must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "t1", AgentID: "a", Fence: co.Fence, Timeout: time.Hour}))
	e.clock.Advance(2 * time.Millisecond) // past the old expiry, long before the new one

	res := must[lease.SweepResult](t)(e.store.Sweep(c))
	if res.Timeouts != 0 {
		t.Errorf("sweep ended %d leases by timeout; t1's was renewed until %v", res.Timeouts, renewed.ExpiresAt)
	}
	lock := must[*lease.Checkout](t)(e.store.LockStatus(c, "t1"))
	if lock == nil || lock.AgentID != "a" || lock.Fence != renewed.Fence {
		t.Fatalf("lock status after the sweep = %+v, want a's renewed lease", lock)
	}
	if _, err := e.store.Renew(c, lease.RenewParams{TaskID: "t1", AgentID: "a", Fence: co.Fence}); err != nil {
		t.Fatalf("a renews its lease after the sweep: %v", err)
	}
}
