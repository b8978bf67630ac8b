package mcpserver

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// Arguments the service would refuse are the tool's invalid_arguments,
// with no request made: an empty or path-like message_id (it used to reach
// the server as another path, "no such path"), and an empty queues list
// (it used to claim from the default queue, where HTTP answers 400).
func TestBadArgumentsAreRefusedBeforeAnyRequest(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	cs := session(t, func(r *http.Request, body map[string]any) (int, string) {
		requests.Add(1)
		return 404, `{"error":"no such path","code":"not_found"}`
	})
	for _, tc := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"ack_message", map[string]any{"message_id": ""}, "message_id"},
		{"ack_message", map[string]any{"message_id": "../../x"}, "message_id"},
		{"claim_task", map[string]any{"queues": []string{}}, "queues"},
	} {
		res, txt, out := callTool(t, cs, tc.tool, tc.args)
		if !res.IsError || out["code"] != "invalid_arguments" || !strings.Contains(txt, tc.want) {
			t.Errorf("%s %v: isError %v, code %v, text %q; want invalid_arguments naming %s", tc.tool, tc.args, res.IsError, out["code"], txt, tc.want)
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests made for arguments refused", n)
	}
}

// A renewal or completion naming a wrong fence for the lease this very
// session holds says so, and does not take the session's own lease for
// another run from before a restart.
func TestAWrongFenceForTheSessionsOwnLeaseSaysSo(t *testing.T) {
	t.Parallel()
	const mine = `{"task_id":"fz","agent_id":"agent-a1b2","agent_name":"researcher","run_id":"%RUN%","fence":1,` +
		`"locked_at":"2026-03-20T14:30:00.000Z","timeout_seconds":900,"expires_at":"2026-03-20T14:45:00.000Z","remaining_seconds":600}`
	var run atomic.Value
	cs := session(t, func(r *http.Request, body map[string]any) (int, string) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/checkout") && r.Method == http.MethodPost:
			run.Store(body["run_id"].(string))
			return 200, strings.ReplaceAll(mine, "%RUN%", body["run_id"].(string))
		case strings.HasSuffix(r.URL.Path, "/checkout") && r.Method == http.MethodGet:
			return 200, locked(strings.ReplaceAll(mine, "%RUN%", run.Load().(string)))
		case r.Method == http.MethodGet:
			return 200, `{"task_id":"fz","title":"t","status":"in_progress","checkout":` + strings.ReplaceAll(mine, "%RUN%", run.Load().(string)) + `}`
		}
		return 403, `{"error":"not the holder","code":"not_holder","holder":` + strings.ReplaceAll(mine, "%RUN%", run.Load().(string)) + `}`
	})
	if res, txt, _ := callTool(t, cs, "checkout_task", map[string]any{"task_id": "fz"}); res.IsError {
		t.Fatalf("checkout: %s", txt)
	}
	for _, tool := range []string{"renew_task", "complete_task"} {
		res, txt, out := callTool(t, cs, tool, map[string]any{"task_id": "fz", "fence": 7})
		if !res.IsError || out["code"] != "not_holder" || !strings.Contains(txt, "the fence you gave (7)") || strings.Contains(txt, "restart") {
			t.Errorf("%s with fence 7 on the session's lease of fence 1: %q", tool, txt)
		}
	}
}
