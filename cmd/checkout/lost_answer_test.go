package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

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

// The same through MCP. claim_task whose every try was lost answered
// "unreachable: try again later", while the claim held a task; the next
// claim_task, under a run id of its own, took a second task, and the
// first stayed held until its lease timed out. A lost answer is now code
// undecided, saying what to call, and the next claim_task is sent under
// the lost one's run, which answers with its lease.
func TestMCPALostAnswerIsUndecided(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	f := testenv.NewFront(t, e.srv.URL())
	me := client.New(e.srv.URL(), e.keys["agent-c3d4"])
	q := "lost"
	for _, id := range []string{"claimed", "other"} {
		if _, err := e.admin.CreateTask(ctx, client.CreateTaskRequest{TaskID: id, Queue: q}); err != nil {
			t.Fatal(err)
		}
	}
	e.task(t, "named", "")
	ms := connectMCP(t, f.URL, e.keys["agent-c3d4"])
	lost := func(tool string, args map[string]any, next string) {
		t.Helper()
		res, out := ms.call(tool, args)
		if !res.IsError || out["code"] != "undecided" || !strings.Contains(textOf(res), "no answer says whether it took effect") || !strings.Contains(textOf(res), next) {
			t.Errorf("%s %v with its answer lost: %s %v; want code undecided, saying to %s", tool, args, textOf(res), out, next)
		}
	}
	all := []testenv.Fault{testenv.Lose, testenv.Lose, testenv.Lose, testenv.Lose}

	f.Fail("POST /api/claim", all...)
	lost("claim_task", map[string]any{"queues": []string{q}}, "claim_task again")
	if res, out := ms.call("claim_task", map[string]any{"queues": []string{q}}); out["acquired"] != true || out["task_id"] != "claimed" {
		t.Errorf("claim_task after a lost one: %s %v", textOf(res), out)
	}
	if cos, err := me.ListCheckouts(ctx, "agent-c3d4"); err != nil || len(cos) != 1 {
		t.Errorf("after a lost claim and the next: leases %+v, %v; want the one the lost claim took", cos, err)
	}

	f.Fail("POST /api/tasks/named/checkout", all...)
	lost("checkout_task", map[string]any{"task_id": "named"}, "checkout_task again")
	if res, out := ms.call("checkout_task", map[string]any{"task_id": "named"}); out["acquired"] != true {
		t.Errorf("checkout_task after a lost one: %s %v", textOf(res), out)
	}
	f.Fail("POST /api/tasks/named/release", all...)
	lost("release_task", map[string]any{"task_id": "named"}, "call release_task again")
	if res, out := ms.call("release_task", map[string]any{"task_id": "named"}); res.IsError {
		t.Errorf("release_task after a lost one that took effect: %s %v", textOf(res), out)
	}
	f.Fail("POST /api/tasks", testenv.Gateway)
	lost("create_task", map[string]any{"task_id": "added"}, "call get_task")
	// Created again, it exists: by the lost creation, not by nobody.
	if res, out := ms.call("create_task", map[string]any{"task_id": "added"}); res.IsError || !strings.Contains(textOf(res), "whose answer was lost, created it") {
		t.Errorf("create_task again after a lost one: %s %v", textOf(res), out)
	}
}

