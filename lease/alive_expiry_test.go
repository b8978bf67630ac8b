package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// An agent read alive is remembered no longer than its heartbeat lasts
// (less clockMargin). Read 600 ms into a 1 s heartbeat (sent through
// another process), the entry would otherwise last 600 ms past the
// expiry (MinHeartbeatTTL from the read), still showing the expiry that
// passed while the agent came back and took another lease: that live
// lease would be judged ended by death and taken over.
func TestAnAliveReadIsNotRememberedPastTheHeartbeatsExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1", "t2")
	other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	hb := must[lease.Heartbeat](t)(other.Heartbeat(c, "a", time.Second))
	must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "a", Timeout: time.Hour}))

	e.clock.Advance(600 * time.Millisecond)
	var ce *lease.ConflictError
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "b"}); !errors.As(err, &ce) {
		t.Fatalf("checkout while a is alive: %v, want a conflict", err)
	}

	// a's heartbeat runs out; a comes back and takes t2.
	e.clock.Advance(hb.ExpiresAt.Sub(e.clock.Now()) + 100*time.Millisecond)
	must[lease.Heartbeat](t)(other.Heartbeat(c, "a", time.Minute))
	e.clock.Advance(100 * time.Millisecond)
	held := must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "t2", AgentID: "a", Timeout: time.Hour}))
	e.clock.Advance(100 * time.Millisecond)

	got, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t2", AgentID: "b"})
	if !errors.As(err, &ce) || ce.Holder.AgentID != "a" {
		t.Fatalf("checkout of t2, held by a, alive again: %+v, %v; want a conflict with a", got, err)
	}
	if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, "t2")); lock == nil || lock.Fence != held.Fence {
		t.Fatalf("t2's lease: %+v, want a's, fence %d", lock, held.Fence)
	}
}
