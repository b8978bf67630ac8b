package e2e

import (
	"testing"
	"time"
)

// The former holder of a lease that ended without it gets one lease_lost
// message naming the lease, through the HTTP API; its own release tells it
// nothing, and a watcher's task_available carries the ended lease too.
func TestFormerHolderGetsLeaseLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	holder, watcher := e.agent(t, "holder"), e.agent(t, "watcher")
	e.task(t, holder, "t1")
	co := e.must(t, 200, "POST", "/api/tasks/t1/checkout", holder, map[string]any{"timeout": "1m"})
	e.must(t, 200, "POST", "/api/tasks/t1/watch", watcher, nil)
	e.must(t, 200, "POST", "/api/tasks/t1/release", e.admin, map[string]any{"force": true, "reason": "stuck"})

	msgs := e.inbox(t, holder)
	equal(t, "holder's messages", len(msgs), 1)
	m := msgs[0]
	equal(t, "type", m["type"], "lease_lost")
	equal(t, "reason", m["reason"], "force_release")
	equal(t, "task", m["task_id"], "t1")
	equal(t, "fence", m["fence"], co.Num("fence"))
	equal(t, "run_id", m["run_id"], co.Str("run_id"))
	w := e.inbox(t, watcher)
	equal(t, "watcher's messages", len(w), 1)
	equal(t, "watcher's type", w[0]["type"], "task_available")
	equal(t, "watcher's fence", w[0]["fence"], co.Num("fence"))
	e.must(t, 200, "DELETE", "/api/inbox/"+m["message_id"].(string), holder, nil)

	// The holder's own release, and a timeout taken over at checkout.
	e.must(t, 200, "POST", "/api/tasks/t1/checkout", holder, map[string]any{"timeout": "1m"})
	e.must(t, 200, "POST", "/api/tasks/t1/release", holder, nil)
	equal(t, "after its own release", len(e.inbox(t, holder)), 0)
	e.must(t, 200, "POST", "/api/tasks/t1/checkout", holder, map[string]any{"timeout": "1m"})
	e.clock.Advance(time.Minute)
	e.must(t, 200, "POST", "/api/tasks/t1/checkout", watcher, nil)
	msgs = e.inbox(t, holder)
	equal(t, "after a takeover", len(msgs), 1)
	equal(t, "takeover's reason", msgs[0]["reason"], "timeout")
}
