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

// A claim's wait of 0s is the service's "no wait" (it takes 0s to 20s,
// as `checkout claim --wait 0s` does): claim_task refused it as no Go
// duration, which it is. A negative wait is still refused, naming the
// range, with no request made.
func TestAClaimWaitOfZeroClaimsWithoutWaiting(t *testing.T) {
	t.Parallel()
	var claims atomic.Int64
	cs := session(t, func(r *http.Request, body map[string]any) (int, string) {
		if r.URL.Path == "/api/claim" {
			claims.Add(1)
			if w, ok := body["wait"]; ok && w != "0s" {
				t.Errorf("claim_task with wait 0s sent wait %v", w)
			}
		}
		return 404, `{"error":"no task is available","code":"no_task_available"}`
	})
	res, txt, _ := callTool(t, cs, "claim_task", map[string]any{"wait": "0s"})
	if res.IsError || !strings.Contains(txt, "No task is available") || claims.Load() != 1 {
		t.Errorf("claim_task with wait 0s: isError %v, %q after %d claims; want one claim answered that no task is available", res.IsError, txt, claims.Load())
	}
	res, txt, out := callTool(t, cs, "claim_task", map[string]any{"wait": "-1s"})
	if !res.IsError || out["code"] != "invalid_arguments" || !strings.Contains(txt, "0s to 20s") || claims.Load() != 1 {
		t.Errorf("claim_task with wait -1s: %q %v after %d claims; want invalid_arguments naming 0s to 20s, and no claim", txt, out, claims.Load())
	}
}
