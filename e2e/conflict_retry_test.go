package e2e

import (
	"testing"
	"time"
)

// A conflict says when to come back, in the body and in Retry-After: the
// lease's expiry for a holder that sends no heartbeat, the holder's
// heartbeat expiry when that comes first, whole seconds rounded up.
func TestConflictSaysWhenToComeBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	holder, other := e.agent(t, "holder"), e.agent(t, "other")
	e.task(t, holder, "t1")
	e.must(t, 200, "POST", "/api/tasks/t1/checkout", holder, map[string]any{"timeout": "10m"})
	e.clock.Advance(1500 * time.Millisecond)

	r := e.fail(t, 409, "checked_out", "POST", "/api/tasks/t1/checkout", other, nil)
	equal(t, "retry_after_seconds", r.Num("retry_after_seconds"), float64(599))
	equal(t, "Retry-After", r.Header.Get("Retry-After"), "599")
	equal(t, "same_agent", r.Body["same_agent"], false)
	h := r.Obj("holder")
	for _, f := range []string{"last_heartbeat_at", "heartbeat_expires_at"} {
		v, ok := h[f]
		if !ok || v != nil {
			t.Fatalf("unwatched holder's %s: %v (present %v): %s", f, v, ok, r.Raw)
		}
	}

	sent := e.clock.Now()
	hb := e.must(t, 200, "POST", "/api/heartbeat", holder, map[string]any{"ttl": "90s"})
	e.clock.Advance(250 * time.Millisecond)
	r = e.fail(t, 409, "checked_out", "POST", "/api/tasks/t1/checkout", other, nil)
	equal(t, "retry_after_seconds, watched", r.Num("retry_after_seconds"), float64(90))
	equal(t, "Retry-After, watched", r.Header.Get("Retry-After"), "90")
	h = r.Obj("holder")
	equal(t, "last_heartbeat_at", h["last_heartbeat_at"], stamp(sent))
	equal(t, "heartbeat_expires_at", h["heartbeat_expires_at"], hb.Str("expires_at"))
}
