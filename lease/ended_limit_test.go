package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A PATCH that raises max_attempts, read while the task's last attempt
// was live and landing after a checkout read that attempt as expired:
// the checkout's ending of that attempt (endEnded) is conditioned on the
// limit as it read it, so it does not fail a task that has attempts left.
func TestAnExpiredAttemptIsNotFailedPastAMaxAttemptsRaisedAfterItsRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "t", MaxAttempts: new(1)})
	e.checkout(t, "t", "a", time.Minute)

	e.clock.Advance(59 * time.Second)
	patcher, pdb := delayed(e)
	reached, land := holdWrite(pdb)
	patched := make(chan struct{})
	var perr error
	go func() {
		defer close(patched)
		_, perr = patcher.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "a", MaxAttempts: new(3)})
	}()
	<-reached // the PATCH read the lease live

	e.clock.Advance(2 * time.Second)
	taker, tdb := delayed(e)
	tdb.armAfter(func() { land(patched) })
	co, err := taker.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", Timeout: time.Minute})
	<-patched
	if perr != nil {
		t.Fatalf("PATCH read while the lease was live: %v", perr)
	}
	if err != nil || co.AgentID != "b" || co.Attempt != 2 {
		t.Fatalf("checkout by b once the limit was raised to 3: %+v, %v; want attempt 2", co, err)
	}
	if got := e.get(t, "t"); got.Status != lease.StatusInProgress || got.MaxAttempts != 3 {
		t.Fatalf("task: %s, attempts %d of %d; want in_progress, 2 of 3", got.Status, got.Attempts, got.MaxAttempts)
	}
}
