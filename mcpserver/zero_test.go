package mcpserver

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// A fence of 0 or less is refused before any request, as the API (400)
// and the CLI (--fence 0) refuse it: it was taken for "no fence", so
// renew_task {"fence": 0} renewed the session's lease instead. A limit of
// 0 is refused too, as the CLI's --limit 0 is, rather than taken for the
// default; and so is an update_task version of 0, which was taken for no
// version (the change made whatever the task's version), where the API
// refuses If-Match: 0. Leaving any of them out still works.
func TestZeroFenceAndLimitAreRefused(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	cs := session(t, func(r *http.Request, body map[string]any) (int, string) {
		requests.Add(1)
		return 404, `{"error":"no such task","code":"task_not_found"}`
	})
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"renew_task", map[string]any{"task_id": "f1", "fence": 0}, "fence must be 1 or more"},
		{"release_task", map[string]any{"task_id": "f1", "fence": 0}, "fence must be 1 or more"},
		{"complete_task", map[string]any{"task_id": "f1", "fence": 0}, "fence must be 1 or more"},
		{"fail_task", map[string]any{"task_id": "f1", "fence": -3, "error": "x"}, "fence must be 1 or more"},
		{"list_tasks", map[string]any{"limit": 0}, "limit 0 is out of range"},
		{"list_checkouts", map[string]any{"limit": 0}, "limit 0 is out of range"},
		{"read_inbox", map[string]any{"limit": 0}, "limit 0 is out of range"},
		{"list_queues", map[string]any{"limit": 0}, "limit 0 is out of range"},
		{"update_task", map[string]any{"task_id": "f1", "title": "x", "version": 0}, "version must be 1 or more"},
		{"update_task", map[string]any{"task_id": "f1", "title": "x", "version": -2}, "version must be 1 or more"},
	} {
		res, txt, out := callTool(t, cs, tc.tool, tc.args)
		if !res.IsError || out["code"] != "invalid_arguments" || !strings.Contains(txt, tc.want) {
			t.Errorf("%s %v: %q %v, want invalid_arguments saying %q", tc.tool, tc.args, txt, out, tc.want)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests made for arguments refused", n)
	}
	// Left out, they are no fence and the default limit.
	res, txt, out := callTool(t, cs, "renew_task", map[string]any{"task_id": "f1"})
	if !res.IsError || out["code"] != "task_not_found" {
		t.Errorf("renew_task without a fence: %q %v", txt, out)
	}
	if _, txt, _ := callTool(t, cs, "list_tasks", map[string]any{}); strings.Contains(txt, "out of range") {
		t.Errorf("list_tasks without a limit: %q", txt)
	}
}
