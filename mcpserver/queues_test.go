package mcpserver

import (
	"net/http"
	"strings"
	"testing"
)

// list_queues reads GET /api/queues and says, per queue, what waits in it.
func TestListQueues(t *testing.T) {
	t.Parallel()
	cs := session(t, func(r *http.Request, _ map[string]any) (int, string) {
		if r.Method != "GET" || r.URL.Path != "/api/queues" {
			return 404, `{"error":"no such path","code":"not_found"}`
		}
		// A call's page stays at 100 queues, below the HTTP listing's 1,000.
		if got := r.URL.Query().Get("limit"); got != "100" {
			return 400, `{"error":"limit ` + got + `, want 100","code":"invalid_request"}`
		}
		return 200, `{"queues":[{"queue":"backend","counts":{"todo":2,"blocked":3,"in_progress":1,"done":4,"cancelled":0,"failed":1},"oldest_todo_at":"2026-03-20T14:30:00.000Z"},` +
			`{"queue":"default","counts":{"todo":0,"in_progress":0,"done":1,"cancelled":1},"oldest_todo_at":null}]}`
	})
	res, txt, out := callTool(t, cs, "list_queues", map[string]any{})
	if res.IsError || out["ok"] != true {
		t.Fatalf("list_queues failed: %s", txt)
	}
	for _, want := range []string{"backend: 2 todo, 3 blocked, 1 in progress, 4 done, 0 cancelled, 1 failed; oldest todo created 2026-03-20T14:30:00Z", "default: 0 todo"} {
		if !strings.Contains(txt, want) {
			t.Errorf("message %q lacks %q", txt, want)
		}
	}
	qs, _ := out["queues"].([]any)
	if len(qs) != 2 || qs[1].(map[string]any)["oldest_todo_at"] != nil {
		t.Errorf("queues %v", out["queues"])
	}

	if _, txt, _ := callTool(t, cs, "list_queues", map[string]any{"limit": 101}); !strings.Contains(txt, "limit 101 is out of range: give 1 to 100") {
		t.Errorf("limit 101: %s", txt)
	}

	empty := session(t, func(*http.Request, map[string]any) (int, string) { return 200, `{"queues":[]}` })
	if _, txt, out := callTool(t, empty, "list_queues", nil); out["ok"] != true || !strings.Contains(txt, "No queues yet") {
		t.Errorf("no queues: %s %v", txt, out)
	}
}
