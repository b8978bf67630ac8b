package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/internal/testenv"
)

// A grant is followed by one read of its task, which says both whether
// the lease is live (a grant to an agent dead by heartbeat is not) and,
// for a later attempt, the latest failed attempt's error. checkout and
// claim read the lock and then the task on a later attempt, and MCP's
// checkout_task read them both on every grant (the task for its title):
// three requests where two do.
func TestAGrantReadsItsTaskOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := testenv.NewFront(t, e.srv.URL())
	ctx := context.Background()
	noDelay := time.Duration(0)
	for _, id := range []string{"cli-first", "cli-again", "cli-claimed", "mcp-first", "mcp-again", "mcp-claimed"} {
		if _, err := e.admin.CreateTask(ctx, client.CreateTaskRequest{TaskID: id, Title: "Title of " + id, Queue: "q-" + id, RetryDelay: &noDelay}); err != nil {
			t.Fatal(err)
		}
	}
	// The "again" tasks had an attempt that failed.
	other := client.New(e.srv.URL(), e.keys["agent-a1b2"])
	for _, id := range []string{"cli-again", "mcp-again"} {
		if _, err := other.Checkout(ctx, id, client.CheckoutRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Fail(ctx, id, "boom", client.ReleaseRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	key := e.keys["agent-c3d4"]
	two := func(what, task string) {
		t.Helper()
		path := "/api/tasks/" + task
		if what == "claim" {
			path = "/api/claim"
		} else {
			path += "/checkout"
		}
		if got := f.Requests(); len(got) != 2 || got[0] != "POST "+path {
			t.Errorf("%s %s: requests %q, want the grant and one read", what, task, got)
		}
	}

	for _, tc := range []struct{ args []string }{{[]string{"cli-first"}}, {[]string{"cli-again"}}, {[]string{"claim", "--queue", "q-cli-claimed"}}} {
		f.Requests()
		r := runCLI(t, f.URL, key, tc.args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Checkout acquired") {
			t.Fatalf("checkout %v: exit %d\n%s%s", tc.args, r.code, r.stdout, r.stderr)
		}
		if tc.args[0] == "cli-again" && !strings.Contains(r.stdout, "Last error: boom") {
			t.Errorf("checkout of a task tried before: no last error\n%s", r.stdout)
		}
		task, what := tc.args[0], "checkout"
		if task == "claim" {
			task, what = "cli-claimed", "claim"
		}
		two(what, task)
	}

	ms := connectMCP(t, f.URL, key)
	for _, tc := range []struct {
		tool string
		args map[string]any
		task string
	}{
		{"checkout_task", map[string]any{"task_id": "mcp-first"}, "mcp-first"},
		{"checkout_task", map[string]any{"task_id": "mcp-again"}, "mcp-again"},
		{"claim_task", map[string]any{"queues": []string{"q-mcp-claimed"}}, "mcp-claimed"},
	} {
		f.Requests()
		res, out := ms.call(tc.tool, tc.args)
		if out["acquired"] != true || out["title"] != "Title of "+tc.task {
			t.Fatalf("%s %v: %s %v", tc.tool, tc.args, textOf(res), out)
		}
		if tc.task == "mcp-again" && out["last_error"] != "boom" {
			t.Errorf("checkout_task of a task tried before: %v", out)
		}
		what := "checkout"
		if tc.tool == "claim_task" {
			what = "claim"
		}
		two(what, tc.task)
	}
}
