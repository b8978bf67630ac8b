package main

import (
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/client"
)

// A denial says when to come back: the lease's expiry, or the holder's
// heartbeat running out when that comes first.
func TestDeniedSaysWhenToComeBack(t *testing.T) {
	t.Setenv("TZ", "")
	locked := time.Date(2026, 3, 20, 14, 30, 0, 0, time.UTC)
	holder := client.Checkout{TaskID: "task-d4e5", AgentID: "agent-c3d4", AgentName: "writer", LockedAt: locked,
		TimeoutSeconds: 900, ExpiresAt: locked.Add(15 * time.Minute), RemainingSeconds: 600}
	hbExp := locked.Add(5*time.Minute + 47*time.Second)
	for _, tc := range []struct {
		name string
		ce   client.ConflictError
		want string
	}{
		{"unwatched holder", client.ConflictError{Holder: holder, RetryAfter: 10 * time.Minute},
			"  Retry after: 10m (the lease expires)\n"},
		{"heartbeat first", client.ConflictError{Holder: holder, RetryAfter: 47 * time.Second, HeartbeatExpiresAt: &hbExp},
			"  Retry after: 47s (the holder's heartbeat runs out at 2026-03-20T14:35:47Z unless it sends another)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			printDenied(&b, "task-d4e5", &tc.ce, false)
			out := b.String()
			if !strings.Contains(out, tc.want) || !strings.HasPrefix(out, "Checkout DENIED: task-d4e5\n  Held by: writer (agent-c3d4)\n") ||
				!strings.HasSuffix(out, tc.want+"  Suggestion: wait or pick another task\n") {
				t.Fatalf("denial:\n%s\nwant the line %q before the suggestion", out, tc.want)
			}
		})
	}
}
