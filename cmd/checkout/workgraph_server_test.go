package main

import (
	"context"
	"strings"
	"testing"
)

// The work graph from the command line and over MCP, against the real
// local server.

func TestWorkGraphFromTheCommandLine(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url, key := e.srv.URL(), e.keys["agent-a1b2"]
	expect := func(r result, code int, lines ...string) {
		t.Helper()
		if r.code != code {
			t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
		}
		for _, l := range lines {
			if !strings.Contains(r.stdout, l) {
				t.Errorf("output lacks %q:\n%s%s", l, r.stdout, r.stderr)
			}
		}
	}

	expect(runCLI(t, url, key, "tasks", "add", "build"), 0)
	expect(runCLI(t, url, key, "tasks", "add", "deploy", "--blocked-by", "build"), 0, "Task created: deploy", "  Blocked by: build (todo)\n")
	expect(runCLI(t, url, key, "tasks", "show", "deploy"), 0, "Task deploy: blocked\n", "  Blocked by: build (todo)\n", "  Attempts: 0 of 5 (retry delay 10s)\n")
	expect(runCLI(t, url, key, "tasks", "show", "build"), 0, "  Blocks: deploy\n")
	expect(runCLI(t, url, key, "tasks", "list", "--status", "blocked"), 0, "| deploy | blocked |")
	expect(runCLI(t, url, key, "deploy"), exitConflict, "Checkout DENIED: deploy\n  Blocked by: build (todo)\n")
	expect(runCLI(t, url, key, "status", "deploy"), 0, "Task deploy: not checked out\n  Status: blocked\n  Blocked by: build (todo)\n")
	expect(runCLI(t, url, key, "tasks", "edit", "deploy", "--blocked-by", ""), 0, "Task deploy: todo\n")
	expect(runCLI(t, url, key, "tasks", "add", "x", "--blocked-by", "nope"), exitUsage)

	expect(runCLI(t, url, key, "tasks", "add", "flaky", "--max-attempts", "2", "--retry-delay", "0s"), 0)
	expect(runCLI(t, url, key, "flaky"), 0, "Checkout acquired: flaky")
	expect(runCLI(t, url, key, "fail", "flaky", "--error", "tests fail"), 0, "Attempt failed: flaky\n", "  Error: tests fail\n", "  Attempts: 1 of 2\n")
	if err := e.srv.Drain(context.Background()); err != nil { // the release's error is on its event once archived
		t.Fatal(err)
	}
	expect(runCLI(t, url, key, "events", "flaky"), 0, "outcome failed; error: tests fail")
	expect(runCLI(t, url, key, "tasks", "show", "flaky"), 0, "Task flaky: todo\n", "  Last error: tests fail\n")
	expect(runCLI(t, url, key, "flaky"), 0, "  Attempt: 2 (an earlier attempt failed or ended without completing it)\n")
	expect(runCLI(t, url, key, "fail", "flaky", "--error", "again"), 0, "  Task failed: it used its 2 attempts")
	expect(runCLI(t, url, key, "tasks", "list", "--status", "failed"), 0, "| flaky | failed |")
	expect(runCLI(t, url, key, "fail", "flaky"), exitNotFound)
}

