package lease_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

// oldTasksTable turns e's tasks into a table of the earlier schema: it
// creates that table (its whole-task index included), copies every task
// item into it without the keys the earlier schema did not write, and
// deletes today's tasks table, as a data directory from before holds them.
func (e *env) oldTasksTable(t *testing.T) {
	t.Helper()
	c, db := ctx(t), uncounted()
	old, cur := e.names.Table(schema.TasksTableV1), e.names.Table(schema.TasksTable)
	_, err := db.CreateTable(c, &dynamodb.CreateTableInput{
		TableName:   &old,
		BillingMode: types.BillingModePayPerRequest,
		KeySchema:   []types.KeySchemaElement{{AttributeName: aws.String("task_id"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("task_id"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("status"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("created_key"), AttributeType: types.ScalarAttributeTypeS},
		},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{{
			IndexName: aws.String("by_status"),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String("status"), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String("created_key"), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
		}},
	})
	if err != nil {
		t.Fatalf("create the earlier tasks table: %v", err)
	}
	// A table is written only once it is active (a busy local DynamoDB may
	// answer a put into one still being created: no such table).
	eventually(t, "the earlier table", func() bool {
		out, err := db.DescribeTable(c, &dynamodb.DescribeTableInput{TableName: &old})
		return err == nil && out.Table.TableStatus == types.TableStatusActive
	})
	page := must[*dynamodb.ScanOutput](t)(db.Scan(c, &dynamodb.ScanInput{TableName: &cur, ConsistentRead: aws.Bool(true)}))
	for _, item := range page.Items {
		delete(item, "status_shard")
		// The earlier schema kept a task's description and metadata on it.
		if b, ok := item["body"]; ok {
			key := item["task_id"].(*types.AttributeValueMemberS).Value + "#body#" + b.(*types.AttributeValueMemberS).Value
			for _, body := range page.Items {
				if body["task_id"].(*types.AttributeValueMemberS).Value != key {
					continue
				}
				for _, name := range []string{"description", "metadata"} {
					if v, ok := body[name]; ok { // a body has either alone, or both
						item[name] = v
					}
				}
			}
			delete(item, "body")
		}
		if id := item["task_id"].(*types.AttributeValueMemberS).Value; strings.Contains(id, "#") {
			continue // a body
		}
		must[*dynamodb.PutItemOutput](t)(db.PutItem(c, &dynamodb.PutItemInput{TableName: &old, Item: item}))
	}
	must[*dynamodb.DeleteTableOutput](t)(db.DeleteTable(c, &dynamodb.DeleteTableInput{TableName: &cur}))
}

// uncounted is a client of the local DynamoDB outside the env's request
// count: a migration scans, which no operation of the store may.
func uncounted() *dynamodb.Client { return lease.NewLocalClient(testenv.Endpoint()) }

// A tasks table of the earlier schema is refused until it is migrated, and
// migrating it keeps every task, lease, fence and event: a migrated lease
// is still held, its fence goes on from where it was, and the copies
// record no transition, so the trail holds each event once.
func TestMigrateEarlierTasksTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "held", "done", "free", "prequeue")
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "elsewhere", Queue: "side"}))
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "done", Description: new("what to do"), Metadata: []byte(`{"k":1}`)}))
	held := e.checkout(t, "held", "a", time.Hour)
	e.checkout(t, "done", "a", time.Hour)
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "done", AgentID: "a"}))
	for range 2 {
		e.checkout(t, "free", "a", time.Hour)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "free", AgentID: "a"}))
	}
	e.drain(t)
	trail := kinds(e.events(t, "free"))
	e.oldTasksTable(t)
	db := uncounted()
	// held as a task from before versions: none.
	must[*dynamodb.UpdateItemOutput](t)(db.UpdateItem(c, &dynamodb.UpdateItemInput{
		TableName: aws.String(e.names.Table(schema.TasksTableV1)), Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: "held"}}, UpdateExpression: aws.String("REMOVE version, attempts, max_attempts"),
	}))

	if err := lease.EnsureTables(c, db, e.names); !errors.Is(err, lease.ErrMigrationNeeded) {
		t.Fatalf("EnsureTables over an earlier tasks table: %v, want ErrMigrationNeeded", err)
	}
	// prequeue as a task from before queues: no queue, priority or claim
	// keys. And the queue registry as before the counts: without "side".
	must[*dynamodb.UpdateItemOutput](t)(db.UpdateItem(c, &dynamodb.UpdateItemInput{
		TableName: aws.String(e.names.Table(schema.TasksTableV1)), Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: "prequeue"}},
		UpdateExpression: aws.String("REMOVE queue, priority, claim_home, claim_key, claim_shard, claim_rank"),
	}))
	must[*dynamodb.DeleteItemOutput](t)(db.DeleteItem(c, &dynamodb.DeleteItemInput{
		TableName: aws.String(e.names.Table(schema.HeartbeatsTable)), Key: lease.AgentKey("#queues"),
	}))
	res := must[lease.MigrateResult](t)(lease.Migrate(c, db, e.names, schema.ShardCounts{}, nil))
	if !res.Found || res.AlreadyDone || res.Copied != 5 || res.Present != 0 {
		t.Fatalf("migrate: %+v, want 5 tasks copied", res)
	}
	if again := must[lease.MigrateResult](t)(lease.Migrate(c, db, e.names, schema.ShardCounts{}, nil)); !again.AlreadyDone || again.Copied != 0 {
		t.Fatalf("migrate again: %+v, want already done", again)
	}
	if err := lease.EnsureTables(c, db, e.names); err != nil {
		t.Fatalf("EnsureTables after the migration: %v", err)
	}
	e.drain(t) // the copies are no transitions

	got := must[lease.Task](t)(e.store.GetTask(c, "held"))
	if got.Checkout == nil || got.Checkout.RunID != held.RunID || got.Checkout.Fence != held.Fence {
		t.Fatalf("held after the migration: %+v, want the lease %+v", got.Checkout, held)
	}
	// A lease from before attempts were counted is the task's first.
	rawHeld := must[*dynamodb.GetItemOutput](t)(db.GetItem(c, &dynamodb.GetItemInput{TableName: aws.String(e.names.Table(schema.TasksTable)),
		Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: "held"}}})).Item
	if _, ok := rawHeld["max_attempts"]; !ok || got.Attempts != 1 || got.Checkout.Attempt != 1 || got.MaxAttempts != lease.DefaultMaxAttempts {
		t.Fatalf("held after the migration: attempts %d of %d, its lease's attempt %d; want 1 of %d, and 1", got.Attempts, got.MaxAttempts, got.Checkout.Attempt, lease.DefaultMaxAttempts)
	}
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "held", AgentID: "b"}); !errors.Is(err, lease.ErrCheckedOut) {
		t.Fatalf("checkout of a migrated live lease: %v, want a conflict", err)
	}
	// A task from before versions starts at version 1: its holder
	// completes it (the completion keeps the version it left).
	if d := must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "held", AgentID: "a", RunID: held.RunID})); d.Status != lease.StatusDone || d.Version != 2 {
		t.Fatalf("held completed after the migration: %s, version %d; want done, version 2", d.Status, d.Version)
	}
	if d := must[lease.Task](t)(e.store.GetTask(c, "done")); d.Status != lease.StatusDone || d.Description != "what to do" || string(d.Metadata) != `{"k":1}` {
		t.Fatalf("done after the migration: %+v", d)
	}
	next := e.checkout(t, "free", "b", time.Hour)
	if next.Fence != 3 {
		t.Fatalf("fence after the migration %d, want 3: fences go on from where they were", next.Fence)
	}
	e.drain(t)
	if got := kinds(e.events(t, "free")); !slices.Equal(got, append(trail, lease.EventCheckout)) {
		t.Fatalf("free's events %v, want %v and the new checkout", got, trail)
	}
	e.caughtUp(t) // the listings and the claim read the indexes
	page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusDone}))
	if len(page.Tasks) != 2 || page.Tasks[0].TaskID != "done" || page.Tasks[1].TaskID != "held" {
		t.Fatalf("done tasks listed after the migration: %+v", page.Tasks)
	}
	// The todo tasks are listed (from the claim index, queue by queue in
	// the registry): the one from before queues in the default queue, the
	// one of a queue never counted in its own; and claimable.
	fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	page = must[lease.TaskPage](t)(fresh.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo}))
	if got := listedIDs(page); !slices.Equal(got, []string{"prequeue", "elsewhere"}) {
		t.Fatalf("todo tasks listed after the migration: %v, want [prequeue elsewhere]", got)
	}
	if got := must[lease.Checkout](t)(fresh.Claim(c, lease.ClaimParams{AgentID: "b", Queues: []string{lease.DefaultQueue}, Timeout: time.Hour})); got.TaskID != "prequeue" {
		t.Fatalf("a claim after the migration took %s, want prequeue", got.TaskID)
	}
}

