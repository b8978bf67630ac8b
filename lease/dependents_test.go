package lease_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/lease"
)

// A task blocks at most so many others (MaxDependents; 3 here), so that
// every answer that lists its blocks stays small: one more dependent, by
// create or PATCH, is 400 invalid_dependency and changes nothing, while a
// dependent naming it again, and a task naming another blocker, are fine.
func TestATaskBlocksABoundedNumberOfOthers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	lease.LimitDependents(e.store, 3)
	e.task(t, "x", "y")
	for i := range 3 {
		e.create(t, lease.CreateTaskParams{TaskID: fmt.Sprintf("d%d", i), BlockedBy: []string{"x"}})
	}
	_, err := e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "d3", BlockedBy: []string{"x"}})
	var ve *lease.ValidationError
	if !errors.As(err, &ve) || ve.Code != lease.CodeInvalidDependency {
		t.Fatalf("a fourth dependent of x: %v, want invalid_dependency", err)
	}
	if _, err := e.store.GetTask(c, "d3"); !errors.Is(err, lease.ErrTaskNotFound) {
		t.Errorf("the refused dependent: %v, want not found", err)
	}
	e.create(t, lease.CreateTaskParams{TaskID: "free"})
	if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "free", AgentID: "a", BlockedBy: &[]string{"y", "x"}}); !errors.As(err, &ve) || ve.Code != lease.CodeInvalidDependency {
		t.Fatalf("PATCH naming x as a fourth: %v, want invalid_dependency", err)
	}
	if got := e.get(t, "free"); len(got.BlockedBy) != 0 {
		t.Errorf("free after the refused PATCH: blocked by %v", got.BlockedBy)
	}
	// d0 naming x again (and y too) is no new dependent of x.
	d0 := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d0", AgentID: "a", BlockedBy: &[]string{"x", "y"}}))
	if len(d0.BlockedBy) != 2 {
		t.Errorf("d0 naming x again and y: %v", d0.BlockedBy)
	}
	if got := e.get(t, "x").Blocks; !slices.Equal(got, []string{"d0", "d1", "d2"}) {
		t.Errorf("x blocks %v", got)
	}
}

// A batch whose tasks would take a blocker past its bound is refused
// whole, naming the first task that would, before anything is written: it
// used to create the tasks before that one (each task's own check refused
// it only when its turn came), answering 400 with half the batch made. A
// batch sent again, whose tasks the blocker already counts, is answered
// as before.
func TestABatchPastABlockersBoundCreatesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	lease.LimitDependents(e.store, 4)
	e.task(t, "x", "y")
	e.create(t, lease.CreateTaskParams{TaskID: "d0", BlockedBy: []string{"x"}})
	batch := func(ids ...string) []lease.CreateTaskParams {
		var ps []lease.CreateTaskParams
		for _, id := range ids {
			ps = append(ps, lease.CreateTaskParams{TaskID: id, BlockedBy: []string{"x"}})
		}
		return ps
	}
	_, err := e.store.CreateTasks(c, batch("b1", "b2", "b3", "b4", "b5"))
	var ve *lease.ValidationError
	if !errors.As(err, &ve) || ve.Code != lease.CodeInvalidDependency || !strings.Contains(err.Error(), "tasks[3]") {
		t.Fatalf("a batch giving x a fifth dependent at its fourth task: %v, want invalid_dependency naming tasks[3]", err)
	}
	for _, id := range []string{"b1", "b2", "b3", "b4", "b5"} {
		if _, err := e.store.GetTask(c, id); !errors.Is(err, lease.ErrTaskNotFound) {
			t.Errorf("%s of the refused batch: %v, want not found", id, err)
		}
	}
	if got := e.get(t, "x").Blocks; !slices.Equal(got, []string{"d0"}) {
		t.Errorf("x blocks %v after the refused batch, want [d0]", got)
	}
	// Three fit, and the same batch again is answered as existing.
	for range 2 {
		res := must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch("b1", "b2", "b3")))
		if len(res) != 3 {
			t.Fatalf("batch of three: %v", res)
		}
	}
	if got := e.get(t, "x").Blocks; len(got) != 4 {
		t.Errorf("x blocks %v, want d0 and b1-b3", got)
	}
}

// A PATCH naming a blocker that is refused after it recorded its edges
// (its compare-and-set lost to another PATCH of the task, answered 412)
// takes them back: the blocker used to list the task in blocks, with the
// task naming no blocker, for good, and the stale edge counted toward the
// blocker's bound.
func TestARefusedPatchLeavesNoEdge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x", "b")
	slow, db := delayed(e)
	db.armAfter(func() { // the graph's lock taken: another PATCH of x lands
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "b", Title: new("another")}); err != nil {
			t.Errorf("the other PATCH: %v", err)
		}
	})
	_, err := slow.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", BlockedBy: &[]string{"b"}, IfVersion: 1})
	if !errors.Is(err, lease.ErrVersionMismatch) {
		t.Fatalf("the PATCH whose version moved on: %v, want version_mismatch", err)
	}
	if got := e.get(t, "x"); len(got.BlockedBy) != 0 {
		t.Fatalf("x blocked by %v after the refused PATCH", got.BlockedBy)
	}
	if got := e.get(t, "b").Blocks; len(got) != 0 {
		t.Errorf("b blocks %v after x's refused PATCH, want none", got)
	}
}
