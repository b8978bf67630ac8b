package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

func TestHealthz(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r := e.must(t, 200, "GET", "/healthz", "", nil)
	equal(t, "ok", r.Body["ok"], true)
	e.fail(t, 405, "method_not_allowed", "POST", "/healthz", "", nil)
	e.fail(t, 404, "not_found", "GET", "/nope", "", nil)
	e.fail(t, 404, "not_found", "GET", "/api/tasks/", e.admin, nil)
	e.fail(t, 405, "method_not_allowed", "PUT", "/api/tasks/t1", e.admin, nil)
}

func TestAgents(t *testing.T) {
	t.Parallel()
	e := newEnv(t)

	r := e.must(t, 201, "POST", "/api/agents", e.admin, map[string]any{"name": "researcher"})
	key, id := r.Str("api_key"), r.Str("agent_id")
	if !strings.HasPrefix(key, "ck_") || id == "" || r.Str("name") != "researcher" || r.Body["admin"] != false {
		t.Fatalf("registration %s", r.Raw)
	}
	var boss string // an admin registered by the admin
	t.Run("an admin registers agents and admins", func(t *testing.T) {
		r := e.must(t, 201, "POST", "/api/agents", e.admin, map[string]any{"name": "boss", "admin": true, "agent_id": "boss"})
		boss = r.Str("api_key")
		equal(t, "admin", r.Body["admin"], true)
		e.fail(t, 409, "agent_exists", "POST", "/api/agents", e.admin, map[string]any{"name": "again", "agent_id": "boss"})
		e.fail(t, 400, "invalid_id", "POST", "/api/agents", e.admin, map[string]any{"name": "x", "agent_id": "-bad"})
		e.fail(t, 400, "invalid_json", "POST", "/api/agents", e.admin, map[string]any{"name": "x", "role": "admin"})
		e.fail(t, 400, "invalid_json", "POST", "/api/agents", e.admin, map[string]any{"name": 7})
	})
	t.Run("whoami tells each key's agent", func(t *testing.T) {
		me := e.must(t, 200, "GET", "/api/whoami", key, nil)
		equal(t, "whoami agent", me.Str("agent_id"), id)
		equal(t, "whoami name", me.Str("name"), "researcher")
		equal(t, "whoami admin", me.Body["admin"], false)
		equal(t, "whoami of an admin", e.must(t, 200, "GET", "/api/whoami", boss, nil).Body["admin"], true)
	})
	t.Run("the new admin may administer; the agent may not", func(t *testing.T) {
		e.must(t, 200, "GET", "/api/agents", boss, nil)
		e.fail(t, 403, "forbidden", "GET", "/api/agents", key, nil)
		e.fail(t, 403, "forbidden", "POST", "/api/agents", key, map[string]any{"name": "x"})
		e.fail(t, 403, "forbidden", "DELETE", "/api/agents/boss", key, nil)
	})
	t.Run("alive is null, then true, then false once the heartbeat expires", func(t *testing.T) {
		alive := func() any {
			for _, a := range e.must(t, 200, "GET", "/api/agents", e.admin, nil).List("agents") {
				if a["agent_id"] == id {
					return a["alive"]
				}
			}
			t.Fatalf("agent %s not listed", id)
			return nil
		}
		equal(t, "alive before any heartbeat", alive(), nil)
		hb := e.must(t, 200, "POST", "/api/heartbeat", key, map[string]any{"ttl": "30s"})
		equal(t, "heartbeat agent", hb.Str("agent_id"), id)
		equal(t, "heartbeat expiry", hb.Str("expires_at"), stamp(t0.Add(30*time.Second)))
		equal(t, "alive after a heartbeat", alive(), true)
		e.clock.Advance(31 * time.Second)
		equal(t, "alive after the heartbeat expired", alive(), false)
		e.must(t, 200, "POST", "/api/heartbeat", key, nil) // default ttl, body optional
		equal(t, "alive again", alive(), true)
		e.fail(t, 400, "invalid_timeout", "POST", "/api/heartbeat", key, map[string]any{"ttl": "2h"})
		e.fail(t, 400, "invalid_timeout", "POST", "/api/heartbeat", key, map[string]any{"ttl": "soon"})
	})
	t.Run("removal revokes the key at once, although it was just cached", func(t *testing.T) {
		e.must(t, 200, "GET", "/api/tasks", key, nil)
		e.must(t, 200, "DELETE", "/api/agents/"+id, e.admin, nil)
		e.fail(t, 401, "unauthorized", "GET", "/api/tasks", key, nil)
		e.fail(t, 404, "agent_not_found", "DELETE", "/api/agents/"+id, e.admin, nil)
		e.fail(t, 400, "invalid_id", "DELETE", "/api/agents/bad%20id", e.admin, nil)
	})
}

