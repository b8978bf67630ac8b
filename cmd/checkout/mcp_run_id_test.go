package main

import (
	"strings"
	"testing"
)

// checkout mcp makes one run per process, with a run id of its own, and
// took no notice of CHECKOUT_RUN_ID, which checkout --help lists among
// the settings: a user who pinned a run in the MCP host's environment was
// not told it was not used. It now says so on stderr, once, at start.
func TestMCPSaysItIgnoresCheckoutRunID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url, key := e.srv.URL(), e.keys["agent-a1b2"]
	r := runCLIEnv(t, []string{"CHECKOUT_URL=" + url, "CHECKOUT_API_KEY=" + key, "CHECKOUT_RUN_ID=run-fixed-1"}, "mcp")
	if r.code != 0 || !strings.Contains(r.stderr, "CHECKOUT_RUN_ID") || !strings.Contains(r.stderr, "ignore") || !strings.Contains(r.stderr, "adopt") {
		t.Errorf("with CHECKOUT_RUN_ID: exit %d, stderr %q, want a warning that it is ignored", r.code, r.stderr)
	}
	if r := runCLIEnv(t, []string{"CHECKOUT_URL=" + url, "CHECKOUT_API_KEY=" + key}, "mcp"); r.code != 0 || r.stderr != "" {
		t.Errorf("without it: exit %d, stderr %q, want nothing", r.code, r.stderr)
	}
	// Its sessions' leases are under a run of their own, not the variable's.
	ms := connectMCP(t, url, key, "CHECKOUT_RUN_ID=run-fixed-1")
	e.task(t, "ri1", "")
	if _, out := ms.call("checkout_task", map[string]any{"task_id": "ri1"}); out["acquired"] != true || out["run_id"] == "run-fixed-1" {
		t.Errorf("checkout_task: %v, want a lease under the session's own run", out)
	}
}
