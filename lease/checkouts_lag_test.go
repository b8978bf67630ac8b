package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A lease renewed just before its old expiry is live (LockStatus says so),
// but while the lease-expiry index still holds its old expiry, the listing
// of every live lease (GET /api/checkouts) leaves it out: its Query's key
// condition (lease_expires > now) drops the stale entry before the
// consistent read that would have confirmed it. The listing must take the
// index's entries as candidates only.
func TestARenewedLeaseIsListedWhileTheIndexShowsItsOldExpiry(t *testing.T) {
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

	lock := must[*lease.Checkout](t)(e.store.LockStatus(c, "t1"))
	if lock == nil || lock.Fence != renewed.Fence {
		t.Fatalf("lock status = %+v, want the renewed lease", lock)
	}
	got := must[[]lease.Checkout](t)(e.store.ListCheckouts(c, ""))
	if len(got) != 1 || got[0].TaskID != "t1" {
		t.Fatalf("live leases = %+v, want t1's renewed lease (live, expires %v)", got, renewed.ExpiresAt)
	}
	page := must[lease.CheckoutPage](t)(e.store.ListCheckoutsPage(c, lease.ListCheckoutsParams{}))
	if len(page.Checkouts) != 1 {
		t.Fatalf("checkout page = %+v, want t1's renewed lease", page.Checkouts)
	}
}
