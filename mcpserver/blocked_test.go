package mcpserver

import (
	"net/http"
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/errcode"
)

// A blocked answer that names no blocker is a task whose blockers are all
// done, about to be unblocked by the change stream: the agent is told to
// try again shortly, not that it waits for nothing.
func TestBlockedByNoneSaysTryAgain(t *testing.T) {
	t.Parallel()
	o := denial("d", &client.BlockedError{APIError: &client.APIError{Code: errcode.Blocked}})
	if o.Code != errcode.Blocked || !strings.Contains(o.Message, "blockers are all done") || !strings.Contains(o.Message, "again") {
		t.Fatalf("blocked by none: %+v", o)
	}
	o = denial("d", &client.BlockedError{APIError: &client.APIError{Code: errcode.Blocked}, BlockedBy: []client.Blocker{{TaskID: "b", Status: "todo"}}})
	if !strings.Contains(o.Message, "waits for") {
		t.Fatalf("blocked by b: %+v", o)
	}
}

// get_task of a blocked task whose blockers are all done (in the second
// before the change stream makes it todo) said "It waits for : nobody can
// take it until they are done". It says the blockers are done and that it
// becomes todo within about a second; list_tasks says so too.
func TestGetTaskOfABlockedTaskWhoseBlockersAreDone(t *testing.T) {
	t.Parallel()
	const gd1 = `{"task_id":"gd1","title":"deploy","status":"blocked","queue":"default","blocked_by":[{"task_id":"gb1","status":"done"}]}`
	cs := session(t, func(r *http.Request, _ map[string]any) (int, string) {
		if strings.HasPrefix(r.URL.Path, "/api/tasks/gd1") {
			return 200, gd1
		}
		return 200, `{"tasks":[` + gd1 + `],"next_cursor":null}`
	})
	_, txt, _ := callTool(t, cs, "get_task", map[string]any{"task_id": "gd1"})
	if strings.Contains(txt, "waits for") || strings.Contains(txt, "nobody can take it") ||
		!strings.Contains(txt, "blockers are all done") || !strings.Contains(txt, "within about a second") {
		t.Errorf("get_task: %q, want its blockers done and todo within about a second", txt)
	}
	_, txt, _ = callTool(t, cs, "list_tasks", nil)
	if strings.Contains(txt, "waits for") || !strings.Contains(txt, "blockers all done") {
		t.Errorf("list_tasks: %q, want its blockers done", txt)
	}
}
