package lease_test

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

// shardedEnv is newEnv with the store (and the stream function's) given
// these shard counts.
func shardedEnv(t *testing.T, counts schema.ShardCounts) *env {
	t.Helper()
	e := &env{clock: testclock.New(epoch), count: testenv.NewCounter(), notes: &testenv.Recorder{}}
	s := testenv.NewStore(t, testenv.WithClock(e.clock.Now), testenv.WithNotifier(e.notes), testenv.WithCounter(e.count), testenv.WithShards(counts))
	e.store, e.db, e.names = s.Store, s.DB, s.Names
	e.poller = e.pollerFor(t, counts)
	return e
}

// pollerFor is the stream function over e's tables with these counts.
func (e *env) pollerFor(t *testing.T, counts schema.ShardCounts) *stream.Poller {
	t.Helper()
	arn, err := localstack.StreamARN(ctx(t), e.db, e.names.Table(schema.TasksTable))
	if err != nil {
		t.Fatalf("stream of the tasks table: %v", err)
	}
	return &stream.Poller{
		Streams:   stream.NewLocalClient(testenv.Endpoint()),
		StreamARN: arn,
		Handle:    stream.Handler(lease.New(lease.Config{DB: lease.NewLocalClient(testenv.Endpoint()), Tables: e.names, Now: e.clock.Now, Notifier: e.notes, Shards: counts})),
		Saved:     stream.MemoryCheckpoints{},
	}
}

// rawItem reads one item of a table as it is stored, its string attributes
// only.
func (e *env) rawItem(t *testing.T, table string, key map[string]types.AttributeValue) map[string]string {
	t.Helper()
	out, err := e.db.GetItem(ctx(t), &dynamodb.GetItemInput{TableName: aws.String(e.names.Table(table)), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := attributevalue.UnmarshalMap(out.Item, &m); err != nil {
		t.Fatal(err)
	}
	s := map[string]string{}
	for k, v := range m {
		if str, ok := v.(string); ok {
			s[k] = str
		}
	}
	return s
}

func (e *env) rawTask(t *testing.T, id string) map[string]string {
	return e.rawItem(t, schema.TasksTable, map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: id}})
}

// feedShards are the feed_shard keys of every archived event of taskID.
func (e *env) feedShards(t *testing.T, taskID string) []string {
	t.Helper()
	out, err := e.db.Query(ctx(t), &dynamodb.QueryInput{
		TableName:                 aws.String(e.names.Table(schema.EventsTable)),
		KeyConditionExpression:    aws.String("task_id = :t"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberS{Value: taskID}},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, it := range out.Items {
		if v, ok := it["feed_shard"].(*types.AttributeValueMemberS); ok {
			got = append(got, v.Value)
		}
	}
	return got
}

// shardIn checks that key is prefix + "#" + a shard below n, and returns
// the shard.
func shardIn(t *testing.T, what, key, prefix string, n int) int {
	t.Helper()
	p, num, ok := strings.Cut(key, "#")
	sh, err := strconv.Atoi(num)
	if !ok || p != prefix || err != nil || sh < 0 || sh >= n {
		t.Errorf("%s: key %q, want %s#<0 to %d>", what, key, prefix, n-1)
	}
	return sh
}

// fnvMod is FNV-1a of id modulo n, the formula the default shards have
// always used.
func fnvMod(id string, n uint32) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % n)
}

