package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A PATCH to todo on a blocked task is refused: its blockers decide when
// it is todo (a PATCH of blocked_by may). A reopen that gives blocked_by
// too is refused (blocked_by changes only on a todo or blocked task:
// reopen first), and one that gives a not_before keeps it: the reopen
// clears the not_before the task had, not the one it is given.
func TestReopenPatchesAndTheStatusOfABlockedTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "rp-blocker", Title: "t"})
	e.create(t, lease.CreateTaskParams{TaskID: "rp-blocked", Title: "t", BlockedBy: []string{"rp-blocker"}})
	todo := lease.StatusTodo
	_, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "rp-blocked", AgentID: "agent-1", Status: &todo})
	if !errors.Is(err, lease.ErrInvalidTransition) {
		t.Fatalf("todo on a blocked task: %v, want ErrInvalidTransition", err)
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "rp-blocked")); got.Status != lease.StatusBlocked {
		t.Fatalf("after the refused PATCH the task is %s, want blocked", got.Status)
	}

	e.create(t, lease.CreateTaskParams{TaskID: "rp-done", Title: "t"})
	e.complete(t, "rp-done", "agent-1")
	blockers := []string{"rp-blocker"}
	_, err = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "rp-done", AgentID: "agent-1", Status: &todo, BlockedBy: &blockers})
	if !errors.Is(err, lease.ErrInvalidTransition) {
		t.Fatalf("a reopen with blocked_by: %v, want ErrInvalidTransition", err)
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "rp-done")); got.Status != lease.StatusDone || len(got.BlockedBy) != 0 {
		t.Fatalf("after the refused reopen the task is %s blocked by %v, want done and no blockers", got.Status, got.BlockedBy)
	}

	nb := e.clock.Now().Add(time.Hour).Truncate(time.Millisecond)
	got := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "rp-done", AgentID: "agent-1", Status: &todo, SetNotBefore: true, NotBefore: &nb}))
	if got.Status != lease.StatusTodo || got.Attempts != 0 || got.NotBefore == nil || !got.NotBefore.Equal(nb) {
		t.Fatalf("a reopen with a not_before: status %s, attempts %d, not_before %v; want todo, 0, %v", got.Status, got.Attempts, got.NotBefore, nb)
	}
}
