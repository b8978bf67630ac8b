package stream

import (
	"context"
	"fmt"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/localstack"
)

// A short page of small records is what the shard held when it was read:
// what arrives while its batch is handled waits for the next poll, in one
// batch. A poll that read on after each short page never ended under a
// steady trickle of writes, and handed the changes over a few at a time,
// each batch with its own writes of consequences (the local server's
// requests per checkout cycle went from 2.1 to 3.8 at one worker).
func TestAPollEndsAtAShortPageOfSmallRecords(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := testenv.NewStore(t)
	arn, err := localstack.StreamARN(ctx, store.DB, store.Names.Table(schema.TasksTable))
	if err != nil {
		t.Fatal(err)
	}
	create := func(id string) {
		t.Helper()
		if _, err := store.CreateTask(ctx, lease.CreateTaskParams{TaskID: id}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		create(fmt.Sprintf("first-%d", i))
	}
	batches, arrived := 0, false
	p := &Poller{Streams: NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: MemoryCheckpoints{},
		Handle: func(ctx context.Context, ev events.DynamoDBEvent) error {
			batches++
			if !arrived {
				arrived = true // two changes land while the first batch is handled
				create("later-0")
				create("later-1")
			}
			return nil
		}}
	n, err := p.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 || batches != 1 {
		t.Fatalf("the first poll applied %d changes in %d batches, want the 3 the shard held, in one", n, batches)
	}
	if n, err = p.Poll(ctx); err != nil || n != 2 {
		t.Fatalf("the next poll applied %d changes (%v), want the 2 that arrived meanwhile", n, err)
	}
}