// A store whose shard counts are all unlike the defaults works end to end
// (create, claim, checkout, listings, the sweep of an expired lease and of
// a dead holder's, queue counts, completion, the feed), and every key it
// writes is in a shard below its count. The claim count, 7, is larger
// than the default 4, so a claim that only read the default's shards
// would miss tasks.
func TestStoreWithOtherShardCountsWorksEndToEnd(t *testing.T) {
	t.Parallel()
	counts := schema.ShardCounts{Lease: 5, Status: 3, Claim: 7, Feed: 2}
	e := shardedEnv(t, counts)
	c := ctx(t)
	var ids []string
	claimShards := map[int]bool{}
	for i := range 14 {
		id := fmt.Sprintf("sh-%02d", i)
		ids = append(ids, id)
		must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: id, Title: id, Queue: "q"}))
		e.clock.Advance(time.Millisecond) // creation order is id order
		it := e.rawTask(t, id)
		if it["status_shard"] != "" {
			t.Errorf("%s: todo, in the status index (%q)", id, it["status_shard"])
		}
		claimShards[shardIn(t, id+" claim_home", it["claim_home"], "q", counts.Claim)] = true
		if it["claim_shard"] != it["claim_home"] {
			t.Errorf("%s: claim_shard %q, claim_home %q", id, it["claim_shard"], it["claim_home"])
		}
	}
	above := false
	for sh := range claimShards {
		above = above || sh >= schema.ClaimShards
	}
	if !above {
		t.Fatalf("claim shards used %v: none above the default's, the test proves nothing", claimShards)
	}

	// Every task is claimable, whatever its shard: claims take them all,
	// oldest first.
	e.caughtUp(t) // the claim finds the tasks through an index
	claimed := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "claimer", Queues: []string{"q"}, Timeout: time.Hour}))
	if claimed.TaskID != ids[0] {
		t.Fatalf("claim took %s, want the oldest, %s", claimed.TaskID, ids[0])
	}
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "dying", 30*time.Second))
	e.checkout(t, ids[1], "dying", time.Hour)
	e.checkout(t, ids[2], "brief", 10*time.Second)
	for _, id := range ids[:3] {
		it := e.rawTask(t, id)
		shardIn(t, id+" lease_shard", "l#"+it["lease_shard"], "l", counts.Lease)
		if it["status_shard"] != "" {
			t.Errorf("%s: in progress, in the status index (%q)", id, it["status_shard"])
		}
		if it["claim_shard"] != "" {
			t.Errorf("%s: leased, still in the claim index (%q)", id, it["claim_shard"])
		}
	}
	hb := e.rawItem(t, schema.HeartbeatsTable, lease.AgentKey("dying"))
	shardIn(t, "hb_shard", "h#"+hb["hb_shard"], "h", counts.Lease)

	e.caughtUp(t) // the listings read the indexes
	if got := must[[]lease.Checkout](t)(e.store.ListCheckouts(c, "")); len(got) != 3 {
		t.Fatalf("%d checkouts listed, want 3: %+v", len(got), got)
	}
	if got := must[[]lease.Checkout](t)(e.store.ListCheckouts(c, "dying")); len(got) != 1 || got[0].TaskID != ids[1] {
		t.Fatalf("the dying agent's checkouts %+v", got)
	}
	listAll := func(st lease.Status) []string {
		var out []string
		p := lease.ListTasksParams{Status: st, Limit: 2}
		for range 100 {
			page := must[lease.TaskPage](t)(e.store.ListTasks(c, p))
			for _, tk := range page.Tasks {
				out = append(out, tk.TaskID)
			}
			if page.NextCursor == "" {
				return out
			}
			p.Cursor = page.NextCursor
		}
		t.Fatal("the listing did not end")
		return nil
	}
	// Soonest expiry first: the brief lease, then the two of an hour, taken
	// in the same millisecond, by id.
	if got, want := listAll(lease.StatusInProgress), []string{ids[2], ids[0], ids[1]}; !slices.Equal(got, want) {
		t.Fatalf("in_progress %v, want %v", got, want)
	}
	if got := listAll(lease.StatusTodo); !slices.Equal(got, ids[3:]) {
		t.Fatalf("todo %v, want %v (in creation order, two a page)", got, ids[3:])
	}

	// The brief lease expires and the dying agent's heartbeat too: one
	// sweep ends both, found in their lease and heartbeat shards.
	e.clock.Advance(31 * time.Second)
	if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res.Timeouts != 1 || res.AgentDeaths != 1 {
		t.Fatalf("sweep %+v, want one timeout and one death", res)
	}
	for _, id := range ids[1:3] {
		it := e.rawTask(t, id)
		if it["lease_shard"] != "" || it["claim_shard"] != it["claim_home"] {
			t.Errorf("%s after the sweep: %v", id, it)
		}
	}
	e.caughtUp(t) // the claim finds the swept task through an index
	again := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "claimer", Queues: []string{"q"}, Timeout: time.Hour}))
	if again.TaskID != ids[1] {
		t.Fatalf("claim after the sweep took %s, want %s", again.TaskID, ids[1])
	}
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: ids[0], AgentID: "claimer"}))
	shardIn(t, "completed status_shard", e.rawTask(t, ids[0])["status_shard"], "done", counts.Status)
	e.caughtUp(t) // the listing reads the status index
	if got := listAll(lease.StatusDone); !slices.Equal(got, ids[:1]) {
		t.Fatalf("done %v", got)
	}

	// Queue counts read the oldest todo task of every claim shard.
	e.drain(t)
	e.caughtUp(t)
	qs := must[[]lease.QueueStats](t)(e.store.ListQueues(c))
	if len(qs) != 1 || qs[0].Counts[lease.StatusTodo] != int64(len(ids)-2) || qs[0].OldestTodoAt.IsZero() {
		t.Fatalf("queues %+v", qs)
	}
	if want := epoch.Add(2 * time.Millisecond); !qs[0].OldestTodoAt.Equal(want) {
		t.Fatalf("oldest todo at %v, want %v (%s's creation)", qs[0].OldestTodoAt, want, ids[2])
	}

	// The feed holds every archived event, each in a feed shard below the
	// count.
	e.clock.Advance(time.Minute)
	e.caughtUp(t) // the feed reads its index: the test clock's minute is no real time
	feed, _ := follow(t, e.store, lease.FeedParams{Since: epoch})
	var archived int
	for _, id := range ids {
		for _, k := range e.feedShards(t, id) {
			archived++
			shardIn(t, id+" feed_shard", "f#"+k[strings.LastIndex(k, "#")+1:], "f", counts.Feed)
		}
	}
	if archived == 0 || len(feed) != archived {
		t.Fatalf("the feed has %d events, the events table %d", len(feed), archived)
	}
}

