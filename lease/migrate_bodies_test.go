package lease_test

import (
	"context"
	"strings"
	"sync/atomic"
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

// putCopyTwiceDB sends the first copy of a task (a PutItem whose item has
// migrated_at) twice: the first applied, its answer lost, the SDK sending
// it again.
type putCopyTwiceDB struct {
	lease.MigrateDB
	sent atomic.Bool
}

func (d *putCopyTwiceDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if _, ok := in.Item["migrated_at"]; ok && d.sent.CompareAndSwap(false, true) {
		if _, err := d.MigrateDB.PutItem(ctx, in, opts...); err != nil {
			return nil, err
		}
	}
	return d.MigrateDB.PutItem(ctx, in, opts...)
}

// A migration whose copy of a task applied, whose answer was lost and
// which the SDK sent again took the second sending's refusal for a task
// copied before and deleted the body the copy had just named: the task's
// description was gone and every GET of it failed. The copy now knows its
// own item by the body it names.
func TestAMigrationWhoseCopyWasSentTwiceKeepsTheBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "a", Title: "t", Description: "what to do", Metadata: []byte(`{"k":1}`)}))
	e.oldTasksTable(t)
	db := &putCopyTwiceDB{MigrateDB: uncounted()}
	res := must[lease.MigrateResult](t)(lease.Migrate(c, db, e.names, schema.ShardCounts{}, nil))
	if !db.sent.Load() {
		t.Fatal("no copy was sent twice")
	}
	if res.Copied != 1 || res.Present != 0 {
		t.Errorf("migrate: %+v, want the task copied", res)
	}
	got, err := e.store.GetTask(c, "a")
	if err != nil {
		t.Fatalf("GET of the task copied: %v; want it with its description", err)
	}
	if got.Description != "what to do" {
		t.Fatalf("description %q, want %q", got.Description, "what to do")
	}
}

// lostCopyDB fails the first copy of a task (a PutItem whose item has
// migrated_at) with a 5xx before DynamoDB sees it: a migration cut short
// between a task's body and its item.
type lostCopyDB struct {
	lease.MigrateDB
	failed atomic.Bool
}

func (d *lostCopyDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if _, ok := in.Item["migrated_at"]; ok && d.failed.CompareAndSwap(false, true) {
		return nil, &types.InternalServerError{Message: aws.String("cut short")}
	}
	return d.MigrateDB.PutItem(ctx, in, opts...)
}

// A migration cut short after a task's body was written and before the
// task was copied left that body when run again: the run again wrote
// another body, under a token of its own, for the task to name, and the
// first stayed, named by no task, for good. A task's copied body now has
// the same key at every run, so the run again writes the one the task
// names.
func TestMigrateCutShortBetweenABodyAndItsTaskLeavesNoBodyBehind(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "a", Title: "t", Description: "what to do", Metadata: []byte(`{"k":1}`)}))
	e.oldTasksTable(t)
	db := &lostCopyDB{MigrateDB: uncounted()}
	if _, err := lease.Migrate(c, db, e.names, schema.ShardCounts{}, nil); err == nil {
		t.Fatal("the migration cut short answered no error")
	}
	if again := must[lease.MigrateResult](t)(lease.Migrate(c, db, e.names, schema.ShardCounts{}, nil)); again.Copied != 1 {
		t.Fatalf("migrate again: %+v, want the task copied", again)
	}
	named := bodyOf(t, e, "a")
	page := must[*dynamodb.ScanOutput](t)(db.Scan(c, &dynamodb.ScanInput{TableName: aws.String(e.names.Table(schema.TasksTable)), ConsistentRead: aws.Bool(true)}))
	for _, item := range page.Items {
		if key := item["task_id"].(*types.AttributeValueMemberS).Value; strings.Contains(key, "#body#") && key != named {
			t.Errorf("body %s is left behind; no task names it", key)
		}
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "a")); got.Description != "what to do" || string(got.Metadata) != `{"k":1}` {
		t.Errorf("after the migrations: description %q, metadata %s", got.Description, got.Metadata)
	}
}

// A task of the earlier schema with a description and no metadata, or
// metadata and no description, keeps the one it has when migrated.
func TestMigrateKeepsADescriptionOrMetadataAlone(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "described", Title: "t", Description: "what to do"}))
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "tagged", Title: "t", Metadata: []byte(`{"k":1}`)}))
	e.oldTasksTable(t)
	if res := must[lease.MigrateResult](t)(lease.Migrate(c, uncounted(), e.names, schema.ShardCounts{}, nil)); res.Copied != 2 {
		t.Fatalf("migrate: %+v, want both tasks copied", res)
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "described")); got.Description != "what to do" || got.Metadata != nil {
		t.Errorf("the described task after the migration: description %q, metadata %s", got.Description, got.Metadata)
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "tagged")); got.Description != "" || string(got.Metadata) != `{"k":1}` {
		t.Errorf("the tagged task after the migration: description %q, metadata %s", got.Description, got.Metadata)
	}
}
