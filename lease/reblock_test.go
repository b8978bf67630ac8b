package lease_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// Reopening a done blocker blocks again the dependents that have not
// started: a todo dependent becomes blocked (claim skips it, a named
// checkout answers blocked naming the reopened blocker), one still blocked
// on others waits for the reopened one too, and one in progress or done
// is left as it is. Completing the blocker again releases them, with one
// unblocked event each per unblocking.
func TestReopeningADoneBlockerBlocksItsDependentsAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a", "b")
	e.create(t, lease.CreateTaskParams{TaskID: "d", Queue: "reblock", BlockedBy: []string{"a"}})
	e.create(t, lease.CreateTaskParams{TaskID: "both", Queue: "reblock-both", BlockedBy: []string{"a", "b"}})
	e.create(t, lease.CreateTaskParams{TaskID: "running", Queue: "reblock-running", BlockedBy: []string{"a"}})
	e.create(t, lease.CreateTaskParams{TaskID: "finished", Queue: "reblock-finished", BlockedBy: []string{"a"}})
	e.complete(t, "a", "x")
	e.drain(t)
	for _, id := range []string{"d", "running", "finished"} {
		if st := e.get(t, id).Status; st != lease.StatusTodo {
			t.Fatalf("%s after a's completion: %s, want todo", id, st)
		}
	}
	run := e.checkout(t, "running", "r", time.Minute)
	e.complete(t, "finished", "f")
	versionBefore := e.get(t, "d").Version

	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", AgentID: "x", Status: new(lease.StatusTodo)}))
	e.drain(t)

	d := e.get(t, "d")
	if d.Status != lease.StatusBlocked || !slices.Equal(blockerIDs(d.BlockedBy), []string{"a=todo"}) {
		t.Fatalf("d after a was reopened: %s, blocked_by %v; want blocked by a", d.Status, blockerIDs(d.BlockedBy))
	}
	if d.Version <= versionBefore {
		t.Errorf("d's version %d after it was blocked again, was %d: a status change moves it", d.Version, versionBefore)
	}
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "y", Queues: []string{"reblock"}}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("claim of d's queue once a is reopened: %v, want no task available", err)
	}
	var be *lease.BlockedError
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "d", AgentID: "y"}); !errors.As(err, &be) || !slices.Equal(blockerIDs(be.BlockedBy), []string{"a=todo"}) {
		t.Fatalf("checkout of d once a is reopened: %v, want BlockedError naming a", err)
	}
	if st := e.get(t, "running").Status; st != lease.StatusInProgress {
		t.Errorf("running, leased when a was reopened: %s, want in_progress", st)
	}
	if _, err := e.store.Renew(c, lease.RenewParams{TaskID: "running", AgentID: "r", RunID: run.RunID, Timeout: time.Minute}); err != nil {
		t.Errorf("the lease of running after a was reopened: %v", err)
	}
	if st := e.get(t, "finished").Status; st != lease.StatusDone {
		t.Errorf("finished, done when a was reopened: %s, want done", st)
	}

	// b's completion leaves "both" waiting on a.
	e.complete(t, "b", "x")
	e.drain(t)
	if got := e.get(t, "both"); got.Status != lease.StatusBlocked {
		t.Fatalf("both after b completed while a is reopened: %s, want blocked", got.Status)
	}
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "y", Queues: []string{"reblock-both"}}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("claim of both's queue: %v, want no task available", err)
	}

	e.complete(t, "a", "x")
	e.drain(t)
	for _, id := range []string{"d", "both"} {
		if st := e.get(t, id).Status; st != lease.StatusTodo {
			t.Fatalf("%s after a completed again: %s, want todo", id, st)
		}
	}
	if n := count(e.events(t, "d"), lease.EventUnblocked); n != 2 {
		t.Errorf("d has %d unblocked events, want 2 (one per unblocking)", n)
	}
	if n := count(e.events(t, "both"), lease.EventUnblocked); n != 1 {
		t.Errorf("both has %d unblocked events, want 1", n)
	}
	co := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "y", Queues: []string{"reblock"}}))
	if co.TaskID != "d" {
		t.Fatalf("claim after a completed again: %s, want d", co.TaskID)
	}
}

// A checkout that reopens a done blocker (expecting done) blocks its
// todo dependents again, as a PATCH that reopens it does.
func TestCheckoutReopeningADoneBlockerBlocksItsDependentsAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"a"}})
	e.complete(t, "a", "x")
	e.drain(t)
	co := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "a", AgentID: "x", ExpectedStatuses: []lease.Status{lease.StatusDone}}))
	e.drain(t)
	if got := e.get(t, "d"); got.Status != lease.StatusBlocked || !slices.Equal(blockerIDs(got.BlockedBy), []string{"a=in_progress"}) {
		t.Fatalf("d once a is checked out again: %s, blocked_by %v; want blocked by a", got.Status, blockerIDs(got.BlockedBy))
	}
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "a", AgentID: "x", RunID: co.RunID}))
	e.drain(t)
	if st := e.get(t, "d").Status; st != lease.StatusTodo {
		t.Fatalf("d after a completed again: %s, want todo", st)
	}
}

// A reopen whose change reaches the stream after the blocker was completed
// again blocks nothing: the dependents never wait on a done blocker.
func TestAReopenSeenAfterTheBlockerIsDoneAgainBlocksNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"a"}})
	e.complete(t, "a", "x")
	e.drain(t)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", AgentID: "x", Status: new(lease.StatusTodo)}))
	e.complete(t, "a", "x")
	e.drain(t)
	if st := e.get(t, "d").Status; st != lease.StatusTodo {
		t.Fatalf("d: %s, want todo", st)
	}
	if n := count(e.events(t, "d"), lease.EventUnblocked); n != 1 {
		t.Errorf("d has %d unblocked events, want 1: it never waited again", n)
	}
}
