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

// An admin's renewal, release and completion of another agent's lease
// (agent_id naming it) are the admin's in the trail, the lease staying the
// holder's; and the release or completion ends the lease without its
// holder, which is told so, as for a force release.
func TestAdminActingForTheHolderIsRecordedAndTold(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	holder := e.agent(t, "holder")
	e.task(t, holder, "t1")
	e.task(t, holder, "t2")
	co := e.must(t, 200, "POST", "/api/tasks/t1/checkout", holder, map[string]any{"timeout": "1m"})
	e.clock.Advance(time.Second)
	e.must(t, 200, "POST", "/api/tasks/t1/renew", e.admin, map[string]any{"agent_id": "holder"})
	e.clock.Advance(time.Second)
	rel := e.must(t, 200, "POST", "/api/tasks/t1/release", e.admin, map[string]any{"agent_id": "holder", "reason": "reassigned"})
	equal(t, "released_by", rel.Str("released_by"), "admin")

	msgs := e.inbox(t, holder)
	equal(t, "holder's messages", len(msgs), 1)
	equal(t, "type", msgs[0]["type"], "lease_lost")
	equal(t, "reason", msgs[0]["reason"], "force_release")
	equal(t, "fence", msgs[0]["fence"], co.Num("fence"))
	var trail []string
	for _, ev := range e.must(t, 200, "GET", "/api/tasks/t1/events", holder, nil).List("events") {
		trail = append(trail, ev["type"].(string)+" "+ev["agent_id"].(string)+"/"+ev["by"].(string))
	}
	equal(t, "t1's trail", trail, []string{"checkout holder/holder", "renew holder/admin", "release holder/admin"})
	e.must(t, 200, "DELETE", "/api/inbox/"+msgs[0]["message_id"].(string), holder, nil)

	e.must(t, 200, "POST", "/api/tasks/t2/checkout", holder, nil)
	e.must(t, 200, "POST", "/api/tasks/t2/complete", e.admin, map[string]any{"agent_id": "holder"})
	msgs = e.inbox(t, holder)
	equal(t, "holder's messages after the completion", len(msgs), 1)
	equal(t, "the completion's reason", msgs[0]["reason"], "force_release")
	evs := e.must(t, 200, "GET", "/api/tasks/t2/events", holder, nil).List("events")
	equal(t, "the completion's by", evs[len(evs)-1]["by"], "admin")
}