// Every route but /healthz refuses a missing, malformed, unknown or revoked
// key with 401 unauthorized.
func TestAuthenticationFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	revoked := e.agent(t, "gone")
	e.must(t, 200, "DELETE", "/api/agents/gone", e.admin, nil)
	routes := [][2]string{
		{"POST", "/api/agents"}, {"GET", "/api/agents"}, {"DELETE", "/api/agents/a1"},
		{"POST", "/api/heartbeat"}, {"POST", "/api/tasks"}, {"GET", "/api/tasks"},
		{"GET", "/api/tasks/t1"}, {"POST", "/api/tasks/t1/checkout"}, {"GET", "/api/tasks/t1/checkout"},
		{"POST", "/api/tasks/t1/renew"}, {"POST", "/api/tasks/t1/release"}, {"POST", "/api/tasks/t1/complete"},
		{"GET", "/api/tasks/t1/events"}, {"POST", "/api/tasks/t1/watch"}, {"GET", "/api/checkouts"},
		{"GET", "/api/inbox"}, {"DELETE", "/api/inbox/m1"}, {"POST", "/api/claim"},
	}
	keys := map[string]string{
		"missing":          "",
		"empty bearer":     "raw:Bearer ",
		"other scheme":     "raw:Basic YWRtaW46YWRtaW4=",
		"no scheme":        "raw:" + e.admin,
		"two tokens":       "raw:Bearer " + e.admin + " extra",
		"unknown":          "ck_not-a-key-of-this-server",
		"admin key + junk": e.admin + "x",
		"revoked":          revoked,
		"huge":             "ck_" + strings.Repeat("a", 4000),
	}
	for name, key := range keys {
		for _, rt := range routes {
			r := e.fail(t, 401, "unauthorized", rt[0], rt[1], key, map[string]any{})
			if strings.Contains(string(r.Raw), "lease:") {
				t.Fatalf("%s: internal text in the answer: %s", name, r.Raw)
			}
		}
	}
	e.must(t, 200, "GET", "/healthz", "raw:Bearer nonsense", nil)
	// The scheme is case-insensitive.
	e.must(t, 200, "GET", "/api/agents", "raw:bearer "+e.admin, nil)
}

func TestTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.agent(t, "a1")

	t.Run("create, and the refusals of create and get", func(t *testing.T) {
		r := e.must(t, 201, "POST", "/api/tasks", k, map[string]any{"task_id": "t1", "title": "Fix login bug"})
		equal(t, "status", r.Str("status"), "todo")
		equal(t, "created_at", r.Str("created_at"), stamp(t0))
		for _, f := range []string{"started_at", "completed_at", "duration_seconds", "checkout"} {
			if v, ok := r.Body[f]; !ok || v != nil {
				t.Fatalf("%s = %v (present %v), want null", f, v, ok)
			}
		}
		gen := e.must(t, 201, "POST", "/api/tasks", k, nil).Str("task_id")
		if gen == "" {
			t.Fatal("no generated task id")
		}
		e.fail(t, 409, "task_exists", "POST", "/api/tasks", k, map[string]any{"task_id": "t1"})
		e.fail(t, 400, "invalid_id", "POST", "/api/tasks", k, map[string]any{"task_id": "has space"})
		e.fail(t, 400, "invalid_id", "POST", "/api/tasks", k, map[string]any{"task_id": strings.Repeat("a", 129)})
		e.fail(t, 400, "invalid_id", "GET", "/api/tasks/bad%20id", k, nil)
		e.fail(t, 404, "task_not_found", "GET", "/api/tasks/t9", k, nil)
		e.fail(t, 400, "invalid_json", "POST", "/api/tasks", k, `{"task_id": "t2"`)
		e.fail(t, 400, "invalid_json", "POST", "/api/tasks", k, `[1,2]`)
		e.fail(t, 400, "invalid_json", "POST", "/api/tasks", k, `{"task_id":"t2"} {}`)
		e.fail(t, 413, "payload_too_large", "POST", "/api/tasks", k, `{"title":"`+strings.Repeat("x", 65<<10)+`"}`)
	})
	for i := 2; i <= 5; i++ {
		e.clock.Advance(time.Second)
		e.task(t, k, "t"+string(rune('0'+i)))
	}
	got := e.must(t, 200, "GET", "/api/tasks/t3", k, nil)
	equal(t, "task", got.Str("title"), "task t3")

	t.Run("pages of two walk every task once, in creation order", func(t *testing.T) {
		var seen []string
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > 10 {
				t.Fatal("pagination does not end")
			}
			target := "/api/tasks?status=todo&limit=2"
			if cursor != "" {
				target += "&cursor=" + cursor
			}
			p := e.must(t, 200, "GET", target, k, nil)
			for _, tk := range p.List("tasks") {
				seen = append(seen, tk["task_id"].(string))
			}
			if p.Body["next_cursor"] == nil {
				break
			}
			cursor = p.Str("next_cursor")
		}
		if len(seen) != 6 || seen[0] != "t1" || seen[len(seen)-1] != "t5" {
			t.Fatalf("listed %v", seen)
		}
		e.fail(t, 400, "invalid_request", "GET", "/api/tasks?limit=0", k, nil)
		e.fail(t, 400, "invalid_request", "GET", "/api/tasks?limit=1001", k, nil)
		e.fail(t, 400, "invalid_request", "GET", "/api/tasks?limit=ten", k, nil)
		e.fail(t, 400, "invalid_request", "GET", "/api/tasks?status=doing", k, nil)
		e.fail(t, 400, "invalid_request", "GET", "/api/tasks?cursor=garbage!", k, nil)
		all := e.must(t, 200, "GET", "/api/tasks", k, nil)
		equal(t, "default listing", len(all.List("tasks")), 6)
		equal(t, "in_progress listing", len(e.must(t, 200, "GET", "/api/tasks?status=in_progress", k, nil).List("tasks")), 0)
	})
}

func TestCheckoutLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice, bob := e.agent(t, "alice"), e.agent(t, "bob")
	e.task(t, alice, "t1")

	// Grant, with the defaults.
	co := e.must(t, 200, "POST", "/api/tasks/t1/checkout", alice, nil)
	run, fence := co.Str("run_id"), co.Num("fence")
	if run == "" || fence < 1 || co.Str("agent_id") != "alice" || co.Str("agent_name") != "alice-name" {
		t.Fatalf("checkout %s", co.Raw)
	}
	equal(t, "timeout_seconds", co.Num("timeout_seconds"), 1800)
	equal(t, "remaining_seconds", co.Num("remaining_seconds"), 1800)
	equal(t, "locked_at", co.Str("locked_at"), stamp(t0))
	equal(t, "expires_at", co.Str("expires_at"), stamp(t0.Add(30*time.Minute)))

	// A same-run retry is the same lease; another run of the same agent and
	// another agent are refused with the holder.
	again := e.must(t, 200, "POST", "/api/tasks/t1/checkout", alice, map[string]any{"run_id": run})
	equal(t, "retry fence", again.Num("fence"), fence)
	for _, key := range []string{alice, bob} {
		c := e.fail(t, 409, "checked_out", "POST", "/api/tasks/t1/checkout", key, map[string]any{"run_id": "other"})
		equal(t, "holder", c.Obj("holder")["agent_id"], "alice")
		equal(t, "message", c.Str("error"), "task t1 is already checked out")
	}

	// The task shows the lease and in_progress.
	e.clock.Advance(100 * time.Second)
	task := e.must(t, 200, "GET", "/api/tasks/t1", bob, nil)
	equal(t, "status", task.Str("status"), "in_progress")
	equal(t, "started_at", task.Str("started_at"), stamp(t0))
	equal(t, "remaining", task.Obj("checkout")["remaining_seconds"], 1700)
	lock := e.must(t, 200, "GET", "/api/tasks/t1/checkout", bob, nil)
	equal(t, "locked", lock.Body["locked"], true)
	equal(t, "lock holder", lock.Obj("checkout")["run_id"], run)
	equal(t, "alice's checkouts", len(e.must(t, 200, "GET", "/api/checkouts?agent_id=alice", bob, nil).List("checkouts")), 1)
	equal(t, "bob's checkouts", len(e.must(t, 200, "GET", "/api/checkouts?agent_id=bob", bob, nil).List("checkouts")), 0)
	equal(t, "all checkouts", len(e.must(t, 200, "GET", "/api/checkouts", bob, nil).List("checkouts")), 1)

	// Renew: only the holder, with matching run and fence when given.
	nh := e.fail(t, 403, "not_holder", "POST", "/api/tasks/t1/renew", bob, nil)
	equal(t, "not_holder holder", nh.Obj("holder")["agent_id"], "alice")
	e.fail(t, 403, "not_holder", "POST", "/api/tasks/t1/renew", alice, map[string]any{"run_id": "other"})
	e.fail(t, 403, "not_holder", "POST", "/api/tasks/t1/renew", alice, map[string]any{"fence": fence + 1})
	e.fail(t, 400, "invalid_timeout", "POST", "/api/tasks/t1/renew", alice, map[string]any{"timeout": "0s"})
	rn := e.must(t, 200, "POST", "/api/tasks/t1/renew", alice, map[string]any{"run_id": run, "fence": fence})
	equal(t, "renew keeps the timeout", rn.Num("timeout_seconds"), 1800)
	equal(t, "renew expiry", rn.Str("expires_at"), stamp(t0.Add(100*time.Second+30*time.Minute)))
	equal(t, "renew fence", rn.Num("fence"), fence)
	rn = e.must(t, 200, "POST", "/api/tasks/t1/renew", alice, map[string]any{"timeout": "1h"})
	equal(t, "renew timeout", rn.Num("timeout_seconds"), 3600)

	// Release: only the holder; force is for admins.
	e.fail(t, 403, "not_holder", "POST", "/api/tasks/t1/release", bob, nil)
	e.fail(t, 403, "forbidden", "POST", "/api/tasks/t1/release", bob, map[string]any{"force": true})
	e.clock.Advance(20 * time.Second)
	rel := e.must(t, 200, "POST", "/api/tasks/t1/release", alice, map[string]any{"reason": "lunch"})
	equal(t, "released_by", rel.Str("released_by"), "alice")
	equal(t, "held_seconds", rel.Num("held_seconds"), 120)
	e.fail(t, 404, "not_checked_out", "POST", "/api/tasks/t1/release", alice, nil)
	e.fail(t, 404, "not_checked_out", "POST", "/api/tasks/t1/renew", alice, nil)
	e.fail(t, 404, "not_checked_out", "POST", "/api/tasks/t1/complete", alice, nil)
	equal(t, "status after release", e.must(t, 200, "GET", "/api/tasks/t1", bob, nil).Str("status"), "todo")
	equal(t, "lock after release", e.must(t, 200, "GET", "/api/tasks/t1/checkout", bob, nil).Body["locked"], false)

	// A new grant has a higher fence; completion ends it and the task.
	co2 := e.must(t, 200, "POST", "/api/tasks/t1/checkout", bob, map[string]any{"timeout": "90s", "reason": "my turn", "run_id": "run-b"})
	if co2.Num("fence") <= fence {
		t.Fatalf("fence %v after %v", co2.Num("fence"), fence)
	}
	equal(t, "reason", co2.Str("reason"), "my turn")
	e.clock.Advance(60 * time.Second)
	e.fail(t, 403, "not_holder", "POST", "/api/tasks/t1/complete", alice, nil)
	done := e.must(t, 200, "POST", "/api/tasks/t1/complete", bob, map[string]any{"run_id": "run-b", "fence": co2.Num("fence")})
	equal(t, "status", done.Str("status"), "done")
	equal(t, "completed_at", done.Str("completed_at"), stamp(t0.Add(180*time.Second)))
	equal(t, "duration", done.Num("duration_seconds"), 180)
	equal(t, "checkout after completion", done.Body["checkout"], nil)

	// Status checks: done is not expected by default.
	sm := e.fail(t, 409, "status_mismatch", "POST", "/api/tasks/t1/checkout", alice, nil)
	equal(t, "status", sm.Str("status"), "done")
	e.must(t, 200, "POST", "/api/tasks/t1/checkout", alice, map[string]any{"expected_statuses": []string{"done"}})

	e.task(t, alice, "t2")
	e.fail(t, 409, "status_mismatch", "POST", "/api/tasks/t2/checkout", alice, map[string]any{"expected_statuses": []string{"in_progress"}})
	e.fail(t, 400, "invalid_request", "POST", "/api/tasks/t2/checkout", alice, map[string]any{"expected_statuses": []string{"doing"}})
	for _, bad := range []string{"0s", "500ms", "25h", "-1m", "soon"} {
		e.fail(t, 400, "invalid_timeout", "POST", "/api/tasks/t2/checkout", alice, map[string]any{"timeout": bad})
	}
	e.fail(t, 400, "invalid_json", "POST", "/api/tasks/t2/checkout", alice, map[string]any{"timeout": 30})
	e.fail(t, 400, "invalid_json", "POST", "/api/tasks/t2/checkout", alice, map[string]any{"lease": "30m"})
	e.fail(t, 404, "task_not_found", "POST", "/api/tasks/t9/checkout", alice, nil)
	e.fail(t, 404, "task_not_found", "GET", "/api/tasks/t9/checkout", alice, nil)
	e.fail(t, 404, "task_not_found", "GET", "/api/tasks/t9/events", alice, nil)
	e.fail(t, 400, "invalid_id", "POST", "/api/tasks/t%3F9/checkout", alice, nil)

	// The audit trail, oldest first; every ending event has held_seconds.
	e.drain(t)
	evs := e.must(t, 200, "GET", "/api/tasks/t1/events", alice, nil).List("events")
	var types []string
	for _, ev := range evs {
		types = append(types, ev["type"].(string))
		if _, ok := ev["held_seconds"]; ok != (ev["type"] == "release" || ev["type"] == "complete") {
			t.Fatalf("held_seconds on %v", ev)
		}
	}
	equal(t, "events", types, []string{"checkout", "renew", "renew", "release", "checkout", "complete", "checkout"})
	equal(t, "release held", evs[3]["held_seconds"], 120)
	equal(t, "release by", evs[3]["by"], "alice")

	// The fleet feed holds the same transitions, once the settle time has
	// passed; a page at a time, following the cursor.
	e.clock.Advance(3 * time.Second)
	var feed []string
	target := "/api/events?since=" + url.QueryEscape(t0.Add(-time.Minute).Format(time.RFC3339)) + "&limit=2"
	for range 20 {
		page := e.must(t, 200, "GET", target, alice, nil)
		list := page.List("events")
		for _, ev := range list {
			if ev["task_id"] == "t1" {
				feed = append(feed, ev["type"].(string))
			}
		}
		if len(list) == 0 {
			break
		}
		target = "/api/events?limit=2&cursor=" + url.QueryEscape(page.Str("next_cursor"))
	}
	equal(t, "feed of t1", feed, types)
	e.fail(t, 400, "invalid_request", "GET", "/api/events?since=yesterday", alice, nil)
}

