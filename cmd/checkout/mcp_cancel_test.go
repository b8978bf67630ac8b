package main

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/internal/testenv"
)

// A claim_task the client cancelled while it waited on the server was
// abandoned: behind a gateway that does not pass the disconnect on (API
// Gateway), the server went on waiting and took the next task that came,
// held for an agent that never learned of it (over stdio a cancelled call
// gets no answer) until its lease timed out. The MCP server now sees such
// a claim through and gives the task back; the session's next claim is a
// fresh one.
func TestMCPCancelledClaimGivesItsTaskBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := testenv.NewFront(t, e.srv.URL()) // passes no disconnect on
	s := connectMCP(t, f.URL, e.keys["agent-a1b2"])
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	called := make(chan error, 1)
	go func() {
		_, err := s.s.CallTool(ctx, &mcp.CallToolParams{Name: "claim_task", Arguments: map[string]any{"queues": []string{"late"}, "wait": "5s"}})
		called <- err
	}()
	// The claim has reached the server, which waits for a task; the
	// client cancels the call; then a task comes.
	f.WaitFor(t, "POST /api/claim", 15*time.Second)
	deadline := time.Now().Add(15 * time.Second)
	cancel()
	if err := <-called; err == nil {
		t.Fatal("the cancelled call returned no error")
	}
	bg := context.Background()
	if _, err := e.admin.CreateTask(bg, client.CreateTaskRequest{TaskID: "late", Queue: "late", Title: "Came late"}); err != nil {
		t.Fatal(err)
	}
	// Once the server's claim has taken the task (it counts an attempt),
	// the task must be free again: given back by the MCP server.
	for {
		task, err := e.admin.GetTask(bg, "late")
		if err != nil {
			t.Fatal(err)
		}
		if task.Attempts > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the waiting claim never took the task that came")
		}
		time.Sleep(20 * time.Millisecond)
	}
	for {
		st, err := e.admin.Status(bg, "late")
		if err != nil {
			t.Fatal(err)
		}
		if !st.Locked {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cancelled claim's task is still held: %+v; want it given back", st.Checkout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The session's next claim is a fresh one, not the cancelled claim's
	// ended lease answered again.
	res, out := s.call("claim_task", map[string]any{"queues": []string{"late"}})
	if res.IsError || out["acquired"] != true {
		t.Fatalf("the next claim_task: %s", textOf(res))
	}
	co, _ := out["checkout"].(map[string]any)
	if co["task_id"] != "late" || co["fence"] != float64(2) {
		t.Errorf("the next claim took %v, fence %v; want late at fence 2", co["task_id"], co["fence"])
	}
}
