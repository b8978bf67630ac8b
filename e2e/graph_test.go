package e2e

import (
	"fmt"
	"maps"
	"net/http"
	"testing"
	"time"
)

// The work graph over HTTP, every answer held to the OpenAPI document: a
// dependent is blocked (409 blocked naming its open blockers) until its
// blocker completes, then todo with an unblocked event and its watcher
// told; bad blockers are 400s; a failed release waits its retry delay
// (409 not_ready); the last attempt's failure makes the task failed, and a
// reopen (a PATCH, or a checkout expecting failed) starts its attempts anew.
func TestWorkGraph(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := e.agent(t, "ann"), e.agent(t, "bob")
	e.task(t, a, "build")
	dep := e.must(t, 201, "POST", "/api/tasks", a, map[string]any{"task_id": "ship", "blocked_by": []string{"build"}, "max_attempts": 2, "retry_delay": "30s"})
	equal(t, "status", dep.Str("status"), "blocked")
	equal(t, "blocked_by", dep.Body["blocked_by"], []any{map[string]any{"task_id": "build", "status": "todo"}})
	equal(t, "max_attempts", dep.Num("max_attempts"), 2)
	equal(t, "retry_delay_seconds", dep.Num("retry_delay_seconds"), 30)
	equal(t, "build blocks", e.must(t, 200, "GET", "/api/tasks/build", a, nil).Body["blocks"], []any{"ship"})

	blocked := e.fail(t, 409, "blocked", "POST", "/api/tasks/ship/checkout", b, nil)
	equal(t, "open blockers", blocked.Body["blocked_by"], []any{map[string]any{"task_id": "build", "status": "todo"}})
	e.fail(t, 400, "invalid_dependency", "POST", "/api/tasks", a, map[string]any{"task_id": "x", "blocked_by": []string{"nope"}})
	e.fail(t, 400, "invalid_dependency", "PATCH", "/api/tasks/build", a, map[string]any{"blocked_by": []string{"build"}})
	e.fail(t, 400, "dependency_cycle", "PATCH", "/api/tasks/build", a, map[string]any{"blocked_by": []string{"ship"}})

	e.must(t, 200, "POST", "/api/tasks/ship/watch", b, nil)
	co := e.must(t, 200, "POST", "/api/tasks/build/checkout", a, nil)
	equal(t, "attempt", co.Num("attempt"), 1)
	e.must(t, 200, "POST", "/api/tasks/build/complete", a, nil)
	e.drain(t) // the completion's consequences unblock ship
	e.drain(t) // and ship's unblocking has its own
	equal(t, "ship after its blocker's completion", e.must(t, 200, "GET", "/api/tasks/ship", a, nil).Str("status"), "todo")
	equal(t, "ship's trail", e.events(t, a, "ship"), []string{"unblocked"})
	msgs := e.inbox(t, b)
	equal(t, "watcher's messages", len(msgs), 1)
	equal(t, "reason", msgs[0]["reason"], "unblocked")

	// A failed attempt waits the retry delay; the last one fails the task.
	co = e.must(t, 200, "POST", "/api/tasks/ship/checkout", b, nil)
	e.must(t, 200, "POST", "/api/tasks/ship/release", b, map[string]any{"run_id": co.Str("run_id"), "outcome": "failed", "error": "registry <down>"})
	task := e.must(t, 200, "GET", "/api/tasks/ship", a, nil)
	equal(t, "after a failed attempt", task.Str("status"), "todo")
	equal(t, "last_error", task.Str("last_error"), "registry <down>")
	equal(t, "not_before", task.Str("not_before"), stamp(e.clock.Now().Add(30*time.Second)))
	nr := e.fail(t, 409, "not_ready", "POST", "/api/tasks/ship/checkout", b, nil)
	equal(t, "not_ready's not_before", nr.Str("not_before"), task.Str("not_before"))
	e.fail(t, 400, "invalid_request", "POST", "/api/tasks/ship/release", b, map[string]any{"outcome": "maybe"})
	e.clock.Advance(30 * time.Second)
	co = e.must(t, 200, "POST", "/api/tasks/ship/checkout", b, nil)
	equal(t, "second attempt", co.Num("attempt"), 2)
	e.must(t, 200, "POST", "/api/tasks/ship/release", b, map[string]any{"outcome": "failed"})
	task = e.must(t, 200, "GET", "/api/tasks/ship", a, nil)
	equal(t, "after the last attempt failed", task.Str("status"), "failed")
	equal(t, "attempts", task.Num("attempts"), 2)
	evs := e.events(t, a, "ship")
	equal(t, "ship's trail ends", evs[len(evs)-2:], []string{"release", "failed"})
	e.fail(t, 409, "status_mismatch", "POST", "/api/tasks/ship/checkout", b, nil)
	q := e.must(t, 200, "GET", "/api/queues", a, nil).List("queues")
	equal(t, "failed count", q[0]["counts"].(map[string]any)["failed"], 1)
	failed := e.must(t, 200, "GET", "/api/tasks?status=failed", a, nil).List("tasks")
	equal(t, "failed listing", len(failed), 1)

	reopened := e.must(t, 200, "PATCH", "/api/tasks/ship", a, map[string]any{"status": "todo"})
	equal(t, "reopened", reopened.Str("status"), "todo")
	equal(t, "attempts after the reopen", reopened.Num("attempts"), 0)

	// A checkout that expects failed reopens a failed task and grants it,
	// its attempts anew; naming blocked is allowed and changes nothing.
	e.must(t, 201, "POST", "/api/tasks", a, map[string]any{"task_id": "flaky", "max_attempts": 1})
	e.must(t, 200, "POST", "/api/tasks/flaky/checkout", b, nil)
	e.must(t, 200, "POST", "/api/tasks/flaky/release", b, map[string]any{"outcome": "failed"})
	e.fail(t, 409, "status_mismatch", "POST", "/api/tasks/flaky/checkout", b, map[string]any{"expected_statuses": []string{"todo", "blocked"}})
	co = e.must(t, 200, "POST", "/api/tasks/flaky/checkout", b, map[string]any{"expected_statuses": []string{"blocked", "failed"}})
	equal(t, "the reopened task's attempt", co.Num("attempt"), 1)
	equal(t, "flaky after the reopening checkout", e.must(t, 200, "GET", "/api/tasks/flaky", a, nil).Str("status"), "in_progress")

	// not_before on create and PATCH.
	later := stamp(e.clock.Now().Add(time.Hour))
	e.must(t, 201, "POST", "/api/tasks", a, map[string]any{"task_id": "later", "not_before": later})
	e.fail(t, 409, "not_ready", "POST", "/api/tasks/later/checkout", b, nil)
	e.must(t, 200, "PATCH", "/api/tasks/later", a, map[string]any{"not_before": nil})
	e.must(t, 200, "POST", "/api/tasks/later/checkout", b, nil)
}

