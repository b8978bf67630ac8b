package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A conflict says when to come back: the earlier of the lease's expiry and
// its holder's heartbeat expiry, in whole seconds rounded up, with the
// holder's heartbeat; nothing of a heartbeat for a holder that never sent
// one. It costs no request beyond the failed write and the holder's
// heartbeat read it made before (TestRequestBudget holds the cached case).
func TestConflictSaysWhenToComeBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "unwatched", "watched", "lease-first")

	conflictOn := func(taskID string) *lease.ConflictError {
		t.Helper()
		_, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: taskID, AgentID: "other"})
		var ce *lease.ConflictError
		if !errors.As(err, &ce) {
			t.Fatalf("checkout of %s: %v, want a conflict", taskID, err)
		}
		return ce
	}

	t.Run("holder never sent a heartbeat", func(t *testing.T) {
		held := e.checkout(t, "unwatched", "quiet", 10*time.Minute)
		e.clock.Advance(1500 * time.Millisecond)
		ce := conflictOn("unwatched")
		if ce.LastHeartbeatAt != nil || ce.HeartbeatExpiresAt != nil {
			t.Fatalf("heartbeat %v %v, want none", ce.LastHeartbeatAt, ce.HeartbeatExpiresAt)
		}
		if !ce.EndsBy().Equal(held.ExpiresAt) {
			t.Fatalf("ends by %v, want the lease's expiry %v", ce.EndsBy(), held.ExpiresAt)
		}
		// 600 s - 1.5 s = 598.5 s, rounded up.
		if got := ce.RetryAfter(e.clock.Now()); got != 599 {
			t.Fatalf("retry after %d s, want 599", got)
		}
	})

	t.Run("holder's heartbeat ends first", func(t *testing.T) {
		hb := must[lease.Heartbeat](t)(e.store.Heartbeat(c, "beating", 90*time.Second))
		sent := e.clock.Now()
		e.clock.Advance(time.Second)
		e.checkout(t, "watched", "beating", time.Hour)
		e.clock.Advance(250 * time.Millisecond)
		e.count.Take()
		ce := conflictOn("watched")
		if n := e.count.Take().Total(); n > 2 {
			t.Errorf("conflict made %d requests, want at most 2 (the failed write and the holder's heartbeat)", n)
		}
		if ce.LastHeartbeatAt == nil || !ce.LastHeartbeatAt.Equal(sent) {
			t.Fatalf("last heartbeat %v, want %v", ce.LastHeartbeatAt, sent)
		}
		if ce.HeartbeatExpiresAt == nil || !ce.HeartbeatExpiresAt.Equal(hb.ExpiresAt) {
			t.Fatalf("heartbeat expires %v, want %v", ce.HeartbeatExpiresAt, hb.ExpiresAt)
		}
		if !ce.EndsBy().Equal(hb.ExpiresAt) {
			t.Fatalf("ends by %v, want the heartbeat's expiry %v", ce.EndsBy(), hb.ExpiresAt)
		}
		// 90 s - 1.25 s = 88.75 s, rounded up.
		if got := ce.RetryAfter(e.clock.Now()); got != 89 {
			t.Fatalf("retry after %d s, want 89", got)
		}
	})

	t.Run("lease ends before the heartbeat", func(t *testing.T) {
		must[lease.Heartbeat](t)(e.store.Heartbeat(c, "long", time.Hour))
		held := e.checkout(t, "lease-first", "long", 30*time.Second)
		e.clock.Advance(10 * time.Second)
		ce := conflictOn("lease-first")
		if ce.HeartbeatExpiresAt == nil || !ce.EndsBy().Equal(held.ExpiresAt) {
			t.Fatalf("ends by %v (heartbeat %v), want the lease's expiry %v", ce.EndsBy(), ce.HeartbeatExpiresAt, held.ExpiresAt)
		}
		if got := ce.RetryAfter(e.clock.Now()); got != 20 {
			t.Fatalf("retry after %d s, want 20", got)
		}
		if got := ce.RetryAfter(held.ExpiresAt.Add(time.Second)); got != 0 {
			t.Fatalf("retry after the end: %d s, want 0", got)
		}
	})
}
