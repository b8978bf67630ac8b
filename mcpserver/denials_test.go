package mcpserver

import (
	"net/http"
	"strings"
	"testing"
)

// Every checkout_task denial reads like the conflict's: a sentence that
// starts "Checkout DENIED: task <id>", whatever keeps the task from the
// agent (a holder, blockers, a not-before time, its status).
func TestCheckoutDenialsNameTheTask(t *testing.T) {
	t.Parallel()
	cs := session(t, func(r *http.Request, _ map[string]any) (int, string) {
		switch {
		case strings.Contains(r.URL.Path, "deploy"):
			return 409, `{"error":"task deploy is blocked","code":"blocked","blocked_by":[{"task_id":"build","status":"todo"}],"watching":true}`
		case strings.Contains(r.URL.Path, "unblocking"):
			return 409, `{"error":"task unblocking is still blocked","code":"blocked","blocked_by":[]}`
		case strings.Contains(r.URL.Path, "flaky"):
			return 409, `{"error":"task flaky is not ready","code":"not_ready","not_before":"2026-03-20T14:35:00.000Z"}`
		}
		return 409, `{"error":"task finished has status done","code":"status_mismatch","status":"done"}`
	})
	for _, c := range []struct {
		args map[string]any
		want []string
	}{
		{map[string]any{"task_id": "deploy", "watch": true}, []string{"Checkout DENIED: task deploy is blocked: it waits for task build (todo)", "(claim_task), perhaps one of those. You will get a message in read_inbox when it is unblocked."}},
		{map[string]any{"task_id": "unblocking"}, []string{"Checkout DENIED: task unblocking is still blocked, but its blockers are all done", "Try checkout_task again then."}},
		{map[string]any{"task_id": "flaky"}, []string{"Checkout DENIED: task flaky cannot be taken before 2026-03-20T14:35:00Z"}},
		{map[string]any{"task_id": "finished"}, []string{"Checkout DENIED: task finished has status done"}},
	} {
		_, txt, _ := callTool(t, cs, "checkout_task", c.args)
		if !strings.HasPrefix(txt, c.want[0]) {
			t.Errorf("checkout_task %v: %q, want it to start %q", c.args, txt, c.want[0])
		}
		for _, w := range c.want[1:] {
			if !strings.Contains(txt, w) {
				t.Errorf("checkout_task %v: %q lacks %q", c.args, txt, w)
			}
		}
	}
}
