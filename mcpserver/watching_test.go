package mcpserver

import (
	"net/http"
	"strings"
	"testing"
)

// checkout_task with watch reports the watch the server says it placed:
// none when the task's watch list is full (the server answers
// "watching": false), and one on a blocked task (the server answers
// "watching": true), which the agent is told of.
func TestCheckoutWatchingIsTheServers(t *testing.T) {
	t.Parallel()
	cs := session(t, func(r *http.Request, body map[string]any) (int, string) {
		switch {
		case r.Method == http.MethodGet:
			return 200, `{"task_id":"x","status":"in_progress"}`
		case strings.Contains(r.URL.Path, "/full/"):
			return 409, `{"error":"task full is already checked out; its watch list is full (100 watchers), so the caller is not on it","code":"checked_out","holder":` +
				holder + `,"retry_after_seconds":600,"watching":false}`
		case body["watch"] == true:
			return 409, `{"error":"task deploy is blocked by build","code":"blocked","blocked_by":[{"task_id":"build","status":"todo"}],"watching":true}`
		}
		return 409, `{"error":"task deploy is blocked by build","code":"blocked","blocked_by":[{"task_id":"build","status":"todo"}]}`
	})
	for _, tc := range []struct {
		name     string
		args     map[string]any
		watching bool
		has      []string
		lacks    []string
	}{
		{"a full watch list", map[string]any{"task_id": "full", "watch": true}, false,
			[]string{"DENIED", "watch list is full", "NOT watching"}, []string{"You will get a message"}},
		{"blocked, watched", map[string]any{"task_id": "deploy", "watch": true}, true,
			[]string{"blocked", "You will get a message in read_inbox when it is unblocked"}, []string{"NOT watching"}},
		{"blocked, not watched", map[string]any{"task_id": "deploy"}, false,
			[]string{"blocked"}, []string{"read_inbox", "watching"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, txt, out := callTool(t, cs, "checkout_task", tc.args)
			if res.IsError || out["ok"] != true || out["acquired"] != false || out["watching"] != tc.watching {
				t.Fatalf("structured %v, want watching %v", out, tc.watching)
			}
			for _, s := range tc.has {
				if !strings.Contains(txt, s) {
					t.Errorf("text %q lacks %q", txt, s)
				}
			}
			for _, s := range tc.lacks {
				if strings.Contains(txt, s) {
					t.Errorf("text %q has %q", txt, s)
				}
			}
		})
	}
}

// checkout_task with watch on a task the service places no watch on (done,
// cancelled, failed, or waiting for its time) says so: watching false in
// the structured answer, and in the text that no message will come.
func TestCheckoutWatchOfATaskNobodyWatchesSaysSo(t *testing.T) {
	t.Parallel()
	cs := session(t, func(r *http.Request, _ map[string]any) (int, string) {
		for _, status := range []string{"done", "cancelled", "failed"} {
			if strings.Contains(r.URL.Path, "/"+status+"/") {
				return 409, `{"error":"task ` + status + ` has status ` + status + `","code":"status_mismatch","status":"` + status + `"}`
			}
		}
		return 409, `{"error":"task later is not ready","code":"not_ready","not_before":"2026-03-20T14:35:00.000Z"}`
	})
	for _, tc := range []struct{ task, code, has string }{
		{"done", "status_mismatch", "a checkout watches only a task another agent holds or a blocked one"},
		{"cancelled", "status_mismatch", "a checkout watches only a task another agent holds or a blocked one"},
		{"failed", "status_mismatch", "a checkout watches only a task another agent holds or a blocked one"},
		{"later", "not_ready", "a task waiting for its time is watched by nobody"},
	} {
		t.Run(tc.task, func(t *testing.T) {
			res, txt, out := callTool(t, cs, "checkout_task", map[string]any{"task_id": tc.task, "watch": true})
			if w, ok := out["watching"]; res.IsError || out["acquired"] != false || out["code"] != tc.code || !ok || w != false {
				t.Errorf("structured %v, want code %s and watching false", out, tc.code)
			}
			for _, s := range []string{"NOT watching", tc.has, "no message will come"} {
				if !strings.Contains(txt, s) {
					t.Errorf("text %q lacks %q", txt, s)
				}
			}
			_, txt, _ = callTool(t, cs, "checkout_task", map[string]any{"task_id": tc.task})
			if strings.Contains(strings.ToLower(txt), "watch") {
				t.Errorf("text without watch asked %q speaks of watching", txt)
			}
		})
	}
}
