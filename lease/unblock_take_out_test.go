package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// Two blockers of one dependent complete at once: both
// passes read it waiting on both and take their blocker out at once; the
// second's take-out is refused (it would leave it blocked on nothing) and
// it unblocks instead: one unblocked event.
func TestTwoBlockersTakenOutAtOnceUnblockOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "b1", "b2")
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "d", Title: "d", BlockedBy: []string{"b1", "b2"}}))
	e.complete(t, "b1", "x")
	e.complete(t, "b2", "x")
	raced := false
	doer := &raceDoer{match: takeOutOf(e), race: func() {
		raced = true
		if err := lease.UnblockDependent(e.store, "d", "b2", 2); err != nil {
			t.Errorf("b2's pass: %v", err)
		}
	}}
	if err := lease.UnblockDependent(e.over(doer), "d", "b1", 2); err != nil {
		t.Fatalf("b1's pass: %v", err)
	}
	if !raced {
		t.Fatal("b1's pass made no take-out")
	}
	if got := e.get(t, "d"); got.Status != lease.StatusTodo {
		t.Fatalf("d after both passes: %s", got.Status)
	}
	if n := count(e.events(t, "d"), lease.EventUnblocked); n != 1 {
		t.Fatalf("%d unblocked events, want 1", n)
	}
}

// A dependent marked while leased (waiting_on on an
// in_progress task) whose blocker completes again: the pass reads it in
// progress and takes the blocker out at once; the lease ends in between
// (the task made blocked on the mark), so the take-out is refused and the
// task is unblocked instead.
func TestAMarkedDependentWhoseLeaseEndsBeforeTheTakeOutIsUnblocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "b1", "b2")
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "d", Title: "d", BlockedBy: []string{"b1", "b2"}}))
	e.complete(t, "b1", "x")
	e.complete(t, "b2", "x")
	e.drain(t)
	co := e.checkout(t, "d", "a", time.Hour)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "b1", AgentID: "x", Status: new(lease.StatusTodo)}))
	e.drain(t)
	e.clock.Advance(time.Second)
	e.complete(t, "b1", "x")
	raced := false
	doer := &raceDoer{match: takeOutOf(e), race: func() {
		raced = true
		if got := e.get(t, "d"); got.Status != lease.StatusInProgress {
			t.Errorf("d before its release: %s", got.Status)
		}
		e.clock.Advance(time.Second)
		if _, err := e.store.Release(c, lease.ReleaseParams{TaskID: "d", AgentID: "a", RunID: co.RunID, Fence: co.Fence}); err != nil {
			t.Errorf("a's release of d: %v", err)
		}
		if got := e.get(t, "d"); got.Status != lease.StatusBlocked {
			t.Errorf("d released while marked: %s, want blocked", got.Status)
		}
	}}
	e.clock.Advance(time.Second)
	if err := lease.UnblockDependent(e.over(doer), "d", "b1", 2); err != nil {
		t.Fatalf("b1's pass: %v", err)
	}
	if !raced {
		t.Fatal("b1's pass made no take-out")
	}
	if got := e.get(t, "d"); got.Status != lease.StatusTodo {
		t.Fatalf("d after b1's pass: %s, want todo", got.Status)
	}
}
