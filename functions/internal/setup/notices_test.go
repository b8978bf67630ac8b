package setup

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

// stuckNotifier is a receiver that never answers: every notice waits for
// its caller to give up.
type stuckNotifier struct{ asked chan lease.Notice }

func (n stuckNotifier) Notify(ctx context.Context, nt lease.Notice) error {
	select {
	case n.asked <- nt:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

// The deployed stream function's handler (stream.WindowHandler, as
// functions/stream runs it) writes a freeing's watcher message and never
// waits for a notice, even with a notifier that never answers: notices are
// the notices function's, on a reading of the stream of its own, which
// publishes them (and only waits itself). Before, the stream function
// published the notices in the same call, so a webhook receiver that was
// down held up every later message and archived event in AWS.
func TestStreamFunctionNeverWaitsForNotices(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 3, 20, 14, 0, 0, 0, time.UTC))
	client := lease.NewLocalClient(testenv.Endpoint())
	names := testenv.Tables(t)
	env := func(fn string) Env { return Env{Function: fn, TablePrefix: names.Prefix, Now: clock.Now} }
	quiet := slog.New(slog.DiscardHandler)
	stuck := stuckNotifier{asked: make(chan lease.Notice, 1)}
	store := func(fn string) *lease.Store { return NewStore(client, stuck, env(fn), quiet) }

	app := store(deploy.Checkouts)
	if _, err := app.CreateTask(ctx, lease.CreateTaskParams{TaskID: "t"}); err != nil {
		t.Fatal(err)
	}
	co, err := app.Checkout(ctx, lease.CheckoutParams{TaskID: "t", AgentID: "alice"})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.Watch(ctx, "t", "bob"); err != nil {
		t.Fatal(err)
	}
	if _, err := app.Release(ctx, lease.ReleaseParams{TaskID: "t", AgentID: "alice", RunID: co.RunID}); err != nil {
		t.Fatal(err)
	}

	arn, err := localstack.StreamARN(ctx, client, names.Table(schema.TasksTable))
	if err != nil {
		t.Fatal(err)
	}
	windowed := stream.WindowHandler(store(deploy.Stream))
	streamFn := &stream.Poller{Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
		Handle: func(ctx context.Context, ev events.DynamoDBEvent) error {
			// As the mapping hands it: a window event that names its shard.
			_, err := windowed(ctx, events.DynamoDBTimeWindowEvent{DynamoDBEvent: ev, TimeWindowProperties: events.TimeWindowProperties{ShardID: "shard-1"}})
			return err
		}}
	// The whole batch within 5 s, as a Lambda invocation would be
	// cut off at its timeout: a notifier waited for fails it.
	within, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := streamFn.Poll(within); err != nil {
		t.Fatalf("the stream function's batch: %v (it waited for a notice?)", err)
	}
	msgs, err := app.Inbox(ctx, "bob")
	if err != nil || len(msgs) != 1 || msgs[0].TaskID != "t" {
		t.Fatalf("bob's inbox after the stream function: %+v, %v; want one message about t", msgs, err)
	}
	select {
	case nt := <-stuck.asked:
		t.Fatalf("the stream function offered notice %s %s", nt.Kind, nt.ID)
	default:
	}

	// The notices function does offer them (and waits for its receiver).
	noticesFn := &stream.Poller{Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
		Handle: stream.NoticesHandler(store(deploy.Notices))}
	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancelShort()
	if _, err := noticesFn.Poll(short); err == nil {
		t.Fatal("the notices function's batch succeeded with a receiver that never answers")
	}
	select {
	case <-stuck.asked:
	default:
		t.Fatal("the notices function offered no notice")
	}
}
