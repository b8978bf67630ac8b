package lease_test

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A migration run again after it was cut short (the earlier table not
// marked copied) put a new body for every task it had already copied,
// then found the task there and left that body, named by no task, for
// good: one more for each task with a description at every run. Only the
// bodies the tasks name are left now.
func TestMigrateRunAgainLeavesNoBodyBehind(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	for _, id := range []string{"a", "b"} {
		must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: id, Title: "t", Description: "what to do in " + id, Metadata: []byte(`{"k":1}`)}))
	}
	e.oldTasksTable(t)
	db := uncounted()
	must[lease.MigrateResult](t)(lease.Migrate(c, db, e.names, schema.ShardCounts{}, nil))
	// Cut short before the earlier table was marked copied.
	must[*dynamodb.DeleteItemOutput](t)(db.DeleteItem(c, &dynamodb.DeleteItemInput{
		TableName: aws.String(e.names.Table(schema.TasksTableV1)), Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: "#migrated"}},
	}))
	if again := must[lease.MigrateResult](t)(lease.Migrate(c, db, e.names, schema.ShardCounts{}, nil)); again.Present != 2 || again.Copied != 0 {
		t.Fatalf("migrate again: %+v, want both tasks present", again)
	}
	named := map[string]bool{bodyOf(t, e, "a"): true, bodyOf(t, e, "b"): true}
	page := must[*dynamodb.ScanOutput](t)(db.Scan(c, &dynamodb.ScanInput{TableName: aws.String(e.names.Table(schema.TasksTable)), ConsistentRead: aws.Bool(true)}))
	for _, item := range page.Items {
		if key := item["task_id"].(*types.AttributeValueMemberS).Value; strings.Contains(key, "#body#") && !named[key] {
			t.Errorf("body %s is left behind; no task names it", key)
		}
	}
	for _, id := range []string{"a", "b"} {
		if got := must[lease.Task](t)(e.store.GetTask(c, id)); got.Description != "what to do in "+id {
			t.Errorf("%s after the migrations: description %q", id, got.Description)
		}
	}
}
