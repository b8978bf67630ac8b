package mcpserver

import (
	"net/http"
	"strings"
	"testing"
)

// task_status always says locked and held_by_this_session, false
// included, and gives checkout null for a free task, as the API and the
// CLI's --json do: a free task's answer had neither locked nor checkout,
// and held_by_this_session was missing whenever false.
func TestTaskStatusSaysFalseOutLoud(t *testing.T) {
	t.Parallel()
	cs := session(t, func(r *http.Request, _ map[string]any) (int, string) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/free/checkout"):
			return 200, `{"task_id":"free","locked":false,"checkout":null}`
		case strings.HasSuffix(r.URL.Path, "/checkout"):
			return 200, `{"task_id":"task-d4e5","locked":true,"checkout":` + holder + `}`
		case strings.HasSuffix(r.URL.Path, "/free"):
			return 200, `{"task_id":"free","title":"t","status":"todo"}`
		}
		return 200, `{"task_id":"task-d4e5","title":"t","status":"in_progress"}`
	})
	_, txt, out := callTool(t, cs, "task_status", map[string]any{"task_id": "free"})
	co, has := out["checkout"]
	if out["ok"] != true || out["locked"] != false || !has || co != nil || out["held_by_this_session"] != false {
		t.Errorf("task_status of a free task: %s %v, want locked false, checkout null, held_by_this_session false", txt, out)
	}
	_, txt, out = callTool(t, cs, "task_status", map[string]any{"task_id": "task-d4e5"})
	if out["ok"] != true || out["locked"] != true || out["checkout"] == nil || out["held_by_this_session"] != false {
		t.Errorf("task_status of another's task: %s %v, want locked true and held_by_this_session false", txt, out)
	}
	// The other results' booleans and counts are there when false or 0.
	_, txt, out = callTool(t, cs, "checkout_task", map[string]any{"task_id": "task-d4e5"})
	for _, k := range []string{"acquired", "adopted", "held_by_you", "watching"} {
		if _, ok := out[k]; !ok {
			t.Errorf("checkout_task: %s missing: %s %v", k, txt, out)
		}
	}
}
