package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/stream"
)

// failAfterFreedRecordDB fails the stream function's first request of
// the kind fail picks that comes after its first freeing record
// ("#freed#<seq>") was written.
type failAfterFreedRecordDB struct {
	lease.DB
	fail     func(op string, key map[string]types.AttributeValue) bool
	recorded atomic.Bool
	failed   atomic.Bool
}

var errInjected = errors.New("injected failure")

func (d *failAfterFreedRecordDB) trip(op string, key map[string]types.AttributeValue) error {
	if d.recorded.Load() && d.fail(op, key) && d.failed.CompareAndSwap(false, true) {
		return errInjected
	}
	return nil
}

func (d *failAfterFreedRecordDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if err := d.trip("PutItem", in.Item); err != nil {
		return nil, err
	}
	out, err := d.DB.PutItem(ctx, in, opts...)
	if k, ok := in.Item["message_id"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(k.Value, "#freed#") && err == nil {
		d.recorded.Store(true)
	}
	return out, err
}

func (d *failAfterFreedRecordDB) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if err := d.trip("Query", in.ExpressionAttributeValues); err != nil {
		return nil, err
	}
	return d.DB.Query(ctx, in, opts...)
}

func (d *failAfterFreedRecordDB) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	if err := d.trip("BatchGetItem", nil); err != nil {
		return nil, err
	}
	return d.DB.BatchGetItem(ctx, in, opts...)
}

// A batch that recorded a freeing and then failed for good (its retries
// used up, it went to the dead-letter queue, and nobody replayed it) told
// none of the freeing's watchers. Its record must not make the task's next
// freeings pass those watches by: the watcher is told, once, of the first
// freeing after its watch, whether the batch failed before it read the
// watches, before it archived the freeing's event, or as it wrote the
// message.
func TestAWatchReadForAFreeingWhoseBatchFailedForGoodIsToldLater(t *testing.T) {
	for _, tc := range []struct {
		name string
		fail func(op string, key map[string]types.AttributeValue) bool
	}{
		{"reading the watches", func(op string, _ map[string]types.AttributeValue) bool { return op == "Query" }},
		{"reading the watchers' heartbeats", func(op string, _ map[string]types.AttributeValue) bool { return op == "BatchGetItem" }},
		{"writing the message", func(op string, item map[string]types.AttributeValue) bool {
			k, ok := item["agent_id"].(*types.AttributeValueMemberS)
			return op == "PutItem" && ok && k.Value == "w"
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
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

			// The release's batch fails after its freeing record...
			fdb := &failAfterFreedRecordDB{DB: lease.NewLocalClient(testenv.Endpoint()), fail: tc.fail}
			p := *e.poller
			p.Handle = stream.Handler(lease.New(lease.Config{DB: fdb, Tables: e.names, Now: e.clock.Now, Notifier: e.notes}))
			if _, err := p.Poll(c); !errors.Is(err, errInjected) {
				t.Fatalf("the failing batch: %v, want the injected failure", err)
			}
			// ... and is given up on.
			p.Handle = func(context.Context, events.DynamoDBEvent) error { return nil }
			if n := must[int](t)(p.Poll(c)); n != 1 {
				t.Fatalf("gave up on %d changes, want the release's alone", n)
			}
			e.poller = &p
			e.poller.Handle = stream.Handler(lease.New(lease.Config{DB: lease.NewLocalClient(testenv.Endpoint()), Tables: e.names, Now: e.clock.Now, Notifier: e.notes}))

			co2 := e.checkout(t, "t", "b", time.Hour)
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: co2.RunID}))
			got := e.inbox(t, "w")
			if len(got) != 1 || got[0].Fence != co1.Fence {
				t.Fatalf("w watched before release 1, whose batch failed for good, and release 2 followed: inbox %+v, want one message, of fence %d", got, co1.Fence)
			}
			co3 := e.checkout(t, "t", "b", time.Hour)
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: co3.RunID}))
			if got := e.inbox(t, "w"); len(got) != 1 {
				t.Errorf("after a third release, w's inbox %+v: its one watch was told again", got)
			}
		})
	}
}
