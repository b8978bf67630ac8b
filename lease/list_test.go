package lease_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A status's tasks are spread over many index partitions; a listing merges
// them back into creation order, page by page, with or without a queue
// filter (which can leave a page short), and lists each task once.
func TestListTasksMergesShardsInCreationOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	var all, inQ []string
	for i := range 45 {
		id := fmt.Sprintf("job-%02d", i)
		q := "default"
		if i%3 == 0 {
			q = "q"
			inQ = append(inQ, id)
		}
		must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: id, Queue: q}))
		all = append(all, id)
		e.clock.Advance(time.Millisecond)
	}
	list := func(t *testing.T, p lease.ListTasksParams) (ids []string) {
		t.Helper()
		for pages := 0; ; pages++ {
			if pages > 100 {
				t.Fatal("pagination does not end")
			}
			page := must[lease.TaskPage](t)(e.store.ListTasks(c, p))
			if len(page.Tasks) > p.Limit {
				t.Fatalf("a page of %d tasks, limit %d", len(page.Tasks), p.Limit)
			}
			for _, tk := range page.Tasks {
				ids = append(ids, tk.TaskID)
			}
			if page.NextCursor == "" {
				return ids
			}
			p.Cursor = page.NextCursor
		}
	}
	for _, limit := range []int{1, 4, 7, 100} {
		t.Run(fmt.Sprintf("every todo task, %d a page", limit), func(t *testing.T) {
			if got := list(t, lease.ListTasksParams{Status: lease.StatusTodo, Limit: limit}); !slices.Equal(got, all) {
				t.Errorf("listed\n %v\nwant\n %v", got, all)
			}
		})
		t.Run(fmt.Sprintf("one queue's, %d a page", limit), func(t *testing.T) {
			if got := list(t, lease.ListTasksParams{Status: lease.StatusTodo, Queue: "q", Limit: limit}); !slices.Equal(got, inQ) {
				t.Errorf("listed\n %v\nwant\n %v", got, inQ)
			}
		})
	}
}
