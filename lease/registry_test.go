package lease_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// process is another store over e's tables, as another process (or Lambda
// container) runs one: nothing it has learned is shared with e's.
func (e *env) process() *lease.Store {
	return lease.New(lease.Config{DB: lease.NewLocalClient(testenv.Endpoint()), Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
}

// registryPages reads the queue registry's pages as stored: the names of
// each, and the page count page 0 holds.
func (e *env) registryPages(t *testing.T) (pages [][]string, count int) {
	t.Helper()
	table := e.names.Table(schema.HeartbeatsTable)
	for p := 0; ; p++ {
		id := "#queues"
		if p > 0 {
			id += fmt.Sprintf("#%d", p)
		}
		out, err := e.db.GetItem(ctx(t), &dynamodb.GetItemInput{TableName: &table, ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"agent_id": &types.AttributeValueMemberS{Value: id}}})
		if err != nil {
			t.Fatalf("read %s: %v", id, err)
		}
		if p == 0 {
			count = 1
			if n, ok := out.Item["pages"].(*types.AttributeValueMemberN); ok {
				fmt.Sscan(n.Value, &count)
			}
		}
		if len(out.Item) == 0 && p >= count {
			return pages, count
		}
		var names []string
		if ss, ok := out.Item["queues"].(*types.AttributeValueMemberSS); ok {
			names = ss.Value
		}
		pages = append(pages, names)
	}
}

// The registry of queues grows past what one item could hold: thousands
// of queues with long names each get their tasks created, and every one
// is listed. One registry item stopped at DynamoDB's 400 KB, about 3,250
// such names, and every create in a new queue failed from then on.
func TestThousandsOfQueues(t *testing.T) {
	e := newEnv(t)
	const n = 3400
	queue := func(i int) string { return fmt.Sprintf("%s-%05d", strings.Repeat("q", 122), i) }
	for start := 0; start < n; start += lease.MaxBatch {
		var ps []lease.CreateTaskParams
		for i := start; i < min(start+lease.MaxBatch, n); i++ {
			ps = append(ps, lease.CreateTaskParams{TaskID: fmt.Sprintf("t-%05d", i), Title: "t", Queue: queue(i)})
		}
		res, err := e.store.CreateTasks(ctx(t), ps)
		if err != nil {
			t.Fatalf("create the tasks of queues %d to %d: %v", start, start+len(ps)-1, err)
		}
		for _, r := range res {
			if r.Outcome != lease.BatchCreated {
				t.Fatalf("create %s: %v", r.TaskID, r.Outcome)
			}
		}
	}
	// Another process, which has enlisted nothing, creates in one more.
	other := e.process()
	if _, err := other.CreateTask(ctx(t), lease.CreateTaskParams{TaskID: "last", Title: "t", Queue: queue(n)}); err != nil {
		t.Fatalf("create in queue %d from another process: %v", n, err)
	}
	pages, count := e.registryPages(t)
	var all []string
	for p, names := range pages {
		if len(names) > lease.RegistryPage {
			t.Errorf("registry page %d holds %d names, more than %d", p, len(names), lease.RegistryPage)
		}
		all = append(all, names...)
	}
	slices.Sort(all)
	all = slices.Compact(all)
	if count < 4 || len(pages) != count {
		t.Errorf("registry: %d pages read, page 0 says %d; want at least 4 for %d names", len(pages), count, n+1)
	}
	for i := 0; i <= n; i++ {
		if _, ok := slices.BinarySearch(all, queue(i)); !ok {
			t.Fatalf("queue %d is missing from the registry (%d names)", i, len(all))
		}
	}
	// The queue listing reads every page: the first queues in name order
	// (their counts not yet counted by the change stream, which this test
	// does not run: so no reads of oldest todo tasks cut the page).
	qs, err := e.store.ListQueues(ctx(t))
	if err != nil {
		t.Fatalf("list queues: %v", err)
	}
	if len(qs) != lease.MaxQueuesListed || qs[0].Queue != all[0] {
		t.Errorf("list queues: %d queues from %q, want %d from %q", len(qs), qs[0].Queue, lease.MaxQueuesListed, all[0])
	}
}

// A page of the queue listing ends before the queue whose oldest todo task
// would take its claim-index reads past the bound (the first queue of a
// page is listed whatever it takes); a walk of the pages still lists every
// queue once, with its counts, and no page reads more than the bound.
func TestQueueListingPagesEndWithinTheirReads(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	shards := schema.DefaultShards().Claim
	lease.LimitQueueListingReads(e.store, 3*shards)
	// The reads each queue takes: a claim shard per priority with todo tasks.
	queues := []struct {
		name       string
		priorities []int // of its todo tasks
		held       bool  // its one task checked out: no todo task
	}{
		{name: "rd-a", priorities: []int{1}},
		{name: "rd-b", priorities: []int{2, 3}},
		{name: "rd-c", priorities: []int{0}, held: true},
		{name: "rd-d", priorities: []int{4}},
		{name: "rd-e", priorities: []int{5, 6, 7}},
		{name: "rd-f", priorities: []int{0, 1, 2, 3}},
		{name: "rd-g", priorities: []int{9, 9}},
	}
	for _, q := range queues {
		for i, p := range q.priorities {
			e.queued(t, fmt.Sprintf("%s-%d", q.name, i), q.name, p)
		}
		if q.held {
			e.checkout(t, q.name+"-0", "agent-1", time.Hour)
		}
	}
	e.drain(t)
	e.count.Take()
	var pages [][]string
	for p := (lease.ListQueuesParams{}); ; {
		page, err := e.store.ListQueuePage(ctx(t), p)
		if err != nil {
			t.Fatalf("page %d: %v", len(pages), err)
		}
		var names []string
		for _, q := range page.Queues {
			names = append(names, q.Queue)
		}
		pages = append(pages, names)
		if n := e.count.Take()["Query"]; n > 3*shards && len(names) > 1 {
			t.Errorf("page %d (%v) made %d Queries, more than the bound of %d", len(pages)-1, names, n, 3*shards)
		}
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	// In shards' worth of reads, bound 3: rd-a 1, rd-b 2 and rd-c 0; rd-d 1
	// (rd-e's 3 would pass the bound); rd-e 3; rd-f 4, over the bound, alone;
	// rd-g 1 (two tasks of one priority).
	got := fmt.Sprint(pages)
	if wantPages := "[[rd-a rd-b rd-c] [rd-d] [rd-e] [rd-f] [rd-g]]"; got != wantPages {
		t.Errorf("pages %s, want %s", got, wantPages)
	}
	qs := must[[]lease.QueueStats](t)(e.store.ListQueues(ctx(t)))
	if len(qs) != 3 || qs[2].Queue != "rd-c" || qs[2].Counts[lease.StatusInProgress] != 1 || qs[1].Counts[lease.StatusTodo] != 2 || qs[0].OldestTodoAt.IsZero() {
		t.Errorf("first page %+v, want rd-a, rd-b (2 todo) and rd-c (1 in progress), rd-a with its oldest todo task", qs)
	}
}

// spreadQueues creates n queues of one todo task each (priority 0), named
// prefix-0000 on.
func (e *env) spreadQueues(t *testing.T, prefix string, n int) {
	t.Helper()
	for start := 0; start < n; start += lease.MaxBatch {
		var ps []lease.CreateTaskParams
		for i := start; i < min(start+lease.MaxBatch, n); i++ {
			ps = append(ps, lease.CreateTaskParams{TaskID: fmt.Sprintf("%s-t-%04d", prefix, i), Title: "t", Queue: fmt.Sprintf("%s-%04d", prefix, i)})
		}
		if _, err := e.store.CreateTasks(ctx(t), ps); err != nil {
			t.Fatalf("create the tasks of queues %d on: %v", start, err)
		}
	}
	e.drain(t)
}

// A page cut short by its reads reads the counters of no more queues than
// it needs: a BatchGetItem per 100 queues, until the page is full, not the
// counters of every queue up to the limit (which the next page reads again).
func TestAQueuePageReadsOnlyTheCountersItNeeds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.spreadQueues(t, "cn", 250)
	// By default one page: 250 queues of one todo task each take the
	// page's 1,000 Queries with 4 claim shards.
	e.count.Take()
	whole := must[lease.QueuePage](t)(e.store.ListQueuePage(ctx(t), lease.ListQueuesParams{}))
	if ops := e.count.Take(); len(whole.Queues) != 250 || whole.NextCursor != "" || ops["Query"] > lease.MaxQueueListingReads {
		t.Errorf("the default page: %d queues, next cursor %q, %d Queries; want 250, none, at most %d", len(whole.Queues), whole.NextCursor, ops["Query"], lease.MaxQueueListingReads)
	}
	lease.LimitQueueListingReads(e.store, 2*schema.DefaultShards().Claim) // pages of 2 queues
	e.count.Take()
	page := must[lease.QueuePage](t)(e.store.ListQueuePage(ctx(t), lease.ListQueuesParams{}))
	ops := e.count.Take()
	if len(page.Queues) != 2 || page.NextCursor == "" {
		t.Fatalf("a page of %d queues (next cursor %q), want 2 and a cursor", len(page.Queues), page.NextCursor)
	}
	if ops["BatchGetItem"] != 1 {
		t.Errorf("a page of 2 queues made %d BatchGetItems of counters, want 1", ops["BatchGetItem"])
	}
}

// Walks of the listing whose pages are cut at, across and within the
// counters' batches of 100 list every queue once.
func TestQueueWalksAcrossCounterBatches(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.spreadQueues(t, "cb", 250)
	shards := schema.DefaultShards().Claim
	for _, per := range []int{1, 99, 100, 101, 150, 250} {
		lease.LimitQueueListingReads(e.store, per*shards)
		var sizes []int
		seen := map[string]bool{}
		for p := (lease.ListQueuesParams{}); ; {
			page := must[lease.QueuePage](t)(e.store.ListQueuePage(ctx(t), p))
			sizes = append(sizes, len(page.Queues))
			for _, q := range page.Queues {
				if seen[q.Queue] {
					t.Fatalf("pages of %d queues: %s listed twice", per, q.Queue)
				}
				seen[q.Queue] = true
			}
			if page.NextCursor == "" {
				break
			}
			p.Cursor = page.NextCursor
		}
		if len(seen) != 250 || sizes[0] != min(per, 250) || len(sizes) != (250+per-1)/per {
			t.Errorf("pages of %d queues: %d listed in pages %v", per, len(seen), sizes)
		}
	}
}

// Writers in many processes at once, with small pages: every queue is
// registered, no page is ever over its size, and the pages are the ones
// page 0 counts.
func TestQueueRegistryPages(t *testing.T) {
	e := newEnv(t)
	const page, writers, each = 5, 8, 12
	var wg sync.WaitGroup
	errs := make(chan error, writers*each)
	for w := range writers {
		s := e.process()
		lease.LimitRegistryPage(s, page)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				// Half the queues are shared by two writers.
				q := fmt.Sprintf("rq-%02d", (w/2)*each*2+i*2+w%2*(i%2))
				if _, err := s.CreateTask(ctx(t), lease.CreateTaskParams{Title: "t", Queue: q}); err != nil {
					errs <- fmt.Errorf("writer %d, queue %s: %w", w, q, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	pages, count := e.registryPages(t)
	want := map[string]bool{}
	for w := range writers {
		for i := range each {
			want[fmt.Sprintf("rq-%02d", (w/2)*each*2+i*2+w%2*(i%2))] = true
		}
	}
	got := map[string]bool{}
	for p, names := range pages {
		if len(names) > page {
			t.Errorf("page %d holds %d names: %v", p, len(names), names)
		}
		for _, q := range names {
			got[q] = true
		}
	}
	if len(pages) != count || count < len(want)/page {
		t.Errorf("%d pages read, page 0 counts %d, for %d names in pages of %d", len(pages), count, len(want), page)
	}
	for q := range want {
		if !got[q] {
			t.Errorf("queue %s is not in the registry", q)
		}
	}
	// A todo listing of every queue walks every page.
	e.caughtUp(t) // it reads each queue's tasks through the claim index
	var listed []string
	for p := (lease.ListTasksParams{Status: lease.StatusTodo, Limit: 7}); ; {
		res, err := e.store.ListTasks(ctx(t), p)
		if err != nil {
			t.Fatalf("list: %v", err)
		}
		for _, task := range res.Tasks {
			if !slices.Contains(listed, task.Queue) {
				listed = append(listed, task.Queue)
			}
		}
		if res.NextCursor == "" {
			break
		}
		p.Cursor = res.NextCursor
	}
	if len(listed) != len(want) || !slices.IsSorted(listed) {
		t.Errorf("a todo listing of every queue reached %d queues, want %d in name order: %v", len(listed), len(want), listed)
	}
}

// The queue listing goes a page at a time, in name order, each queue
// once; a cursor it did not issue and a limit out of range are refused.
func TestQueueListingPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var want []string
	for i := range 7 {
		q := fmt.Sprintf("page-q%d", i)
		e.queued(t, "t-"+q, q, i)
		want = append(want, q)
	}
	e.drain(t)
	var got []string
	pages := 0
	for p := (lease.ListQueuesParams{Limit: 3}); ; pages++ {
		page, err := e.store.ListQueuePage(ctx(t), p)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		if len(page.Queues) > 3 {
			t.Fatalf("page %d holds %d queues, limit 3", pages, len(page.Queues))
		}
		for _, q := range page.Queues {
			got = append(got, q.Queue)
			if q.Counts[lease.StatusTodo] != 1 {
				t.Errorf("%s: %v todo, want 1", q.Queue, q.Counts[lease.StatusTodo])
			}
		}
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	if !slices.Equal(got, want) || pages != 2 {
		t.Errorf("pages of 3 listed %v over %d pages after the first, want %v over 2", got, pages, want)
	}
	var ve *lease.ValidationError
	for _, p := range []lease.ListQueuesParams{{Limit: -1}, {Limit: lease.MaxQueuesListed + 1}, {Cursor: "bogus"}, {Cursor: "cTpub3QgYW4gaWQ"}} {
		if _, err := e.store.ListQueuePage(ctx(t), p); !errors.As(err, &ve) {
			t.Errorf("list queues %+v: %v, want a validation error", p, err)
		}
	}
}
