package httpapi

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A conflict says when to come back: retry_after_seconds in the body and
// the same value in Retry-After, with the holder's heartbeat in holder
// (null when the holder never sent one).
func TestConflictSaysWhenToComeBack(t *testing.T) {
	t.Parallel()
	now := t0.Add(10*time.Minute + 500*time.Millisecond) // the harness's clock
	for _, tc := range []struct {
		name      string
		hbExpires *time.Time
		retry     float64
		header    string
	}{
		// The lease (30 m from t0) ends first: 19 m 59.5 s, rounded up.
		{"unwatched holder", nil, 1200, "1200"},
		// The heartbeat runs out 42.25 s from now: 43.
		{"heartbeat ends first", new(now.Add(42250 * time.Millisecond)), 43, "43"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t)
			ce := &lease.ConflictError{Holder: sampleCheckout("task-1", "agent-2")}
			if tc.hbExpires != nil {
				last := now.Add(-47 * time.Second)
				ce.LastHeartbeatAt, ce.HeartbeatExpiresAt = &last, tc.hbExpires
			}
			hs.svc.err = ce
			res := hs.do("POST", "/api/tasks/task-1/checkout", "ck_agent", "").expect(t, 409, "checked_out")
			if got := res.json["retry_after_seconds"]; got != tc.retry {
				t.Fatalf("retry_after_seconds %v, want %v: %s", got, tc.retry, res.body)
			}
			if got := res.header.Get("Retry-After"); got != tc.header {
				t.Fatalf("Retry-After %q, want %q", got, tc.header)
			}
			if res.json["same_agent"] != false {
				t.Fatalf("same_agent: %s", res.body)
			}
			holder := res.json["holder"].(map[string]any)
			for _, f := range []string{"last_heartbeat_at", "heartbeat_expires_at"} {
				v, present := holder[f]
				if !present {
					t.Fatalf("holder without %s: %s", f, res.body)
				}
				if (v == nil) != (tc.hbExpires == nil) {
					t.Fatalf("holder %s = %v: %s", f, v, res.body)
				}
			}
			if tc.hbExpires != nil && (holder["last_heartbeat_at"] != "2026-03-20T14:44:13.623Z" || holder["heartbeat_expires_at"] != "2026-03-20T14:45:42.873Z") {
				t.Fatalf("holder's heartbeat: %s", res.body)
			}
		})
	}
}

// Other errors carry no Retry-After: only a conflict knows when to come
// back (and a 503, which has its own).
func TestNotHolderHasNoRetryAfter(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	hs.svc.err = &lease.NotHolderError{Holder: sampleCheckout("task-1", "agent-2")}
	res := hs.do("POST", "/api/tasks/task-1/renew", "ck_agent", "").expect(t, 403, "not_holder")
	if h := res.header.Get("Retry-After"); h != "" {
		t.Fatalf("Retry-After %q on not_holder", h)
	}
	if _, ok := res.json["retry_after_seconds"]; ok {
		t.Fatalf("retry_after_seconds on not_holder: %s", res.body)
	}
	holder := res.json["holder"].(map[string]any)
	if _, ok := holder["last_heartbeat_at"]; ok {
		t.Fatalf("not_holder's holder carries a heartbeat: %s", res.body)
	}
}
