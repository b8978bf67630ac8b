package lease_test

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// Each status is listed from its own index, its tasks spread over many
// partitions, and merged back into order page by page, with or without a
// queue filter (which can leave a page short), each task once:
//
//   - todo from the claim index, queue by queue in name order, each in
//     claim order: highest priority, then oldest, then those waiting for
//     their not_before, earliest first;
//   - in_progress from the lease index, soonest expiry first;
//   - done (and the other statuses) from the status index, oldest first.
func TestListTasksOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	type task struct {
		id, queue string
		prio      int
		created   int64
		delay     time.Duration
	}
	var tasks []task
	queues := []string{"default", "q", "a-first", "b", "c", "zz", "m"} // more than a walk reads at once
	for i := range 60 {
		tk := task{id: fmt.Sprintf("job-%02d", i), queue: queues[i%len(queues)], prio: (i / 3) % 4 * 3, created: e.clock.Now().UnixMilli()}
		p := lease.CreateTaskParams{TaskID: tk.id, Queue: tk.queue, Priority: &tk.prio}
		if i%7 == 0 {
			// Waiting: ranked after the ready ones, earliest first.
			tk.delay = time.Duration(60-i) * time.Minute
			nb := e.clock.Now().Add(tk.delay)
			p.NotBefore = &nb
		}
		must[lease.Task](t)(e.store.CreateTask(c, p))
		tasks = append(tasks, tk)
		e.clock.Advance(time.Millisecond)
	}
	// Six in progress, their expiries in another order than their ids',
	// and three done.
	var held, done []string
	for i, id := range []string{"job-01", "job-02", "job-04", "job-05", "job-08", "job-10"} {
		e.checkout(t, id, "agent", time.Duration(20-3*i)*time.Minute)
		held = append([]string{id}, held...)
	}
	for _, id := range []string{"job-11", "job-13", "job-16"} {
		e.checkout(t, id, "agent", time.Hour)
		must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: id, AgentID: "agent"}))
		done = append(done, id)
	}
	e.caughtUp(t) // the listings read the indexes
	var todo []task
	for _, tk := range tasks {
		if !slices.Contains(held, tk.id) && !slices.Contains(done, tk.id) {
			todo = append(todo, tk)
		}
	}
	slices.SortFunc(todo, func(a, b task) int {
		return cmp.Or(cmp.Compare(a.queue, b.queue), cmp.Compare(a.delay, b.delay), cmp.Compare(b.prio, a.prio), cmp.Compare(a.created, b.created))
	})
	ids := func(ts []task, queue string) (out []string) {
		for _, tk := range ts {
			if queue == "" || tk.queue == queue {
				out = append(out, tk.id)
			}
		}
		return out
	}
	inQueue := func(all []string, queue string) (out []string) {
		for _, id := range all {
			if i := slices.IndexFunc(tasks, func(tk task) bool { return tk.id == id }); tasks[i].queue == queue {
				out = append(out, id)
			}
		}
		return out
	}
	list := func(t *testing.T, p lease.ListTasksParams) (ids []string) {
		t.Helper()
		for pages := 0; ; pages++ {
			if pages > 200 {
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
		for _, queue := range []string{"", "q", "default"} {
			for _, tc := range []struct {
				status lease.Status
				want   []string
			}{
				{lease.StatusTodo, ids(todo, queue)},
				{lease.StatusInProgress, inQueueOrAll(held, queue, inQueue)},
				{lease.StatusDone, inQueueOrAll(done, queue, inQueue)},
			} {
				t.Run(fmt.Sprintf("%s in queue %q, %d a page", tc.status, queue, limit), func(t *testing.T) {
					if got := list(t, lease.ListTasksParams{Status: tc.status, Queue: queue, Limit: limit}); !slices.Equal(got, tc.want) {
						t.Errorf("listed\n %v\nwant\n %v", got, tc.want)
					}
				})
			}
		}
		t.Run(fmt.Sprintf("every status, %d a page", limit), func(t *testing.T) {
			want := slices.Concat(ids(todo, ""), held, done)
			if got := list(t, lease.ListTasksParams{Limit: limit}); !slices.Equal(got, want) {
				t.Errorf("listed\n %v\nwant\n %v", got, want)
			}
		})
	}
}

func listedIDs(p lease.TaskPage) []string {
	ids := []string{}
	for _, tk := range p.Tasks {
		ids = append(ids, tk.TaskID)
	}
	return ids
}

func inQueueOrAll(all []string, queue string, inQueue func([]string, string) []string) []string {
	if queue == "" {
		return all
	}
	return inQueue(all, queue)
}

// A todo task in a queue never seen before is listed by a listing of
// every queue from another process as soon as its create answers and
// that process's copy of the queue registry is lease.ListedQueuesFor old:
// the queue is in the registry before the task is written.
func TestListTodoFindsANewQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	for i := range 3 {
		id := fmt.Sprintf("t%d", i)
		must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: id, Queue: fmt.Sprintf("fresh-%d", i)}))
		e.caughtUp(t) // the queue's tasks are read through an index; its name is not
		e.clock.Advance(lease.ListedQueuesFor)
		page := must[lease.TaskPage](t)(other.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo}))
		if got := listedIDs(page); len(got) != i+1 || got[i] != id {
			t.Fatalf("after creating %s in a new queue, another store listed %v", id, got)
		}
	}
	// A PATCH that moves a task to a new queue, likewise.
	q := "moved-here"
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t0", Queue: &q}))
	e.caughtUp(t)
	e.clock.Advance(lease.ListedQueuesFor)
	page := must[lease.TaskPage](t)(other.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo}))
	if got := listedIDs(page); !slices.Equal(got, []string{"t1", "t2", "t0"}) {
		t.Errorf("after moving t0 to a new queue, another store listed %v, want [t1 t2 t0] (queues in name order)", got)
	}
}

