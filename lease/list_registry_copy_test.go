package lease_test

import (
	"slices"
	"testing"

	"github.com/checkout-dev/checkout/lease"
)

// A walk of every queue's todo tasks goes from process to process (each
// page may land on another Lambda container), and each reads its own copy
// of the queue registry. A page from the process that created a queue can
// end inside it; the next page, from a process whose copy is younger than
// a second and lacks that queue, went on at the next queue in its copy,
// and the walk missed the rest of the cursor's queue. The cursor's queue
// is walked whether or not the copy has it yet.
func TestATodoWalkGoesOnInTheCursorsQueueAnotherProcessHasNotSeen(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	e.create(t, lease.CreateTaskParams{TaskID: "z-0", Queue: "z-old"})
	e.caughtUp(t)
	// The other process reads the registry now: its copy has z-old only.
	must[lease.TaskPage](t)(other.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo}))

	for _, id := range []string{"m-0", "m-1", "m-2"} {
		e.create(t, lease.CreateTaskParams{TaskID: id, Queue: "m-new"})
	}
	e.caughtUp(t)

	first := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo, Limit: 2}))
	listed := listedIDs(first)
	if first.NextCursor == "" {
		t.Fatalf("the first page of 2 listed %v and no cursor", listed)
	}
	for p := (lease.ListTasksParams{Cursor: first.NextCursor, Limit: 2}); ; {
		page := must[lease.TaskPage](t)(other.ListTasks(c, p))
		listed = append(listed, listedIDs(page)...)
		if page.NextCursor == "" || len(listed) > 10 {
			break
		}
		p.Cursor = page.NextCursor
	}
	if want := []string{"m-0", "m-1", "m-2", "z-0"}; !slices.Equal(listed, want) {
		t.Errorf("the walk listed %v, want %v", listed, want)
	}
}
