package lease_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
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
)

// failWatchDropDB fails the first DeleteItem of a watch ("#watch#..."
// partition): the stream function's batch fails after it wrote its
// messages, before it used its watches up.
type failWatchDropDB struct {
	lease.DB
	failed atomic.Bool
}

func (d *failWatchDropDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if k, ok := in.Key["agent_id"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(k.Value, "#watch#") && d.failed.CompareAndSwap(false, true) {
		return nil, errInjected
	}
	return d.DB.DeleteItem(ctx, in, opts...)
}

// expireWatchPartition deletes the items of the task's watch partition
// whose TTL has passed by the test clock, as DynamoDB's TTL does (the
// local DynamoDB applies none).
func (e *env) expireWatchPartition(t testing.TB, taskID string) {
	t.Helper()
	table := e.names.Table(schema.InboxTable)
	for _, it := range e.inboxItems(t, "#watch#"+taskID) {
		n, ok := it["ttl"].(*types.AttributeValueMemberN)
		if !ok {
			continue
		}
		if ttl, _ := strconv.ParseInt(n.Value, 10, 64); ttl > e.clock.Now().Unix() {
			continue
		}
		if _, err := e.db.DeleteItem(ctx(t), &dynamodb.DeleteItemInput{
			TableName: aws.String(table),
			Key:       map[string]types.AttributeValue{"agent_id": it["agent_id"], "message_id": it["message_id"]},
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// A batch that told a watcher of a freeing and then failed for good
// before it used the watch up (its retries used up, not replayed) leaves
// the watch's place behind, with the freeing's record after it. The place
// has had its message: when the task is next freed, a week on (the
// record's freeing's messages have expired, and TTL has deleted what it
// may), the place must not be told again, of the later freeing.
func TestAWatchToldByABatchThatFailedForGoodIsNotToldAgainAWeekOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co1 := e.checkout(t, "t", "a", time.Hour)
	if err := e.store.Watch(c, "t", "w"); err != nil {
		t.Fatal(err)
	}
	e.drain(t)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co1.RunID}))

	// The release's batch writes w's message, fails as it uses the watch
	// up...
	p := *e.poller
	p.Handle = stream.Handler(lease.New(lease.Config{DB: &failWatchDropDB{DB: lease.NewLocalClient(testenv.Endpoint())}, Tables: e.names, Now: e.clock.Now, Notifier: e.notes}))
	if _, err := p.Poll(c); !errors.Is(err, errInjected) {
		t.Fatalf("the failing batch: %v, want the injected failure", err)
	}
	// ... and is given up on.
	p.Handle = func(context.Context, events.DynamoDBEvent) error { return nil }
	if n := must[int](t)(p.Poll(c)); n != 1 {
		t.Fatalf("gave up on %d changes, want the release's alone", n)
	}
	if got := e.inbox(t, "w"); len(got) != 1 || got[0].Fence != co1.Fence {
		t.Fatalf("w's inbox after the failed batch: %+v, want the message of fence %d", got, co1.Fence)
	}

	e.clock.Advance(8 * 24 * time.Hour)
	e.expireWatchPartition(t, "t")
	co2 := e.checkout(t, "t", "b", time.Hour)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: co2.RunID}))
	for _, m := range e.inbox(t, "w") {
		if m.Fence == co2.Fence {
			t.Fatalf("w, told of release 1 (fence %d), was told again of release 2 a week on: %+v", co1.Fence, m)
		}
	}
}