// The default counts are the ones every item was written with before they
// were settings: a store with none writes each key in the shard today's
// formulas give (FNV-1a of the id modulo 16; the claim shard that modulo
// 4), and a store given the defaults explicitly finds what it wrote.
func TestDefaultShardsAreTheShardsItemsHaveAlwaysHad(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	ids := []string{"d-1", "d-2", "d-3", "d-4", "d-5", "d-6", "d-7", "d-8"}
	for _, id := range ids {
		e.task(t, id)
	}
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Hour))
	e.checkout(t, ids[0], "a", time.Hour)
	cancelled := lease.StatusCancelled
	e.task(t, "d-9")
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d-9", Status: &cancelled}))
	if got, want := e.rawTask(t, "d-9")["status_shard"], fmt.Sprintf("cancelled#%d", fnvMod("d-9", 16)); got != want {
		t.Errorf("d-9: status_shard %q, want %q", got, want)
	}
	for _, id := range ids {
		it := e.rawTask(t, id)
		if it["status_shard"] != "" { // todo and in_progress are not in the status index
			t.Errorf("%s: status_shard %q, want none", id, it["status_shard"])
		}
		if want := fmt.Sprintf("%s#%d", lease.DefaultQueue, fnvMod(id, 16)%4); it["claim_home"] != want {
			t.Errorf("%s: claim_home %q, want %q", id, it["claim_home"], want)
		}
	}
	if got, want := e.rawTask(t, ids[0])["lease_shard"], strconv.Itoa(fnvMod(ids[0], 16)); got != want {
		t.Errorf("lease_shard %q, want %q", got, want)
	}
	if got, want := e.rawItem(t, schema.HeartbeatsTable, lease.AgentKey("a"))["hb_shard"], strconv.Itoa(fnvMod("a", 16)); got != want {
		t.Errorf("hb_shard %q, want %q", got, want)
	}
	e.drain(t)
	for _, k := range e.feedShards(t, ids[0]) {
		if want := fmt.Sprintf("#%d", fnvMod(ids[0], 16)); !strings.HasSuffix(k, want) {
			t.Errorf("feed_shard %q, want the suffix %q", k, want)
		}
	}

	explicit := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Shards: schema.DefaultShards()})
	e.caughtUp(t) // the listings and the claim read the indexes
	if got := must[[]lease.Checkout](t)(explicit.ListCheckouts(c, "")); len(got) != 1 || got[0].TaskID != ids[0] {
		t.Fatalf("checkouts %+v", got)
	}
	page := must[lease.TaskPage](t)(explicit.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo}))
	if len(page.Tasks) != len(ids)-1 {
		t.Fatalf("todo %+v", page.Tasks)
	}
	if got := must[lease.Checkout](t)(explicit.Claim(c, lease.ClaimParams{AgentID: "b", Timeout: time.Minute})); got.TaskID != ids[1] {
		t.Fatalf("claim took %s", got.TaskID)
	}
}