// An admin acts on behalf of an agent; an agent may not.
func TestAdminOnBehalf(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	alice, bob := e.agent(t, "alice"), e.agent(t, "bob")
	e.task(t, alice, "t1")
	e.task(t, alice, "t2")
	e.fail(t, 403, "forbidden", "POST", "/api/tasks/t1/checkout", bob, map[string]any{"agent_id": "alice"})
	e.fail(t, 403, "forbidden", "POST", "/api/claim", bob, map[string]any{"agent_id": "alice"})
	// agent_id is for admins only, even naming the caller itself.
	e.fail(t, 403, "forbidden", "POST", "/api/tasks/t1/checkout", bob, map[string]any{"agent_id": "bob"})
	e.fail(t, 403, "forbidden", "POST", "/api/claim", bob, map[string]any{"agent_id": "bob"})
	co := e.must(t, 200, "POST", "/api/tasks/t1/checkout", e.admin, map[string]any{"agent_id": "alice", "run_id": "r1"})
	equal(t, "holder", co.Str("agent_id"), "alice")
	equal(t, "holder name", co.Str("agent_name"), "alice-name")
	// Alice holds it now: she may release it.
	e.must(t, 200, "POST", "/api/tasks/t1/release", alice, map[string]any{"run_id": "r1"})
	cl := e.must(t, 200, "POST", "/api/claim", e.admin, map[string]any{"agent_id": "bob"})
	equal(t, "claimed by", cl.Str("agent_id"), "bob")
	// The admin's force release ends bob's lease, audited as such.
	fr := e.must(t, 200, "POST", "/api/tasks/"+cl.Str("task_id")+"/release", e.admin, map[string]any{"force": true, "reason": "stuck"})
	equal(t, "released_by", fr.Str("released_by"), "admin")
	evs := e.events(t, bob, cl.Str("task_id"))
	equal(t, "last event", evs[len(evs)-1], "force_release")
	_ = bob
}

func TestClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.agent(t, "a1")
	e.fail(t, 404, "no_task_available", "POST", "/api/claim", k, nil)
	for _, id := range []string{"c3", "c1", "c2"} { // created in this order
		e.task(t, k, id)
		e.clock.Advance(time.Second)
	}
	e.must(t, 200, "POST", "/api/tasks/c1/checkout", k, nil)
	var got []string
	for range 2 {
		c := e.must(t, 200, "POST", "/api/claim", k, map[string]any{"timeout": "5m", "reason": "next"})
		got = append(got, c.Str("task_id"))
		equal(t, "timeout", c.Num("timeout_seconds"), 300)
	}
	equal(t, "claim order", got, []string{"c3", "c2"})
	e.fail(t, 404, "no_task_available", "POST", "/api/claim", k, nil)
	e.fail(t, 400, "invalid_timeout", "POST", "/api/claim", k, map[string]any{"timeout": "48h"})
	// An expired lease's task is claimable again once the sweep has moved
	// it back to todo (claim takes todo tasks only).
	e.clock.Advance(6 * time.Minute)
	equal(t, "sweep", fmtSweep(e.sweep(t)), "2 0")
	c := e.must(t, 200, "POST", "/api/claim", k, nil)
	equal(t, "claimed after expiry", c.Str("task_id"), "c3")
}

func TestInboxAndWatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	holder, w1, w2, w3 := e.agent(t, "holder"), e.agent(t, "w1"), e.agent(t, "w2"), e.agent(t, "w3")
	e.task(t, holder, "t1")
	e.must(t, 200, "POST", "/api/tasks/t1/checkout", holder, map[string]any{"run_id": "r1"})

	// Three ways to watch: the route, a refused checkout with watch, and
	// the route twice (still one message).
	e.must(t, 200, "POST", "/api/tasks/t1/watch", w1, nil)
	equal(t, "watching", e.must(t, 200, "POST", "/api/tasks/t1/watch", w1, nil).Body["watching"], true)
	e.fail(t, 409, "checked_out", "POST", "/api/tasks/t1/checkout", w2, map[string]any{"watch": true})
	e.fail(t, 404, "task_not_found", "POST", "/api/tasks/t9/watch", w3, nil)
	e.fail(t, 400, "invalid_id", "POST", "/api/tasks/%20/watch", w3, nil)

	e.clock.Advance(time.Minute)
	e.must(t, 200, "POST", "/api/tasks/t1/release", holder, map[string]any{"reason": "blocked"})
	for _, k := range []string{w1, w2} {
		msgs := e.inbox(t, k)
		if len(msgs) != 1 || msgs[0]["task_id"] != "t1" || msgs[0]["type"] != "task_available" || msgs[0]["at"] != stamp(t0.Add(time.Minute)) {
			t.Fatalf("inbox %v", msgs)
		}
	}
	equal(t, "unwatched inbox", len(e.inbox(t, w3)), 0)
	equal(t, "holder inbox", len(e.inbox(t, holder)), 0)

	// The watch is used up: the next release tells nobody.
	e.must(t, 200, "POST", "/api/tasks/t1/checkout", holder, nil)
	e.must(t, 200, "POST", "/api/tasks/t1/release", holder, nil)
	equal(t, "w1 after a second release", len(e.inbox(t, w1)), 1)

	// Deleting a message: once.
	id := e.inbox(t, w1)[0]["message_id"].(string)
	e.fail(t, 404, "not_found", "DELETE", "/api/inbox/"+id, w3, nil) // not in w3's inbox
	e.must(t, 200, "DELETE", "/api/inbox/"+id, w1, nil)
	e.fail(t, 404, "not_found", "DELETE", "/api/inbox/"+id, w1, nil)
	equal(t, "w1 inbox after delete", len(e.inbox(t, w1)), 0)

	// Completion tells nobody.
	e.must(t, 200, "POST", "/api/tasks/t1/watch", w3, nil)
	e.must(t, 200, "POST", "/api/tasks/t1/checkout", holder, nil)
	e.must(t, 200, "POST", "/api/tasks/t1/complete", holder, nil)
	equal(t, "w3 after completion", len(e.inbox(t, w3)), 0)
}

