package e2e

import (
	"sync"
	"testing"
	"time"
)

// An expired lease is never live, blocks nobody, and the sweep ends it once:
// one timeout event, the task back to todo, each watcher told once.
func TestExpiryThroughTheSweep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	holder, watcher := e.agent(t, "holder"), e.agent(t, "watcher")
	e.task(t, holder, "t1")
	co := e.must(t, 200, "POST", "/api/tasks/t1/checkout", holder, map[string]any{"timeout": "1m"})
	e.must(t, 200, "POST", "/api/tasks/t1/watch", watcher, nil)

	e.clock.Advance(59 * time.Second)
	equal(t, "sweep before expiry", fmtSweep(e.sweep(t)), "0 0")
	equal(t, "remaining", e.must(t, 200, "GET", "/api/tasks/t1", watcher, nil).Obj("checkout")["remaining_seconds"], 1)

	e.clock.Advance(2 * time.Second)
	// Expired but not swept: not live anywhere.
	task := e.must(t, 200, "GET", "/api/tasks/t1", watcher, nil)
	equal(t, "checkout of an expired lease", task.Body["checkout"], nil)
	equal(t, "lock of an expired lease", e.must(t, 200, "GET", "/api/tasks/t1/checkout", watcher, nil).Body["locked"], false)
	equal(t, "live leases", len(e.must(t, 200, "GET", "/api/checkouts", watcher, nil).List("checkouts")), 0)
	e.fail(t, 404, "not_checked_out", "POST", "/api/tasks/t1/renew", holder, nil)

	// Overlapping sweeps end the lease once.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var timeouts int
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			to, _ := e.sweep(t)
			mu.Lock()
			timeouts += to
			mu.Unlock()
		}()
	}
	wg.Wait()
	equal(t, "timeouts over all sweeps", timeouts, 1)
	equal(t, "sweep after", fmtSweep(e.sweep(t)), "0 0")

	e.drain(t)
	evs := e.must(t, 200, "GET", "/api/tasks/t1/events", holder, nil).List("events")
	equal(t, "events", len(evs), 2)
	last := evs[1]
	equal(t, "ending event", last["type"], "timeout")
	equal(t, "held", last["held_seconds"], 60)
	equal(t, "by", last["by"], "system")
	equal(t, "fence", last["fence"], co.Num("fence"))
	equal(t, "status", e.must(t, 200, "GET", "/api/tasks/t1", holder, nil).Str("status"), "todo")
	msgs := e.inbox(t, watcher)
	equal(t, "watcher messages", len(msgs), 1)
	equal(t, "message task", msgs[0]["task_id"], "t1")
}

// A checkout takes over an expired lease at once; the old lease ends with a
// timeout event, the fence grows, and nobody is told (the task never became
// free).
func TestTakeoverOfAnExpiredLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b, w := e.agent(t, "a"), e.agent(t, "b"), e.agent(t, "w")
	e.task(t, a, "t1")
	first := e.must(t, 200, "POST", "/api/tasks/t1/checkout", a, map[string]any{"timeout": "30s"})
	e.must(t, 200, "POST", "/api/tasks/t1/watch", w, nil)
	e.clock.Advance(31 * time.Second)
	second := e.must(t, 200, "POST", "/api/tasks/t1/checkout", b, nil)
	if second.Num("fence") <= first.Num("fence") {
		t.Fatalf("fence %v after %v", second.Num("fence"), first.Num("fence"))
	}
	equal(t, "events", e.events(t, a, "t1"), []string{"checkout", "timeout", "checkout"})
	equal(t, "sweep after the takeover", fmtSweep(e.sweep(t)), "0 0")
	equal(t, "watcher told", len(e.inbox(t, w)), 0)
	// The old holder is no longer the holder.
	e.fail(t, 403, "not_holder", "POST", "/api/tasks/t1/release", a, map[string]any{"run_id": first.Str("run_id")})
}

