package mcpserver

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/checkout-dev/checkout/client"
)

// A session is one agent run. Every session of one New shared the
// server's run id: a checkout_task by one session of a task another held
// was answered as the other's own lease (the API's idempotent retry of
// one run), and its releases and completions named the other's lease.
// Each session now has its run id and leases of its own.
func TestEachSessionOfOneServerIsARunOfItsOwn(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	runs := map[string]string{} // task id -> run id of its checkouts
	same := map[string]bool{}   // task id -> every checkout of it named one run
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		if r.Method == http.MethodGet {
			io.WriteString(w, `{"task_id":"task-1","title":"T","status":"in_progress"}`)
			return
		}
		run, _ := body["run_id"].(string)
		task := r.URL.Path[len("/api/tasks/") : len(r.URL.Path)-len("/checkout")]
		mu.Lock()
		if prev, ok := runs[task]; ok {
			same[task] = same[task] && prev == run
		} else {
			runs[task], same[task] = run, true
		}
		mu.Unlock()
		io.WriteString(w, `{"task_id":"`+task+`","agent_id":"agent-a1b2","run_id":"`+run+`","fence":1,`+
			`"locked_at":"2026-03-20T14:30:00.000Z","timeout_seconds":900,"expires_at":"2026-03-20T14:45:00.000Z"}`)
	}))
	t.Cleanup(srv.Close)
	server := New(client.New(srv.URL, "ck_test"))
	ctx := context.Background()
	connect := func() *mcp.ClientSession {
		st, ct := mcp.NewInMemoryTransports()
		ss, err := server.Connect(ctx, st, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ss.Close() })
		cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cs.Close() })
		return cs
	}
	a, b := connect(), connect()
	callTool(t, a, "checkout_task", map[string]any{"task_id": "task-a"})
	callTool(t, a, "checkout_task", map[string]any{"task_id": "task-a"})
	callTool(t, b, "checkout_task", map[string]any{"task_id": "task-b"})
	callTool(t, b, "checkout_task", map[string]any{"task_id": "task-b"})
	mu.Lock()
	defer mu.Unlock()
	if !same["task-a"] || !same["task-b"] || runs["task-a"] == "" {
		t.Fatalf("one session's checkouts named runs %v (each task one run: %v); want one run a session", runs, same)
	}
	if runs["task-a"] == runs["task-b"] {
		t.Errorf("two sessions of one server both checked out under run %s; want a run id each", runs["task-a"])
	}
}
