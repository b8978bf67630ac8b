package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localserver"
	"github.com/checkout-dev/checkout/localstack"
)

// A data directory with a body two hours old that no task names (a create
// cut short before its task was written), beside a task's own body of the
// same age and a body no task names yet, a minute old, and a failed
// release's error two days old that its task no longer names (a later
// failed release's replaced it) beside that later one: `checkout-server
// bodies -dry-run` lists the stray body and error and deletes nothing,
// `checkout-server bodies` deletes them alone, and run again finds nothing
// to delete.
func TestBodiesCommand(t *testing.T) {
	bin := testenv.Binary(t, "github.com/checkout-dev/checkout/cmd/checkout-server")
	dir := filepath.Join(t.TempDir(), "data")
	run := func(args ...string) (string, error) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "DYNAMODB_ENDPOINT=", "CHECKOUT_TABLE_PREFIX=", "CHECKOUT_DATA_DIR="+dir)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	ctx := testenv.Context(t)
	names := schema.Names{}
	table := aws.String(names.Table(schema.TasksTable))
	open := func() (*localstack.Dynalite, *dynamodb.Client) {
		t.Helper()
		d, err := localstack.Start(ctx, localstack.Options{Path: dir})
		if err != nil {
			t.Fatal(err)
		}
		db := lease.NewLocalClient(d.Endpoint)
		if err := lease.EnsureTables(ctx, db, names); err != nil {
			t.Fatal(err)
		}
		return d, db
	}
	there := func(db *dynamodb.Client, key string) bool {
		t.Helper()
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, ConsistentRead: aws.Bool(true),
			Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: key}}})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Item) > 0
	}

	d, db := open()
	then := time.Now().Add(-2 * time.Hour)
	store := lease.New(lease.Config{DB: db, Tables: names, Now: func() time.Time { return then }})
	if _, err := store.CreateTask(ctx, lease.CreateTaskParams{TaskID: "kept", Title: "kept", Description: "what to do"}); err != nil {
		t.Fatal(err)
	}
	earlier := time.Now().Add(-48 * time.Hour)
	retried := lease.New(lease.Config{DB: db, Tables: names, Now: func() time.Time { return earlier }})
	zero := time.Duration(0)
	if _, err := retried.CreateTask(ctx, lease.CreateTaskParams{TaskID: "retried", Title: "retried", RetryDelay: &zero}); err != nil {
		t.Fatal(err)
	}
	var errorKeys []string
	for _, text := range []string{"first", "second"} {
		co, err := retried.Checkout(ctx, lease.CheckoutParams{TaskID: "retried", AgentID: "a", Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := retried.Release(ctx, lease.ReleaseParams{TaskID: "retried", AgentID: "a", RunID: co.RunID, Outcome: lease.OutcomeFailed, Error: text}); err != nil {
			t.Fatal(err)
		}
		errorKeys = append(errorKeys, namedError(t, db, "retried"))
	}
	replaced, named := errorKeys[0], errorKeys[1]
	for key, at := range map[string]time.Time{"lost#body#b1": then, "writing#body#b2": time.Now().Add(-time.Minute)} {
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: table, Item: map[string]types.AttributeValue{
			"task_id":     &types.AttributeValueMemberS{Value: key},
			"description": &types.AttributeValueMemberS{Value: "of " + key},
			"written_at":  &types.AttributeValueMemberN{Value: strconv.FormatInt(at.UnixMilli(), 10)},
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	publishNotices(t, d, db) // as the server did before it stopped
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}

	if out, err := run("bodies", "-dry-run"); err != nil || !strings.Contains(out, "stray lost#body#b1\n") || !strings.Contains(out, "stray "+replaced+"\n") ||
		!strings.Contains(out, "3 bodies and 2 errors: 2 stray, 0 untimed, kept 1 younger than 1h0m0s (errors 25h0m0s)") {
		t.Fatalf("bodies -dry-run: %v: %s", err, out)
	}
	if out, err := run("bodies"); err != nil || !strings.Contains(out, "deleted lost#body#b1\n") || !strings.Contains(out, "deleted "+replaced+"\n") ||
		!strings.Contains(out, "3 bodies and 2 errors: 2 deleted, 0 timed, kept 1 younger than 1h0m0s") {
		t.Fatalf("bodies: %v: %s", err, out)
	}
	if out, err := run("bodies"); err != nil || !strings.Contains(out, "2 bodies and 1 errors: 0 deleted") {
		t.Fatalf("bodies again: %v: %s", err, out)
	}
	for _, args := range [][]string{{"bodies", "-older-than", "1m"}, {"bodies", "extra"}} {
		if out, err := run(args...); err == nil {
			t.Fatalf("%q succeeded: %s", args, out)
		}
	}

	d, db = open()
	defer func() { _ = d.Stop() }()
	if there(db, "lost#body#b1") || !there(db, "writing#body#b2") {
		t.Fatalf("after the runs: the stray body there %v, the young one %v; want only the young one", there(db, "lost#body#b1"), there(db, "writing#body#b2"))
	}
	if there(db, replaced) || !there(db, named) {
		t.Fatalf("after the runs: the replaced error there %v, the named one %v; want only the named one", there(db, replaced), there(db, named))
	}
	got, err := lease.New(lease.Config{DB: db, Tables: names}).GetTask(ctx, "kept")
	if err != nil || got.Description != "what to do" {
		t.Fatalf("the task after the runs: %+v, %v; want its description", got, err)
	}
}

// A command whose clock runs ahead, by more than -older-than, judges a
// body's age by the database's clock instead (the Date of its answers):
// a body no task names yet, a minute old, is kept, and one two hours old
// is deleted. Before, the command's clock alone made the young body look
// old, and it was deleted while its request might still name it.
func TestBodiesCommandClockAhead(t *testing.T) {
	ctx := testenv.Context(t)
	d, err := localstack.Start(ctx, localstack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Stop() }()
	names := schema.Names{Prefix: "ahead-"}
	db := lease.NewLocalClient(d.Endpoint)
	if err := lease.EnsureTables(ctx, db, names); err != nil {
		t.Fatal(err)
	}
	table := aws.String(names.Table(schema.TasksTable))
	for key, at := range map[string]time.Time{"lost#body#old": time.Now().Add(-2 * time.Hour), "writing#body#young": time.Now().Add(-time.Minute)} {
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: table, Item: map[string]types.AttributeValue{
			"task_id":    &types.AttributeValueMemberS{Value: key},
			"written_at": &types.AttributeValueMemberN{Value: strconv.FormatInt(at.UnixMilli(), 10)},
		}})
		if err != nil {
			t.Fatal(err)
		}
	}
	env := map[string]string{localstack.EnvEndpoint: d.Endpoint, "CHECKOUT_TABLE_PREFIX": names.Prefix}
	ahead := func() time.Time { return time.Now().Add(3 * time.Hour) }
	var out, errs strings.Builder
	if err := bodies(ctx, nil, func(k string) string { return env[k] }, ahead, &out, &errs); err != nil {
		t.Fatalf("bodies: %v: %s%s", err, out.String(), errs.String())
	}
	if !strings.Contains(out.String(), "deleted lost#body#old\n") || strings.Contains(out.String(), "writing#body#young") ||
		!strings.Contains(out.String(), "1 deleted, 0 timed, kept 1 younger than 1h0m0s") {
		t.Fatalf("bodies with the command's clock 3 hours ahead: %s; want the old body deleted, the young one kept", out.String())
	}
	got, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: table, ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: "writing#body#young"}}})
	if err != nil || len(got.Item) == 0 {
		t.Fatalf("the young body after the run: %v, %v; want it there", got, err)
	}
}

