package main

import (
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

// After an upgrade deploy, before `checkout-server migrate` has run, the
// tasks are in the earlier table, today's is empty, and the queue counts
// (which carry over, and which the migration's copies do not move) are
// right. A recount then must not count today's empty table and write
// zero over every queue's counts: the migration would leave them zero
// with the tasks back. It refuses, naming the migration, and writes
// nothing.
func TestRecountRefusesBeforeTheMigration(t *testing.T) {
	ctx := testenv.Context(t)
	d, err := localstack.Start(ctx, localstack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Stop() }()
	names := schema.Names{Prefix: "unmigrated-"}
	db := lease.NewLocalClient(d.Endpoint)
	if err := lease.EnsureTables(ctx, db, names); err != nil {
		t.Fatal(err)
	}
	store := lease.New(lease.Config{DB: db, Tables: names})
	for _, id := range []string{"t1", "t2"} {
		if _, err := store.CreateTask(ctx, lease.CreateTaskParams{TaskID: id, Queue: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	cur, old := names.Table(schema.TasksTable), names.Table(schema.TasksTableV1)
	arn, err := localstack.StreamARN(ctx, db, cur)
	if err != nil {
		t.Fatal(err)
	}
	p := &stream.Poller{Streams: stream.NewLocalClient(d.Endpoint), StreamARN: arn, Handle: stream.ConsequencesHandler(store), Saved: stream.MemoryCheckpoints{}}
	if _, err := p.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	counter := func() string {
		t.Helper()
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(names.Table(schema.HeartbeatsTable)), ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"agent_id": &types.AttributeValueMemberS{Value: "#queue#q"}}})
		if err != nil {
			t.Fatal(err)
		}
		n, _ := out.Item["n#todo"].(*types.AttributeValueMemberN)
		if n == nil {
			return ""
		}
		return n.Value
	}
	if got := counter(); got != "2" {
		t.Fatalf("q's todo count before: %q, want 2", got)
	}

	// The tasks as the upgrade leaves them: in the earlier table, not
	// migrated; today's table there, empty.
	if _, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: &old, BillingMode: types.BillingModePayPerRequest,
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("task_id"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("task_id"), AttributeType: types.ScalarAttributeTypeS}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := dynamodb.NewTableExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: &old}, time.Minute); err != nil {
		t.Fatal(err)
	}
	page, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: &cur, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range page.Items {
		if id := item["task_id"].(*types.AttributeValueMemberS).Value; !strings.Contains(id, "#") {
			delete(item, "status_shard")
			if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &old, Item: item}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &cur, Key: map[string]types.AttributeValue{"task_id": item["task_id"]}}); err != nil {
			t.Fatal(err)
		}
	}

	env := map[string]string{localstack.EnvEndpoint: d.Endpoint, "CHECKOUT_TABLE_PREFIX": names.Prefix}
	var out, errs strings.Builder
	err = recount(ctx, []string{"-settle", "500ms"}, func(k string) string { return env[k] }, &out, &errs)
	if err == nil || !strings.Contains(err.Error(), "migrate") {
		t.Errorf("recount before the migration: %v: %s; want a refusal naming the migration", err, out.String())
	}
	if got := counter(); got != "2" {
		t.Fatalf("q's todo count after a recount before the migration: %q, want 2 (the earlier table's tasks, which the migration's copies do not count)", got)
	}
}
