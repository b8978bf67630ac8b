package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/stream"
)

// queueCounts returns each queue's counts after the stream is drained.
func (e *env) queueCounts(t testing.TB) map[string]lease.QueueStats {
	t.Helper()
	if _, err := e.poller.Poll(ctx(t)); err != nil {
		t.Fatalf("poll: %v", err)
	}
	qs := must[[]lease.QueueStats](t)(e.store.ListQueues(ctx(t)))
	out := map[string]lease.QueueStats{}
	for _, q := range qs {
		out[q.Queue] = q
	}
	return out
}

func wantCounts(t testing.TB, got lease.QueueStats, todo, inProgress, done, cancelled int64) {
	t.Helper()
	want := map[lease.Status]int64{lease.StatusTodo: todo, lease.StatusInProgress: inProgress, lease.StatusDone: done, lease.StatusCancelled: cancelled}
	for st, n := range want {
		if got.Counts[st] != n {
			t.Errorf("queue %q: %s = %d, want %d (all: %v)", got.Queue, st, got.Counts[st], n, got.Counts)
		}
	}
}

// Counts follow creates, checkouts, completions, cancels and PATCH moves
// between queues, and the oldest todo task is the oldest of any priority.
func TestQueueCountsFollowTransitions(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	e.queued(t, "a1", "alpha", 5)
	e.clock.Advance(time.Second)
	e.queued(t, "a2", "alpha", 9)
	e.clock.Advance(time.Second)
	e.queued(t, "a3", "alpha", 1)
	e.queued(t, "b1", "beta", 5)
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "a1", AgentID: "w1"}))
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "a2", AgentID: "w2"}))
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "a2", AgentID: "w2"}))
	cancelled := lease.StatusCancelled
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "b1", AgentID: "w1", Status: &cancelled}))
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a3", AgentID: "w1", Queue: ptr("beta")}))

	e.caughtUp(t) // each queue's oldest todo task is read through the claim index
	got := e.queueCounts(t)
	if len(got) != 2 {
		t.Fatalf("queues %v, want alpha and beta", got)
	}
	wantCounts(t, got["alpha"], 0, 1, 1, 0)
	wantCounts(t, got["beta"], 1, 0, 0, 1)
	if !got["alpha"].OldestTodoAt.IsZero() {
		t.Errorf("alpha has no todo task, oldest_todo_at %v", got["alpha"].OldestTodoAt)
	}
	if want := epoch.Add(2 * time.Second); !got["beta"].OldestTodoAt.Equal(want) {
		t.Errorf("beta oldest_todo_at %v, want a3's creation %v", got["beta"].OldestTodoAt, want)
	}

	// A release brings a1 back to todo; it is now alpha's oldest.
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "a1", AgentID: "w1"}))
	e.caughtUp(t)
	got = e.queueCounts(t)
	wantCounts(t, got["alpha"], 1, 0, 1, 0)
	if !got["alpha"].OldestTodoAt.Equal(epoch) {
		t.Errorf("alpha oldest_todo_at %v, want a1's creation %v", got["alpha"].OldestTodoAt, epoch)
	}
}

// capture reads the stream once and returns its records per shard, without
// applying them.
func (e *env) capture(t testing.TB) map[string][]events.DynamoDBEventRecord {
	t.Helper()
	out := map[string][]events.DynamoDBEventRecord{}
	p := *e.poller
	p.Handle = func(ctx context.Context, ev events.DynamoDBEvent) error {
		out[stream.ShardOf(ctx)] = append(out[stream.ShardOf(ctx)], ev.Records...)
		return nil
	}
	if _, err := p.Poll(ctx(t)); err != nil {
		t.Fatalf("poll: %v", err)
	}
	return out
}