// A page of todo tasks of every queue that ends exactly at a queue's last
// task goes on, on the next page, after that task: a task created in the
// meantime in that queue, behind its last, or in a new queue between it and
// the next, is on the next page. The cursor named the next queue instead,
// and the walk missed both.
func TestListTodoPageEndingWithAQueueMissesNothingCreatedAhead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	for _, q := range []string{"x1", "x3", "x5"} {
		e.queued(t, q, q, 5)
	}
	e.caughtUp(t) // the listing reads the claim index
	first := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo, Limit: 2}))
	if got := listedIDs(first); !slices.Equal(got, []string{"x1", "x3"}) || first.NextCursor == "" {
		t.Fatalf("first page %v, cursor %q; want [x1 x3] and more", got, first.NextCursor)
	}
	e.queued(t, "x3-later", "x3", 0) // after x3's last task in claim order
	e.queued(t, "x4", "x4", 5)       // a new queue between x3 and x5
	e.caughtUp(t)
	var rest []string
	for p := (lease.ListTasksParams{Cursor: first.NextCursor, Limit: 2}); ; {
		page := must[lease.TaskPage](t)(e.store.ListTasks(c, p))
		rest = append(rest, listedIDs(page)...)
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	if !slices.Equal(rest, []string{"x3-later", "x4", "x5"}) {
		t.Errorf("the walk went on with %v, want [x3-later x4 x5]", rest)
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
	e.caughtUp(t) // the listings read the claim index
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
	// A cursor issued before todo tasks were listed from the claim index
	// (its positions are in the status index's creation order, with or
	// without its listing named) lists them again from the start.
	for _, old := range []string{
		`{"s":0,"a":["0000000000001#job-00",""]}`,
		`{"l":1,"ls":"todo","lq":"q","s":0,"a":["0000000000001#job-00",""]}`,
	} {
		cur := base64.RawURLEncoding.EncodeToString([]byte(old))
		page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo, Queue: "q", Limit: 100, Cursor: cur}))
		if got := listedIDs(page); !slices.Equal(got, inQ) {
			t.Errorf("an earlier cursor %s listed\n %v\nwant\n %v", old, got, inQ)
		}
	}
	all := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Limit: 2}))
	_, err := e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo, Cursor: all.NextCursor})
	expectRule(t, err, ruleFailure{"cursor", "invalid_request", "cursor continues the listing of every task: give no status or queue with it"})
}

// A listing of one status in one queue reads its status's index with the
// queue as a filter. Where the queue holds few of the status's tasks, a
// read finds none of them in most shards: such a shard goes on from where
// its read stopped, and a short page reads on, so that a page is not
// empty while the queue's tasks are still ahead. (Each page of such a walk
// used to move one shard of sixteen on: 200 cancelled tasks of another
// queue made a walk of 5 at a time answer dozens of empty pages before
// the queue's own.)
func TestListOfARareQueueFindsItsTasksWithoutEmptyPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	cancel := func(id, queue string) {
		must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: id, Queue: queue}))
		st := lease.StatusCancelled
		must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: id, AgentID: "admin", Admin: true, Status: &st}))
		e.clock.Advance(time.Millisecond)
	}
	for i := range 200 {
		cancel(fmt.Sprintf("other-%03d", i), "other")
	}
	var want []string
	for i := range 3 {
		id := fmt.Sprintf("rare-%d", i)
		cancel(id, "rare")
		want = append(want, id)
	}
	cancel("other-last", "other")
	e.caughtUp(t) // the walk reads the status index

	var got []string
	pages, empty := 0, 0
	for p := (lease.ListTasksParams{Status: lease.StatusCancelled, Queue: "rare", Limit: 5}); ; {
		page := must[lease.TaskPage](t)(e.store.ListTasks(c, p))
		pages++
		if len(page.Tasks) == 0 && page.NextCursor != "" {
			empty++
		}
		got = append(got, listedIDs(page)...)
		if page.NextCursor == "" || pages > 100 {
			break
		}
		p = lease.ListTasksParams{Cursor: page.NextCursor, Limit: 5}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the walk listed %v, want %v", got, want)
	}
	if empty > 0 || pages > 2 {
		t.Errorf("the walk took %d pages, %d of them empty with a cursor; want at most 2 and none empty", pages, empty)
	}
}

