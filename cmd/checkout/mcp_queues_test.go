package main

import (
	"context"
	"strings"
	"testing"
)

// list_queues over stdio against the real local server: the counts the
// change stream kept, and the oldest todo task.
func TestMCPListQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-q1", "Fix login bug")
	e.task(t, "task-q2", "Write release notes")
	if err := e.srv.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	agent := connectMCP(t, e.srv.URL(), e.keys["agent-a1b2"])
	res, out := agent.call("list_queues", map[string]any{})
	if res.IsError || out["ok"] != true {
		t.Fatalf("list_queues: %v", out)
	}
	if msg, _ := out["message"].(string); !strings.Contains(msg, "default: 2 todo, 0 blocked, 0 in progress, 0 done, 0 cancelled, 0 failed; oldest todo created ") {
		t.Errorf("message %q", msg)
	}
	qs, _ := out["queues"].([]any)
	if len(qs) != 1 || qs[0].(map[string]any)["oldest_todo_at"] == nil {
		t.Errorf("queues %v", out["queues"])
	}
}