// A watched agent whose heartbeat expires is dead: its leases block nobody,
// the sweep ends them with agent_death, and it is alive again from its next
// heartbeat without getting them back.
func TestHeartbeatDeath(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	dead, other, watcher := e.agent(t, "dead"), e.agent(t, "other"), e.agent(t, "watcher")
	e.task(t, dead, "t1")
	e.task(t, dead, "t2")
	e.must(t, 200, "POST", "/api/heartbeat", dead, map[string]any{"ttl": "10s"})
	e.must(t, 200, "POST", "/api/tasks/t1/checkout", dead, map[string]any{"timeout": "1h"})
	e.must(t, 200, "POST", "/api/tasks/t2/checkout", dead, map[string]any{"timeout": "1h"})
	e.must(t, 200, "POST", "/api/tasks/t1/watch", watcher, nil)
	e.must(t, 200, "POST", "/api/tasks/t2/watch", watcher, nil)

	e.clock.Advance(9 * time.Second)
	e.fail(t, 409, "checked_out", "POST", "/api/tasks/t1/checkout", other, nil)
	equal(t, "sweep while alive", fmtSweep(e.sweep(t)), "0 0")

	e.clock.Advance(2 * time.Second)
	equal(t, "dead holder's lease", e.must(t, 200, "GET", "/api/tasks/t1", other, nil).Body["checkout"], nil)
	equal(t, "dead holder's checkouts", len(e.must(t, 200, "GET", "/api/checkouts?agent_id=dead", other, nil).List("checkouts")), 0)

	// t2 is taken over at checkout (agent_death, nobody told); the sweep
	// ends t1 (agent_death, watcher told once).
	e.must(t, 200, "POST", "/api/tasks/t2/checkout", other, nil)
	equal(t, "t2 events", e.events(t, other, "t2"), []string{"checkout", "agent_death", "checkout"})
	equal(t, "sweep", fmtSweep(e.sweep(t)), "0 1")
	equal(t, "second sweep", fmtSweep(e.sweep(t)), "0 0")
	equal(t, "t1 events", e.events(t, other, "t1"), []string{"checkout", "agent_death"})
	equal(t, "t1 status", e.must(t, 200, "GET", "/api/tasks/t1", other, nil).Str("status"), "todo")
	msgs := e.inbox(t, watcher)
	equal(t, "watcher messages", len(msgs), 1)
	equal(t, "message task", msgs[0]["task_id"], "t1")

	// Alive again, but the ended leases stay ended.
	e.must(t, 200, "POST", "/api/heartbeat", dead, map[string]any{"ttl": "10s"})
	e.fail(t, 404, "not_checked_out", "POST", "/api/tasks/t1/renew", dead, nil)
	e.fail(t, 403, "not_holder", "POST", "/api/tasks/t2/renew", dead, nil)
	e.must(t, 200, "POST", "/api/tasks/t1/checkout", dead, nil)
}

// Removing an agent ends its leases at once, with agent_death and the
// reason "agent removed", and tells the watchers.
func TestRemovingAnAgentEndsItsLeases(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	gone, watcher := e.agent(t, "gone"), e.agent(t, "watcher")
	e.task(t, gone, "t1")
	e.must(t, 200, "POST", "/api/tasks/t1/checkout", gone, nil)
	e.must(t, 200, "POST", "/api/tasks/t1/watch", watcher, nil)
	e.clock.Advance(5 * time.Second)
	e.must(t, 200, "DELETE", "/api/agents/gone", e.admin, nil)
	e.drain(t)
	evs := e.must(t, 200, "GET", "/api/tasks/t1/events", watcher, nil).List("events")
	equal(t, "events", len(evs), 2)
	equal(t, "type", evs[1]["type"], "agent_death")
	equal(t, "reason", evs[1]["reason"], "agent removed")
	equal(t, "held", evs[1]["held_seconds"], 5)
	equal(t, "status", e.must(t, 200, "GET", "/api/tasks/t1", watcher, nil).Str("status"), "todo")
	equal(t, "watcher told", len(e.inbox(t, watcher)), 1)
	equal(t, "sweep", fmtSweep(e.sweep(t)), "0 0")
}

func fmtSweep(timeouts, deaths int) string {
	return itoa(timeouts) + " " + itoa(deaths)
}

func itoa(n int) string {
	if n < 0 {
		return "-" + itoa(-n)
	}
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

// A release repeated by its run id after later leases of the task have
// ended is answered as the first was; a force release naming an ended
// lease leaves the live one alone.
func TestReleaseRepeatedAfterLaterLeasesOverHTTP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := e.agent(t, "ann"), e.agent(t, "bob")
	e.task(t, a, "t")
	co := e.must(t, 200, "POST", "/api/tasks/t/checkout", a, nil)
	e.clock.Advance(2 * time.Second)
	first := e.must(t, 200, "POST", "/api/tasks/t/release", a, map[string]any{"run_id": co.Str("run_id")})
	e.must(t, 200, "POST", "/api/tasks/t/checkout", b, nil)
	e.must(t, 200, "POST", "/api/tasks/t/release", b, nil)
	e.drain(t)
	again := e.must(t, 200, "POST", "/api/tasks/t/release", a, map[string]any{"run_id": co.Str("run_id")})
	equal(t, "the repeat's answer", again.Body, first.Body)

	live := e.must(t, 200, "POST", "/api/tasks/t/checkout", b, nil)
	e.fail(t, 403, "not_holder", "POST", "/api/tasks/t/release", e.admin, map[string]any{"force": true, "fence": co.Num("fence")})
	e.must(t, 200, "POST", "/api/tasks/t/renew", b, map[string]any{"fence": live.Num("fence")})
}