// At least 32 agents race for one task: exactly one wins, every other gets
// 409 naming the winner.
func TestRace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const n = 40
	keys := make([]string, n)
	for i := range keys {
		keys[i] = e.agent(t, "racer-"+string(rune('A'+i%26))+string(rune('a'+i/26)))
	}
	e.task(t, keys[0], "prize")

	for round := 0; round < 2; round++ {
		type result struct {
			status int
			holder string
			winner string
			fence  float64
		}
		results := make([]result, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r := e.call(t, "POST", "/api/tasks/prize/checkout", keys[i], map[string]any{"timeout": "10m"})
				results[i] = result{status: r.Status, holder: strings.Clone(stringOf(r.Obj("holder")["agent_id"])), winner: r.Str("agent_id"), fence: r.Num("fence")}
			}()
		}
		close(start)
		wg.Wait()

		var winner string
		var winners int
		var fence float64
		for _, r := range results {
			if r.status == 200 {
				winners++
				winner, fence = r.winner, r.fence
			}
		}
		if winners != 1 {
			t.Fatalf("round %d: %d winners", round, winners)
		}
		for i, r := range results {
			if r.status == 200 {
				continue
			}
			if r.status != 409 || r.holder != winner {
				t.Fatalf("round %d racer %d: %d holder %q, winner %q", round, i, r.status, r.holder, winner)
			}
		}
		lock := e.must(t, 200, "GET", "/api/tasks/prize/checkout", keys[0], nil)
		equal(t, "lock holder", lock.Obj("checkout")["agent_id"], winner)
		equal(t, "fence", lock.Obj("checkout")["fence"], fence)
		equal(t, "fence of round", fence, float64(round+1))
		// The next round races for the expired lease: still one winner.
		e.clock.Advance(11 * time.Minute)
	}
}

func stringOf(v any) string { s, _ := v.(string); return s }

func TestAutoCreateTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, autoCreate)
	k := e.agent(t, "a1")
	co := e.must(t, 200, "POST", "/api/tasks/new-task/checkout", k, nil)
	equal(t, "task", co.Str("task_id"), "new-task")
	equal(t, "status", e.must(t, 200, "GET", "/api/tasks/new-task", k, nil).Str("status"), "in_progress")
	e.fail(t, 400, "invalid_id", "POST", "/api/tasks/new%20task/checkout", k, nil)
}