// A data directory whose server stopped before archiving two failed
// releases of a task, the second replacing the first's error, 26 hours
// ago: `checkout-server bodies` applies the changes the server left
// unapplied (from its checkpoint) before it deletes the replaced error,
// so the trail keeps both errors. Before, it deleted the error first, as
// the stream's records outlive a day while the server is stopped, and the
// server started again archived the first release with error "".
func TestBodiesCommandArchivesTheStoppedServersReleasesFirst(t *testing.T) {
	ctx := testenv.Context(t)
	dir, replaced := stoppedWithTwoFailedReleases(t, true)
	if out, err := runBodies(t, dir); err != nil || !strings.Contains(out, "deleted "+replaced+"\n") {
		t.Fatalf("bodies: %v: %s; want the replaced error deleted", err, out)
	}

	d, db := openDataDir(t, dir)
	defer func() { _ = d.Stop() }()
	store := lease.New(lease.Config{DB: db, Tables: schema.Names{}})
	// The server's consumer of the consequences, as it starts again.
	if _, err := dataDirPoller(t, d, db, stream.ConsequencesHandler(store), localserver.ConsequencesCheckpoints(db, schema.Names{})).Poll(ctx); err != nil {
		t.Fatal(err)
	}
	tr, err := store.Trail(ctx, "retried")
	if err != nil {
		t.Fatal(err)
	}
	var errs []string
	for _, e := range tr.Events {
		if e.Outcome == lease.OutcomeFailed {
			errs = append(errs, e.Error)
		}
	}
	if !slices.Equal(errs, []string{"first", "second"}) {
		t.Fatalf("the failed releases' errors in the trail: %q; want first and second", errs)
	}
}

// The same data directory: `checkout-server bodies` keeps the replaced
// error while the server's notices of its release are still to be
// published (the server publishes them when it starts again), so the
// notices carry both errors. Before, it deleted the error, having applied
// the consequences alone, and the notice of its release said error "".
func TestBodiesCommandKeepsTheErrorsOfUnpublishedNotices(t *testing.T) {
	ctx := testenv.Context(t)
	dir, _ := stoppedWithTwoFailedReleases(t, false)
	if out, err := runBodies(t, dir); err != nil || strings.Contains(out, "deleted retried#error#") {
		t.Fatalf("bodies: %v: %s; want the replaced error kept", err, out)
	}

	d, db := openDataDir(t, dir)
	defer func() { _ = d.Stop() }()
	var notices noticeLog
	store := lease.New(lease.Config{DB: db, Tables: schema.Names{}, Notifier: &notices})
	// The server's consumer of the notices, as it starts again.
	if _, err := dataDirPoller(t, d, db, stream.NoticesHandler(store), localserver.NoticesCheckpoints(db, schema.Names{})).Poll(ctx); err != nil {
		t.Fatal(err)
	}
	var errs []string
	for _, n := range notices {
		if n.Kind == lease.NoticeLeaseEnded {
			errs = append(errs, n.Event.Error)
		}
	}
	if !slices.Equal(errs, []string{"first", "second"}) {
		t.Fatalf("the failed releases' errors in the notices: %q; want first and second", errs)
	}
}

