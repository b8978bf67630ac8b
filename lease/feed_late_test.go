package lease_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

// failingArchiveDB fails every BatchWriteItem while failing is set: the
// stream function's archive write, throttled or failing.
type failingArchiveDB struct {
	lease.DB
	failing atomic.Bool
}

func (d *failingArchiveDB) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	if d.failing.Load() {
		return nil, errors.New("injected: archive write failed")
	}
	return d.DB.BatchWriteItem(ctx, in, opts...)
}

// A follower of the fleet feed in AWS sees an event whose batch of the
// change stream failed and was retried after the feed's settle time.
// Archived at its own time, the event was behind the cursor the follower
// had taken past that time meanwhile, and it never saw it. An event
// archived late is listed when it was archived, once: a replay of it
// later leaves it where it is, so the follower does not see it again.
func TestAFeedFollowerSeesAnEventArchivedLate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	start := e.clock.Now()
	e.task(t, "late")
	e.checkout(t, "late", "a", time.Hour)
	landed := e.clock.Now().Truncate(time.Second) // every write landed then

	// The stream function as in AWS (FeedAtLanding), on the store's clock.
	db := &failingArchiveDB{DB: e.db}
	aws := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, FeedAtLanding: true})
	arn, err := localstack.StreamARN(c, e.db, e.names.Table(schema.TasksTable))
	if err != nil {
		t.Fatal(err)
	}
	handle := stream.Handler(aws)
	poller := func() *stream.Poller {
		return &stream.Poller{
			Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
			Handle: func(ctx context.Context, ev events.DynamoDBEvent) error {
				for i := range ev.Records {
					ev.Records[i].Change.ApproximateCreationDateTime = events.SecondsEpochTime{Time: landed}
				}
				return handle(ctx, ev)
			},
		}
	}
	p := poller()
	db.failing.Store(true)
	if _, err := p.Poll(c); err == nil {
		t.Fatal("the batch was applied though its archive write failed")
	}
	db.failing.Store(false)

	// The batch is retried 3 s later; meanwhile the follower reads past
	// the checkout's time.
	e.clock.Advance(3 * time.Second)
	got, cur := follow(t, e.store, lease.FeedParams{Since: start})
	if len(got) != 0 {
		t.Fatalf("the feed holds %v before the archive", kinds(got))
	}
	if _, err := p.Poll(c); err != nil {
		t.Fatalf("the batch retried: %v", err)
	}
	e.caughtUp(t) // the index's lag is the other half of the settle time
	e.clock.Advance(lease.DefaultFeedSettle + time.Millisecond)
	got, cur = follow(t, e.store, lease.FeedParams{Cursor: cur})
	if len(got) != 1 || got[0].Type != lease.EventCheckout {
		all, _ := follow(t, e.store, lease.FeedParams{Since: start})
		t.Fatalf("the follower's feed after its cursor: %v; want the checkout once (a read by since holds %v)", kinds(got), kinds(all))
	}

	// A replay of the whole stream, later still, adds no second entry.
	e.clock.Advance(10 * time.Second)
	if _, err := poller().Poll(c); err != nil {
		t.Fatalf("replay: %v", err)
	}
	e.clock.Advance(lease.DefaultFeedSettle + time.Millisecond)
	e.caughtUp(t)
	if again, _ := follow(t, e.store, lease.FeedParams{Cursor: cur}); len(again) != 0 {
		t.Fatalf("after a replay the follower reads %v again", kinds(again))
	}
	if all, _ := follow(t, e.store, lease.FeedParams{Since: start}); len(all) != 1 || all[0].Type != lease.EventCheckout {
		t.Fatalf("after a replay the feed holds %v; want the checkout once", kinds(all))
	}
	if trail := must[[]lease.Event](t)(e.store.Events(c, "late")); len(trail) != 1 || trail[0].Type != lease.EventCheckout {
		t.Fatalf("the task's trail: %v; want the checkout", kinds(trail))
	}
}

// slowEventPutsDB runs before ahead of each PutItem of the events table:
// a late event's archive, each a throttled request the SDK retries.
type slowEventPutsDB struct {
	lease.DB
	events string
	before func()
}

func (d *slowEventPutsDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if *in.TableName == d.events {
		d.before()
	}
	return d.DB.PutItem(ctx, in, opts...)
}