// The earlier table's last transitions, which its server's stream
// function had not applied when it stopped (it polls every 200 ms, and may
// be killed), are applied by the migration from that table's stream: the
// copies are no transitions and cause nothing, so a release's event and
// its watcher's message used to be lost, and the task's trail waited for
// that event for ever.
func TestMigrateAppliesWhatTheEarlierStreamHolds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, db := ctx(t), uncounted()
	e.task(t, "w")
	co := e.checkout(t, "w", "a", time.Hour)
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "w", AgentID: "b", Watch: true}); !errors.Is(err, lease.ErrCheckedOut) {
		t.Fatalf("b's checkout with watch: %v, want a conflict", err)
	}
	e.drain(t)
	cur := e.names.Table(schema.TasksTable)
	raw := func() map[string]types.AttributeValue {
		out := must[*dynamodb.GetItemOutput](t)(db.GetItem(c, &dynamodb.GetItemInput{TableName: &cur, ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: "w"}}}))
		return out.Item
	}
	held := raw()
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "w", AgentID: "a", RunID: co.RunID}))
	released := raw() // the release's consequences are not applied: its server stopped

	// The earlier table, with its stream, as that server left it: the
	// task held, then released.
	old := e.names.Table(schema.TasksTableV1)
	must[*dynamodb.CreateTableOutput](t)(db.CreateTable(c, &dynamodb.CreateTableInput{
		TableName: &old, BillingMode: types.BillingModePayPerRequest,
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("task_id"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("task_id"), AttributeType: types.ScalarAttributeTypeS}},
		StreamSpecification:  &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages},
	}))
	eventually(t, "the earlier table", func() bool {
		out, err := db.DescribeTable(c, &dynamodb.DescribeTableInput{TableName: &old})
		return err == nil && out.Table.TableStatus == types.TableStatusActive
	})
	for _, item := range []map[string]types.AttributeValue{held, released} {
		must[*dynamodb.PutItemOutput](t)(db.PutItem(c, &dynamodb.PutItemInput{TableName: &old, Item: item}))
	}
	must[*dynamodb.DeleteTableOutput](t)(db.DeleteTable(c, &dynamodb.DeleteTableInput{TableName: &cur}))

	arn := must[string](t)(localstack.StreamARN(c, db, old))
	p := &stream.Poller{
		Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
		Handle: stream.Handler(lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})),
	}
	earlier := func(ctx context.Context) error { _, err := p.Poll(ctx); return err }
	if res := must[lease.MigrateResult](t)(lease.Migrate(c, db, e.names, schema.ShardCounts{}, earlier)); res.Copied != 1 {
		t.Fatalf("migrate: %+v, want 1 task copied", res)
	}
	// From here on, the server reads today's table's stream.
	e.poller = &stream.Poller{Streams: p.Streams, StreamARN: must[string](t)(localstack.StreamARN(c, db, cur)), Saved: stream.MemoryCheckpoints{}, Handle: p.Handle}
	// The trail is whole, and goes on.
	next := e.checkout(t, "w", "c", time.Hour)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "w", AgentID: "c", RunID: next.RunID}))
	want := []lease.EventType{lease.EventCheckout, lease.EventRelease, lease.EventCheckout, lease.EventRelease}
	if got := kinds(e.events(t, "w")); !slices.Equal(got, want) {
		t.Fatalf("w's trail after the migration: %v, want %v", got, want)
	}
	var told int
	for _, m := range e.inbox(t, "b") {
		if m.TaskID == "w" && m.Type == lease.MessageTaskAvailable {
			told++
		}
	}
	if told != 1 {
		t.Fatalf("b was told %d times that w is available, want once (a watch is told once)", told)
	}
}

// A migration writes status shards: with a count below the one the
// deployment has used it is refused before it copies anything, naming the
// count; with the count used it goes on.
func TestMigrateRefusesAShardCountBelowTheOneUsed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a")
	e.oldTasksTable(t)
	db := uncounted()
	grown := schema.ShardCounts{Status: schema.MaxStatusShards}
	must[any](t)(nil, lease.RecordShards(c, db, e.names, grown))
	_, err := lease.Migrate(c, db, e.names, schema.ShardCounts{}, nil)
	var shrink *schema.ShrinkError
	if !errors.As(err, &shrink) || shrink.Name != "status" || shrink.Recorded != schema.MaxStatusShards {
		t.Fatalf("migrate with the default counts after %+v was used: %v, want the status count refused", grown, err)
	}
	if err := lease.EnsureTables(c, db, e.names); !errors.Is(err, lease.ErrMigrationNeeded) {
		t.Fatalf("after the refused migration: %v, want ErrMigrationNeeded (nothing copied, no marker)", err)
	}
	if res := must[lease.MigrateResult](t)(lease.Migrate(c, db, e.names, grown, nil)); res.Copied != 1 {
		t.Fatalf("migrate with the counts used: %+v, want the task copied", res)
	}
}