// Counts may grow between deploys: what a store with the defaults wrote,
// a store with larger counts still finds (it reads every shard below its
// counts), and a listing cursor issued before the growth still works.
func TestShardCountsMayGrow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	ids := []string{"g-1", "g-2", "g-3", "g-4", "g-5", "g-6"}
	for _, id := range ids {
		e.task(t, id)
		e.clock.Advance(time.Millisecond)
	}
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "dying", 30*time.Second))
	e.checkout(t, ids[0], "dying", time.Hour)
	e.checkout(t, ids[1], "brief", 10*time.Second)
	e.caughtUp(t) // the listings, the claim and the sweep read the indexes
	first := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo, Limit: 2}))
	if first.NextCursor == "" {
		t.Fatal("no cursor")
	}
	e.drain(t)

	grown := schema.ShardCounts{Lease: 32, Status: schema.MaxStatusShards, Claim: 8, Feed: 32}
	big := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Shards: grown})
	if got := must[[]lease.Checkout](t)(big.ListCheckouts(c, "")); len(got) != 2 {
		t.Fatalf("checkouts after growth %+v", got)
	}
	rest := must[lease.TaskPage](t)(big.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo, Cursor: first.NextCursor}))
	var listed []string
	for _, tk := range append(first.Tasks, rest.Tasks...) {
		listed = append(listed, tk.TaskID)
	}
	if !slices.Equal(listed, ids[2:]) {
		t.Fatalf("todo across the growth %v, want %v", listed, ids[2:])
	}
	if got := must[lease.Checkout](t)(big.Claim(c, lease.ClaimParams{AgentID: "b", Timeout: time.Hour})); got.TaskID != ids[2] {
		t.Fatalf("claim after growth took %s", got.TaskID)
	}
	// A PATCH that leaves the queue alone leaves the claim shard alone,
	// even where the grown count would put the task elsewhere.
	moved := ids[4]
	if fnvMod(moved, 8) == fnvMod(moved, 4) {
		t.Fatalf("%s has the same claim shard of 4 and of 8: the check below proves nothing", moved)
	}
	home := e.rawTask(t, moved)["claim_home"]
	title := "renamed"
	must[lease.Task](t)(big.UpdateTask(c, lease.UpdateTaskParams{TaskID: moved, AgentID: "b", Title: &title}))
	if got := e.rawTask(t, moved); got["claim_home"] != home || got["claim_shard"] != home || got["title"] != title {
		t.Fatalf("after a PATCH of its title: claim_home %q, claim_shard %q, title %q; want %q, %q, %q", got["claim_home"], got["claim_shard"], got["title"], home, home, title)
	}
	e.clock.Advance(31 * time.Second)
	if res := must[lease.SweepResult](t)(big.Sweep(c)); res.Timeouts != 1 || res.AgentDeaths != 1 {
		t.Fatalf("sweep after growth %+v", res)
	}
	e.drain(t)
	e.clock.Advance(time.Minute)
	e.caughtUp(t) // the feed reads its index: the test clock's minute is no real time
	if feed, _ := follow(t, big, lease.FeedParams{Since: epoch}); len(feed) != 5 {
		t.Fatalf("feed after growth %d events", len(feed))
	}

	// A cursor of more status shards than the store has was not issued by
	// this deployment.
	cancelled := lease.StatusCancelled
	for _, id := range ids[4:] {
		must[lease.Task](t)(big.UpdateTask(c, lease.UpdateTaskParams{TaskID: id, AgentID: "b", Status: &cancelled}))
	}
	e.caughtUp(t) // the listing reads the status index
	wide := must[lease.TaskPage](t)(big.ListTasks(c, lease.ListTasksParams{Status: lease.StatusCancelled, Limit: 1}))
	if wide.NextCursor == "" {
		t.Fatal("no cursor")
	}
	var ve *lease.ValidationError
	if _, err := e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusCancelled, Cursor: wide.NextCursor}); !errors.As(err, &ve) {
		t.Fatalf("a cursor of %d shards to a store of %d: %v", grown.Status, schema.StatusShards, err)
	}
}

