package lease_test

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// putStrayBody writes body key as a writer does (body.go), written at
// (none when zero), with no task write naming it.
func putStrayBody(t *testing.T, e *env, key string, at time.Time) {
	t.Helper()
	item := map[string]types.AttributeValue{
		"task_id":     &types.AttributeValueMemberS{Value: key},
		"description": &types.AttributeValueMemberS{Value: "the description of " + key},
	}
	if !at.IsZero() {
		item["written_at"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(at.UnixMilli(), 10)}
	}
	must[*dynamodb.PutItemOutput](t)(e.db.PutItem(ctx(t), &dynamodb.PutItemInput{TableName: aws.String(e.names.Table(schema.TasksTable)), Item: item}))
}

// bodyThere reads body key: whether it exists, and its written_at.
func bodyThere(t *testing.T, e *env, key string) (bool, int64) {
	t.Helper()
	out := must[*dynamodb.GetItemOutput](t)(e.db.GetItem(ctx(t), &dynamodb.GetItemInput{TableName: aws.String(e.names.Table(schema.TasksTable)),
		Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: key}}, ConsistentRead: aws.Bool(true)}))
	if len(out.Item) == 0 {
		return false, 0
	}
	at, _ := out.Item["written_at"].(*types.AttributeValueMemberN)
	if at == nil {
		return true, 0
	}
	n, _ := strconv.ParseInt(at.Value, 10, 64)
	return true, n
}

// errorItemKey is the key of the error item task id names.
func errorItemKey(t *testing.T, e *env, id string) string {
	t.Helper()
	n, _ := rawTask(t, e, id)["last_error_fence"].(*types.AttributeValueMemberN)
	if n == nil {
		t.Fatalf("task %s names no error item", id)
	}
	return id + "#error#" + n.Value
}

// An old body no task names (a PATCH's whose write was lost, a create's
// cut short before its task was written) is deleted; a body its task
// names stays however old, and so does a young one no task names yet (a
// create or a PATCH writing it right now). A dry run lists the same and
// deletes nothing.
func TestStrayBodiesOldUnnamedAreDeleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	desc := "what to do"
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "named", Title: "t", Description: "first"}))
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "named", Description: &desc}))
	named := bodyOf(t, e, "named")
	if ok, at := bodyThere(t, e, named); !ok || at != epoch.UnixMilli() {
		t.Fatalf("the PATCH's body: there %v, written_at %d; want %d", ok, at, epoch.UnixMilli())
	}
	putStrayBody(t, e, "named#body#lost", epoch)
	putStrayBody(t, e, "crashed#body#c1", epoch)
	e.clock.Advance(90 * time.Minute)
	putStrayBody(t, e, "named#body#writing", e.clock.Now())
	e.clock.Advance(30 * time.Minute)

	dry := must[lease.StrayBodiesResult](t)(lease.DeleteStrayBodies(c, uncounted(), e.names, lease.StrayBodiesParams{Now: e.clock.Now, DryRun: true}))
	want := []string{"crashed#body#c1", "named#body#lost"}
	if !slices.Equal(dry.Deleted, want) || dry.Bodies != 4 || dry.Young != 1 || dry.Changed != 0 || len(dry.Timed) != 0 {
		t.Fatalf("dry run: %+v; want %v to delete of 4 bodies, 1 young", dry, want)
	}
	for _, key := range want {
		if ok, _ := bodyThere(t, e, key); !ok {
			t.Fatalf("the dry run deleted %s", key)
		}
	}

	res := must[lease.StrayBodiesResult](t)(lease.DeleteStrayBodies(c, uncounted(), e.names, lease.StrayBodiesParams{Now: e.clock.Now}))
	if !slices.Equal(res.Deleted, want) || res.Young != 1 || res.Changed != 0 {
		t.Fatalf("the run: %+v; want %v deleted, 1 young", res, want)
	}
	for key, kept := range map[string]bool{"crashed#body#c1": false, "named#body#lost": false, named: true, "named#body#writing": true} {
		if ok, _ := bodyThere(t, e, key); ok != kept {
			t.Errorf("%s there after the run: %v, want %v", key, ok, kept)
		}
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "named")); got.Description != desc {
		t.Fatalf("the named task's description after the run: %q, want %q", got.Description, desc)
	}
	if _, err := lease.DeleteStrayBodies(c, uncounted(), e.names, lease.StrayBodiesParams{Now: e.clock.Now, OlderThan: time.Minute}); err == nil {
		t.Fatal("a run deleting bodies a minute old was not refused")
	}
}

