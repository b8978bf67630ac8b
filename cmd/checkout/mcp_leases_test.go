package main

import (
	"strings"
	"testing"
)

// Another agent's lease is never offered for adoption: whoever asks is
// told plainly that another agent holds the task, at the latest once the
// fence it was offered does not adopt it.
func TestMCPAnotherAgentsLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "held", "Held by the writer")
	e.task(t, "mine", "")
	writer := connectMCP(t, e.srv.URL(), e.keys["agent-c3d4"])
	_, out := writer.call("checkout_task", map[string]any{"task_id": "held"})
	fence := out["checkout"].(map[string]any)["fence"]

	// A session that has not yet seen which agent it is may be looking at
	// its own agent's lease of an earlier run: the fence adopts that. Given
	// for another agent's lease, it is refused plainly.
	researcher := connectMCP(t, e.srv.URL(), e.keys["agent-a1b2"])
	res, out := researcher.call("release_task", map[string]any{"task_id": "held"})
	if !res.IsError || out["code"] != "not_holder" || out["holder"].(map[string]any)["agent_id"] != "agent-c3d4" {
		t.Fatalf("release of another agent's lease: %s %v", textOf(res), out)
	}
	res, out = researcher.call("release_task", map[string]any{"task_id": "held", "fence": fence})
	if txt := textOf(res); !res.IsError || out["code"] != "not_holder" || !strings.Contains(txt, "another agent") || strings.Contains(txt, "fence=") {
		t.Fatalf("release of another agent's lease by its fence: %s %v", txt, out)
	}

	// update_task has no fence, and its holder check is by agent alone.
	res, out = researcher.call("update_task", map[string]any{"task_id": "held", "status": "cancelled"})
	if txt := textOf(res); !res.IsError || out["code"] != "not_holder" || !strings.Contains(txt, "another agent") || strings.Contains(txt, "fence=") || strings.Contains(txt, "adopt") {
		t.Fatalf("cancel of another agent's task: %s %v", txt, out)
	}

	// Once the session knows its agent, every tool on a lease says so at once.
	if res, _ = researcher.call("checkout_task", map[string]any{"task_id": "mine"}); res.IsError {
		t.Fatal(textOf(res))
	}
	for _, tc := range []struct {
		tool string
		args map[string]any
	}{
		{"renew_task", map[string]any{"task_id": "held"}},
		{"complete_task", map[string]any{"task_id": "held"}},
		{"release_task", map[string]any{"task_id": "held"}},
		{"fail_task", map[string]any{"task_id": "held", "error": "tests fail"}},
	} {
		res, out := researcher.call(tc.tool, tc.args)
		txt := textOf(res)
		if !res.IsError || out["code"] != "not_holder" || !strings.Contains(txt, "another agent") || !strings.Contains(txt, "writer (agent-c3d4)") ||
			strings.Contains(txt, "fence=") || strings.Contains(txt, "adopt") {
			t.Errorf("%s of another agent's lease: %s %v", tc.tool, txt, out)
		}
	}
}

// A release or completion repeated after claim_task, or after adopting a
// lease, names the lease that ended and is answered as the first was.
func TestMCPRepeatedEndIsAnsweredAsTheFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "ad1", "Adopted")
	url, key := e.srv.URL(), e.keys["agent-a1b2"]
	first := connectMCP(t, url, key)
	if res, _ := first.call("checkout_task", map[string]any{"task_id": "ad1"}); res.IsError {
		t.Fatal(textOf(res))
	}
	first.s.Close()
	e.task(t, "cl1", "")
	e.task(t, "cl2", "")
	e.task(t, "cl3", "")

	agent := connectMCP(t, url, key)
	if res, out := agent.call("checkout_task", map[string]any{"task_id": "ad1", "adopt": true}); res.IsError || out["adopted"] != true {
		t.Fatalf("adopt: %s %v", textOf(res), out)
	}
	for range 2 {
		if res, out := agent.call("complete_task", map[string]any{"task_id": "ad1"}); res.IsError || out["task"].(map[string]any)["status"] != "done" {
			t.Fatalf("complete of the adopted lease: %s %v", textOf(res), out)
		}
	}
	for _, tool := range []string{"complete_task", "release_task", "fail_task"} {
		res, out := agent.call("claim_task", nil)
		if res.IsError || out["acquired"] != true {
			t.Fatalf("claim: %s %v", textOf(res), out)
		}
		args := map[string]any{"task_id": out["task_id"]}
		if tool == "fail_task" {
			args["error"] = "tests fail"
		}
		for i := range 2 {
			if res, out := agent.call(tool, args); res.IsError {
				t.Fatalf("%s #%d of a claimed task: %s %v", tool, i+1, textOf(res), out)
			}
		}
	}

	// No lease holds a done task any more, and nobody takes it again.
	res, out := agent.call("renew_task", map[string]any{"task_id": "ad1"})
	if txt := textOf(res); !res.IsError || out["code"] != "not_checked_out" || !strings.Contains(txt, "done") || strings.Contains(txt, "checkout_task") {
		t.Fatalf("renew of a done task: %s %v", txt, out)
	}
}

