package lease_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// holdTasks creates n tasks "<prefix>-<i>" in queue and checks each out by
// agent a for timeout, a few at once.
func holdTasks(t *testing.T, e *env, prefix, queue string, n int, timeout time.Duration) {
	t.Helper()
	c := ctx(t)
	id := func(i int) string { return fmt.Sprintf("%s-%04d", prefix, i) }
	for b := 0; b < n; b += lease.MaxBatch {
		var batch []lease.CreateTaskParams
		for i := b; i < min(n, b+lease.MaxBatch); i++ {
			batch = append(batch, lease.CreateTaskParams{TaskID: id(i), Queue: queue})
		}
		must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 4 {
				if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: id(i), AgentID: "a", AgentName: "name-a", Timeout: timeout}); err != nil {
					t.Errorf("checkout %s: %v", id(i), err)
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// A listing of one queue's in_progress tasks reads the lease index, which
// holds every queue's leases, and tells the queue from the task items: a
// page read on until it was full, so a queue with few leases in a fleet
// of 100,000 had a page read every lease there is (a Query per shard and
// a BatchGetItem per page's worth of them), past the tasks function's 10 s
// in AWS. A page makes a bounded number of reads, each of a bounded
// number of leases (4 of 250 at most limits), and the walk goes on with
// its cursor.
func TestAnInProgressPageOfOneQueueIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const busy, limit, perPage = 1100, 5, 4 * 250
	holdTasks(t, e, "busy", "busy", busy, time.Hour)
	e.create(t, lease.CreateTaskParams{TaskID: "idle-0", Queue: "idle"})
	e.checkout(t, "idle-0", "a", 2*time.Hour) // the last to expire
	e.caughtUp(t)
	db := &taskReadsDB{DB: e.db, table: e.names.Table(schema.TasksTable)}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})

	var listed []string
	pages := 0
	for p := (lease.ListTasksParams{Status: lease.StatusInProgress, Queue: "idle", Limit: limit}); ; pages++ {
		page := must[lease.TaskPage](t)(s.ListTasks(c, p))
		if read := db.take(); read > perPage {
			t.Fatalf("page %d read %d task items, want at most %d (4 reads of 250)", pages, read, perPage)
		}
		for _, task := range page.Tasks {
			listed = append(listed, task.TaskID)
		}
		if page.NextCursor == "" || pages > busy {
			break
		}
		p = lease.ListTasksParams{Cursor: page.NextCursor, Limit: limit}
	}
	if fmt.Sprint(listed) != "[idle-0]" {
		t.Errorf("the walk of %d pages listed %v, want [idle-0]", pages+1, listed)
	}
}

// A page of one queue's in_progress tasks comes full in an ordinary
// fleet: with another queue's leases expiring sooner (10 before the
// queue's first, 20 before its second), ?limit=1 shows the queue's first
// lease on the first page, and the next page its second (the cursor is
// at the task listed, not at the last lease read).
func TestAnInProgressPageOfOneQueueComesFull(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	holdTasks(t, e, "other", "other", 10, time.Minute)
	e.create(t, lease.CreateTaskParams{TaskID: "mine-0", Queue: "mine"})
	e.checkout(t, "mine-0", "a", 2*time.Minute)
	holdTasks(t, e, "later", "other", 10, 3*time.Minute)
	e.create(t, lease.CreateTaskParams{TaskID: "mine-1", Queue: "mine"})
	e.checkout(t, "mine-1", "a", time.Hour)
	e.caughtUp(t)

	var pages [][]string
	for p := (lease.ListTasksParams{Status: lease.StatusInProgress, Queue: "mine", Limit: 1}); len(pages) < 5; {
		page := must[lease.TaskPage](t)(e.store.ListTasks(c, p))
		var ids []string
		for _, task := range page.Tasks {
			ids = append(ids, task.TaskID)
		}
		pages = append(pages, ids)
		if page.NextCursor == "" {
			break
		}
		p = lease.ListTasksParams{Cursor: page.NextCursor, Limit: 1}
	}
	if len(pages) < 2 || fmt.Sprint(pages[:2]) != "[[mine-0] [mine-1]]" {
		t.Errorf("pages of 1 listed %v, want [mine-0] then [mine-1]", pages)
	}
}
