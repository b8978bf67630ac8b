package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// checkout whoami says whose key the command holds; an agent whose
// CHECKOUT_AGENT names itself checks out, claims and completes as itself
// (the server refuses agent_id from a non-admin, even naming itself, so
// the CLI leaves it out for the key's own agent), and naming another
// agent is still refused.
func TestWhoamiAndAnAgentNamingItself(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-1", "")
	url, researcher := e.srv.URL(), e.keys["agent-a1b2"]

	r := runCLI(t, url, researcher, "whoami")
	if r.code != 0 || r.stdout != "Agent: researcher (agent-a1b2)\n  Admin: false\n" {
		t.Errorf("whoami: exit %d\nstdout %q\nstderr %s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, url, e.keys["admin"], "whoami", "--json")
	var id struct {
		AgentID string `json:"agent_id"`
		Admin   bool   `json:"admin"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &id); r.code != 0 || err != nil || id.AgentID != "admin" || !id.Admin {
		t.Errorf("whoami --json of the admin: exit %d, %v: %q", r.code, err, r.stdout)
	}

	self := []string{"CHECKOUT_URL=" + url, "CHECKOUT_API_KEY=" + researcher, "CHECKOUT_AGENT=agent-a1b2"}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"task-1"}, 0, "Agent: researcher (agent-a1b2)"},
		{[]string{"renew", "task-1"}, 0, "Checkout renewed: task-1"},
		{[]string{"complete", "task-1"}, 0, "Task completed: task-1"},
		{[]string{"release", "task-1", "--agent", "agent-c3d4"}, 1, "forbidden: only an admin may act for another agent"},
	} {
		r := runCLIEnv(t, self, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
			t.Errorf("CHECKOUT_AGENT=agent-a1b2 checkout %s: exit %d, want %d with %q\nstdout %s\nstderr %s", strings.Join(tc.args, " "), r.code, tc.code, tc.want, r.stdout, r.stderr)
		}
	}
}