// A task that cannot be taken (blocked, not ready yet, or not open) is an
// answer like a conflict, not an error: acquired=false, with its code.
func TestMCPTaskNotOpenIsNoError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	agent := connectMCP(t, e.srv.URL(), e.keys["agent-a1b2"])
	for _, args := range []map[string]any{
		{"task_id": "build"},
		{"task_id": "deploy", "blocked_by": []string{"build"}},
		{"task_id": "later", "not_before": "2026-03-21T09:00:00Z"},
		{"task_id": "gone"},
	} {
		if res, _ := agent.call("create_task", args); res.IsError {
			t.Fatal(textOf(res))
		}
	}
	if res, _ := agent.call("update_task", map[string]any{"task_id": "gone", "status": "cancelled"}); res.IsError {
		t.Fatal(textOf(res))
	}
	for _, tc := range []struct {
		task, code, field string
	}{
		{"deploy", "blocked", "blocked_by"},
		{"later", "not_ready", "not_before"},
		{"gone", "status_mismatch", "message"},
	} {
		res, out := agent.call("checkout_task", map[string]any{"task_id": tc.task})
		if res.IsError || out["ok"] != true || out["acquired"] != false || out["code"] != tc.code || out[tc.field] == nil || !strings.Contains(textOf(res), "pick another task") {
			t.Errorf("checkout of %s: isError %v, %v", tc.task, res.IsError, out)
		}
	}
}

// claim_task on queues without a task, update_task with a stale version or
// with nothing to change: each says so in the tool's own terms.
func TestMCPWording(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	agent := connectMCP(t, e.srv.URL(), e.keys["agent-a1b2"])
	res, out := agent.call("claim_task", map[string]any{"queues": []string{"nothing-here"}})
	if txt := textOf(res); res.IsError || out["acquired"] != false || strings.Contains(txt, "every open task is taken") || !strings.Contains(txt, "nothing-here") {
		t.Errorf("claim from an empty queue: %s", txt)
	}
	e.task(t, "t1", "")
	res, out = agent.call("update_task", map[string]any{"task_id": "t1", "priority": 3, "version": 99})
	if txt := textOf(res); !res.IsError || out["code"] != "version_mismatch" || strings.Contains(txt, "If-Match") || !strings.Contains(txt, "version") {
		t.Errorf("update with a stale version: %s %v", txt, out)
	}
	for _, args := range []map[string]any{{"task_id": "t1"}, {"task_id": "t1", "version": 1}} {
		res, out = agent.call("update_task", args)
		if !res.IsError || out["code"] != "invalid_arguments" || !strings.Contains(textOf(res), "nothing to change") {
			t.Errorf("update_task %v: %s %v", args, textOf(res), out)
		}
	}
}

// checkout_task of a task this session claimed is the lease it holds, as
// for a task it checked out: acquired, with that lease, never "your agent
// holds it under another run, probably from before a restart".
func TestMCPCheckoutOfAClaimedTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "cq1", "Claimed")
	agent := connectMCP(t, e.srv.URL(), e.keys["agent-a1b2"])
	res, out := agent.call("claim_task", nil)
	if res.IsError || out["acquired"] != true {
		t.Fatalf("claim: %s %v", textOf(res), out)
	}
	claimed := out["checkout"].(map[string]any)
	res, out = agent.call("checkout_task", map[string]any{"task_id": "cq1"})
	txt := textOf(res)
	if res.IsError || out["acquired"] != true || out["held_by_you"] != false || strings.Contains(txt, "another run") || strings.Contains(txt, "adopt") {
		t.Fatalf("checkout of the task this session claimed: %s %v", txt, out)
	}
	co := out["checkout"].(map[string]any)
	if co["run_id"] != claimed["run_id"] || co["fence"] != claimed["fence"] {
		t.Fatalf("checkout answered %v, want the claimed lease %v", co, claimed)
	}
}
