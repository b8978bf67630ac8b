package lease_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/lease"
)

// A listing page stays within what one answer can carry (a Lambda's
// answer is at most 6 MB) whatever its tasks hold: 120 tasks with the
// largest descriptions, listed 1,000 at a time, come in several pages,
// each under 5 MB even were every byte escaped, and the walk lists each
// task once.
func TestListingPagesAreBoundedInBytes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	desc := strings.Repeat("<", lease.MaxDescriptionLen) // 6 bytes a byte in JSON
	const n = 120
	for b := 0; b < n; b += lease.MaxBatch {
		var batch []lease.CreateTaskParams
		for i := b; i < min(b+lease.MaxBatch, n); i++ {
			batch = append(batch, lease.CreateTaskParams{TaskID: fmt.Sprintf("big-%03d", i), Queue: "big", Description: desc})
		}
		must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	}
	e.caughtUp(t) // the listing reads the claim index
	seen := map[string]bool{}
	pages := 0
	for cursor := ""; ; pages++ {
		page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo, Queue: "big", Limit: 1000, Cursor: cursor}))
		raw, err := json.Marshal(page.Tasks)
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) > 5<<20 {
			t.Fatalf("page %d: %d tasks, %d bytes of JSON", pages, len(page.Tasks), len(raw))
		}
		for _, task := range page.Tasks {
			if seen[task.TaskID] {
				t.Fatalf("%s listed twice", task.TaskID)
			}
			seen[task.TaskID] = true
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if len(seen) != n || pages < 1 {
		t.Fatalf("the walk listed %d of %d tasks in %d pages", len(seen), n, pages+1)
	}
	t.Logf("%d tasks in %d pages", n, pages+1)
}