// stoppedWithTwoFailedReleases is a data directory whose server stopped,
// 26 hours ago, before archiving two failed releases of task "retried",
// with errors "first" and "second", and, unless published, before
// publishing their notices.
func stoppedWithTwoFailedReleases(t *testing.T, published bool) (dir, replaced string) {
	t.Helper()
	ctx := testenv.Context(t)
	dir = filepath.Join(t.TempDir(), "data")
	d, db := openDataDir(t, dir)
	then := time.Now().Add(-26 * time.Hour)
	store := lease.New(lease.Config{DB: db, Tables: schema.Names{}, Now: func() time.Time { return then }})
	zero := time.Duration(0)
	if _, err := store.CreateTask(ctx, lease.CreateTaskParams{TaskID: "retried", Title: "retried", RetryDelay: &zero}); err != nil {
		t.Fatal(err)
	}
	for _, text := range []string{"first", "second"} {
		co, err := store.Checkout(ctx, lease.CheckoutParams{TaskID: "retried", AgentID: "a", Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Release(ctx, lease.ReleaseParams{TaskID: "retried", AgentID: "a", RunID: co.RunID, Outcome: lease.OutcomeFailed, Error: text}); err != nil {
			t.Fatal(err)
		}
		if replaced == "" {
			replaced = namedError(t, db, "retried")
		}
	}
	if published {
		publishNotices(t, d, db)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	return dir, replaced
}

// namedError is the key of the error item task taskID names (its latest
// failed release's error).
func namedError(t *testing.T, db *dynamodb.Client, taskID string) string {
	t.Helper()
	out, err := db.GetItem(testenv.Context(t), &dynamodb.GetItemInput{TableName: aws.String(schema.Names{}.Table(schema.TasksTable)), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: taskID}}})
	if err != nil {
		t.Fatal(err)
	}
	n, _ := out.Item["last_error_fence"].(*types.AttributeValueMemberN)
	if n == nil {
		t.Fatalf("task %s names no error", taskID)
	}
	return taskID + "#error#" + n.Value
}

// openDataDir starts dynalite over dir, with the tables.
func openDataDir(t *testing.T, dir string) (*localstack.Dynalite, *dynamodb.Client) {
	t.Helper()
	ctx := testenv.Context(t)
	d, err := localstack.Start(ctx, localstack.Options{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	db := lease.NewLocalClient(d.Endpoint)
	if err := lease.EnsureTables(ctx, db, schema.Names{}); err != nil {
		t.Fatal(err)
	}
	return d, db
}

// dataDirPoller is a consumer of the tasks table's stream over d, as the
// server runs one.
func dataDirPoller(t *testing.T, d *localstack.Dynalite, db *dynamodb.Client, handle func(context.Context, events.DynamoDBEvent) error, saved stream.Checkpoints) *stream.Poller {
	t.Helper()
	arn, err := localstack.StreamARN(testenv.Context(t), db, schema.Names{}.Table(schema.TasksTable))
	if err != nil {
		t.Fatal(err)
	}
	return &stream.Poller{Streams: stream.NewLocalClient(d.Endpoint), StreamARN: arn, Handle: handle, Saved: saved}
}

// publishNotices publishes the notices of the changes of the stream over
// d from the server's checkpoint, as the server does.
func publishNotices(t *testing.T, d *localstack.Dynalite, db *dynamodb.Client) {
	t.Helper()
	p := dataDirPoller(t, d, db, stream.NoticesHandler(lease.New(lease.Config{DB: db, Tables: schema.Names{}, Notifier: &noticeLog{}})),
		localserver.NoticesCheckpoints(db, schema.Names{}))
	if _, err := p.Poll(testenv.Context(t)); err != nil {
		t.Fatal(err)
	}
}

// runBodies runs `checkout-server bodies` over data directory dir.
func runBodies(t *testing.T, dir string) (string, error) {
	t.Helper()
	cmd := exec.Command(testenv.Binary(t, "github.com/checkout-dev/checkout/cmd/checkout-server"), "bodies")
	cmd.Env = append(os.Environ(), "DYNAMODB_ENDPOINT=", "CHECKOUT_TABLE_PREFIX=", "CHECKOUT_DATA_DIR="+dir)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// noticeLog keeps the notices it is given.
type noticeLog []lease.Notice

func (l *noticeLog) Notify(_ context.Context, n lease.Notice) error {
	*l = append(*l, n)
	return nil
}
