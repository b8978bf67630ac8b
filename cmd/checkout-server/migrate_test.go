package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
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

// A data directory whose tasks table is of the earlier schema: the server
// refuses it, naming the command; `checkout-server migrate` copies it, and
// says so; run again, it has nothing to do; the server then starts.
func TestMigrateCommand(t *testing.T) {
	bin := testenv.Binary(t, "github.com/checkout-dev/checkout/cmd/checkout-server")
	dir := filepath.Join(t.TempDir(), "data")
	run := func(args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "DYNAMODB_ENDPOINT=", "CHECKOUT_TABLE_PREFIX=", "CHECKOUT_DATA_DIR="+dir, "CHECKOUT_ADDR=127.0.0.1:0")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("migrate"); err != nil || !strings.Contains(out, "no table checkout-tasks: nothing to migrate") {
		t.Fatalf("migrate of a new data directory: %v: %s", err, out)
	}

	// The earlier schema's tasks table, with one task on it.
	ctx := testenv.Context(t)
	d, err := localstack.Start(ctx, localstack.Options{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	db := lease.NewLocalClient(d.Endpoint)
	_, err = db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("checkout-tasks"),
		BillingMode:          types.BillingModePayPerRequest,
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("task_id"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("task_id"), AttributeType: types.ScalarAttributeTypeS}},
		StreamSpecification:  &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := dynamodb.NewTableExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("checkout-tasks")}, time.Minute); err != nil {
		t.Fatal(err)
	}
	task := map[string]types.AttributeValue{
		"task_id": &types.AttributeValueMemberS{Value: "kept"}, "status": &types.AttributeValueMemberS{Value: "todo"},
		"fence": &types.AttributeValueMemberN{Value: "7"}, "eseq": &types.AttributeValueMemberN{Value: "14"},
		"version": &types.AttributeValueMemberN{Value: "15"}, "created_at": &types.AttributeValueMemberN{Value: "1"},
		"created_key": &types.AttributeValueMemberS{Value: "0000000000001#kept"},
	}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("checkout-tasks"), Item: task}); err != nil {
		t.Fatal(err)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}

	out, err := run()
	if err == nil || !strings.Contains(out, "checkout-server migrate") {
		t.Fatalf("the server over an unmigrated data directory: %v: %s, want a refusal naming the command", err, out)
	}
	if out, err := run("migrate"); err != nil || !strings.Contains(out, "copied 1 tasks from checkout-tasks into checkout-tasks2") {
		t.Fatalf("migrate: %v: %s", err, out)
	}
	if out, err := run("migrate"); err != nil || !strings.Contains(out, "nothing to do") {
		t.Fatalf("migrate again: %v: %s", err, out)
	}
	if out, err := run("migrate", "extra"); err == nil {
		t.Fatalf("migrate with an argument succeeded: %s", out)
	}

	d, err = localstack.Start(context.Background(), localstack.Options{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Stop() }()
	store := lease.New(lease.Config{DB: lease.NewLocalClient(d.Endpoint)})
	got, err := store.GetTask(ctx, "kept")
	if err != nil || got.Status != lease.StatusTodo || got.Version != 15 {
		t.Fatalf("the migrated task: %+v, %v", got, err)
	}
	// The earlier table's stream was read, where its server left off (it
	// left no checkpoint), to its end, and where that is was saved.
	saved, err := lease.NewLocalClient(d.Endpoint).GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("checkout-agents"),
		Key: map[string]types.AttributeValue{"agent_id": &types.AttributeValueMemberS{Value: "#stream#checkout-tasks"}}})
	if err != nil || len(saved.Item) < 2 {
		t.Fatalf("the earlier stream's checkpoint after the migration: %v, %v", saved.Item, err)
	}
}

