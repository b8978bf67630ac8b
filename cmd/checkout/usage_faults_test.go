package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/client"
)

// A command word one slip away from a command, with --help, is the same
// unknown command as without it: cobra answered the help flag first, and
// printed the root's (or the group's) help with exit status 0.
func TestMistypedCommandWithHelpIsUnknownCommand(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"relase", "--help"}, `unknown command "relase": did you mean release?`},
		{[]string{"--help", "relase"}, `unknown command "relase": did you mean release?`},
		{[]string{"relase", "-h"}, `unknown command "relase": did you mean release?`},
		{[]string{"tasks", "lsit", "--help"}, `unknown command "lsit" for "checkout tasks": did you mean list?`},
		{[]string{"agents", "nope", "--help"}, `unknown command "nope" for "checkout agents"`},
	} {
		bare := runCLIEnv(t, nil, withoutHelp(tc.args)...)
		r := runCLIEnv(t, nil, tc.args...)
		if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("checkout %q: exit %d, stdout %.80q, stderr %q; want exit %d, no stdout, %q on stderr", tc.args, r.code, r.stdout, r.stderr, exitUsage, tc.want)
		}
		if r.code != bare.code || r.stderr != bare.stderr {
			t.Errorf("checkout %q answered %d %q, but without the help flag %d %q", tc.args, r.code, r.stderr, bare.code, bare.stderr)
		}
	}
	// Help for what is a command, or for a task id, is still help.
	for _, args := range [][]string{{"release", "--help"}, {"tasks", "--help"}, {"task-1", "--help"}, {"--help"}, {"help", "release"}} {
		if r := runCLIEnv(t, nil, args...); r.code != 0 || !strings.Contains(r.stdout, "Usage:") {
			t.Errorf("checkout %q: exit %d, stdout %.80q, stderr %q; want the help", args, r.code, r.stdout, r.stderr)
		}
	}
}

func withoutHelp(args []string) []string {
	var out []string
	for _, a := range args {
		if a != "--help" && a != "-h" {
			out = append(out, a)
		}
	}
	return out
}