// The commands an agent repeats safely are tried again by the client when
// an answer is lost, under the same run id or naming the same lease: one
// lost answer (the connection closed after the server acted, or a
// gateway's 502) is no failure, and the repeat does not act twice.
func TestAnAnswerLostOnceIsTriedAgainSafely(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	f := testenv.NewFront(t, e.srv.URL())
	key := e.keys["agent-c3d4"]
	me := client.New(e.srv.URL(), key)
	for _, id := range []string{"taken", "named", "renewed", "released", "completed", "watched"} {
		e.task(t, id, "")
	}
	if _, err := e.admin.CreateTask(ctx, client.CreateTaskRequest{TaskID: "claimed", Queue: "once"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"renewed", "released", "completed"} {
		if _, err := me.Checkout(ctx, id, client.CheckoutRequest{RunID: "run-held"}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		path  string
		fault testenv.Fault
		args  []string
		want  string
	}{
		{"/api/tasks/taken/checkout", testenv.Lose, []string{"taken"}, "Checkout acquired: taken"},
		{"/api/tasks/named/checkout", testenv.Gateway, []string{"named", "--run-id", "run-named"}, "Checkout acquired: named"},
		{"/api/claim", testenv.Lose, []string{"claim", "--queue", "once"}, "Checkout acquired: claimed"},
		{"/api/tasks/renewed/renew", testenv.Gateway, []string{"renew", "renewed", "--run-id", "run-held"}, "Checkout renewed: renewed"},
		{"/api/tasks/released/release", testenv.Lose, []string{"release", "released", "--run-id", "run-held"}, "Checkout released: released"},
		{"/api/tasks/completed/complete", testenv.Gateway, []string{"complete", "completed", "--run-id", "run-held"}, "Task completed: completed"},
		{"/api/heartbeat", testenv.Lose, []string{"heartbeat"}, "Heartbeat: agent-c3d4"},
		{"/api/tasks/watched/watch", testenv.Gateway, []string{"watch", "watched"}, "Watching"},
	} {
		f.Requests()
		f.Fail("POST "+tc.path, tc.fault)
		if r := runCLI(t, f.URL, key, tc.args...); r.code != 0 || !strings.Contains(r.stdout, tc.want) {
			t.Errorf("checkout %v with one answer %v: exit %d\n%s%s", tc.args, tc.fault, r.code, r.stdout, r.stderr)
		}
		sent := 0
		for _, r := range f.Requests() {
			if r == "POST "+tc.path {
				sent++
			}
		}
		if sent != 2 {
			t.Errorf("checkout %v with one answer %v: sent %d times, want twice (lost, then tried again)", tc.args, tc.fault, sent)
		}
	}
	cos, err := me.ListCheckouts(ctx, "agent-c3d4")
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]int64{}
	for _, co := range cos {
		held[co.TaskID] = co.Fence
	}
	if len(held) != 4 || held["taken"] != 1 || held["named"] != 1 || held["claimed"] != 1 || held["renewed"] != 1 {
		t.Errorf("leases after the lost answers: %v; want taken, named, claimed and renewed, each once (fence 1)", held)
	}
	for id, want := range map[string]string{"released": client.StatusTodo, "completed": client.StatusDone} {
		if task, err := me.GetTask(ctx, id); err != nil || task.Status != want {
			t.Errorf("%s: %+v, %v; want %s", id, task, err, want)
		}
	}
}

// An agent's key is shown once, in the answer that creates it. agents
// add whose answer was lost said "cannot reach the server", and adding
// it again answered that it exists: its key was gone, with nothing said.
// It now says the agent may exist with a key nobody has, and how to get
// one (remove it and add it again); an inbox message deleted or an agent
// removed whose answer was lost say to look first.
func TestALostAgentCreationSaysItsKeyIsLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	f := testenv.NewFront(t, e.srv.URL())
	f.Fail("POST /api/agents", testenv.Lose)
	r := runCLI(t, f.URL, e.keys["admin"], "agents", "add", "planner", "--id", "agent-p1")
	if r.code != exitError || !strings.Contains(r.stderr, "the creation of agent planner was sent, but no answer says whether it took effect") ||
		!strings.Contains(r.stderr, "checkout agents remove") {
		t.Errorf("agents add with its answer lost: exit %d, stderr %q", r.code, r.stderr)
	}
	agents, err := e.admin.ListAgents(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ag := range agents {
		found = found || ag.AgentID == "agent-p1"
	}
	if !found {
		t.Errorf("the agent whose creation's answer was lost: not created (%+v)", agents)
	}
	f.Fail("DELETE /api/agents/agent-p1", testenv.Gateway)
	if r := runCLI(t, f.URL, e.keys["admin"], "agents", "remove", "agent-p1"); r.code != exitError || !strings.Contains(r.stderr, "run checkout agents list") {
		t.Errorf("agents remove with its answer lost: exit %d, stderr %q", r.code, r.stderr)
	}
	f.Fail("DELETE /api/inbox/m1", testenv.Lose)
	if r := runCLI(t, f.URL, e.keys["agent-c3d4"], "inbox", "delete", "m1"); r.code != exitError || !strings.Contains(r.stderr, "run checkout inbox") {
		t.Errorf("inbox delete with its answer lost: exit %d, stderr %q", r.code, r.stderr)
	}
}

// A checkout or claim whose first answer was lost is answered, when the
// client tries again under the same run, with the lease the first try
// got, which has then had its time running. When that took more than a
// second, the command took its own grant for a lease held from before:
// it printed "You already hold" and skipped what follows a grant (the
// check that the lease is live, the last error of a retried task). A
// run id the command generated cannot have held anything before: its
// lease is always the command's own grant.
func TestAGrantWhoseAnswerWasLostIsStillAcquired(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	f := testenv.NewFront(t, e.srv.URL())
	f.Lost = func(string) { e.clock.Advance(5 * time.Second) }
	key := e.keys["agent-c3d4"]
	e.task(t, "named", "")
	if _, err := e.admin.CreateTask(ctx, client.CreateTaskRequest{TaskID: "claimed", Queue: "slow"}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"named"}, {"claim", "--queue", "slow"}} {
		f.Fail("POST /api/tasks/named/checkout", testenv.Lose)
		f.Fail("POST /api/claim", testenv.Lose)
		r := runCLI(t, f.URL, key, args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Checkout acquired") {
			t.Errorf("checkout %v whose first answer was lost: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
	}
}

// claim_task whose every try was lost took a task, whose lease was then
// force-released. The next claim_task, under the lost claim's run, is
// answered with that lease as it ended: it said the lease was granted to
// the agent but was not live, the agent being dead by heartbeat, and told
// it to send a heartbeat. It now says what happened: the lost claim's
// lease has ended, nothing is held; and the claim after it is a fresh one.
func TestMCPALostClaimsEndedLeaseIsSaidSo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	f := testenv.NewFront(t, e.srv.URL())
	q := "ended"
	if _, err := e.admin.CreateTask(ctx, client.CreateTaskRequest{TaskID: "ended", Queue: q}); err != nil {
		t.Fatal(err)
	}
	ms := connectMCP(t, f.URL, e.keys["agent-c3d4"])
	f.Fail("POST /api/claim", testenv.Lose, testenv.Lose, testenv.Lose, testenv.Lose)
	if _, out := ms.call("claim_task", map[string]any{"queues": []string{q}}); out["code"] != "undecided" {
		t.Fatalf("claim_task with its answer lost: %v", out)
	}
	if _, err := e.admin.Release(ctx, "ended", client.ReleaseRequest{Force: true, Reason: "taken back"}); err != nil {
		t.Fatal(err)
	}
	res, out := ms.call("claim_task", map[string]any{"queues": []string{q}})
	if msg := textOf(res); out["acquired"] == true || strings.Contains(msg, "heartbeat") || !strings.Contains(msg, "has ended") || !strings.Contains(msg, "claim_task") {
		t.Errorf("claim_task after a lost claim whose lease ended: %s %v; want it to say that lease has ended and to claim again", msg, out)
	}
	if res, out := ms.call("claim_task", map[string]any{"queues": []string{q}}); out["acquired"] != true || out["checkout"].(map[string]any)["fence"] != float64(2) {
		t.Errorf("claim_task after that: %s %v; want the task claimed anew, fence 2", textOf(res), out)
	}
}

// Ctrl-C after a claim was sent left it undecided: the claim may have
// taken a task. The command said so, with the Go error inside: "(claim:
// context canceled after the request was sent, before its answer came:
// it may have taken effect)". It now sees the claim through (see
// TestAnInterruptedClaimGivesItsTaskBack) and says what became of it: it
// took nothing, or, when its answer is lost too, it may hold a task and
// how to find the lease (exit 1 both).
func TestAnInterruptedClaimSaysItWasInterrupted(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		fault testenv.Fault
		says  []string
	}{
		{"nothing taken", testenv.Pass, []string{"interrupted: the claim under run", "took no task: nothing is checked out"}},
		{"answer lost", testenv.Down, []string{"interrupted: the claim under run", "it may hold a task", "checkout claim --run-id"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			f := testenv.NewFront(t, e.srv.URL())
			f.Fail("POST /api/claim", c.fault)
			cmd := exec.Command(binary, "claim", "--queue", "empty", "--wait", "2s")
			cmd.Env = cleanEnv("CHECKOUT_URL="+f.URL, "CHECKOUT_API_KEY="+e.keys["agent-c3d4"])
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(10 * time.Second); !slices.Contains(f.Requests(), "POST /api/claim"); {
				if time.Now().After(deadline) {
					cmd.Process.Kill()
					t.Fatal("the claim never reached the server")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := cmd.Process.Signal(os.Interrupt); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != exitError {
				t.Fatalf("interrupted claim: %v, stderr %q; want exit 1", err, errb.String())
			}
			msg := errb.String()
			for _, w := range c.says {
				if !strings.Contains(msg, w) || strings.Contains(msg, "context canceled") {
					t.Errorf("interrupted claim: stderr %q; want it to say %q", msg, w)
				}
			}
		})
	}
}

// A claim_task whose first try lost its answer, and whose retries a
// gateway throttled (429), may have taken a task: the next claim_task
// claims under its run, and gets that lease, not a second task.
func TestMCPALostClaimThrottledAfterIsClaimedAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	f := testenv.NewFront(t, e.srv.URL())
	me := client.New(e.srv.URL(), e.keys["agent-c3d4"])
	q := "throttled"
	for _, id := range []string{"first", "second"} {
		if _, err := e.admin.CreateTask(ctx, client.CreateTaskRequest{TaskID: id, Queue: q}); err != nil {
			t.Fatal(err)
		}
	}
	ms := connectMCP(t, f.URL, e.keys["agent-c3d4"])
	f.Fail("POST /api/claim", testenv.Lose, testenv.Throttle, testenv.Throttle, testenv.Throttle)
	if res, out := ms.call("claim_task", map[string]any{"queues": []string{q}}); out["code"] != "undecided" {
		t.Errorf("claim_task lost, then throttled: %s %v; want undecided", textOf(res), out)
	}
	res, out := ms.call("claim_task", map[string]any{"queues": []string{q}})
	if out["acquired"] != true {
		t.Errorf("claim_task after it: %s %v", textOf(res), out)
	}
	if cos, err := me.ListCheckouts(ctx, "agent-c3d4"); err != nil || len(cos) != 1 {
		t.Errorf("after a lost claim and the next: leases %+v, %v; want the one the lost claim took", cos, err)
	}
}

// --json prints the server's answer. A release throttled (429, which the
// client tries again) and then sent again with its answer lost printed
// the throttle's JSON, an answer to a try that did nothing, as if it were
// the release's; so too a completion answered 502 by a gateway and then
// lost. With no answer to the last try, --json prints nothing and the
// error says the request may have taken effect.
func TestJSONPrintsNoEarlierTrysAnswerWhenTheLastWasLost(t *testing.T) {
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
	f.Fail("POST /api/tasks/released/release", testenv.Throttle, testenv.Lose)
	f.Fail("POST /api/tasks/completed/complete", testenv.Throttle, testenv.Gateway)
	for _, args := range [][]string{{"release", "released", "--json"}, {"complete", "completed", "--json"}} {
		r := runCLI(t, f.URL, key, args...)
		if r.code != exitError || r.stdout != "" || !strings.Contains(r.stderr, "no answer says whether it took effect") {
			t.Errorf("checkout %v, throttled, then its answer lost: exit %d, stdout %q, stderr %q; want exit 1, nothing on stdout, and that it may have taken effect",
				args, r.code, r.stdout, r.stderr)
		}
	}
	for _, id := range []string{"released", "completed"} {
		if s, err := me.Status(ctx, id); err != nil || s.Locked {
			t.Errorf("%s after its lost answer: %+v, %v; want it ended", id, s, err)
		}
	}
}
