package lease_test

import (
	"testing"

	"github.com/checkout-dev/checkout/lease"
)

// A PATCH that raises max_attempts, read while the task's last attempt
// was live and landing after a checkout read that attempt as expired:
// the checkout's ending of that attempt (endEnded) is conditioned on the
// limit as it read it, so it does not fail a task that has attempts left.
func TestAnExpiredAttemptIsNotFailedPastAMaxAttemptsRaisedAfterItsRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	co, err := takeoverRacingAMaxAttemptsPatch(t, e, 1, 3)
	if err != nil || co.AgentID != "b" || co.Attempt != 2 {
		t.Fatalf("checkout by b once the limit was raised to 3: %+v, %v; want attempt 2", co, err)
	}
	if got := e.get(t, "t"); got.Status != lease.StatusInProgress || got.MaxAttempts != 3 {
		t.Fatalf("task: %s, attempts %d of %d; want in_progress, 2 of 3", got.Status, got.Attempts, got.MaxAttempts)
	}
}