// A body written before bodies carried their time of writing, no task
// naming it, is given the time of the run and deleted by the first run
// at least an hour later.
func TestStrayBodiesUntimedAreTimedThenDeleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	putStrayBody(t, e, "old#body#u", time.Time{})
	run := func() lease.StrayBodiesResult {
		t.Helper()
		return must[lease.StrayBodiesResult](t)(lease.DeleteStrayBodies(c, uncounted(), e.names, lease.StrayBodiesParams{Now: e.clock.Now}))
	}
	if res := run(); !slices.Equal(res.Timed, []string{"old#body#u"}) || len(res.Deleted) != 0 {
		t.Fatalf("first run: %+v; want the body timed", res)
	}
	if ok, at := bodyThere(t, e, "old#body#u"); !ok || at != epoch.UnixMilli() {
		t.Fatalf("the body after the first run: there %v, written_at %d; want %d", ok, at, epoch.UnixMilli())
	}
	e.clock.Advance(30 * time.Minute)
	if res := run(); len(res.Deleted) != 0 || res.Young != 1 {
		t.Fatalf("a run half an hour later: %+v; want the body kept, young", res)
	}
	e.clock.Advance(time.Hour)
	if res := run(); !slices.Equal(res.Deleted, []string{"old#body#u"}) {
		t.Fatalf("a run an hour and a half later: %+v; want the body deleted", res)
	}
}

// raceDB runs a function once before the GetItem, or DeleteItem, of the
// key it is given for.
type raceDB struct {
	lease.StrayBodiesDB
	beforeGet, beforeDelete map[string]func()
}

func once(fs map[string]func(), key map[string]types.AttributeValue) {
	id := key["task_id"].(*types.AttributeValueMemberS).Value
	if f := fs[id]; f != nil {
		delete(fs, id)
		f()
	}
}

func (d *raceDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	once(d.beforeGet, in.Key)
	return d.StrayBodiesDB.GetItem(ctx, in, opts...)
}

func (d *raceDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	once(d.beforeDelete, in.Key)
	return d.StrayBodiesDB.DeleteItem(ctx, in, opts...)
}

// An old body that a task names after the Scan read it unnamed is kept:
// named before the consistent read of its task, or written again and
// named (a migration run again writes its body again, then names it)
// after that read and before the delete.
func TestStrayBodiesNamedAfterTheScanStay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	table := aws.String(e.names.Table(schema.TasksTable))
	name := func(id, token string) {
		t.Helper()
		must[*dynamodb.UpdateItemOutput](t)(e.db.UpdateItem(c, &dynamodb.UpdateItemInput{TableName: table,
			Key:                       map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: id}},
			UpdateExpression:          aws.String("SET body = :b"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":b": &types.AttributeValueMemberS{Value: token}}}))
	}
	e.task(t, "read", "deleted")
	putStrayBody(t, e, "read#body#old", epoch)
	putStrayBody(t, e, "deleted#body#migrated", epoch)
	e.clock.Advance(2 * time.Hour)

	db := &raceDB{StrayBodiesDB: uncounted(),
		beforeGet: map[string]func(){"read": func() { name("read", "old") }},
		beforeDelete: map[string]func(){"deleted#body#migrated": func() {
			putStrayBody(t, e, "deleted#body#migrated", e.clock.Now())
			name("deleted", "migrated")
		}},
	}
	res := must[lease.StrayBodiesResult](t)(lease.DeleteStrayBodies(c, db, e.names, lease.StrayBodiesParams{Now: e.clock.Now}))
	if len(res.Deleted) != 0 || res.Changed != 2 {
		t.Errorf("the run: %+v; want both bodies kept, changed since the Scan", res)
	}
	for id, key := range map[string]string{"read": "read#body#old", "deleted": "deleted#body#migrated"} {
		if got, err := e.store.GetTask(c, id); err != nil || got.Description != "the description of "+key {
			t.Errorf("task %s after the run: %+v, %v; want the description of %s", id, got, err, key)
		}
	}
}

// A migration cut short between a task's body and its copy leaves the
// body old and unnamed; run again after the Scan, it writes the body
// again and names it: the body is kept, and the task keeps its
// description. (Run again later, after the task's read, it would find
// the body kept all the same: its task is not copied.)
func TestStrayBodiesAMigrationRunAgainKeepsItsBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "a", Title: "t", Description: "what to do", Metadata: []byte(`{"k":1}`)}))
	e.oldTasksTable(t)
	if _, err := lease.Migrate(c, &lostCopyDB{MigrateDB: uncounted()}, e.names, schema.ShardCounts{}, nil); err == nil {
		t.Fatal("the migration cut short answered no error")
	}
	if ok, at := bodyThere(t, e, "a#body#migrated"); !ok || at == 0 {
		t.Fatalf("the body of the migration cut short: there %v, written_at %d", ok, at)
	}
	db := &raceDB{StrayBodiesDB: uncounted(), beforeGet: map[string]func(){"a": func() {
		must[lease.MigrateResult](t)(lease.Migrate(c, uncounted(), e.names, schema.ShardCounts{}, nil))
	}}}
	later := func() time.Time { return time.Now().Add(2 * time.Hour) }
	res := must[lease.StrayBodiesResult](t)(lease.DeleteStrayBodies(c, db, e.names, lease.StrayBodiesParams{Now: later}))
	if len(res.Deleted) != 0 || res.Changed != 1 {
		t.Errorf("the run: %+v; want the body kept, written again since the Scan", res)
	}
	if got, err := e.store.GetTask(c, "a"); err != nil || got.Description != "what to do" {
		t.Fatalf("the task after the migration: %+v, %v; want its description", got, err)
	}
}

