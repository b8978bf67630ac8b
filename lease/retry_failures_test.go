package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// The retry wait doubles with the failed attempts, not with every grant:
// a plain release before the first failed one leaves that failure's wait
// at the retry delay.
func TestAPlainReleaseDoesNotDoubleTheRetryWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	delay := 10 * time.Second
	e.create(t, lease.CreateTaskParams{TaskID: "t", RetryDelay: &delay})
	co := e.checkout(t, "t", "x", time.Hour)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID}))
	co = e.checkout(t, "t", "x", time.Hour)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	got := e.get(t, "t")
	if want := e.clock.Now().Add(delay); got.Attempts != 2 || got.NotBefore == nil || !got.NotBefore.Equal(want) {
		t.Errorf("t after a plain and a failed release: attempts %d, not_before %v; want 2, %v (one failure: the retry delay)", got.Attempts, got.NotBefore, want)
	}
}
