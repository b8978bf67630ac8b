package lease_test

import (
	"context"
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

// slowEndingDB runs hook once, before the first ending write (one that
// sets end_agent) is sent: the write of a release that waits in the SDK
// (a throttle's back-off, a dropped connection's retry) after its request
// read its clock.
type slowEndingDB struct {
	lease.DB
	hook func()
	done atomic.Bool
}

func (d *slowEndingDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if slices.Contains(mapValues(in.ExpressionAttributeNames), "end_agent") && d.done.CompareAndSwap(false, true) {
		d.hook()
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}

// A follower of the fleet feed in AWS sees a transition whose write landed
// long after its request read the clock. The event was keyed in the feed
// at that clock reading (the write's last_at), behind the cursor the
// follower had taken past it while the write waited, though it was
// archived as soon as it landed: the follower never saw it (only a read by
// since did). With FeedAtLanding, as the functions run, an event is keyed
// no earlier than the second its stream record says the write landed.
func TestAFeedFollowerSeesATransitionWhoseWriteLandedLate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	start := e.clock.Now()
	// The stream function as in AWS: its records stamped when the write
	// landed (whole seconds), on the same clock as the store's.
	aws := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, FeedAtLanding: true})
	arn, err := localstack.StreamARN(c, e.db, e.names.Table(schema.TasksTable))
	if err != nil {
		t.Fatal(err)
	}
	handle := stream.Handler(aws)
	poller := &stream.Poller{
		Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
		Handle: func(ctx context.Context, ev events.DynamoDBEvent) error {
			for i := range ev.Records {
				ev.Records[i].Change.ApproximateCreationDateTime = events.SecondsEpochTime{Time: e.clock.Now().Truncate(time.Second)}
			}
			return handle(ctx, ev)
		},
	}
	drain := func() {
		t.Helper()
		if _, err := poller.Poll(c); err != nil {
			t.Fatalf("drain the change stream: %v", err)
		}
	}
	e.task(t, "g")
	co := e.checkout(t, "g", "a", time.Hour)
	drain()
	e.clock.Advance(lease.DefaultFeedSettle + time.Millisecond)
	var cur string
	eventually(t, "the checkout in the feed", func() bool {
		var got []lease.Event
		got, cur = follow(t, aws, lease.FeedParams{Since: start})
		return len(got) == 1
	})
	db := &slowEndingDB{DB: e.db}
	db.hook = func() {
		// The release's request has read its clock; its write waits 3 s,
		// while the follower reads on, caught up.
		e.clock.Advance(3 * time.Second)
		drain()
		_, cur = follow(t, aws, lease.FeedParams{Cursor: cur})
	}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	must[lease.Released](t)(s.Release(c, lease.ReleaseParams{TaskID: "g", AgentID: "a", RunID: co.RunID}))
	if !db.done.Load() {
		t.Fatal("the release's write was not held")
	}
	drain() // archived as soon as it landed
	e.clock.Advance(lease.DefaultFeedSettle + time.Millisecond)
	var got []lease.Event
	for deadline := time.Now().Add(2 * time.Second); len(got) == 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got, _ = follow(t, aws, lease.FeedParams{Cursor: cur})
	}
	if len(got) != 1 || got[0].Type != lease.EventRelease {
		all, _ := follow(t, aws, lease.FeedParams{Since: start})
		t.Fatalf("the follower's feed after its cursor: %v; want the release (a read by since holds %v)", kinds(got), kinds(all))
	}
}
