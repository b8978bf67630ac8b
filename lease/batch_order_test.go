package lease_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/lease"
)

// A batch's tasks may name each other in blocked_by in any order: each is
// written after the tasks of the batch it names (a batch naming a later
// task was refused, "put blockers first", a rule written nowhere), and
// each answer shows the tasks of the batch that name it in blocks, as a
// read of it does.
func TestABatchMayNameItsBlockersInAnyOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "outside")
	res, err := e.store.CreateTasks(c, []lease.CreateTaskParams{
		{TaskID: "ship", BlockedBy: []string{"build", "test"}},
		{TaskID: "test", BlockedBy: []string{"build"}},
		{TaskID: "build", BlockedBy: []string{"outside"}},
		{TaskID: "docs"},
	})
	if err != nil {
		t.Fatalf("a batch naming later tasks as blockers: %v", err)
	}
	for i, want := range []string{"ship", "test", "build", "docs"} {
		if res[i].TaskID != want || res[i].Outcome != lease.BatchCreated {
			t.Fatalf("result %d = %s %s, want %s created (answers in the batch's order)", i, res[i].TaskID, res[i].Outcome, want)
		}
	}
	blocks := map[string][]string{"ship": nil, "test": {"ship"}, "build": {"ship", "test"}, "docs": nil}
	for _, r := range res {
		if !slices.Equal(r.Task.Blocks, blocks[r.TaskID]) {
			t.Errorf("%s answered blocks %v, want %v", r.TaskID, r.Task.Blocks, blocks[r.TaskID])
		}
		if got := e.get(t, r.TaskID); !slices.Equal(got.Blocks, blocks[r.TaskID]) {
			t.Errorf("%s read as blocks %v, want %v", r.TaskID, got.Blocks, blocks[r.TaskID])
		}
	}
	var names []string
	for _, b := range e.get(t, "ship").BlockedBy {
		names = append(names, b.TaskID)
	}
	if !slices.Equal(names, []string{"build", "test"}) {
		t.Errorf("ship blocked by %v, want build and test", names)
	}
}

// Tasks of a batch that wait for each other in a cycle are refused, naming
// a task on the cycle, and nothing of the batch is written.
func TestABatchWhoseTasksWaitInACycleCreatesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	_, err := e.store.CreateTasks(c, []lease.CreateTaskParams{
		{TaskID: "first", BlockedBy: []string{"a"}},
		{TaskID: "a", BlockedBy: []string{"b"}},
		{TaskID: "b", BlockedBy: []string{"a"}},
	})
	var ve *lease.ValidationError
	if !errors.As(err, &ve) || ve.Code != lease.CodeDependencyCycle || !strings.Contains(err.Error(), "cycle") || !strings.Contains(err.Error(), "tasks[1]: ") {
		t.Fatalf("a batch with a cycle: %v, want dependency_cycle naming tasks[1] (a)", err)
	}
	for _, id := range []string{"first", "a", "b"} {
		if _, err := e.store.GetTask(c, id); !errors.Is(err, lease.ErrTaskNotFound) {
			t.Errorf("%s after the refused batch: %v, want not found", id, err)
		}
	}
}

// CreateTasks: "Every task is validated before any is written", and
// checkBatchDependents refuses a batch "before any of it is written" whose
// tasks would take a blocker past its dependents bound. A blocker that
// exists already but is also listed in the batch (answered "exists") is
// taken for one of the batch and skips that check: the batch writes the
// tasks ordered before the refused one, then answers 400.
func TestABatchNamingAnExistingTaskOfTheBatchAtItsBoundWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	lease.LimitDependents(e.store, 1)
	e.task(t, "x")
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "d1", Title: "d1", BlockedBy: []string{"x"}}))
	_, err := e.store.CreateTasks(c, []lease.CreateTaskParams{
		{TaskID: "n", Title: "n"},
		{TaskID: "x", Title: "x again"},
		{TaskID: "a", Title: "a", BlockedBy: []string{"x"}},
	})
	if err == nil {
		t.Fatalf("the batch gave x a second dependent past its bound of 1")
	}
	if _, gerr := e.store.GetTask(c, "n"); gerr == nil {
		t.Errorf("the batch was refused (%v) after writing n", err)
	}
}
