package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A named claim retried after its lease ended answers that lease with its
// reason, whatever the task did since: while the ending is the task's
// latest (the item's record of it keeps no reason), and once the task was
// granted again and that lease ended (the grant found in the trail). The
// receipt keeps the grant's reason all along.
func TestAClaimRetriedAfterItsLeaseEndedAnswersOneReason(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	e.caughtUp(t)
	p := lease.ClaimParams{AgentID: "a", RunID: "run-a", Timeout: time.Hour, Reason: "why a claimed it"}
	co := must[lease.Checkout](t)(e.store.Claim(c, p))
	if co.Reason != p.Reason {
		t.Fatalf("the claim's own answer: reason %q", co.Reason)
	}
	e.clock.Advance(time.Second)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a", RunID: co.RunID, Fence: co.Fence}))
	e.clock.Advance(time.Second)
	ended := must[lease.Checkout](t)(e.store.Claim(c, p))
	e.drain(t)
	cb := e.checkout(t, "x", "b", time.Hour)
	e.clock.Advance(time.Second)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "b", RunID: cb.RunID, Fence: cb.Fence}))
	e.clock.Advance(time.Second)
	e.drain(t)
	later := must[lease.Checkout](t)(e.store.Claim(c, p))
	t.Logf("retry while its ending is the latest: fence %d reason %q; after b's grant: fence %d reason %q", ended.Fence, ended.Reason, later.Fence, later.Reason)
	if ended.Fence != co.Fence || later.Fence != co.Fence {
		t.Fatalf("retries answered fences %d and %d, want %d", ended.Fence, later.Fence, co.Fence)
	}
	if ended.Reason != later.Reason {
		t.Errorf("one ended lease, retried twice: reason %q, then %q once the task was granted again", ended.Reason, later.Reason)
	}
}