// Reopening a done blocker over HTTP blocks again the dependent it had
// released, until it is done again: claim skips the dependent, a named
// checkout answers blocked naming it, the queue counts it blocked.
func TestReopenedBlockerBlocksItsDependentAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := e.agent(t, "ann"), e.agent(t, "bob")
	e.task(t, a, "build")
	e.must(t, 201, "POST", "/api/tasks", a, map[string]any{"task_id": "ship", "queue": "release", "blocked_by": []string{"build"}})
	e.must(t, 200, "POST", "/api/tasks/build/checkout", a, nil)
	e.must(t, 200, "POST", "/api/tasks/build/complete", a, nil)
	e.drain(t)
	e.drain(t)
	equal(t, "ship after build's completion", e.must(t, 200, "GET", "/api/tasks/ship", a, nil).Str("status"), "todo")

	e.must(t, 200, "PATCH", "/api/tasks/build", a, map[string]any{"status": "todo"})
	e.drain(t)
	e.drain(t)
	ship := e.must(t, 200, "GET", "/api/tasks/ship", a, nil)
	equal(t, "ship once build is reopened", ship.Str("status"), "blocked")
	equal(t, "ship's blockers", ship.Body["blocked_by"], []any{map[string]any{"task_id": "build", "status": "todo"}})
	e.fail(t, 404, "no_task_available", "POST", "/api/claim", b, map[string]any{"queues": []string{"release"}})
	blocked := e.fail(t, 409, "blocked", "POST", "/api/tasks/ship/checkout", b, nil)
	equal(t, "open blockers", blocked.Body["blocked_by"], []any{map[string]any{"task_id": "build", "status": "todo"}})
	for _, q := range e.must(t, 200, "GET", "/api/queues", a, nil).List("queues") {
		if q["queue"] == "release" {
			equal(t, "release's counts", q["counts"].(map[string]any)["blocked"], 1)
		}
	}

	e.must(t, 200, "POST", "/api/tasks/build/checkout", a, nil)
	e.must(t, 200, "POST", "/api/tasks/build/complete", a, nil)
	e.drain(t)
	e.drain(t)
	co := e.must(t, 200, "POST", "/api/claim", b, map[string]any{"queues": []string{"release"}})
	equal(t, "claimed once build is done again", co.Str("task_id"), "ship")
	equal(t, "ship's trail", e.events(t, a, "ship"), []string{"unblocked", "unblocked", "checkout"})
}