func TestWorkGraphOverMCP(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	m := connectMCP(t, e.srv.URL(), e.keys["agent-a1b2"])

	if res, out := m.call("create_task", map[string]any{"task_id": "build"}); res.IsError {
		t.Fatal(out)
	}
	res, out := m.call("create_task", map[string]any{"task_id": "deploy", "blocked_by": []string{"build"}, "max_attempts": 2, "retry_delay": "0s"})
	if res.IsError || out["task"].(map[string]any)["status"] != "blocked" || !strings.Contains(out["message"].(string), "task build (todo)") {
		t.Fatalf("create_task blocked: %v", out)
	}
	res, out = m.call("checkout_task", map[string]any{"task_id": "deploy"})
	if res.IsError || out["acquired"] != false || out["code"] != "blocked" || len(out["blocked_by"].([]any)) != 1 {
		t.Fatalf("checkout_task of a blocked task: %v", out)
	}

	if res, out = m.call("checkout_task", map[string]any{"task_id": "build"}); res.IsError || out["acquired"] != true {
		t.Fatalf("checkout_task build: %v", out)
	}
	res, out = m.call("fail_task", map[string]any{"task_id": "build", "error": "compiler crashed"})
	if res.IsError {
		t.Fatalf("fail_task: %v", out)
	}
	task, _ := out["task"].(map[string]any)
	if task["last_error"] != "compiler crashed" || task["attempts"] != 1.0 || task["status"] != "todo" {
		t.Errorf("fail_task's task: %v", out)
	}
	if res, out = m.call("get_task", map[string]any{"task_id": "build"}); res.IsError || !strings.Contains(out["message"].(string), "compiler crashed") {
		t.Errorf("get_task after a failure: %v", out)
	}
	if res, out = m.call("update_task", map[string]any{"task_id": "deploy", "blocked_by": []string{}}); res.IsError || out["task"].(map[string]any)["status"] != "todo" {
		t.Errorf("update_task clearing blocked_by: %v", out)
	}
}

// A watcher told of a failed attempt whose task now waits sees until when,
// in a column of its own.
func TestInboxShowsWhenADelayedTaskIsReady(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url, holder, watcher := e.srv.URL(), e.keys["agent-a1b2"], e.keys["agent-c3d4"]
	run := func(key string, args ...string) result {
		t.Helper()
		r := runCLI(t, url, key, args...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
		return r
	}
	run(holder, "tasks", "add", "flaky", "--retry-delay", "30s")
	run(holder, "flaky")
	run(watcher, "watch", "flaky")
	run(holder, "fail", "flaky")
	if err := e.srv.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	out := run(watcher, "inbox").stdout
	if !strings.Contains(out, "| Message | Task | Type | Reason | At | Ready at |") || !strings.Contains(out, "| flaky | task_available | release | 2026-03-20T14:30:00Z | 2026-03-20T14:30:30Z |") {
		t.Fatalf("inbox after a failed attempt that waits:\n%s", out)
	}
}

// Whoever takes a task whose earlier attempts failed, by checkout or by
// claim, is shown what the latest one failed with, under its attempt.
func TestTakingARetriedTaskShowsItsLastError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url, key := e.srv.URL(), e.keys["agent-a1b2"]
	run := func(args ...string) string {
		t.Helper()
		r := runCLI(t, url, key, args...)
		if r.code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
		return r.stdout
	}
	run("tasks", "add", "flaky", "--retry-delay", "0s")
	if out := run("flaky"); strings.Contains(out, "Last error") {
		t.Errorf("a first attempt shows a last error:\n%s", out)
	}
	run("fail", "flaky", "--error", "tests fail: TestLogin")
	if out := run("flaky"); !strings.Contains(out, "  Attempt: 2 (an earlier attempt failed or ended without completing it)\n  Last error: tests fail: TestLogin\n") {
		t.Errorf("checkout of a retried task:\n%s", out)
	}
	run("fail", "flaky", "--error", "out of disk")
	if out := run("claim"); !strings.Contains(out, "  Last error: out of disk\n") {
		t.Errorf("claim of a retried task:\n%s", out)
	}
}

// tasks list shows when a todo task that may not be taken yet is ready,
// so that a task waiting for its retry delay or a time it was given is not
// taken for an open one.
func TestTasksListShowsWhenATaskIsReady(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url, key := e.srv.URL(), e.keys["agent-a1b2"]
	for _, args := range [][]string{{"tasks", "add", "later", "--not-before", "2099-01-01T09:00:00Z"}, {"tasks", "add", "now"}} {
		if r := runCLI(t, url, key, args...); r.code != 0 {
			t.Fatalf("%v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
	r := runCLI(t, url, key, "tasks", "list")
	if r.code != 0 || !strings.Contains(r.stdout, "| Held By | Not Before |") ||
		!strings.Contains(r.stdout, "| later | todo | default | 5 | - | - | 2099-01-01T09:00:00Z |") ||
		!strings.Contains(r.stdout, "| now | todo | default | 5 | - | - | - |") {
		t.Errorf("tasks list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
