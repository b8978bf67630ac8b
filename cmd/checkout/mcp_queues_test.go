package main

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/client"
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

// list_queues answers a page at a time, so that a fleet's thousands of
// queues never make one result too large for an agent to read: limit and
// cursor walk them, and a bad limit or cursor is a clear failure.
func TestMCPListQueuesPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, q := range []string{"alpha", "bravo", "charlie"} {
		if _, err := e.admin.CreateTask(context.Background(), client.CreateTaskRequest{TaskID: "task-" + q, Title: q, Queue: q}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.srv.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	agent := connectMCP(t, e.srv.URL(), e.keys["agent-a1b2"])
	names := func(out map[string]any) []string {
		var got []string
		qs, _ := out["queues"].([]any)
		for _, q := range qs {
			got = append(got, q.(map[string]any)["queue"].(string))
		}
		return got
	}

	res, out := agent.call("list_queues", map[string]any{"limit": 2})
	cursor, _ := out["next_cursor"].(string)
	if res.IsError || out["ok"] != true || !slices.Equal(names(out), []string{"alpha", "bravo"}) || cursor == "" {
		t.Fatalf("first page: %v", out)
	}
	if msg, _ := out["message"].(string); !strings.Contains(msg, "2 queue(s) on this page.") || !strings.Contains(msg, "cursor=next_cursor") {
		t.Errorf("first page's message %q", msg)
	}
	res, out = agent.call("list_queues", map[string]any{"limit": 2, "cursor": cursor})
	if res.IsError || !slices.Equal(names(out), []string{"charlie"}) || out["next_cursor"] != nil {
		t.Fatalf("last page: %v", out)
	}
	if msg, _ := out["message"].(string); strings.Contains(msg, "cursor=next_cursor") {
		t.Errorf("last page's message %q offers more", msg)
	}
	if _, out = agent.call("list_queues", map[string]any{}); !slices.Equal(names(out), []string{"alpha", "bravo", "charlie"}) {
		t.Errorf("default page: %v", out)
	}

	for _, bad := range []map[string]any{{"limit": 101}, {"limit": -1}} {
		res, out := agent.call("list_queues", bad)
		if !res.IsError || out["code"] != "invalid_arguments" {
			t.Errorf("list_queues %v: %v", bad, out)
		}
	}
	if res, out := agent.call("list_queues", map[string]any{"cursor": "not a cursor!"}); !res.IsError || out["code"] != "invalid_request" {
		t.Errorf("a forged cursor: %v", out)
	}
}
