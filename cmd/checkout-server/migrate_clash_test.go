package main

import (
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
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/localstack"
)

// Today's table already holds a task of an id the earlier table holds too,
// one no migration wrote (in AWS: the functions served the new, empty
// table while the earlier one was restored from its backup, as README
// "Upgrading" describes). The migration cannot copy the earlier task (its
// lease history and fence 7 stay behind in the earlier table), so it must
// not report success and tell the operator the earlier table "can be
// deleted": that would lose the task's history and let its fence restart
// below 7. It says which task it could not copy, and exits non-zero, the
// rest copied; run again, it still says so.
func TestMigrateReportsTasksTodaysTableAlreadyHeld(t *testing.T) {
	bin := testenv.Binary(t, "github.com/checkout-dev/checkout/cmd/checkout-server")
	dir := filepath.Join(t.TempDir(), "data")
	run := func(args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "DYNAMODB_ENDPOINT=", "CHECKOUT_TABLE_PREFIX=", "CHECKOUT_DATA_DIR="+dir, "CHECKOUT_ADDR=127.0.0.1:0")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	ctx := testenv.Context(t)
	d, err := localstack.Start(ctx, localstack.Options{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	db := lease.NewLocalClient(d.Endpoint)
	// Today's tables, served while there was no earlier table: a task
	// "clash" created there, fence 0.
	if err := lease.EnsureTables(ctx, db, schema.Names{}); err != nil {
		t.Fatal(err)
	}
	store := lease.New(lease.Config{DB: db})
	if _, err := store.CreateTask(ctx, lease.CreateTaskParams{TaskID: "clash"}); err != nil {
		t.Fatal(err)
	}
	// Then the earlier table, as restored: "clash" at fence 7, and "kept".
	_, err = db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            aws.String("checkout-tasks"),
		BillingMode:          types.BillingModePayPerRequest,
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("task_id"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("task_id"), AttributeType: types.ScalarAttributeTypeS}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := dynamodb.NewTableExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String("checkout-tasks")}, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"clash", "kept"} {
		task := map[string]types.AttributeValue{
			"task_id": &types.AttributeValueMemberS{Value: id}, "status": &types.AttributeValueMemberS{Value: "todo"},
			"fence": &types.AttributeValueMemberN{Value: "7"}, "eseq": &types.AttributeValueMemberN{Value: "14"},
			"version": &types.AttributeValueMemberN{Value: "15"}, "created_at": &types.AttributeValueMemberN{Value: "1"},
			"created_key": &types.AttributeValueMemberS{Value: "0000000000001#" + id},
		}
		if id == "clash" {
			task["description"] = &types.AttributeValueMemberS{Value: "the earlier one"}
		}
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("checkout-tasks"), Item: task}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}

	for _, pass := range []string{"migrate", "migrate again"} {
		out, err := run("migrate")
		if err == nil || strings.Contains(out, "can be deleted") || !strings.Contains(out, "clash") {
			t.Fatalf("%s over a table of today's holding a task of the same id as the earlier table: %v: %s\nwant a failure naming clash, and no word that the earlier table can be deleted", pass, err, out)
		}
	}

	d, err = localstack.Start(ctx, localstack.Options{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Stop() }()
	db = lease.NewLocalClient(d.Endpoint)
	store = lease.New(lease.Config{DB: db})
	if got, err := store.GetTask(ctx, "kept"); err != nil || got.Version != 15 {
		t.Fatalf("kept after the migration: %+v, %v; want it copied", got, err)
	}
	if got, err := store.GetTask(ctx, "clash"); err != nil || got.Description != "" {
		t.Fatalf("clash after the migration: %+v, %v; want today's task untouched", got, err)
	}
	old, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("checkout-tasks"), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: "clash"}}})
	if err != nil || len(old.Item) == 0 {
		t.Fatalf("the earlier clash after the migration: %v, %v; want it kept", old.Item, err)
	}
	// No body of the earlier clash was left behind in today's table.
	body, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("checkout-tasks2"), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: "clash#body#migrated"}}})
	if err != nil || len(body.Item) != 0 {
		t.Fatalf("the earlier clash's body in today's table: %v, %v; want none", body.Item, err)
	}
}
