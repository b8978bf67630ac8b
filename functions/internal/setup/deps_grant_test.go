package setup

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/lease"
)

// A blocker that already blocks lease.MaxDependents tasks: a create naming
// it is refused, and a PATCH of a task that already names it passes. Both
// read the named task's edge with GetItem on inbox to tell them apart; the
// tasks function is granted it (it was not, and AWS would have denied the
// read: a 500 where the local server answers 400 invalid_dependency).
func TestTasksFunctionChecksAFullBlocker(t *testing.T) {
	ctx := context.Background()
	store, _, checkGrants := storeOf(t, deploy.Tasks)
	if _, err := store.CreateTask(ctx, lease.CreateTaskParams{TaskID: "blocker", Title: "blocker"}); err != nil {
		t.Fatal(err)
	}
	for start := 0; start < lease.MaxDependents; start += lease.MaxBatch {
		var batch []lease.CreateTaskParams
		for i := start; i < min(start+lease.MaxBatch, lease.MaxDependents); i++ {
			batch = append(batch, lease.CreateTaskParams{TaskID: fmt.Sprintf("dep-%04d", i), Title: "dependent", BlockedBy: []string{"blocker"}})
		}
		if _, err := store.CreateTasks(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	_, err := store.CreateTask(ctx, lease.CreateTaskParams{TaskID: "one-too-many", Title: "one too many", BlockedBy: []string{"blocker"}})
	if !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("a create naming a full blocker: %v, want invalid input", err)
	}
	title := "renamed"
	if _, err := store.UpdateTask(ctx, lease.UpdateTaskParams{TaskID: "dep-0000", Title: &title, BlockedBy: &[]string{"blocker"}}); err != nil {
		t.Errorf("a PATCH keeping its full blocker: %v", err)
	}
	// A PATCH naming a new blocker reads the graph's epoch and takes and
	// gives back its lock.
	if _, err := store.CreateTask(ctx, lease.CreateTaskParams{TaskID: "other", Title: "other"}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.UpdateTask(ctx, lease.UpdateTaskParams{TaskID: "dep-0001", BlockedBy: &[]string{"blocker", "other"}}); err != nil {
		t.Errorf("a PATCH naming a new blocker: %v", err)
	}
	checkGrants()
}
