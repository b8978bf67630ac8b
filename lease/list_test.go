package lease_test

import (
	"encoding/base64"
	"encoding/json"
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

// A cursor continues the listing it came from: given alone, it keeps that
// listing's status and queue (the CLI's "More:" line and MCP's list_tasks
// pass the cursor alone, and used to continue an unfiltered listing from
// a filtered one's place); given with another status or queue, it is
// refused.
func TestListCursorKeepsItsListing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	var inQ []string
	for i := range 64 {
		id := fmt.Sprintf("job-%02d", i)
		q := "other"
		if i%2 == 0 {
			q = "q"
			inQ = append(inQ, id)
		}
		must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: id, Queue: q}))
		e.clock.Advance(time.Millisecond)
	}
	first := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo, Queue: "q", Limit: 2}))
	if first.NextCursor == "" {
		t.Fatal("no cursor after the first page")
	}
	ids := []string{}
	for _, tk := range first.Tasks {
		ids = append(ids, tk.TaskID)
	}
	for p := (lease.ListTasksParams{Cursor: first.NextCursor, Limit: 100}); p.Cursor != ""; {
		page := must[lease.TaskPage](t)(e.store.ListTasks(c, p))
		for _, tk := range page.Tasks {
			ids = append(ids, tk.TaskID)
		}
		p.Cursor = page.NextCursor
	}
	if !slices.Equal(ids, inQ) {
		t.Errorf("a filtered listing continued by its cursor alone listed\n %v\nwant\n %v", ids, inQ)
	}
	// The same listing named again is fine; another is refused.
	must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo, Queue: "q", Cursor: first.NextCursor}))
	for _, p := range []lease.ListTasksParams{
		{Status: lease.StatusDone, Cursor: first.NextCursor},
		{Queue: "other", Cursor: first.NextCursor},
	} {
		_, err := e.store.ListTasks(c, p)
		expectRule(t, err, ruleFailure{"cursor", "invalid_request", "cursor continues the listing of todo tasks in queue q: give that status and queue, or neither"})
	}
	// A cursor issued before cursors named their listing goes on with the
	// listing the request names, as it did.
	raw := must[[]byte](t)(base64.RawURLEncoding.DecodeString(first.NextCursor))
	var fields map[string]any
	if err := json.Unmarshal(raw, &fields); err != nil {
		t.Fatal(err)
	}
	delete(fields, "l")
	delete(fields, "ls")
	delete(fields, "lq")
	raw = must[[]byte](t)(json.Marshal(fields))
	old := base64.RawURLEncoding.EncodeToString(raw)
	fromOld := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo, Queue: "q", Limit: 100, Cursor: old}))
	fromNew := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Cursor: first.NextCursor, Limit: 100}))
	if len(fromOld.Tasks) == 0 || len(fromOld.Tasks) != len(fromNew.Tasks) || fromOld.Tasks[0].TaskID != fromNew.Tasks[0].TaskID {
		t.Errorf("an earlier cursor with its listing's filters listed %d tasks, the cursor of today %d", len(fromOld.Tasks), len(fromNew.Tasks))
	}
	all := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Limit: 2}))
	_, err := e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo, Cursor: all.NextCursor})
	expectRule(t, err, ruleFailure{"cursor", "invalid_request", "cursor continues the listing of every task: give no status or queue with it"})
}
