package lease_test

import (
	"errors"
	"fmt"
	"slices"
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
