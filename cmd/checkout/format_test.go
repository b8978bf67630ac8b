package main

import (
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/client"
)

// A short lease's end is shown to the second: a minute's rounding would
// be a good part of it. A longer one keeps the skill's hours and minutes.
func TestShortLeasesEndToTheSecond(t *testing.T) {
	t.Setenv("TZ", "")
	locked := time.Date(2026, 3, 20, 14, 30, 0, 0, time.UTC)
	for _, tc := range []struct {
		timeout time.Duration
		want    string
	}{
		{2 * time.Second, "  Timeout: 2s (auto-release at 14:30:02)\n  Expires at: 2026-03-20 14:30:02 UTC (in 2s)\n"},
		{90 * time.Second, "  Timeout: 90s (auto-release at 14:31:30)\n  Expires at: 2026-03-20 14:31:30 UTC (in 90s)\n"},
		{30 * time.Minute, "  Timeout: 30m (auto-release at 15:00)\n  Expires at: 2026-03-20 15:00 UTC (in 30m)\n"},
	} {
		co := client.Checkout{TaskID: "t", LockedAt: locked, TimeoutSeconds: int64(tc.timeout / time.Second),
			ExpiresAt: locked.Add(tc.timeout), RemainingSeconds: int64(tc.timeout / time.Second)}
		var b strings.Builder
		timeoutLine(&b, co)
		if b.String() != tc.want {
			t.Errorf("%v lease:\n%s\nwant:\n%s", tc.timeout, b.String(), tc.want)
		}
	}
}
