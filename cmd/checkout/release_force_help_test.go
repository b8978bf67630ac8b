package main

import (
	"context"
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/client"
)

// release --force --run-id X is a force release pinned to run X ("--run-id:
// only if the lease has this run id"), as the server takes it: an admin
// ending a stuck run's lease must not end the lease another run took
// meanwhile. The CLI dropped --run-id with --force, so the live lease of
// another run was force-released. CHECKOUT_RUN_ID, the admin's own run,
// names no lease of the holder's and is still left out.
func TestForceReleaseKeepsTheRunIDFlag(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-d4e5", "")
	researcher := client.New(e.srv.URL(), e.keys["agent-a1b2"])
	co, err := researcher.Checkout(context.Background(), "task-d4e5", client.CheckoutRequest{RunID: "run-new"})
	if err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, e.srv.URL(), e.keys["admin"], "release", "task-d4e5", "--force", "--run-id", "run-stuck")
	if r.code != exitConflict || !strings.Contains(r.stderr, co.RunID) {
		t.Errorf("release --force --run-id run-stuck of a lease of run-new: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if s, err := e.admin.Status(context.Background(), "task-d4e5"); err != nil || !s.Locked || s.Checkout.RunID != "run-new" {
		t.Fatalf("the lease after a force release pinned to another run: %+v, %v", s, err)
	}
	// The admin's own CHECKOUT_RUN_ID is not the holder's run: ignored.
	r = runCLIEnv(t, []string{"CHECKOUT_URL=" + e.srv.URL(), "CHECKOUT_API_KEY=" + e.keys["admin"], "CHECKOUT_RUN_ID=run-admin"},
		"release", "task-d4e5", "--force")
	if r.code != exitOK {
		t.Errorf("release --force under CHECKOUT_RUN_ID=run-admin: exit %d, stderr %q", r.code, r.stderr)
	}
	// Pinned to the live run, it ends that lease.
	if _, err := researcher.Checkout(context.Background(), "task-d4e5", client.CheckoutRequest{RunID: "run-third"}); err != nil {
		t.Fatal(err)
	}
	r = runCLI(t, e.srv.URL(), e.keys["admin"], "release", "task-d4e5", "--force", "--run-id", "run-third")
	if r.code != exitOK || !strings.Contains(r.stdout, "Checkout released: task-d4e5") {
		t.Errorf("release --force --run-id of the live run: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
}

// "checkout help <word>" for a word that is no command printed the root's
// help (or, below a group, the group's) and exited 0: "checkout help
// relase" never said that relase is no command, nor that release is.
// An unknown command is a usage error (exit 2), in help as elsewhere.
func TestHelpOfAnUnknownCommandIsAUsageError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"help", "relase"}, `unknown command "relase" for "checkout": did you mean release?`},
		{[]string{"help", "bogus"}, `unknown command "bogus" for "checkout"`},
		{[]string{"help", "tasks", "shwo"}, `unknown command "shwo" for "checkout tasks": did you mean show?`},
	} {
		r := runCLIEnv(t, nil, tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
			t.Errorf("checkout %s: exit %d, stdout %.80q, stderr %q; want exit 2 and %q", strings.Join(tc.args, " "), r.code, r.stdout, r.stderr, tc.want)
		}
	}
	for _, args := range [][]string{{"help"}, {"help", "release"}, {"help", "tasks", "show"}, {"help", "checkout"}} {
		r := runCLIEnv(t, nil, args...)
		if r.code != exitOK || !strings.Contains(r.stdout, "Usage:") || r.stderr != "" {
			t.Errorf("checkout %s: exit %d, stdout %.80q, stderr %q", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}
	if r := runCLIEnv(t, nil, "help", "release"); !strings.Contains(r.stdout, releaseLong[:40]) {
		t.Errorf("checkout help release: %.200q", r.stdout)
	}
}