// A failed release's error is an item of its own, "<id>#error#<n>",
// which the task names until a later failed release names its own: the
// one replaced was never read again (the release's archived event keeps
// its text) and stayed for good. An error no task names is deleted once
// it is a day older than a body would have to be (the stream reads it up
// to a day after its release, archiving it), as is one a refused release
// left that no task ever named; the one its task names stays however old,
// and the trail keeps both releases' errors.
func TestStrayBodiesReplacedErrorsAreDeleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "t", MaxAttempts: new(5), RetryDelay: new(time.Duration(0))})
	var keys []string
	for _, text := range []string{"first", "second"} {
		co := e.checkout(t, "t", "x", time.Minute)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID, Outcome: lease.OutcomeFailed, Error: text}))
		keys = append(keys, errorItemKey(t, e, "t"))
	}
	replaced, named := keys[0], keys[1]
	if ok, at := bodyThere(t, e, replaced); !ok || at != epoch.UnixMilli() {
		t.Fatalf("the first error: there %v, written_at %d; want %d", ok, at, epoch.UnixMilli())
	}
	putStrayBody(t, e, "refused#error#7", epoch)
	e.drain(t)
	run := func(dry bool) lease.StrayBodiesResult {
		t.Helper()
		return must[lease.StrayBodiesResult](t)(lease.DeleteStrayBodies(c, uncounted(), e.names, lease.StrayBodiesParams{Now: e.clock.Now, DryRun: dry}))
	}

	e.clock.Advance(2 * time.Hour)
	if res := run(false); len(res.Deleted) != 0 || res.Errors != 3 || res.Young != 2 {
		t.Fatalf("a run two hours later: %+v; want 3 errors, the 2 no task names kept, young", res)
	}
	e.clock.Advance(24 * time.Hour)
	want := []string{"refused#error#7", replaced}
	if dry := run(true); !slices.Equal(dry.Deleted, want) {
		t.Fatalf("a dry run a day later: %+v; want %v to delete", dry, want)
	}
	if res := run(false); !slices.Equal(res.Deleted, want) || res.Changed != 0 {
		t.Fatalf("a run a day later: %+v; want %v deleted", res, want)
	}
	for key, kept := range map[string]bool{"refused#error#7": false, replaced: false, named: true} {
		if ok, _ := bodyThere(t, e, key); ok != kept {
			t.Errorf("%s there after the run: %v, want %v", key, ok, kept)
		}
	}
	if got := e.get(t, "t").LastError; got != "second" {
		t.Errorf("last_error after the run: %q, want second", got)
	}
	var errs []string
	for _, ev := range e.events(t, "t") {
		if ev.Error != "" {
			errs = append(errs, ev.Error)
		}
	}
	if !slices.Equal(errs, []string{"first", "second"}) {
		t.Errorf("the trail's errors after the run: %q, want first and second", errs)
	}
}

// stalledCopyDB runs stall once, before the first copy of a task (a
// PutItem whose item has migrated_at): a migration held up between a
// task's body and its item.
type stalledCopyDB struct {
	lease.MigrateDB
	stall func()
}

func (d *stalledCopyDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if _, ok := in.Item["migrated_at"]; ok && d.stall != nil {
		stall := d.stall
		d.stall = nil
		stall()
	}
	return d.MigrateDB.PutItem(ctx, in, opts...)
}

// A migration is an operator's process, not a request whose life is
// bounded: held up between a task's body and its copy (its machine
// asleep, say) for longer than -older-than, its body looked stray, no
// task naming it, and was deleted; then the copy named it, and the task
// named a body that is gone (its description lost, and every read of it
// refused). A body a migration wrote is kept while its task is not copied.
func TestStrayBodiesOfACopyHeldUpStay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "a", Title: "t", Description: "what to do", Metadata: []byte(`{"k":1}`)}))
	e.oldTasksTable(t)
	later := func() time.Time { return time.Now().Add(2 * time.Hour) }
	var res lease.StrayBodiesResult
	db := &stalledCopyDB{MigrateDB: uncounted(), stall: func() {
		res = must[lease.StrayBodiesResult](t)(lease.DeleteStrayBodies(c, uncounted(), e.names, lease.StrayBodiesParams{Now: later}))
	}}
	if got := must[lease.MigrateResult](t)(lease.Migrate(c, db, e.names, schema.ShardCounts{}, nil)); got.Copied != 1 {
		t.Fatalf("migrate: %+v, want the task copied", got)
	}
	if res.Bodies != 1 || len(res.Deleted) != 0 || res.Uncopied != 1 {
		t.Errorf("the run while the copy was held up: %+v; want its body kept", res)
	}
	got, err := e.store.GetTask(c, "a")
	if err != nil || got.Description != "what to do" || string(got.Metadata) != `{"k":1}` {
		t.Fatalf("the task after the migration: %+v, %v; want its description and metadata", got, err)
	}
}