// A batch's late events are archived one PutItem after another: each is
// listed when it is put, not when the batch began, or the later ones,
// behind a throttled table, land behind the cursor of a follower that
// read the earlier ones meanwhile, and it never sees them.
func TestAFeedFollowerSeesEveryEventOfASlowLateBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	start := e.clock.Now()
	ids := []string{"s1", "s2", "s3", "s4", "s5", "s6"}
	e.task(t, ids...)
	for _, id := range ids {
		e.checkout(t, id, "a", time.Hour)
	}
	landed := e.clock.Now().Truncate(time.Second)
	e.clock.Advance(3 * time.Second) // the batch, retried, is applied late

	var seen []lease.Event
	_, cur := follow(t, e.store, lease.FeedParams{Since: start})
	db := &slowEventPutsDB{DB: e.db, events: e.names.Table(schema.EventsTable), before: func() {
		e.clock.Advance(time.Second) // each put takes a second
		var got []lease.Event
		got, cur = follow(t, e.store, lease.FeedParams{Cursor: cur})
		seen = append(seen, got...)
	}}
	aws := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, FeedAtLanding: true})
	arn, err := localstack.StreamARN(c, e.db, e.names.Table(schema.TasksTable))
	if err != nil {
		t.Fatal(err)
	}
	handle := stream.Handler(aws)
	p := &stream.Poller{
		Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
		Handle: func(ctx context.Context, ev events.DynamoDBEvent) error {
			for i := range ev.Records {
				ev.Records[i].Change.ApproximateCreationDateTime = events.SecondsEpochTime{Time: landed}
			}
			return handle(ctx, ev)
		},
	}
	if _, err := p.Poll(c); err != nil {
		t.Fatalf("the batch: %v", err)
	}
	e.caughtUp(t)
	e.clock.Advance(lease.DefaultFeedSettle + time.Millisecond)
	got, _ := follow(t, e.store, lease.FeedParams{Cursor: cur})
	seen = append(seen, got...)
	var tasks []string
	for _, ev := range seen {
		tasks = append(tasks, ev.TaskID)
	}
	slices.Sort(tasks)
	if !slices.Equal(tasks, ids) {
		all, _ := follow(t, e.store, lease.FeedParams{Since: start})
		t.Fatalf("the follower saw the checkouts of %v, want each of %v once (a read by since holds %d events)", tasks, ids, len(all))
	}
}

// slowGetDB runs before ahead of the first GetItem: the stream function's
// read of a failed release's error, throttled.
type slowGetDB struct {
	lease.DB
	before func()
}

func (d *slowGetDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if before := d.before; before != nil {
		d.before = nil
		before()
	}
	return d.DB.GetItem(ctx, in, opts...)
}

// Whether a batch's events are late is judged when they are archived, not
// when the batch began: the reads the batch makes first (here a failed
// release's error, throttled) may take seconds, and events judged on time
// before them, keyed at their own times, landed behind the cursor of a
// follower that read past those times meanwhile.
func TestAFeedFollowerSeesEventsOfABatchSlowedByItsReads(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	start := e.clock.Now()
	e.task(t, "f1", "o1")
	co := e.checkout(t, "f1", "a", time.Hour)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "f1", AgentID: "a", RunID: co.RunID, Outcome: lease.OutcomeFailed, Error: "broke"}))
	e.checkout(t, "o1", "a", time.Hour)
	landed := e.clock.Now().Truncate(time.Second)

	var seen []lease.Event
	_, cur := follow(t, e.store, lease.FeedParams{Since: start})
	read := false
	db := &slowGetDB{DB: e.db, before: func() {
		read = true
		e.clock.Advance(6 * time.Second)
		var got []lease.Event
		got, cur = follow(t, e.store, lease.FeedParams{Cursor: cur})
		seen = append(seen, got...)
	}}
	aws := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, FeedAtLanding: true})
	arn, err := localstack.StreamARN(c, e.db, e.names.Table(schema.TasksTable))
	if err != nil {
		t.Fatal(err)
	}
	handle := stream.Handler(aws)
	p := &stream.Poller{
		Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
		Handle: func(ctx context.Context, ev events.DynamoDBEvent) error {
			for i := range ev.Records {
				ev.Records[i].Change.ApproximateCreationDateTime = events.SecondsEpochTime{Time: landed}
			}
			return handle(ctx, ev)
		},
	}
	if _, err := p.Poll(c); err != nil {
		t.Fatalf("the batch: %v", err)
	}
	if !read {
		t.Fatal("the stream function read no error")
	}
	e.caughtUp(t)
	e.clock.Advance(lease.DefaultFeedSettle + time.Millisecond)
	got, _ := follow(t, e.store, lease.FeedParams{Cursor: cur})
	seen = append(seen, got...)
	all, _ := follow(t, e.store, lease.FeedParams{Since: start})
	keys := func(evs []lease.Event) []string {
		var out []string
		for _, ev := range evs {
			out = append(out, eventKey(ev))
		}
		slices.Sort(out)
		return out
	}
	if len(all) < 3 || !slices.Equal(keys(seen), keys(all)) {
		t.Fatalf("the follower saw %v; the feed holds %v", keys(seen), keys(all))
	}
}
