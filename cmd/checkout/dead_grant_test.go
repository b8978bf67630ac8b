package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/client"
)

// An agent whose heartbeats have run out is dead until its next one, and
// a lease it takes meanwhile is not live: any agent may take the task at
// once (API.md). checkout and claim printed "Checkout acquired" and
// exited 0 for such a lease, so a script went to work on a task that
// another agent could take at the same moment. They now say that the lease
// is not live and why, and exit 3; after a heartbeat the same command
// takes the task for good.
func TestCheckoutByADeadAgentIsNotAcquired(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "named", "")
	e.task(t, "claimed", "")
	writer := client.New(e.srv.URL(), e.keys["agent-c3d4"])
	if _, err := writer.Heartbeat(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Second)
	for _, args := range [][]string{{"named"}, {"claim"}} {
		r := runCLI(t, e.srv.URL(), e.keys["agent-c3d4"], args...)
		if r.code != exitConflict || strings.Contains(r.stdout, "Checkout acquired") || !strings.Contains(r.stderr, "not live") || !strings.Contains(r.stderr, "checkout heartbeat") {
			t.Errorf("checkout %v by a dead agent: exit %d\nstdout: %s\nstderr: %s", args, r.code, r.stdout, r.stderr)
		}
	}
	if r := runCLI(t, e.srv.URL(), e.keys["agent-c3d4"], "heartbeat"); r.code != 0 {
		t.Fatalf("heartbeat: exit %d: %s", r.code, r.stderr)
	}
	e.clock.Advance(time.Millisecond)
	if r := runCLI(t, e.srv.URL(), e.keys["agent-c3d4"], "named"); r.code != 0 || !strings.Contains(r.stdout, "Checkout acquired") {
		t.Errorf("checkout after a heartbeat: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if s, err := e.admin.Status(context.Background(), "named"); err != nil || !s.Locked {
		t.Errorf("after the heartbeat's checkout: %+v, %v", s, err)
	}
}

// The same through MCP: checkout_task and claim_task of an agent dead by
// heartbeat answered acquired: true for a lease that is not live. They
// answer acquired: false with code not_live, telling the agent to send a
// heartbeat first; after one, checkout_task takes the task.
func TestMCPCheckoutByADeadAgentIsNotAcquired(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "named", "")
	e.task(t, "claimed", "")
	writer := connectMCP(t, e.srv.URL(), e.keys["agent-c3d4"])
	if res, _ := writer.call("heartbeat", map[string]any{"ttl": "1s"}); res.IsError {
		t.Fatalf("heartbeat: %s", textOf(res))
	}
	e.clock.Advance(2 * time.Second)
	for _, call := range []struct {
		tool string
		args map[string]any
	}{{"checkout_task", map[string]any{"task_id": "named"}}, {"claim_task", nil}} {
		res, out := writer.call(call.tool, call.args)
		if out["acquired"] != false || out["code"] != "not_live" || !strings.Contains(textOf(res), "heartbeat") {
			t.Errorf("%s by a dead agent: %s %v", call.tool, textOf(res), out)
		}
	}
	writer.call("heartbeat", nil)
	e.clock.Advance(time.Millisecond)
	if res, out := writer.call("checkout_task", map[string]any{"task_id": "named"}); out["acquired"] != true {
		t.Errorf("checkout_task after a heartbeat: %s %v", textOf(res), out)
	}
	if s, err := e.admin.Status(context.Background(), "named"); err != nil || !s.Locked {
		t.Errorf("after the heartbeat's checkout: %+v, %v", s, err)
	}
}
