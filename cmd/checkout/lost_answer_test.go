package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/internal/testenv"
)

// A command whose answer was lost may have done what it was asked. A
// release or completion naming no lease, a task added, whose answer was
// lost, said only "cannot reach the server" (exit 1), and running it
// again answered "has no live lease" (exit 4) or "already exists" for
// what had happened. A claim whose every try was lost said the same,
// while it held a task under a run id it never showed: a claim again took
// another task, and the first stayed held until its lease timed out. They
// now say that the request was sent and may have taken effect, and what
// to run; the claim names its run, and claiming under it gets that lease.
func TestALostAnswerIsReportedUndecided(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	f := testenv.NewFront(t, e.srv.URL())
	key := e.keys["agent-c3d4"]
	me := client.New(e.srv.URL(), key)
	for _, id := range []string{"released", "completed"} {
		e.task(t, id, "")
		if _, err := me.Checkout(ctx, id, client.CheckoutRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	q := "lost"
	for _, id := range []string{"claimed", "other"} {
		if _, err := e.admin.CreateTask(ctx, client.CreateTaskRequest{TaskID: id, Queue: q}); err != nil {
			t.Fatal(err)
		}
	}
	undecided := func(r result, what, next string) {
		t.Helper()
		if r.code != exitError || !strings.Contains(r.stderr, what) || !strings.Contains(r.stderr, " was sent, but no answer says whether it took effect") || !strings.Contains(r.stderr, next) {
			t.Errorf("exit %d, stderr %q; want exit 1 saying %s may have taken effect, and %q", r.code, r.stderr, what, next)
		}
	}

	f.Fail("POST /api/tasks/released/release", testenv.Lose)
	undecided(runCLI(t, f.URL, key, "release", "released"), "the release of task released", "run checkout status released")
	f.Fail("POST /api/tasks/completed/complete", testenv.Gateway)
	undecided(runCLI(t, f.URL, key, "complete", "completed"), "the completion of task completed", "run checkout tasks show completed")
	f.Fail("POST /api/tasks", testenv.Lose)
	undecided(runCLI(t, f.URL, key, "tasks", "add", "added"), "the creation of task added", "run checkout tasks show added")
	for _, id := range []string{"released", "completed"} {
		if s, err := me.Status(ctx, id); err != nil || s.Locked {
			t.Errorf("%s after its lost answer: %+v, %v; want it ended", id, s, err)
		}
	}

	f.Fail("POST /api/claim", testenv.Lose, testenv.Lose, testenv.Lose, testenv.Lose)
	r := runCLI(t, f.URL, key, "claim", "--queue", q)
	undecided(r, "the claim under run", "run checkout claim --run-id")
	run := regexp.MustCompile(`--run-id (run-[0-9a-f]{16})`).FindStringSubmatch(r.stderr)
	if run == nil {
		t.Fatalf("the lost claim names no run: %q", r.stderr)
	}
	r = runCLI(t, f.URL, key, "claim", "--queue", q, "--run-id", run[1])
	if r.code != 0 || !strings.Contains(r.stdout, "claimed") {
		t.Errorf("claim under the lost claim's run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	cos, err := me.ListCheckouts(ctx, "agent-c3d4")
	if err != nil {
		t.Fatal(err)
	}
	if len(cos) != 1 || cos[0].TaskID != "claimed" || cos[0].RunID != run[1] {
		t.Errorf("after the lost claim and its run's claim, the agent holds %+v; want one lease, on claimed under %s", cos, run[1])
	}
}