// Queues end to end: a batch with queues and priorities, claims by queue
// best first, a PATCH that moves a task, a cancel of a live lease by its
// holder (watchers told), and a reopen.
func TestQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.agent(t, "q1")
	w := e.agent(t, "q2")
	res := e.must(t, 200, "POST", "/api/tasks/batch", k, map[string]any{"tasks": []map[string]any{
		{"task_id": "low", "queue": "backend", "priority": 1},
		{"task_id": "high", "queue": "backend", "priority": 8, "metadata": map[string]any{"k": "v"}},
		{"task_id": "other", "queue": "research"},
	}})
	equal(t, "batch outcomes", len(res.List("results")), 3)
	again := e.must(t, 200, "POST", "/api/tasks/batch", k, map[string]any{"tasks": []map[string]any{{"task_id": "low"}}})
	equal(t, "retried batch", again.List("results")[0]["outcome"], "exists")
	e.must(t, 200, "PATCH", "/api/tasks/other", k, map[string]any{"queue": "backend", "priority": 9})
	c := e.must(t, 200, "POST", "/api/claim", k, map[string]any{"queues": []string{"backend"}})
	equal(t, "first claim", c.Str("task_id"), "other")
	equal(t, "its queue", c.Str("queue"), "backend")
	c = e.must(t, 200, "POST", "/api/claim", k, map[string]any{"queues": []string{"backend"}})
	equal(t, "second claim", c.Str("task_id"), "high")
	e.must(t, 200, "POST", "/api/tasks/high/watch", w, nil)
	e.fail(t, 403, "not_holder", "PATCH", "/api/tasks/high", w, map[string]any{"status": "cancelled"})
	done := e.must(t, 200, "PATCH", "/api/tasks/high", k, map[string]any{"status": "cancelled"})
	equal(t, "cancelled", done.Str("status"), "cancelled")
	equal(t, "events", e.events(t, k, "high"), []string{"checkout", "cancel"})
	msgs := e.inbox(t, w)
	equal(t, "watcher told", len(msgs), 1)
	equal(t, "reason", msgs[0]["reason"], "cancel")
	e.fail(t, 409, "invalid_transition", "PATCH", "/api/tasks/other", k, map[string]any{"status": "todo"})
	e.must(t, 200, "PATCH", "/api/tasks/high", k, map[string]any{"status": "todo"})
	list := e.must(t, 200, "GET", "/api/tasks?queue=backend&status=todo", k, nil)
	equal(t, "todo in backend", len(list.List("tasks")), 2)

	// The counts follow the change stream: low and high wait, other is
	// held, and research lost its only task to backend.
	e.drain(t)
	byQueue := map[string]map[string]any{}
	for _, q := range e.must(t, 200, "GET", "/api/queues", w, nil).List("queues") {
		byQueue[q["queue"].(string)] = q
	}
	backend := byQueue["backend"]
	if backend == nil {
		t.Fatalf("no backend queue in %v", byQueue)
	}
	counts := backend["counts"].(map[string]any)
	equal(t, "backend todo", counts["todo"], float64(2))
	equal(t, "backend in progress", counts["in_progress"], float64(1))
	equal(t, "backend oldest todo", backend["oldest_todo_at"], stamp(t0))
	if research := byQueue["research"]; research != nil {
		for status, n := range research["counts"].(map[string]any) {
			equal(t, "research "+status, n, float64(0))
		}
	}
}

// The refusals the other scenarios do not reach: a stale If-Match, the
// built-in admin's removal, and a task whose watch list is full.
func TestRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	k := e.agent(t, "r1")
	e.task(t, k, "t1")
	t.Run("a stale version is version_mismatch", func(t *testing.T) {
		r := e.callWith(t, "PATCH", "/api/tasks/t1", k, http.Header{"If-Match": {"99"}}, map[string]any{"priority": 3})
		if r.Status != 412 || r.Code() != "version_mismatch" {
			t.Fatalf("PATCH with If-Match 99: %d %s", r.Status, r.Raw)
		}
		e.must(t, 200, "PATCH", "/api/tasks/t1", k, map[string]any{"priority": 3})
	})
	t.Run("the built-in admin stays", func(t *testing.T) {
		e.fail(t, 409, "cannot_remove_admin", "DELETE", "/api/agents/admin", e.admin, nil)
	})
	t.Run("a full watch list is too_many_watchers", func(t *testing.T) {
		for i := range lease.MaxWatchers {
			w := e.agent(t, fmt.Sprintf("w%03d", i))
			e.must(t, 200, "POST", "/api/tasks/t1/watch", w, nil)
		}
		e.fail(t, 409, "too_many_watchers", "POST", "/api/tasks/t1/watch", k, nil)
		// A checkout with watch of the held task still answers who holds
		// it, and says the caller is not watching.
		e.call(t, "POST", "/api/tasks/t1/checkout", e.agent(t, "holder"), nil)
		held := e.fail(t, 409, "checked_out", "POST", "/api/tasks/t1/checkout", k, map[string]any{"watch": true})
		if held.Body["holder"] == nil || held.Body["watching"] != false {
			t.Fatalf("checkout with watch of a held task with a full watch list: %s", held.Raw)
		}
	})
}