// checkout <task> --watch on a task that is done, cancelled or failed
// places no watch (the server watches only a held or blocked task): the
// denial says so, in text and in JSON, as it does for a task waiting for
// its time. It said nothing, so the user waited for a message that never
// comes.
func TestWatchOnAFinishedTaskSaysNoWatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	e.task(t, "done-1", "")
	e.task(t, "gone-1", "")
	co, err := e.admin.Checkout(ctx, "done-1", client.CheckoutRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.Complete(ctx, "done-1", client.CompleteRequest{RunID: co.RunID}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.admin.CancelTask(ctx, "gone-1"); err != nil {
		t.Fatal(err)
	}
	key := e.keys["agent-a1b2"]
	for _, id := range []string{"done-1", "gone-1"} {
		r := runCLI(t, e.srv.URL(), key, id, "--watch")
		if r.code != exitConflict || !strings.Contains(r.stdout, "  Watching: no,") {
			t.Errorf("checkout %s --watch: exit %d, stdout %q, stderr %q; want exit %d and a Watching: no line", id, r.code, r.stdout, r.stderr, exitConflict)
		}
		r = runCLI(t, e.srv.URL(), key, id, "--watch", "--json")
		var body struct {
			Code     string `json:"code"`
			Status   string `json:"status"`
			Watching *bool  `json:"watching"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &body); err != nil || r.code != exitConflict || body.Code != "status_mismatch" || body.Watching == nil || *body.Watching {
			t.Errorf("checkout %s --watch --json: exit %d, stdout %q (%v); want exit %d, code status_mismatch and \"watching\": false", id, r.code, r.stdout, err, exitConflict)
		}
		// Not asked to watch, the answer is the server's, unchanged.
		r = runCLI(t, e.srv.URL(), key, id, "--json")
		if r.code != exitConflict || strings.Contains(r.stdout, "watching") {
			t.Errorf("checkout %s --json: exit %d, stdout %q; want exit %d without watching", id, r.code, r.stdout, exitConflict)
		}
		if r := runCLI(t, e.srv.URL(), key, id); strings.Contains(r.stdout, "Watching") {
			t.Errorf("checkout %s: %q; want no Watching line", id, r.stdout)
		}
	}
}

// Every list flag reads "a, b" as a and b: claim --queue kept the space
// (" b", a queue id the server refuses), where --blocked-by and --type
// trim.
func TestClaimQueueListIsTrimmed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if _, err := e.admin.CreateTask(context.Background(), client.CreateTaskRequest{TaskID: "b-1", Queue: "b"}); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, e.srv.URL(), e.keys["agent-a1b2"], "claim", "--queue", "a, b")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Checkout acquired: b-1") {
		t.Errorf(`claim --queue "a, b": exit %d, stdout %q, stderr %q; want b-1 acquired`, r.code, r.stdout, r.stderr)
	}
	// Nothing but blanks and commas names no queue, as --queue "" does.
	for _, q := range []string{" ", " , "} {
		r := runCLI(t, e.srv.URL(), e.keys["agent-c3d4"], "claim", "--queue", q)
		if r.code != exitUsage || !strings.Contains(r.stderr, "names no queue") {
			t.Errorf("claim --queue %q: exit %d, stdout %q, stderr %q; want exit %d, names no queue", q, r.code, r.stdout, r.stderr, exitUsage)
		}
	}
	// events --type drops blanks as well, and one of blanks alone names no
	// type: refused, rather than taken for no filter (the whole feed).
	r = runCLI(t, e.srv.URL(), e.keys["agent-a1b2"], "events", "--type", "checkout, ,", "--json")
	if r.code != 0 || !json.Valid([]byte(r.stdout)) {
		t.Errorf(`events --type "checkout, ,": exit %d, stdout %q, stderr %q; want the feed`, r.code, r.stdout, r.stderr)
	}
	for _, v := range []string{"", " , "} {
		r = runCLI(t, e.srv.URL(), e.keys["agent-a1b2"], "events", "--type", v)
		if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "names no event type") {
			t.Errorf(`events --type %q: exit %d, stdout %.80q, stderr %q; want exit %d, names no event type`, v, r.code, r.stdout, r.stderr, exitUsage)
		}
	}
}

// A flag the command would not use is refused, not ignored:
// events --interval without --follow, and --limit with a task id (the
// trail is read whole).
func TestEventsFlagsItWouldIgnoreAreRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-1", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"events", "--interval", "5s"}, "--interval"},
		{[]string{"events", "--interval", "5s", "--limit", "10"}, "--interval"},
		{[]string{"events", "task-1", "--limit", "5"}, "--limit"},
		{[]string{"events", "task-1", "--interval", "5s"}, "--interval"},
	} {
		r := runCLI(t, e.srv.URL(), e.keys["agent-a1b2"], tc.args...)
		if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("checkout %q: exit %d, stdout %.80q, stderr %q; want exit %d naming %s", tc.args, r.code, r.stdout, r.stderr, exitUsage, tc.want)
		}
	}
	for _, args := range [][]string{{"events", "--limit", "10"}, {"events", "task-1"}} {
		if r := runCLI(t, e.srv.URL(), e.keys["agent-a1b2"], args...); r.code != 0 {
			t.Errorf("checkout %q: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}

// checkout --version --json prints JSON, as checkout version --json does.
func TestVersionFlagWithJSONPrintsJSON(t *testing.T) {
	t.Parallel()
	want := runCLIEnv(t, nil, "version", "--json")
	for _, args := range [][]string{{"--version", "--json"}, {"--json", "--version"}} {
		r := runCLIEnv(t, nil, args...)
		var b build
		if err := json.Unmarshal([]byte(r.stdout), &b); err != nil || r.code != 0 || b.Version == "" || r.stdout != want.stdout {
			t.Errorf("checkout %q: exit %d, stdout %q (%v); want %q", args, r.code, r.stdout, err, want.stdout)
		}
	}
	if r := runCLIEnv(t, nil, "--version"); r.code != 0 || !strings.HasPrefix(r.stdout, "checkout ") {
		t.Errorf("checkout --version: exit %d, stdout %q", r.code, r.stdout)
	}
}

// --version was answered before the arguments were looked at: a slip of a
// command, or a task id, with it printed the version and exited 0.
func TestVersionFlagWithArgumentsIsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"relase", "--version"}, `unknown command "relase": did you mean release?`},
		{[]string{"--version", "task-1"}, "--version takes no task id"},
	} {
		r := runCLIEnv(t, nil, tc.args...)
		if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("checkout %q: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, r.code, r.stdout, r.stderr, exitUsage, tc.want)
		}
	}
}

// release --force --agent X released whoever held the task (the server's
// force release ends the live lease, whatever agent_id names), so another
// agent's lease than X's was ended. The two are refused together.
func TestForceReleaseNamingAnAgentIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-1", "")
	if _, err := client.New(e.srv.URL(), e.keys["agent-c3d4"]).Checkout(context.Background(), "task-1", client.CheckoutRequest{}); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, e.srv.URL(), e.keys["admin"], "release", "task-1", "--force", "--agent", "agent-a1b2")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--force releases whoever holds the task") {
		t.Errorf("release --force --agent agent-a1b2 of agent-c3d4's lease: exit %d, stdout %q, stderr %q; want exit %d", r.code, r.stdout, r.stderr, exitUsage)
	}
	if s, err := e.admin.Status(context.Background(), "task-1"); err != nil || !s.Locked || s.Checkout.AgentID != "agent-c3d4" {
		t.Errorf("agent-c3d4's lease after release --force --agent agent-a1b2: %+v, %v", s, err)
	}
	// The admin's own agent from the environment is still left out.
	r = runCLIEnv(t, []string{"CHECKOUT_URL=" + e.srv.URL(), "CHECKOUT_API_KEY=" + e.keys["admin"], "CHECKOUT_AGENT=admin"}, "release", "task-1", "--force")
	if r.code != exitOK {
		t.Errorf("release --force under CHECKOUT_AGENT=admin: exit %d, stderr %q", r.code, r.stderr)
	}
}

// A checkout with --watch of a task waiting for its time places no watch:
// the text said so, and now --json does too ("watching": false).
func TestWatchOnAWaitingTaskJSONSaysNotWatching(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	later := e.clock.Now().Add(time.Hour)
	if _, err := e.admin.CreateTask(context.Background(), client.CreateTaskRequest{TaskID: "later-1", NotBefore: &later}); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, e.srv.URL(), e.keys["agent-a1b2"], "later-1", "--watch", "--json")
	var body struct {
		Code     string `json:"code"`
		Watching *bool  `json:"watching"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &body); err != nil || r.code != exitConflict || body.Code != "not_ready" || body.Watching == nil || *body.Watching {
		t.Errorf("checkout later-1 --watch --json: exit %d, stdout %q (%v); want exit %d, not_ready and \"watching\": false", r.code, r.stdout, err, exitConflict)
	}
}

// Checking out a task you already hold under another run is a success
// (exit 0, "You already hold"); with --json it printed the server's 409
// error body ("code": "checked_out") with exit status 0. It now prints
// the lease you hold, as a checkout that got it answers.
func TestCheckoutOfATaskYouHoldPrintsYourLeaseAsJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-1", "")
	url, key := e.srv.URL(), e.keys["agent-a1b2"]
	first := runCLI(t, url, key, "task-1", "--json", "--reason", "on it")
	var mine client.Checkout
	if err := json.Unmarshal([]byte(first.stdout), &mine); err != nil || first.code != 0 {
		t.Fatalf("first checkout: exit %d, %q (%v)", first.code, first.stdout, err)
	}
	r := runCLI(t, url, key, "task-1", "--json")
	var body map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &body); err != nil {
		t.Fatalf("checkout again --json: exit %d, stdout %q: %v", r.code, r.stdout, err)
	}
	if r.code != 0 || body["code"] != nil || body["error"] != nil || body["run_id"] != mine.RunID ||
		body["fence"] != float64(mine.Fence) || body["task_id"] != "task-1" || body["agent_id"] != "agent-a1b2" || body["reason"] != "on it" {
		t.Errorf("checkout again --json: exit %d, stdout %q; want exit 0 and the lease of run %s", r.code, r.stdout, mine.RunID)
	}
	if r.stderr != "" {
		t.Errorf("checkout again --json: stderr %q", r.stderr)
	}
	// Another agent is still denied, with the server's answer.
	r = runCLI(t, url, e.keys["agent-c3d4"], "task-1", "--json")
	if err := json.Unmarshal([]byte(r.stdout), &body); err != nil || r.code != exitConflict || body["code"] != "checked_out" {
		t.Errorf("checkout by another agent --json: exit %d, stdout %q; want exit %d and the conflict", r.code, r.stdout, exitConflict)
	}
}
