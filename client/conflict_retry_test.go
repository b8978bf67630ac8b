package client

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A conflict's answer says when to come back and how the holder's
// heartbeat stands; the client hands both on.
func TestConflictCarriesRetryAfterAndHeartbeat(t *testing.T) {
	t.Parallel()
	body := `{"error":"task task-1 is already checked out","code":"checked_out","same_agent":false,"retry_after_seconds":43,` +
		`"holder":{"task_id":"task-1","agent_id":"agent-w","agent_name":"writer","run_id":"run-w","fence":3,` +
		`"locked_at":"2026-03-20T14:35:00.123Z","timeout_seconds":1800,"expires_at":"2026-03-20T15:05:00.123Z","remaining_seconds":1199,"reason":"",` +
		`"last_heartbeat_at":"2026-03-20T14:44:13.623Z","heartbeat_expires_at":"2026-03-20T14:45:42.873Z"}}`
	s := newScripted(t, func(int, recorded) (int, string) { return 409, body })
	_, err := New(s.URL, "ck_x").Checkout(context.Background(), "task-1", CheckoutRequest{})
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("err = %v, want a *ConflictError", err)
	}
	if ce.RetryAfter != 43*time.Second {
		t.Fatalf("RetryAfter %v, want 43s", ce.RetryAfter)
	}
	want := time.Date(2026, 3, 20, 14, 45, 42, 873e6, time.UTC)
	if ce.HeartbeatExpiresAt == nil || !ce.HeartbeatExpiresAt.Equal(want) || ce.LastHeartbeatAt == nil {
		t.Fatalf("heartbeat %v %v, want expiry %v", ce.LastHeartbeatAt, ce.HeartbeatExpiresAt, want)
	}
}
