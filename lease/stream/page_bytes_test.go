package stream

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/localstack"
)

// GetRecords answers at most 1 MB of records, however many Limit asks
// for: a page of fewer records than asked is not the shard's end when its
// records are large. A poll applies every change the shard holds when it
// begins. It used to take a short page for the end and stop there, so the
// local server's reads that apply the stream first (the inbox, a task's
// trail, the queue counts, the fleet feed's barrier) answered without the
// changes past the page, and `checkout-server migrate`, which polls the
// earlier table's stream once, left them unapplied.
func TestAPollGoesOnPastAPageCutAtAMegabyte(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := testenv.NewStore(t)
	arn, err := localstack.StreamARN(ctx, store.DB, store.Names.Table(schema.TasksTable))
	if err != nil {
		t.Fatal(err)
	}
	// Tasks about as large as a task item gets: the longest ids, queue,
	// title and reason, and twenty blockers (done, so that the tasks are
	// todo). Each checkout's record carries the item before and after,
	// over 10 KB, so a page of BatchSize of them is more than a megabyte.
	var blockers []string
	for i := range lease.MaxBlockers {
		id := fmt.Sprintf("%03d", i) + strings.Repeat("b", 125)
		blockers = append(blockers, id)
		if _, err := store.CreateTask(ctx, lease.CreateTaskParams{TaskID: id}); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Checkout(ctx, lease.CheckoutParams{TaskID: id, AgentID: "w"}); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Complete(ctx, lease.CompleteParams{TaskID: id, AgentID: "w"}); err != nil {
			t.Fatal(err)
		}
	}
	title := strings.Repeat("t", lease.MaxTitleLen)
	reason := strings.Repeat("r", lease.MaxReasonLen)
	agent, queue := strings.Repeat("a", 128), strings.Repeat("q", 128)
	var ids []string
	for b := 0; b < 2*BatchSize/lease.MaxBatch; b++ {
		var ps []lease.CreateTaskParams
		for i := range lease.MaxBatch {
			id := fmt.Sprintf("%03d", b*lease.MaxBatch+i) + strings.Repeat("d", 125)
			ids = append(ids, id)
			ps = append(ps, lease.CreateTaskParams{TaskID: id, Title: title, Queue: queue, BlockedBy: blockers})
		}
		if _, err := store.CreateTasks(ctx, ps); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		if _, err := store.Checkout(ctx, lease.CheckoutParams{TaskID: id, AgentID: agent, RunID: "run-" + id[:124], Reason: reason}); err != nil {
			t.Fatal(err)
		}
	}
	var sizes []int64
	p := &Poller{Streams: NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: MemoryCheckpoints{},
		Handle: func(_ context.Context, ev events.DynamoDBEvent) error {
			for _, r := range ev.Records {
				sizes = append(sizes, r.Change.SizeBytes)
			}
			return nil
		}}
	n, err := p.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for more := 1; err == nil && more > 0; {
		more, err = p.Poll(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	// The checkouts' records, the last ones, are each so large that any
	// BatchSize-1 of them come to a megabyte: whichever of them a page
	// begins with, it is cut before BatchSize records, with more behind.
	for i, size := range sizes[len(sizes)-len(ids):] {
		if size*(BatchSize-1) < 1<<20 {
			t.Fatalf("checkout %d's record is %d bytes: the test does not cut a page", i, size)
		}
	}
	if n != len(sizes) {
		t.Fatalf("one poll applied %d of the %d changes the stream held when it began", n, len(sizes))
	}
}
