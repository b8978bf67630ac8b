package lease_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
)

// blockerReadsDB counts the keys of tasks named "b-..." read by
// BatchGetItem: the blockers a listing page reads the statuses of.
type blockerReadsDB struct {
	lease.DB

	mu    sync.Mutex
	reads int
}

func (d *blockerReadsDB) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	for _, ka := range in.RequestItems {
		for _, k := range ka.Keys {
			if id, ok := k["task_id"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(id.Value, "b-") {
				d.mu.Lock()
				d.reads++
				d.mu.Unlock()
			}
		}
	}
	return d.DB.BatchGetItem(ctx, in, opts...)
}

func (d *blockerReadsDB) take() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.reads
	d.reads = 0
	return n
}

// A listing page read the status of every blocker its tasks name, 100 a
// BatchGetItem: a page of 1,000 tasks, each blocked by 20 tasks of its
// own, read 20,000 tasks (200 requests) before its answer. A page reads
// at most PageBlockerReads blockers and ends early, with its cursor,
// when its tasks name more; the walk still lists every task once, each
// with its blockers' statuses.
func TestAListingPageReadsTheStatusesOfABoundedNumberOfBlockers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	n := lease.PageBlockerReads/lease.MaxBlockers + 10 // tasks blocked by more blockers than a page reads
	blockers := func(i int) []string {
		out := make([]string, lease.MaxBlockers)
		for j := range out {
			out[j] = fmt.Sprintf("b-%03d-%02d", i, j)
		}
		return out
	}
	var all []lease.CreateTaskParams
	for i := range n {
		for _, id := range blockers(i) {
			all = append(all, lease.CreateTaskParams{TaskID: id, Queue: "b"})
		}
	}
	for b := 0; b < len(all); b += lease.MaxBatch {
		must[[]lease.BatchResult](t)(e.store.CreateTasks(c, all[b:min(b+lease.MaxBatch, len(all))]))
	}
	var ids []string
	for b := 0; b < n; b += lease.MaxBatch {
		var batch []lease.CreateTaskParams
		for i := b; i < min(b+lease.MaxBatch, n); i++ {
			ids = append(ids, fmt.Sprintf("t-%03d", i))
			batch = append(batch, lease.CreateTaskParams{TaskID: ids[i], Queue: "g", BlockedBy: blockers(i)})
		}
		must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	}
	e.caughtUp(t) // the listing reads the status index
	db := &blockerReadsDB{DB: e.db}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})

	seen := 0
	for cursor, pages := "", 0; ; pages++ {
		page := must[lease.TaskPage](t)(s.ListTasks(c, lease.ListTasksParams{Status: lease.StatusBlocked, Queue: "g", Limit: 1000, Cursor: cursor}))
		if reads := db.take(); reads > lease.PageBlockerReads {
			t.Fatalf("page %d of %d tasks read the statuses of %d blockers", pages, len(page.Tasks), reads)
		}
		for _, task := range page.Tasks {
			if seen == n || task.TaskID != ids[seen] || len(task.BlockedBy) != lease.MaxBlockers {
				t.Fatalf("page %d shows %s blocked by %d tasks, want %s", pages, task.TaskID, len(task.BlockedBy), ids[min(seen, n-1)])
			}
			for _, b := range task.BlockedBy {
				if b.Status != lease.StatusTodo {
					t.Fatalf("%s shows blocker %s %q, want todo", task.TaskID, b.TaskID, b.Status)
				}
			}
			seen++
		}
		if page.NextCursor == "" || pages > n {
			break
		}
		cursor = page.NextCursor
	}
	if seen != n {
		t.Fatalf("the walk listed %d of %d tasks", seen, n)
	}
}
