package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/lease"
)

// A checkout with --watch (checkout_task with watch) says whether the
// caller watches as the server said: not when the task's watch list is
// full, and so when a blocked task's watch was placed; --json stays the
// server's answer.
func TestCheckoutWatchingIsTheServers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	url, bob := e.srv.URL(), e.keys["agent-a1b2"]
	e.task(t, "full", "")
	if _, err := client.New(url, e.keys["agent-c3d4"]).Checkout(ctx, "full", client.CheckoutRequest{}); err != nil {
		t.Fatal(err)
	}
	for i := range lease.MaxWatchers {
		reg, err := e.admin.CreateAgent(ctx, client.CreateAgentRequest{AgentID: fmt.Sprintf("w%d", i), Name: "watcher"})
		if err != nil {
			t.Fatal(err)
		}
		if err := client.New(url, reg.APIKey).Watch(ctx, "full"); err != nil {
			t.Fatal(err)
		}
	}
	e.task(t, "build", "")
	if _, err := e.admin.CreateTask(ctx, client.CreateTaskRequest{TaskID: "deploy", BlockedBy: []string{"build"}}); err != nil {
		t.Fatal(err)
	}

	r := runCLI(t, url, bob, "full", "--watch")
	if r.code != exitConflict || strings.Contains(r.stdout, "your inbox gets a message") || !strings.Contains(r.stdout, "  Watching: no, the task's watch list is full") {
		t.Errorf("checkout full --watch, its watch list full: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, url, bob, "full", "--watch", "--json")
	var body map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &body); r.code != exitConflict || err != nil || body["watching"] != false || body["code"] != "checked_out" {
		t.Errorf("checkout full --watch --json: exit %d %q", r.code, r.stdout)
	}
	r = runCLI(t, url, bob, "deploy")
	if r.code != exitConflict || strings.Contains(r.stdout, "Watching") {
		t.Errorf("checkout deploy, blocked: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, url, bob, "deploy", "--watch")
	if r.code != exitConflict || !strings.Contains(r.stdout, "Checkout DENIED: deploy\n  Blocked by: build (todo)\n  Watching: your inbox gets a message when it is unblocked\n") {
		t.Errorf("checkout deploy --watch, blocked: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	m := connectMCP(t, url, e.keys["agent-c3d4"])
	res, out := m.call("checkout_task", map[string]any{"task_id": "deploy", "watch": true})
	if res.IsError || out["code"] != "blocked" || out["watching"] != true || !strings.Contains(textOf(res), "read_inbox") {
		t.Errorf("checkout_task deploy with watch, blocked: %v", out)
	}
	m = connectMCP(t, url, bob)
	res, out = m.call("checkout_task", map[string]any{"task_id": "full", "watch": true})
	if res.IsError || out["acquired"] != false || out["watching"] != false || strings.Contains(textOf(res), "You will get a message") {
		t.Errorf("checkout_task full with watch, its watch list full: %v", out)
	}
}
