package stream

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/lease"
)

// WindowHandler is ConsequencesHandler for events that name their shard:
// the event source mapping's with a tumbling window
// (DynamoDBTimeWindowEvent), which is how the deployed stream function is
// configured (the notices function, on a mapping of its own, publishes the
// notices and needs no shard: NoticesHandler). The
// shard id and each record's sequence number go with every change, and
// they are what make the queue counters exact under the stream's
// at-least-once delivery (see lease/doc.go, "Queue counts"). The window's
// state is not used: the answer carries an empty one, which the mapping
// requires.
func WindowHandler(store ConsequencesApplier) func(context.Context, events.DynamoDBTimeWindowEvent) (events.DynamoDBTimeWindowEventResponse, error) {
	return func(ctx context.Context, ev events.DynamoDBTimeWindowEvent) (events.DynamoDBTimeWindowEventResponse, error) {
		resp := events.DynamoDBTimeWindowEventResponse{TimeWindowEventResponseProperties: events.TimeWindowEventResponseProperties{State: map[string]string{}}}
		changes, err := changesOf(ev.Records, ev.ShardID)
		if err != nil {
			return resp, err
		}
		if len(changes) == 0 {
			return resp, nil // a window's final invocation may carry no records
		}
		return resp, store.ApplyConsequences(ctx, changes)
	}
}

type shardKey struct{}

// WithShard tells Handler which stream shard the batch comes from, as the
// local poller does: a Lambda event without a tumbling window does not say.
func WithShard(ctx context.Context, shard string) context.Context {
	return context.WithValue(ctx, shardKey{}, shard)
}

// ShardOf is the shard WithShard put on ctx, or "".
func ShardOf(ctx context.Context) string {
	s, _ := ctx.Value(shardKey{}).(string)
	return s
}

// changesOf turns a batch's records into the store's changes, each with
// its shard (when known) and sequence number.
func changesOf(records []events.DynamoDBEventRecord, shard string) ([]lease.Change, error) {
	changes := make([]lease.Change, 0, len(records))
	for _, r := range records {
		old, err := image(r.Change.OldImage)
		if err != nil {
			return nil, fmt.Errorf("record %s: %w", r.EventID, err)
		}
		cur, err := image(r.Change.NewImage)
		if err != nil {
			return nil, fmt.Errorf("record %s: %w", r.EventID, err)
		}
		ch := lease.Change{Old: old, New: cur, Landed: r.Change.ApproximateCreationDateTime.Time}
		if shard != "" {
			ch.Shard, ch.Seq = shard, r.Change.SequenceNumber
		}
		changes = append(changes, ch)
	}
	return changes, nil
}