// A batch delivered again, whole, in halves (as the event source mapping
// bisects a failing batch) or after a crash with more records behind it
// (as the local poller re-reads from its checkpoint) counts each change
// once.
func TestQueueCountsExactUnderRedelivery(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	for _, id := range []string{"r1", "r2", "r3", "r4"} {
		e.queued(t, id, "redo", 5)
	}
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "r1", AgentID: "w"}))
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "r1", AgentID: "w"}))
	first := e.capture(t)
	e.queued(t, "r5", "redo", 2)
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "r2", AgentID: "w"}))
	all := e.capture(t)

	handle := stream.Handler(lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes}))
	deliver := func(shard string, recs []events.DynamoDBEventRecord) {
		t.Helper()
		if err := handle(stream.WithShard(c, shard), events.DynamoDBEvent{Records: recs}); err != nil {
			t.Fatalf("handle %d records: %v", len(recs), err)
		}
	}
	check := func(when string, todo, inProgress, done int64) {
		t.Helper()
		q := must[[]lease.QueueStats](t)(e.store.ListQueues(c))
		if len(q) != 1 {
			t.Fatalf("%s: queues %v", when, q)
		}
		t.Run(when, func(t *testing.T) { wantCounts(t, q[0], todo, inProgress, done, 0) })
	}
	for shard, recs := range first {
		if len(recs) < 2 {
			t.Fatalf("want several records in shard %s, got %d", shard, len(recs))
		}
		deliver(shard, recs)
		check("applied once", 3, 0, 1)
		deliver(shard, recs)
		check("redelivered whole", 3, 0, 1)
		mid := len(recs) / 2
		deliver(shard, recs[:mid])
		deliver(shard, recs[mid:])
		check("redelivered bisected", 3, 0, 1)
	}
	for shard, recs := range all {
		// After a crash: the batch again, now with the records behind it.
		deliver(shard, recs)
		check("redelivered with more behind it", 3, 1, 1)
		deliver(shard, recs[len(recs)-1:])
		check("last record again", 3, 1, 1)
	}
	// The poller itself, from its start: everything it reads is a repeat.
	if _, err := e.poller.Poll(c); err != nil {
		t.Fatal(err)
	}
	check("the poller from the start", 3, 1, 1)
}

// A bisected batch whose first attempt failed part-way (one queue's counter
// written, another's not) completes exactly.
func TestQueueCountsExactAfterPartialFailure(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	e.queued(t, "p1", "left", 5)
	e.queued(t, "p2", "right", 5)
	e.queued(t, "p3", "left", 5)
	recs := e.capture(t)
	handle := stream.Handler(lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes}))
	for shard, rs := range recs {
		// The first attempt counted only the records of "left" (as if the
		// write for "right" had failed): deliver p1 and p3 alone first.
		var left []events.DynamoDBEventRecord
		for _, r := range rs {
			if r.Change.NewImage["queue"].String() == "left" {
				left = append(left, r)
			}
		}
		must[struct{}](t)(struct{}{}, handle(stream.WithShard(c, shard), events.DynamoDBEvent{Records: left[:1]}))
		for i := range rs {
			must[struct{}](t)(struct{}{}, handle(stream.WithShard(c, shard), events.DynamoDBEvent{Records: rs[i : i+1]}))
		}
		must[struct{}](t)(struct{}{}, handle(stream.WithShard(c, shard), events.DynamoDBEvent{Records: rs}))
	}
	got := map[string]lease.QueueStats{}
	for _, q := range must[[]lease.QueueStats](t)(e.store.ListQueues(c)) {
		got[q.Queue] = q
	}
	wantCounts(t, got["left"], 2, 0, 0, 0)
	wantCounts(t, got["right"], 1, 0, 0, 0)
}

// Changes that carry no shard (a Lambda event without a tumbling window)
// are not counted rather than counted twice on a redelivery.
func TestQueueCountsNeedAShard(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	e.queued(t, "n1", "none", 5)
	handle := stream.Handler(lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes}))
	for _, rs := range e.capture(t) {
		if err := handle(c, events.DynamoDBEvent{Records: rs}); err != nil {
			t.Fatal(err)
		}
	}
	// The queue is listed (a create puts it in the registry), with no
	// task counted.
	for _, q := range must[[]lease.QueueStats](t)(e.store.ListQueues(c)) {
		for st, n := range q.Counts {
			if n != 0 {
				t.Fatalf("queue %s: %d %s tasks counted, want none", q.Queue, n, st)
			}
		}
	}
}

// With the claim index lagging, oldest_todo_at may miss a task for the
// lag, never count it wrongly; the counts come from the counters alone.
func TestQueueOldestTodoUnderIndexLag(t *testing.T) {
	e := newEnv(t)
	e.lag(t, "", 300*time.Millisecond)
	e.queued(t, "l1", "lagged", 3)
	e.clock.Advance(time.Second)
	e.queued(t, "l2", "lagged", 8)
	got := e.queueCounts(t)
	wantCounts(t, got["lagged"], 2, 0, 0, 0)
	eventually(t, "oldest_todo_at from the claim index", func() bool {
		q := e.queueCounts(t)["lagged"]
		return q.OldestTodoAt.Equal(epoch)
	})
	c := ctx(t)
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "l1", AgentID: "w"}))
	eventually(t, "oldest_todo_at after l1 is taken", func() bool {
		q := e.queueCounts(t)["lagged"]
		return q.Counts[lease.StatusTodo] == 1 && q.OldestTodoAt.Equal(epoch.Add(time.Second))
	})
}