// The longest cursor a task listing can issue, with the most status
// shards and the longest task ids, fits the cursor's bound.
func TestLongestListingCursorFits(t *testing.T) {
	t.Parallel()
	e := shardedEnv(t, schema.ShardCounts{Status: schema.MaxStatusShards})
	c := ctx(t)
	// Two tasks of the longest ids in every status shard: the first page
	// lists the first of each ("a…" sorts before "b…"), so the cursor
	// holds a position of the longest kind in every shard.
	for _, first := range []string{"a", "b"} {
		seen := map[int]bool{}
		for i := 0; len(seen) < schema.MaxStatusShards; i++ {
			id := fmt.Sprintf("%s%05d", first, i) + strings.Repeat("x", 122)
			if sh := fnvMod(id, schema.MaxStatusShards); !seen[sh] {
				seen[sh] = true
				e.task(t, id)
			}
			if i > 99999 {
				t.Fatal("no id for every shard")
			}
		}
	}
	e.caughtUp(t) // the listing reads the claim index
	page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo, Limit: schema.MaxStatusShards}))
	if page.NextCursor == "" {
		t.Fatal("no cursor")
	}
	if len(page.NextCursor) > lease.MaxCursorLen {
		t.Fatalf("cursor of %d bytes, over %d", len(page.NextCursor), lease.MaxCursorLen)
	}
	if err := lease.CheckCursor(page.NextCursor); err != nil {
		t.Fatal(err)
	}
	must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo, Cursor: page.NextCursor}))
}

// A deployment keeps the largest shard counts any of its processes has
// started with: a start with a larger count raises the record, one with a
// smaller count is refused with the count, the record and the variable to
// set, and writes nothing; an unchanged start reads the record only.
func TestRecordShardsRefusesAShrink(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	record := func(counts schema.ShardCounts) error {
		return lease.RecordShards(c, e.db, e.names, counts)
	}
	if err := record(schema.ShardCounts{}); err != nil {
		t.Fatalf("the first start, with the defaults: %v", err)
	}
	e.count.Take()
	if err := record(schema.DefaultShards()); err != nil {
		t.Fatalf("the defaults again: %v", err)
	}
	if n := e.count.Take(); n["UpdateItem"] != 0 || n["GetItem"] != 1 {
		t.Errorf("an unchanged start made %v, want one GetItem", n)
	}
	grown := schema.ShardCounts{Lease: 32, Status: schema.StatusShards, Claim: 8, Feed: schema.FeedShards}
	if err := record(grown); err != nil {
		t.Fatalf("a start with grown counts: %v", err)
	}
	for _, tc := range []struct {
		counts schema.ShardCounts
		want   string
	}{
		{schema.ShardCounts{}, "lease shard count 16 is below 32, which this deployment has used (CHECKOUT_LEASE_SHARDS, CDK context leaseShards)"},
		{schema.ShardCounts{Lease: 32}, "claim shard count 4 is below 8, which this deployment has used (CHECKOUT_CLAIM_SHARDS, CDK context claimShards)"},
		{schema.ShardCounts{Lease: 64, Claim: 8, Status: 2}, "status shard count 2 is below 16"},
	} {
		e.count.Take()
		err := record(tc.counts)
		var shrink *schema.ShrinkError
		if !errors.As(err, &shrink) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "never shrink") {
			t.Errorf("a start with %+v: %v, want a refusal saying %q", tc.counts, err, tc.want)
		}
		if n := e.count.Take(); n["UpdateItem"] != 0 {
			t.Errorf("a refused start with %+v wrote the record", tc.counts)
		}
	}
	// The refused larger lease count of the last case was not recorded.
	if err := record(grown); err != nil {
		t.Fatalf("the grown counts again: %v", err)
	}
}
