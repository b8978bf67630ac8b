package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// The request budget of each operation, counted by an SDK middleware on the
// real requests. Servers that ignore ReturnValuesOnConditionCheckFailure make
// the store read the item back; that read (FallbackReads) does not happen on
// DynamoDB and is subtracted.
func TestRequestBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	e.task(t, "u")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "holder", time.Hour))
	e.count.take()

	spent := func(name string, budget int, fallbackBefore int64) {
		t.Helper()
		ops := e.count.take()
		n := total(ops) - int(e.store.FallbackReads()-fallbackBefore)
		t.Logf("%-22s %d requests %v", name, n, ops)
		if n > budget {
			t.Errorf("%s made %d DynamoDB requests %v, budget %d", name, n, ops, budget)
		}
		if ops["UpdateItem"]+ops["PutItem"] > 1 && name != "takeover of expired" {
			t.Errorf("%s made more than one decisive write: %v", name, ops)
		}
	}

	fb := e.store.FallbackReads()
	held := e.checkout(t, "t", "holder", time.Minute)
	spent("checkout", 2, fb)

	fb = e.store.FallbackReads()
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "other"}); !errors.Is(err, lease.ErrCheckedOut) {
		t.Fatalf("conflict: %v", err)
	}
	spent("conflict", 2, fb)

	// The holder was read alive a moment ago: the next loser pays only its
	// failed write.
	fb = e.store.FallbackReads()
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "third"}); !errors.Is(err, lease.ErrCheckedOut) {
		t.Fatalf("conflict: %v", err)
	}
	spent("conflict, holder read alive just now", 1, fb)

	fb = e.store.FallbackReads()
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "holder", RunID: held.RunID}))
	spent("same-run retry", 2, fb)

	fb = e.store.FallbackReads()
	must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "holder"}))
	spent("renew", 3, fb)

	fb = e.store.FallbackReads()
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "holder"}))
	spent("release", 2, fb)

	fb = e.store.FallbackReads()
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "holder", time.Hour))
	spent("heartbeat", 1, fb)

	fb = e.store.FallbackReads()
	must[lease.Task](t)(e.store.GetTask(c, "u"))
	spent("get task", 2, fb)

	// Taking over an expired lease: the write that finds it, and the write
	// that takes it over, pinned to it.
	e.checkout(t, "u", "holder", time.Minute)
	e.clock.Advance(time.Minute)
	e.count.take()
	fb = e.store.FallbackReads()
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "u", AgentID: "other"}))
	spent("takeover of expired", 3, fb)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "u", AgentID: "other"}))
	e.count.take()

	e.checkout(t, "u", "holder", time.Minute)
	e.clock.Advance(time.Minute)
	e.count.take()
	res := must[lease.SweepResult](t)(e.store.Sweep(c))
	if res.Timeouts != 1 {
		t.Fatalf("sweep %+v", res)
	}
	// One Query per shard of each index, then two requests per expired lease.
	ops := e.count.take()
	if ops["Query"] != 16 || ops["UpdateItem"] != 1 || ops["BatchWriteItem"] != 1 {
		t.Errorf("sweep of one expired lease: %v", ops)
	}
}
