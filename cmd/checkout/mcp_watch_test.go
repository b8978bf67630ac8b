package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/client"
)

// checkout_task with watch on a done, cancelled, failed or waiting task
// places no watch, and its answer says so (watching false, and a text
// saying no message will come), as the CLI's Watching: no line does.
func TestMCPCheckoutWatchOfATaskNobodyWatchesSaysSo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	one := 1
	later := e.clock.Now().Add(time.Hour)
	for _, req := range []client.CreateTaskRequest{{TaskID: "shipped"}, {TaskID: "dropped"}, {TaskID: "broken", MaxAttempts: &one}, {TaskID: "later", NotBefore: &later}} {
		if _, err := e.admin.CreateTask(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	co, err := e.admin.Checkout(ctx, "shipped", client.CheckoutRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.Complete(ctx, "shipped", client.CompleteRequest{RunID: co.RunID}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.CancelTask(ctx, "dropped"); err != nil {
		t.Fatal(err)
	}
	if co, err = e.admin.Checkout(ctx, "broken", client.CheckoutRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.Fail(ctx, "broken", "exit status 1", client.ReleaseRequest{RunID: co.RunID}); err != nil {
		t.Fatal(err)
	}
	m := connectMCP(t, e.srv.URL(), e.keys["agent-a1b2"])
	for task, code := range map[string]string{"shipped": "status_mismatch", "dropped": "status_mismatch", "broken": "status_mismatch", "later": "not_ready"} {
		res, out := m.call("checkout_task", map[string]any{"task_id": task, "watch": true})
		txt := textOf(res)
		if w, ok := out["watching"]; res.IsError || out["acquired"] != false || out["code"] != code || !ok || w != false ||
			!strings.Contains(txt, "NOT watching") || !strings.Contains(txt, "no message will come") {
			t.Errorf("checkout_task %s with watch: %v %q; want code %s, watching false and a text saying no message will come", task, out, txt, code)
		}
	}
}
