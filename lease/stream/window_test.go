package stream

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/lease"
)

type applied struct{ changes []lease.Change }

func (a *applied) ApplyChanges(_ context.Context, cs []lease.Change) error {
	a.changes = append(a.changes, cs...)
	return nil
}

func (a *applied) ApplyConsequences(ctx context.Context, cs []lease.Change) error {
	return a.ApplyChanges(ctx, cs)
}

// A tumbling-window event, as the event source mapping hands it to the
// deployed function, names its shard: every change goes on with it and its
// sequence number, and the answer carries the state the mapping requires.
// Without a shard (a plain event) changes carry neither.
func TestWindowHandlerPassesTheShard(t *testing.T) {
	t.Parallel()
	payload := `{"Records":[{"eventID":"1","eventName":"INSERT","eventSource":"aws:dynamodb",` +
		`"dynamodb":{"NewImage":{"task_id":{"S":"a"}},"SequenceNumber":"4400000000012","StreamViewType":"NEW_AND_OLD_IMAGES"}}],` +
		`"window":{"start":"2026-03-20T14:30:00Z","end":"2026-03-20T14:45:00Z"},"state":{},` +
		`"shardId":"shardId-00000001774017400000-abcd1234","eventSourceARN":"arn:stream","isFinalInvokeForWindow":false,"isWindowTerminatedEarly":false}`
	var ev events.DynamoDBTimeWindowEvent
	if err := json.Unmarshal([]byte(payload), &ev); err != nil {
		t.Fatal(err)
	}
	a := &applied{}
	resp, err := WindowHandler(a)(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(resp); string(b) != `{"state":{},"batchItemFailures":null}` {
		t.Errorf("answer %s: the mapping needs a state", b)
	}
	if len(a.changes) != 1 || a.changes[0].Shard != "shardId-00000001774017400000-abcd1234" || a.changes[0].Seq != "4400000000012" {
		t.Fatalf("changes %+v", a.changes)
	}
	// A window's final invocation may carry no records.
	if _, err := WindowHandler(a)(context.Background(), events.DynamoDBTimeWindowEvent{}); err != nil || len(a.changes) != 1 {
		t.Fatalf("empty final invocation: %v, %d changes", err, len(a.changes))
	}
	// The local poller's batches name the shard through the context.
	plain := &applied{}
	if err := Handler(plain)(WithShard(context.Background(), "s1"), ev.DynamoDBEvent); err != nil || plain.changes[0].Shard != "s1" {
		t.Fatalf("handler with a shard: %v %+v", err, plain.changes)
	}
	none := &applied{}
	if err := Handler(none)(context.Background(), ev.DynamoDBEvent); err != nil || none.changes[0].Shard != "" || none.changes[0].Seq != "" {
		t.Fatalf("handler without a shard: %v %+v", err, none.changes)
	}
}
