package lease_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

// lateOrderCase is a store that judges the checkout of a task late and
// its release, a moment later, on time: by the clock (FeedLate: the
// checkout more than half the settle time before the archive, the
// release less) or, as the local server does, by the horizon a held-up
// feed read handed out (FeedPassed: the checkout's time).
type lateOrderCase struct {
	name  string
	store func(e *env, checkout time.Time) *lease.Store
	// gap is the time between the checkout and the release; the
	// changes are applied a second after the release.
	gap time.Duration
}

var lateOrderCases = []lateOrderCase{
	{"FeedLate", func(e *env, _ time.Time) *lease.Store {
		return lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes, FeedLate: true})
	}, 1700 * time.Millisecond},
	{"FeedPassed", func(e *env, checkout time.Time) *lease.Store {
		passed := new(atomic.Int64)
		passed.Store(checkout.UnixMilli())
		return lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes, FeedPassed: passed.Load})
	}, time.Second},
}

// lateOrderPoller hands the tasks table's change stream to s, in one
// batch, or with apart, each record in a batch of its own.
func lateOrderPoller(t *testing.T, e *env, s *lease.Store, apart bool) *stream.Poller {
	t.Helper()
	arn, err := localstack.StreamARN(ctx(t), e.db, e.names.Table(schema.TasksTable))
	if err != nil {
		t.Fatal(err)
	}
	handle := stream.Handler(s)
	return &stream.Poller{
		Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
		Handle: func(ctx context.Context, ev events.DynamoDBEvent) error {
			if !apart {
				return handle(ctx, ev)
			}
			for _, rec := range ev.Records {
				if err := handle(ctx, events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{rec}}); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// checkLateOrder runs a checkout and its release, judged late and on
// time, through the change stream (see lateOrderPoller), and then again
// (a replay by the same process), and checks that the feed lists the
// two once each and in their order.
func checkLateOrder(t *testing.T, tc lateOrderCase, apart bool) {
	e := newEnv(t)
	c := ctx(t)
	start := e.clock.Now()
	e.task(t, "o")
	co := e.checkout(t, "o", "a", time.Hour)
	s := tc.store(e, e.clock.Now())
	e.clock.Advance(tc.gap)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "o", AgentID: "a", RunID: co.RunID}))
	e.clock.Advance(time.Second)
	want := []lease.EventType{lease.EventCheckout, lease.EventRelease}
	for _, round := range []string{"archive", "replay"} {
		if _, err := lateOrderPoller(t, e, s, apart).Poll(c); err != nil {
			t.Fatalf("%s: %v", round, err)
		}
		e.caughtUp(t)
		e.clock.Advance(lease.DefaultFeedSettle + time.Millisecond)
		if got, _ := follow(t, e.store, lease.FeedParams{Since: start}); !slices.Equal(kinds(got), want) {
			t.Fatalf("after the %s the feed lists %v; want %v", round, kinds(got), want)
		}
	}
}

// A release the stream function archives on time in the batch in which
// it archived the checkout it ended late is listed after that checkout:
// keyed at its own time, it came before the checkout, keyed at its
// archive, and a follower read that a task was released before it was
// checked out.
func TestFeedListsATasksEventsInOrderAfterALateOneInItsBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range lateOrderCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkLateOrder(t, tc, false)
		})
	}
}

// As above, with the release in the batch after the checkout's: the
// process that keyed the checkout at its archive keys the task's next
// events no earlier.
func TestFeedListsATasksEventsInOrderAfterALateOneInAnEarlierBatch(t *testing.T) {
	t.Parallel()
	for _, tc := range lateOrderCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkLateOrder(t, tc, true)
		})
	}
}

// The feed time of a late event is held as its task's floor only while
// an event of the task could still be keyed before it: a settle time
// and a margin later, the clock's rule keys every event after it
// anyway, and the floor is forgotten, so a long-running stream function
// does not hold one for every task it ever archived late.
func TestFeedForgetsALateEventsFloorOnceItCannotMatter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	start := e.clock.Now()
	e.task(t, "o")
	co := e.checkout(t, "o", "a", time.Hour)
	s := lateOrderCases[0].store(e, e.clock.Now())
	p := lateOrderPoller(t, e, s, true)
	e.clock.Advance(3 * time.Second) // the checkout is archived late
	if _, err := p.Poll(c); err != nil {
		t.Fatal(err)
	}
	if n := lease.LateFeedFloors(s); n != 1 {
		t.Fatalf("%d floors held after a late event; want 1", n)
	}
	e.clock.Advance(lease.DefaultFeedSettle + lease.LateFeedMargin + time.Millisecond)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "o", AgentID: "a", RunID: co.RunID}))
	if _, err := p.Poll(c); err != nil {
		t.Fatal(err)
	}
	if n := lease.LateFeedFloors(s); n != 0 {
		t.Fatalf("%d floors held a settle time and a margin after the late event; want 0", n)
	}
	e.caughtUp(t)
	e.clock.Advance(lease.DefaultFeedSettle + time.Millisecond)
	want := []lease.EventType{lease.EventCheckout, lease.EventRelease}
	if got, _ := follow(t, e.store, lease.FeedParams{Since: start}); !slices.Equal(kinds(got), want) {
		t.Fatalf("the feed lists %v; want %v", kinds(got), want)
	}
}
