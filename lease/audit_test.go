package lease_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
)

// lossyDB loses what a network can lose: the answer to an update that was
// applied.
type lossyDB struct {
	lease.DB
	loseAnswers atomic.Int32 // applied UpdateItem calls whose answer is lost
}

// errLost is an answer lost past every retry: an error the client's
// retryer does not send the request again for (a store sending a write
// again itself follows it: sentAgainWith), so the call sees it.
var errLost = errors.New("the answer was lost")

func (d *lossyDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := d.DB.UpdateItem(ctx, in, opts...)
	if err == nil && d.loseAnswers.Add(-1) >= 0 {
		return nil, errLost
	}
	return out, err
}

func lossyStore(e *env) (*lease.Store, *lossyDB) {
	db := &lossyDB{DB: e.db}
	return lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes}), db
}

// archived returns the event types in the events table itself.
func archived(t *testing.T, e *env, taskID string) []string {
	t.Helper()
	name := e.names.Table(schema.EventsTable)
	expr, _ := expression.NewBuilder().WithKeyCondition(expression.Key("task_id").Equal(expression.Value(taskID))).Build()
	out, err := e.db.Query(context.Background(), &dynamodb.QueryInput{
		TableName: &name, KeyConditionExpression: expr.KeyCondition(), ConsistentRead: aws.Bool(true),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, item := range out.Items {
		got = append(got, item["type"].(*types.AttributeValueMemberS).Value)
	}
	return got
}

// Every transition's events ride in its one write: the answers to all of
// them can be lost and the change stream still archives every event, in
// order, and tells each watcher once.
func TestLostAnswersLoseNoEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	store, db := lossyStore(e)
	e.task(t, "t")
	if err := e.store.Watch(c, "t", "w"); err != nil {
		t.Fatal(err)
	}
	db.loseAnswers.Store(100)
	if _, err := store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "run-a"}); !errors.Is(err, errLost) {
		t.Fatalf("checkout with a lost answer: %v", err)
	}
	e.clock.Advance(time.Second)
	if _, err := store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a"}); !errors.Is(err, errLost) {
		t.Fatalf("renew with a lost answer: %v", err)
	}
	e.clock.Advance(time.Second)
	if _, err := store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"}); !errors.Is(err, errLost) {
		t.Fatalf("release with a lost answer: %v", err)
	}
	want := []string{"checkout", "renew", "release"}
	// Before the stream is drained, the item's own latest event is known
	// but held back: the two before it are not archived yet.
	if got, _ := e.store.Trail(c, "t"); len(got.Events) != 0 || got.Pending != 1 {
		t.Fatalf("trail before the stream ran = %+v, want nothing shown and the release pending", got)
	}
	if got := kinds(e.events(t, "t")); !slices.Equal(stringsOf(got), want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if got := archived(t, e, "t"); !slices.Equal(got, want) {
		t.Fatalf("archived %v, want %v", got, want)
	}
	if msgs := e.inbox(t, "w"); len(msgs) != 1 {
		t.Fatalf("watcher told %d times, want once", len(msgs))
	}
}

func stringsOf(ts []lease.EventType) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = string(t)
	}
	return out
}

// The stream delivers a change at least once: a batch handed to the
// handler again, whole, writes nothing new; a message its agent deleted
// does not come back, and the notices carry the same ids.
func TestReplayedChangesWriteNothingNew(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	e.checkout(t, "t", "a", time.Minute)
	if err := e.store.Watch(c, "t", "w"); err != nil {
		t.Fatal(err)
	}
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"}))

	// Capture the batch the handler gets, then hand it over twice more.
	var batches []events.DynamoDBEvent
	handle := stream.Handler(lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes}))
	p := *e.poller
	p.Handle = func(ctx context.Context, ev events.DynamoDBEvent) error {
		batches = append(batches, ev)
		return handle(ctx, ev)
	}
	if _, err := p.Poll(c); err != nil {
		t.Fatal(err)
	}
	msgs := e.inbox(t, "w")
	if len(msgs) != 1 {
		t.Fatalf("watcher told %d times", len(msgs))
	}
	if err := e.store.DeleteMessage(c, "w", msgs[0].MessageID); err != nil {
		t.Fatal(err)
	}
	ids := func() []string {
		var out []string
		for _, n := range e.notes.Notices() {
			out = append(out, n.ID)
		}
		return out
	}
	first := slices.Clone(ids())
	for _, b := range batches {
		if err := handle(c, b); err != nil {
			t.Fatal(err)
		}
	}
	if got := archived(t, e, "t"); !slices.Equal(got, []string{"checkout", "release"}) {
		t.Fatalf("archived after a replay %v", got)
	}
	if msgs := e.inbox(t, "w"); len(msgs) != 0 {
		t.Fatalf("a replay brought back a deleted message: %+v", msgs)
	}
	again := ids()[len(first):]
	slices.Sort(first)
	slices.Sort(again)
	first, again = slices.Compact(first), slices.Compact(again)
	if len(first) != 2 || !slices.Equal(first, again) {
		t.Fatalf("replayed notice ids %v, want the same as %v", again, first)
	}
}

// A release whose answer was lost, retried under the same run id, is
// answered as released; its event is recorded once and each watcher is told
// once.
func TestRetriedReleaseIsIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	store, db := lossyStore(e)
	e.task(t, "t")
	held := e.checkout(t, "t", "a", time.Minute)
	if err := e.store.Watch(c, "t", "w"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(3 * time.Second)
	db.loseAnswers.Store(1)
	p := lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: held.RunID, Fence: held.Fence}
	if _, err := store.Release(c, p); !errors.Is(err, errLost) {
		t.Fatalf("release with a lost answer: %v", err)
	}
	for range 2 {
		got, err := store.Release(c, p)
		if err != nil || got.Held != 3*time.Second || got.ReleasedBy != "a" {
			t.Fatalf("retried release: %+v %v", got, err)
		}
	}
	e.drain(t)
	if got := archived(t, e, "t"); !slices.Equal(got, []string{"checkout", "release"}) {
		t.Fatalf("archived %v", got)
	}
	if msgs := e.inbox(t, "w"); len(msgs) != 1 {
		t.Fatalf("watcher told %d times", len(msgs))
	}
	// A release that does not name the lease is not taken for a retry.
	if _, err := store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"}); !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Fatalf("unnamed second release: %v", err)
	}
	// Nor is another agent's, or another lease's.
	if _, err := store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: held.RunID}); !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Fatalf("other agent's release: %v", err)
	}
	if _, err := store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", Fence: held.Fence + 1}); !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Fatalf("other lease's release: %v", err)
	}
}

func TestRetriedCompleteIsIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	store, db := lossyStore(e)
	e.task(t, "t")
	held := e.checkout(t, "t", "a", time.Minute)
	db.loseAnswers.Store(1)
	p := lease.CompleteParams{TaskID: "t", AgentID: "a", RunID: held.RunID}
	if _, err := store.Complete(c, p); !errors.Is(err, errLost) {
		t.Fatalf("complete with a lost answer: %v", err)
	}
	done := must[lease.Task](t)(store.Complete(c, p))
	if done.Status != lease.StatusDone || done.CompletedAt == nil {
		t.Fatalf("retried completion %+v", done)
	}
	e.drain(t)
	if got := archived(t, e, "t"); !slices.Equal(got, []string{"checkout", "complete"}) {
		t.Fatalf("archived %v", got)
	}
}
