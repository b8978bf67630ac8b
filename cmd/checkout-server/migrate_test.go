package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
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
