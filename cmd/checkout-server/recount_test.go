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
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localserver"
	"github.com/checkout-dev/checkout/localstack"
)

// A data directory whose queue count is off, with a change its server
// stopped before applying: `checkout-server recount` applies the change
// (from the server's checkpoint), mends the count and says so; run again,
// it finds every count right.
func TestRecountCommand(t *testing.T) {
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
	open := func() (*localstack.Dynalite, *lease.Store, *stream.Poller) {
		t.Helper()
		d, err := localstack.Start(ctx, localstack.Options{Path: dir})
		if err != nil {
			t.Fatal(err)
		}
		db := lease.NewLocalClient(d.Endpoint)
		if err := lease.EnsureTables(ctx, db, names); err != nil {
			t.Fatal(err)
		}
		arn, err := localstack.StreamARN(ctx, db, names.Table(schema.TasksTable))
		if err != nil {
			t.Fatal(err)
		}
		store := lease.New(lease.Config{DB: db, Tables: names})
		// The server's consumer of the consequences, as it polls.
		p := &stream.Poller{Streams: stream.NewLocalClient(d.Endpoint), StreamARN: arn,
			Handle: stream.ConsequencesHandler(store), Saved: localserver.ConsequencesCheckpoints(db, names)}
		return d, store, p
	}
	create := func(store *lease.Store, id string) {
		t.Helper()
		if _, err := store.CreateTask(ctx, lease.CreateTaskParams{TaskID: id, Title: id, Queue: "q"}); err != nil {
			t.Fatal(err)
		}
	}

	d, store, p := open()
	create(store, "t1")
	create(store, "t2")
	if _, err := p.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := lease.NewLocalClient(d.Endpoint).UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(names.Table(schema.HeartbeatsTable)), Key: map[string]types.AttributeValue{"agent_id": &types.AttributeValueMemberS{Value: "#queue#q"}},
		UpdateExpression: aws.String("SET #n = :n"), ExpressionAttributeNames: map[string]string{"#n": "n#todo"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: "9"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	create(store, "t3") // the server stops before applying it
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}

	if out, err := run("recount"); err != nil || !strings.Contains(out, "counted 3 tasks: 0 queues right, mended: q") {
		t.Fatalf("recount: %v: %s", err, out)
	}
	if out, err := run("recount"); err != nil || !strings.Contains(out, "counted 3 tasks: 1 queues right, mended: none") {
		t.Fatalf("recount again: %v: %s", err, out)
	}
	if out, err := run("recount", "extra"); err == nil {
		t.Fatalf("recount with an argument succeeded: %s", out)
	}

	d, store, p = open()
	defer func() { _ = d.Stop() }()
	if n, err := p.Poll(ctx); err != nil || n != 0 {
		t.Fatalf("the stream after the recount: %d changes left to apply, %v", n, err)
	}
	qs, err := store.ListQueues(ctx)
	if err != nil || len(qs) != 1 || qs[0].Counts[lease.StatusTodo] != 3 {
		t.Fatalf("queues after the recount: %+v, %v; want q with 3 todo", qs, err)
	}
}

// A change its server stopped before applying is archived by
// `checkout-server recount`, late: keyed in the fleet feed at when it is
// archived, as the server keys it, not at the transition's own time,
// which a follower's cursor may have passed meanwhile (a feed read that
// could not apply the stream first). Keyed there, the follower never sees
// the event.
func TestRecountArchivesALateEventAheadOfAFollower(t *testing.T) {
	bin := testenv.Binary(t, "github.com/checkout-dev/checkout/cmd/checkout-server")
	dir := filepath.Join(t.TempDir(), "data")
	ctx := testenv.Context(t)
	names := schema.Names{}
	d, err := localstack.Start(ctx, localstack.Options{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	db := lease.NewLocalClient(d.Endpoint)
	if err := lease.EnsureTables(ctx, db, names); err != nil {
		t.Fatal(err)
	}
	// The transition is a minute old when the follower reads past it.
	then := time.Now().Add(-time.Minute)
	writer := lease.New(lease.Config{DB: db, Tables: names, Now: func() time.Time { return then }})
	if _, err := writer.CreateTask(ctx, lease.CreateTaskParams{TaskID: "t", Title: "t", Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Checkout(ctx, lease.CheckoutParams{TaskID: "t", AgentID: "a", Timeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	reader := lease.New(lease.Config{DB: db, Tables: names})
	page, err := reader.Feed(ctx, lease.FeedParams{Since: then.Add(-time.Minute), Horizon: time.Now().Truncate(time.Millisecond)})
	if err != nil || len(page.Events) != 0 {
		t.Fatalf("the feed before the change is applied: %+v, %v; want no events", page, err)
	}
	if err := d.Stop(); err != nil { // the server stops before applying it
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "recount")
	cmd.Env = append(os.Environ(), "DYNAMODB_ENDPOINT=", "CHECKOUT_TABLE_PREFIX=", "CHECKOUT_DATA_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("recount: %v: %s", err, out)
	}

	d, err = localstack.Start(ctx, localstack.Options{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = d.Stop() }()
	reader = lease.New(lease.Config{DB: lease.NewLocalClient(d.Endpoint), Tables: names})
	page, err = reader.Feed(ctx, lease.FeedParams{Cursor: page.NextCursor, Horizon: time.Now().Truncate(time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Events) != 1 || page.Events[0].Type != lease.EventCheckout {
		t.Fatalf("the follower's next page after the recount: %+v; want the checkout the recount archived", page.Events)
	}
}
