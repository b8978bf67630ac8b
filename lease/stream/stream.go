// Package stream carries each transition's consequences from the tasks
// table's change stream: the stream function's handler, shared by the
// Lambda function (functions/stream) and the local server, and, locally, a
// poller that reads the local DynamoDB's Streams API and hands the handler
// batches shaped as Lambda's event source mapping hands them.
//
// Every write that moves a lease records its events on the task item (see
// lease/doc.go); the handler archives them, writes the watchers' messages
// and publishes the notices. The stream delivers every change at least
// once, in order per item, and the handler is idempotent, so a replayed
// batch writes nothing new. The stream is read by two consumers, each with
// its own position (ConsequencesHandler, or WindowHandler, and
// NoticesHandler): in AWS the stream and notices functions, each behind an
// event source mapping of its own; locally two pollers in the server. So
// notices that are slow to deliver never delay the messages, the archive
// or the feed.
package stream

import (
	"context"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/lease"
)

// Applier is what the handler needs of the lease store.
type Applier interface {
	ApplyChanges(ctx context.Context, changes []lease.Change) error
}

// Handler returns the stream function's handler: it applies a batch of
// task-table changes in order. An error fails the whole batch, which the
// event source mapping retries (bisecting it) and, after its retries,
// sends to the dead-letter queue.
func Handler(store Applier) func(context.Context, events.DynamoDBEvent) error {
	return handlerOf(store.ApplyChanges)
}

// ConsequencesApplier is what ConsequencesHandler needs of the lease store.
type ConsequencesApplier interface {
	ApplyConsequences(ctx context.Context, changes []lease.Change) error
}

// ConsequencesHandler is Handler without the notices
// (lease.Store.ApplyConsequences): the local server runs it as one
// consumer of the stream and NoticesHandler as another, each with its own
// checkpoint, so that a notifier that is slow (a webhook receiver that is
// down is retried for up to half a minute, then only probed now and then)
// holds up only the notices.
func ConsequencesHandler(store ConsequencesApplier) func(context.Context, events.DynamoDBEvent) error {
	return handlerOf(store.ApplyConsequences)
}

// NoticesPublisher is what NoticesHandler needs of the lease store.
type NoticesPublisher interface {
	PublishNotices(ctx context.Context, changes []lease.Change) error
}

// NoticesHandler publishes the notices of a batch, the same ones Handler
// publishes, and writes nothing (lease.Store.PublishNotices). An error
// fails the batch, which is handed again, so each notice goes out at least
// once.
func NoticesHandler(store NoticesPublisher) func(context.Context, events.DynamoDBEvent) error {
	return handlerOf(store.PublishNotices)
}

func handlerOf(apply func(context.Context, []lease.Change) error) func(context.Context, events.DynamoDBEvent) error {
	return func(ctx context.Context, ev events.DynamoDBEvent) error {
		changes, err := changesOf(ev.Records, ShardOf(ctx))
		if err != nil {
			return err
		}
		return apply(ctx, changes)
	}
}
