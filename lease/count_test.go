package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// The request budget of each operation on the request path, counted by an
// SDK middleware on the real requests: one DynamoDB request per transition.
// Everything else a transition causes (its archived event, the watchers'
// messages, the notices) comes from the change stream, off the request
// path. The local DynamoDB returns the item with a failed condition, as
// DynamoDB does, so these are DynamoDB's own counts.
func TestRequestBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t", "u", "v", "w")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "holder", time.Hour))
	e.count.Take()

	spent := func(name string, budget int) {
		t.Helper()
		ops := e.count.Take()
		n := ops.Total()
		t.Logf("%-34s %d requests %v", name, n, ops)
		if n > budget {
			t.Errorf("%s made %d DynamoDB requests %v, budget %d", name, n, ops, budget)
		}
	}

	held := e.checkout(t, "t", "holder", time.Minute)
	spent("checkout", 1)

	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "other"}); !errors.Is(err, lease.ErrCheckedOut) {
		t.Fatalf("conflict: %v", err)
	}
	spent("conflict, holder not read yet", 1) // its heartbeat was just sent through this store

	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "third"}); !errors.Is(err, lease.ErrCheckedOut) {
		t.Fatalf("conflict: %v", err)
	}
	spent("conflict, holder read alive", 1)

	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "holder", RunID: held.RunID}))
	spent("same-run retry", 1)

	must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "holder"}))
	spent("renew", 1)

	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "holder"}))
	spent("release", 1)

	e.checkout(t, "t", "holder", time.Minute)
	e.count.Take()
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "holder"}))
	spent("complete", 1)

	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "holder", time.Hour))
	spent("heartbeat", 1)

	must[lease.Task](t)(e.store.GetTask(c, "u"))
	spent("get task", 1)

	// Taking over an expired lease: the plain grant, which takes free
	// tasks only and returns the lease it found, and the write pinned to
	// that lease, which counts its failed attempt (API.md, "Attempts and
	// delays": a timeout is a failure however the lease ends).
	e.checkout(t, "u", "other", time.Minute)
	e.clock.Advance(time.Minute)
	e.count.Take()
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "u", AgentID: "third"}))
	spent("takeover of expired", 2)

	// A dead holder's lease: the write that finds it, the holder's heartbeat
	// (a death is read, never assumed), and the write pinned to the lease.
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "mortal", time.Second))
	e.task(t, "v2")
	e.checkout(t, "v", "mortal", time.Hour)
	e.checkout(t, "v2", "mortal", time.Hour)
	e.clock.Advance(2 * time.Second)
	e.count.Take()
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "v", AgentID: "third"}))
	spent("takeover of a dead holder's lease", 3)
	// Another lease the same dead agent held: its death is remembered.
	// (One it took within clockMargin, 50 ms, of its death being seen is
	// judged afresh, with a read: alive.go, deathCache.)
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "v2", AgentID: "third"}))
	spent("takeover, holder known dead", 2)

	e.checkout(t, "w", "holder", time.Minute)
	e.clock.Advance(time.Minute)
	e.caughtUp(t) // the sweep finds the lease through an index
	e.count.Take()
	res := must[lease.SweepResult](t)(e.store.Sweep(c))
	if res.Timeouts != 1 {
		t.Fatalf("sweep %+v", res)
	}
	// One Query per shard of each index, then one write per lease it ends
	// (the dead agent "mortal", due, costs the read of the live leases, in
	// which it holds nothing: no read of its heartbeat).
	ops := e.count.Take()
	if ops["UpdateItem"] != 1 || ops["BatchWriteItem"] != 0 {
		t.Errorf("sweep of one expired lease: %v", ops)
	}
	t.Logf("sweep of one expired lease: %v", ops)
}