// A PATCH that names an unknown blocker is answered in the order a PATCH
// naming a cycle is: an unknown task is 404, a stale If-Match 412, and a
// task that is not todo or blocked 409 invalid_transition, before the
// blockers are judged (400 invalid_dependency).
func TestPatchOfUnknownBlockerAfterTheTaskIsJudged(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.agent(t, "ann")
	e.task(t, a, "build")
	ghost := map[string]any{"blocked_by": []string{"ghost"}}
	e.fail(t, 404, "task_not_found", "PATCH", "/api/tasks/nope", a, ghost)

	stale := e.callWith(t, "PATCH", "/api/tasks/build", a, http.Header{"If-Match": {"9"}}, ghost)
	if stale.Status != 412 || stale.Code() != "version_mismatch" {
		t.Fatalf("PATCH with a stale If-Match and an unknown blocker: %d %s, want 412 version_mismatch", stale.Status, stale.Raw)
	}

	e.must(t, 200, "POST", "/api/tasks/build/checkout", a, nil)
	e.must(t, 200, "POST", "/api/tasks/build/complete", a, nil)
	e.fail(t, 409, "invalid_transition", "PATCH", "/api/tasks/build", a, ghost)

	e.task(t, a, "ship")
	e.fail(t, 400, "invalid_dependency", "PATCH", "/api/tasks/ship", a, ghost)
	equal(t, "ship's blockers", e.must(t, 200, "GET", "/api/tasks/ship", a, nil).Body["blocked_by"], []any{})
}

// A release's event carries outcome and error (API.md, "Attempts and
// delays"): null when the release gave none, as a task's last_error is.
// A plain release's event had neither key, so a client reading them from
// every release event found them missing. Events of other types have
// neither.
func TestAReleaseEventCarriesOutcomeAndError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a, b := e.agent(t, "ann"), e.agent(t, "bob")
	e.task(t, a, "job")
	for _, body := range []map[string]any{nil, {"outcome": "done"}, {"outcome": "failed"}, {"outcome": "failed", "error": "exit status 1"}} {
		co := e.must(t, 200, "POST", "/api/tasks/job/checkout", b, nil)
		body = maps.Clone(body)
		if body == nil {
			body = map[string]any{}
		}
		body["run_id"] = co.Str("run_id")
		e.must(t, 200, "POST", "/api/tasks/job/release", b, body)
		e.clock.Advance(time.Hour) // past any retry delay
	}
	e.drain(t)
	var releases []string
	for _, ev := range e.must(t, 200, "GET", "/api/tasks/job/events", a, nil).List("events") {
		outcome, hasOutcome := ev["outcome"]
		errText, hasError := ev["error"]
		if ev["type"] != "release" {
			if hasOutcome || hasError {
				t.Errorf("a %v event carries outcome %v and error %v; want neither", ev["type"], outcome, errText)
			}
			continue
		}
		if !hasOutcome || !hasError {
			t.Errorf("a release event without outcome (%v) or error (%v): %v", hasOutcome, hasError, ev)
		}
		releases = append(releases, fmt.Sprintf("%v/%v", outcome, errText))
	}
	equal(t, "the release events' outcome/error", releases, []string{"<nil>/<nil>", "done/<nil>", "failed/<nil>", "failed/exit status 1"})
}