// An AWS upgrade: the deploy replaced the event source mapping of the
// earlier tasks table's stream, which had applied all but the last
// changes, and left no checkpoint anyone can read. `checkout-server
// migrate -aws` (here with the SDK's endpoints pointed at the local
// DynamoDB and at a stand-in for EventBridge) applies what the mapping left
// (each task's trail is whole, its queue counted once) without applying
// the stream again from its start: an event the mapping archived long
// before, deleted here, stays deleted. And the notices of the changes it
// applies go to the stack's bus, as the notices function would have sent
// them; before, they were only logged.
func TestMigrateAppliesWhatTheReplacedMappingLeft(t *testing.T) {
	ctx := testenv.Context(t)
	d, err := localstack.Start(ctx, localstack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Stop() }()
	db := lease.NewLocalClient(d.Endpoint)
	names := schema.Names{Prefix: "up-"}
	if err := lease.EnsureTables(ctx, db, names); err != nil {
		t.Fatal(err)
	}
	store := lease.New(lease.Config{DB: db, Tables: names, Notifier: &testenv.Recorder{}})
	cur, old := names.Table(schema.TasksTable), names.Table(schema.TasksTableV1)
	// Every image the tasks go through, in order: 3 creates, then 80
	// checkout+release cycles of each task.
	var images []map[string]types.AttributeValue
	snap := func(id string) {
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &cur, ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: id}}})
		if err != nil {
			t.Fatal(err)
		}
		images = append(images, out.Item)
	}
	ids := []string{"t0", "t1", "t2"}
	for _, id := range ids {
		if _, err := store.CreateTask(ctx, lease.CreateTaskParams{TaskID: id, Title: id}); err != nil {
			t.Fatal(err)
		}
		snap(id)
	}
	const cycles = 80
	for range cycles {
		for _, id := range ids {
			co, err := store.Checkout(ctx, lease.CheckoutParams{TaskID: id, AgentID: "a", Timeout: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			snap(id)
			if _, err := store.Release(ctx, lease.ReleaseParams{TaskID: id, AgentID: "a", RunID: co.RunID}); err != nil {
				t.Fatal(err)
			}
			snap(id)
		}
	}

	// The earlier table and its stream, as the upgrade deploy left them:
	// the mapping applied the first 403 changes, then was replaced.
	if _, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: &old, BillingMode: types.BillingModePayPerRequest,
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("task_id"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("task_id"), AttributeType: types.ScalarAttributeTypeS}},
		StreamSpecification:  &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages},
	}); err != nil {
		t.Fatal(err)
	}
	if err := dynamodb.NewTableExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: &old}, time.Minute); err != nil {
		t.Fatal(err)
	}
	put := func(items []map[string]types.AttributeValue) {
		for _, item := range items {
			if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &old, Item: item}); err != nil {
				t.Fatal(err)
			}
		}
	}
	const applied = 403
	put(images[:applied])
	arn, err := localstack.StreamARN(ctx, db, old)
	if err != nil {
		t.Fatal(err)
	}
	mapping := &stream.Poller{Streams: stream.NewLocalClient(d.Endpoint), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
		Handle: stream.Handler(store)}
	if n, err := mapping.Poll(ctx); err != nil || n != applied {
		t.Fatalf("the mapping applied %d changes, %v; want %d", n, err, applied)
	}
	put(images[applied:])
	if _, err := db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &cur}); err != nil {
		t.Fatal(err)
	}
	events := func(id string) []int64 {
		out, err := db.Query(ctx, &dynamodb.QueryInput{TableName: aws.String(names.Table(schema.EventsTable)), ConsistentRead: aws.Bool(true),
			KeyConditionExpression:    aws.String("task_id = :t"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":t": &types.AttributeValueMemberS{Value: id}}})
		if err != nil {
			t.Fatal(err)
		}
		var seqs []int64
		for _, it := range out.Items {
			n, _ := strconv.ParseInt(it["seq"].(*types.AttributeValueMemberN).Value, 10, 64)
			seqs = append(seqs, n)
		}
		return seqs
	}
	first := events("t0")[0]
	if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(names.Table(schema.EventsTable)), Key: map[string]types.AttributeValue{
		"task_id": &types.AttributeValueMemberS{Value: "t0"}, "seq": &types.AttributeValueMemberN{Value: strconv.FormatInt(first, 10)}}}); err != nil {
		t.Fatal(err)
	}

	// The notices the changes the mapping left would have sent.
	want := &testenv.Recorder{}
	last := map[string]map[string]types.AttributeValue{}
	var left []lease.Change
	for k, img := range images {
		id := img["task_id"].(*types.AttributeValueMemberS).Value
		if k >= applied {
			left = append(left, lease.Change{Old: last[id], New: img})
		}
		last[id] = img
	}
	if err := lease.New(lease.Config{DB: db, Tables: names, Notifier: want}).PublishNotices(ctx, left); err != nil {
		t.Fatal(err)
	}
	if len(want.Notices()) == 0 {
		t.Fatal("the changes left have no notices: the test proves nothing")
	}
	bus := &testenv.EventBridge{}
	fake := httptest.NewServer(bus)
	defer fake.Close()

	bin := testenv.Binary(t, "github.com/checkout-dev/checkout/cmd/checkout-server")
	cmd := exec.Command(bin, "migrate", "-aws")
	cmd.Env = append(os.Environ(), "CHECKOUT_TABLE_PREFIX="+names.Prefix, "CHECKOUT_DATA_DIR=", "DYNAMODB_ENDPOINT=",
		"AWS_REGION=us-east-1", "AWS_ACCESS_KEY_ID=local", "AWS_SECRET_ACCESS_KEY=local", "AWS_SESSION_TOKEN=", "AWS_PROFILE=",
		"AWS_CONFIG_FILE="+os.DevNull, "AWS_SHARED_CREDENTIALS_FILE="+os.DevNull, "AWS_EC2_METADATA_DISABLED=true",
		"AWS_ENDPOINT_URL_DYNAMODB="+d.Endpoint, "AWS_ENDPOINT_URL_DYNAMODB_STREAMS="+d.Endpoint,
		"AWS_ENDPOINT_URL_EVENTBRIDGE="+fake.URL, "CHECKOUT_EVENT_BUS=up-bus")
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "copied 3 tasks") {
		t.Fatalf("migrate -aws: %v: %s", err, out)
	}
	got := busIDs(t, bus)
	for _, n := range want.Notices() {
		if !got[n.ID] {
			t.Errorf("notice %s of a change the mapping left was not put on the bus (%d notices were)", n.ID, len(got))
		}
	}

	for _, id := range ids {
		want := 2 * cycles
		if id == "t0" {
			want-- // the event deleted: not archived again
		}
		if got := events(id); len(got) != want || id == "t0" && slices.Contains(got, first) {
			t.Errorf("%s has %d events archived (%v ... %v), want %d", id, len(got), got[:min(3, len(got))], got[max(0, len(got)-3):], want)
		}
	}
	queues, err := store.ListQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(queues) != 1 || queues[0].Counts[lease.StatusTodo] != 3 || queues[0].Counts[lease.StatusInProgress] != 0 {
		t.Fatalf("queue counts after the migration: %+v, want 3 todo in one queue", queues)
	}
}

// busIDs are the notice ids of the entries put on the bus named up-bus.
func busIDs(t *testing.T, b *testenv.EventBridge) map[string]bool {
	t.Helper()
	ids := map[string]bool{}
	for _, e := range b.Entries() {
		var detail struct{ ID string }
		if err := json.Unmarshal([]byte(fmt.Sprint(e["Detail"])), &detail); err != nil || detail.ID == "" || e["EventBusName"] != "up-bus" || e["Source"] != "checkout" {
			t.Errorf("entry %v: %v", e, err)
			continue
		}
		ids[detail.ID] = true
	}
	return ids
}
