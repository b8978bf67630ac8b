package lease_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A listing of every queue's todo tasks walks the queues in name order,
// and a page read queue after queue until it was full: over a fleet's
// thousand queues that hold no todo task (each queue ever used stays in
// the registry) one page made a Query per claim shard of each, thousands
// of Queries, and with ten thousand queues it outran the tasks function's
// 10 s in AWS. A page reads a bounded number of queues (256) and, when
// that bound ends it, goes on with a cursor at the next queue: the walk
// still reaches every todo task.
func TestATodoPageReadsABoundedNumberOfQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const empty = 300
	e.create(t, lease.CreateTaskParams{TaskID: "root", Queue: "0-root"})
	e.checkout(t, "root", "a", time.Hour)
	for b := 0; b < empty; b += lease.MaxBatch {
		var batch []lease.CreateTaskParams
		for i := b; i < min(empty, b+lease.MaxBatch); i++ {
			// Blocked: its queue has no todo task.
			batch = append(batch, lease.CreateTaskParams{TaskID: fmt.Sprintf("blocked-%03d", i), Queue: fmt.Sprintf("q-%03d", i), BlockedBy: []string{"root"}})
		}
		must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	}
	e.create(t, lease.CreateTaskParams{TaskID: "last", Queue: "z-last"})
	e.caughtUp(t)

	perPage := 256 * schema.DefaultShards().Claim // a Query per shard of each queue
	var listed []string
	pages := 0
	for p := (lease.ListTasksParams{Status: lease.StatusTodo, Limit: 10}); ; pages++ {
		e.count.Take()
		page := must[lease.TaskPage](t)(e.store.ListTasks(c, p))
		if n := e.count.Count("Query"); n > perPage {
			t.Fatalf("page %d made %d Queries, want at most %d whatever the number of queues", pages, n, perPage)
		}
		for _, task := range page.Tasks {
			listed = append(listed, task.TaskID)
		}
		if page.NextCursor == "" || pages > empty {
			break
		}
		p = lease.ListTasksParams{Cursor: page.NextCursor}
	}
	if fmt.Sprint(listed) != "[last]" {
		t.Errorf("the walk of %d pages listed %v, want [last]", pages+1, listed)
	}
}

// A page of every queue's todo tasks comes full in an ordinary fleet: a
// test suite that made a queue for each of 40 tests, their tasks since
// done, finds the next test's task on the first page.
func TestATodoPageComesFullAfterManyEmptyQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const done = 40
	for b := 0; b < done; b += lease.MaxBatch {
		var batch []lease.CreateTaskParams
		for i := b; i < min(done, b+lease.MaxBatch); i++ {
			batch = append(batch, lease.CreateTaskParams{TaskID: fmt.Sprintf("test-%02d", i), Queue: fmt.Sprintf("test-%02d", i)})
		}
		must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	}
	for i := range done {
		id := fmt.Sprintf("test-%02d", i)
		e.checkout(t, id, "a", time.Hour)
		must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: id, AgentID: "a"}))
	}
	e.create(t, lease.CreateTaskParams{TaskID: "next", Queue: "test-99"})
	e.caughtUp(t)

	page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo}))
	var listed []string
	for _, task := range page.Tasks {
		listed = append(listed, task.TaskID)
	}
	if fmt.Sprint(listed) != "[next]" || page.NextCursor != "" {
		t.Errorf("the first page listed %v (next cursor %q), want [next] and no cursor", listed, page.NextCursor)
	}
}