// A page that holds the listing's last task has no next_cursor (API.md:
// null when nothing follows), also when the page is full: a listing of
// in_progress tasks, of one queue or all, and a listing of every status,
// whose last status to hold tasks ends with the page. Each used to answer
// a cursor whose page was empty.
func TestAFullPageEndingTheListingHasNoCursor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	for i := range 3 {
		e.queued(t, fmt.Sprintf("held-%d", i), "held", 0)
		e.checkout(t, fmt.Sprintf("held-%d", i), "a", time.Minute)
		e.queued(t, fmt.Sprintf("open-%d", i), "open", 0)
	}
	e.caughtUp(t)
	for _, tc := range []struct {
		name string
		p    lease.ListTasksParams
		want int
	}{
		{"in_progress", lease.ListTasksParams{Status: lease.StatusInProgress, Limit: 3}, 3},
		{"in_progress of one queue", lease.ListTasksParams{Status: lease.StatusInProgress, Queue: "held", Limit: 3}, 3},
		{"every status of a queue of todo tasks", lease.ListTasksParams{Queue: "open", Limit: 3}, 3},
		{"every status of a queue of held tasks", lease.ListTasksParams{Queue: "held", Limit: 3}, 3},
		{"every status", lease.ListTasksParams{Limit: 6}, 6},
	} {
		page := must[lease.TaskPage](t)(e.store.ListTasks(c, tc.p))
		if len(page.Tasks) != tc.want || page.NextCursor != "" {
			t.Errorf("%s, limit %d: %d tasks, next_cursor %q; want %d and none", tc.name, tc.p.Limit, len(page.Tasks), page.NextCursor, tc.want)
		}
	}
	// One more task after them: the full page has a cursor, and its page
	// holds that task.
	e.queued(t, "open-3", "open", 0)
	e.caughtUp(t)
	page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Queue: "open", Limit: 3}))
	if page.NextCursor == "" {
		t.Fatalf("four todo tasks, limit 3: no cursor")
	}
	rest := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Cursor: page.NextCursor, Limit: 3}))
	if got := listedIDs(rest); !slices.Equal(got, []string{"open-3"}) || rest.NextCursor != "" {
		t.Errorf("the next page: %v, cursor %q; want [open-3] and none", got, rest.NextCursor)
	}
}

// A page of every status full at the end of its todo tasks peeks at the
// later statuses (anyListed): through 200 delayed tasks' entries in the
// lease index (no holder, filtered out after a Query's Limit) it reads
// each lease shard once, not once for each entry (a review measured 221
// Queries where a page ending mid-todo made 4).
func TestAPeekPastAFullPageReadsEachLeaseShardOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	nb := e.clock.Now().Add(time.Hour)
	const delayed = 200
	for i := range delayed {
		must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: fmt.Sprintf("d-%02d", i), Title: "d", NotBefore: &nb}))
	}
	e.task(t, "held")
	e.checkout(t, "held", "a", time.Hour*2)
	e.caughtUp(t)
	queries := map[int]int{}
	for _, limit := range []int{delayed - 1, delayed} {
		e.count.Take()
		page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Limit: limit}))
		ops := e.count.Take()
		if len(page.Tasks) != limit || page.NextCursor == "" {
			t.Fatalf("every status, limit %d: %d tasks, cursor %q; want %d and a cursor (a lease follows)", limit, len(page.Tasks), page.NextCursor, limit)
		}
		queries[limit] = ops["Query"]
	}
	if got, bound := queries[delayed], queries[delayed-1]+schema.Shards; got > bound {
		t.Errorf("the page ending with todo's last task made %d Queries, want at most %d (a page ending within todo: %d, and one Query of each lease shard)", got, bound, queries[delayed-1])
	}
}
