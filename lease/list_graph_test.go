package lease_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// depsReadsDB counts the Queries of blockers' edges (the inbox table's
// "#deps#" partitions).
type depsReadsDB struct {
	lease.DB

	mu    sync.Mutex
	reads int
}

func (d *depsReadsDB) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	for _, v := range in.ExpressionAttributeValues {
		if s, ok := v.(*types.AttributeValueMemberS); ok && strings.HasPrefix(s.Value, "#deps#") {
			d.mu.Lock()
			d.reads++
			d.mu.Unlock()
		}
	}
	return d.DB.Query(ctx, in, opts...)
}

func (d *depsReadsDB) take() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.reads
	d.reads = 0
	return n
}

// giveDependents records, as a create naming it would, that each of ids
// blocks the tasks deps(id): an edge each and has_dependents on it, written
// straight to the tables (the dependents need not exist for a listing).
func giveDependents(t *testing.T, e *env, ids []string, deps func(string) []string) {
	t.Helper()
	c := ctx(t)
	var puts []types.WriteRequest
	flush := func() {
		if len(puts) == 0 {
			return
		}
		in := &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{e.names.Table(schema.InboxTable): puts}}
		for len(in.RequestItems) > 0 {
			out, err := e.db.BatchWriteItem(c, in)
			if err != nil {
				t.Fatal(err)
			}
			in.RequestItems = out.UnprocessedItems
		}
		puts = nil
	}
	for _, id := range ids {
		for _, dep := range deps(id) {
			puts = append(puts, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{
				"agent_id":   &types.AttributeValueMemberS{Value: "#deps#" + id},
				"message_id": &types.AttributeValueMemberS{Value: dep},
				"at":         &types.AttributeValueMemberN{Value: "1"},
			}}})
			if len(puts) == 25 {
				flush()
			}
		}
		if _, err := e.db.UpdateItem(c, &dynamodb.UpdateItemInput{
			TableName:                 aws.String(e.names.Table(schema.TasksTable)),
			Key:                       map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: id}},
			UpdateExpression:          aws.String("SET has_dependents = :t"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberBOOL{Value: true}},
		}); err != nil {
			t.Fatal(err)
		}
	}
	flush()
}

// A listing page read the dependents of every task it listed, a Query
// each: a page of 1,000 tasks that each block others sent 1,000 Queries
// (more for long lists of dependents) before its answer. A page reads the
// dependents of at most PageDependentsReads tasks and ends early, with its
// cursor, when more would be needed; the walk still lists every task once
// and shows each one's blocks.
func TestAListingPageReadsTheDependentsOfABoundedNumberOfTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	n := 2*lease.PageDependentsReads + 30
	var ids []string
	for b := 0; b < n; b += lease.MaxBatch {
		var batch []lease.CreateTaskParams
		for i := b; i < min(b+lease.MaxBatch, n); i++ {
			id := fmt.Sprintf("t-%03d", i)
			ids = append(ids, id)
			batch = append(batch, lease.CreateTaskParams{TaskID: id, Queue: "g"})
		}
		must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	}
	deps := func(id string) []string { return []string{id + "-a", id + "-b"} }
	giveDependents(t, e, ids, deps)
	e.caughtUp(t) // the listing reads the claim index
	db := &depsReadsDB{DB: e.db}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})

	seen := map[string]bool{}
	pages := 0
	for cursor := ""; ; pages++ {
		page := must[lease.TaskPage](t)(s.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo, Queue: "g", Limit: 1000, Cursor: cursor}))
		if reads := db.take(); reads > lease.PageDependentsReads {
			t.Fatalf("page %d of %d tasks read the dependents of %d tasks", pages, len(page.Tasks), reads)
		}
		for _, task := range page.Tasks {
			if seen[task.TaskID] {
				t.Fatalf("%s listed twice", task.TaskID)
			}
			seen[task.TaskID] = true
			if !slices.Equal(task.Blocks, deps(task.TaskID)) {
				t.Fatalf("%s blocks %v, want %v", task.TaskID, task.Blocks, deps(task.TaskID))
			}
		}
		if page.NextCursor == "" || pages > n {
			break
		}
		cursor = page.NextCursor
	}
	if len(seen) != n {
		t.Fatalf("the walk listed %d of %d tasks in %d pages", len(seen), n, pages+1)
	}
}

// A task that blocks the most tasks it may, each of the longest id, is
// answered whole and far under the 6 MB a Lambda can return, by GET and
// in a listing page: every answer carrying a task stays bounded.
func TestATaskBlockingTheMostTasksIsAnsweredSmall(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "hub", Queue: "hub", Description: strings.Repeat("<", lease.MaxDescriptionLen)})
	var want []string
	for i := range lease.MaxDependents { // ids of 128 characters, the longest
		want = append(want, fmt.Sprintf("%04d-%s", i, strings.Repeat("d", 128-5)))
	}
	giveDependents(t, e, []string{"hub"}, func(string) []string { return want })
	e.caughtUp(t)
	got := e.get(t, "hub")
	page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo, Queue: "hub"}))
	if len(page.Tasks) != 1 {
		t.Fatalf("the listing of queue hub shows %d tasks", len(page.Tasks))
	}
	for what, task := range map[string]lease.Task{"GET": got, "the listing": page.Tasks[0]} {
		if !slices.Equal(task.Blocks, want) {
			t.Fatalf("%s: hub blocks %d tasks, want %d", what, len(task.Blocks), len(want))
		}
		raw, err := json.Marshal(task)
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) > 1<<20 {
			t.Errorf("%s: hub takes %d bytes of JSON", what, len(raw))
		}
	}
}

// A listing page stops reading dependents once the ids it has read fill
// its answer: of 40 tasks that each block 1,000 tasks of the longest ids
// (about 19 fit a page), a page reads those of no more than a read's
// width past the tasks it shows, not of every task it might list.
func TestAListingPageReadsDependentsOnlyWhileTheyFit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const n = 40
	var ids []string
	for b := 0; b < n; b += lease.MaxBatch {
		var batch []lease.CreateTaskParams
		for i := b; i < min(b+lease.MaxBatch, n); i++ {
			ids = append(ids, fmt.Sprintf("t-%02d", i))
			batch = append(batch, lease.CreateTaskParams{TaskID: ids[i], Queue: "g"})
		}
		must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	}
	deps := func(id string) []string {
		out := make([]string, lease.MaxDependents)
		for i := range out {
			out[i] = fmt.Sprintf("%s-%04d-%s", id, i, strings.Repeat("d", 128-len(id)-6))
		}
		return out
	}
	giveDependents(t, e, ids, deps)
	e.caughtUp(t)
	db := &depsReadsDB{DB: e.db}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	seen := 0
	for cursor, pages := "", 0; ; pages++ {
		page := must[lease.TaskPage](t)(s.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo, Queue: "g", Limit: 1000, Cursor: cursor}))
		if reads := db.take(); reads > len(page.Tasks)+8 {
			t.Fatalf("page %d of %d tasks read the dependents of %d tasks", pages, len(page.Tasks), reads)
		}
		for _, task := range page.Tasks {
			if task.TaskID != ids[seen] || len(task.Blocks) != lease.MaxDependents {
				t.Fatalf("page %d shows %s blocking %d tasks, want %s blocking %d", pages, task.TaskID, len(task.Blocks), ids[seen], lease.MaxDependents)
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
