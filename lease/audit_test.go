package lease_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// lossyDB loses what a network can lose: the audit batch (the request never
// arrives) and the answer to an update that was applied.
type lossyDB struct {
	lease.DB
	dropBatches atomic.Int32 // BatchWriteItem calls to fail before sending
	loseAnswers atomic.Int32 // applied UpdateItem calls whose answer is lost
}

var errLost = errors.New("connection reset by peer")

func (d *lossyDB) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	if d.dropBatches.Add(-1) >= 0 {
		return nil, errLost
	}
	return d.DB.BatchWriteItem(ctx, in, opts...)
}

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

// The task item keeps the last ended lease, so its events survive a lost
// audit batch: they are shown at once and archived by the next ending.
func TestEventsSurviveALostAuditBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	store, db := lossyStore(e)
	e.task(t, "t")
	want := []lease.EventType{"checkout", "release"}

	db.dropBatches.Store(100) // every audit batch of the next two transitions is lost
	must[lease.Checkout](t)(store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a"}))
	e.clock.Advance(time.Second)
	must[lease.Released](t)(store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"}))
	db.dropBatches.Store(0)
	evs := e.events(t, "t")
	if got := kinds(evs); !slices.Equal(got, want) {
		t.Fatalf("events after lost batches %v, want %v", got, want)
	}
	if evs[1].Held == nil || *evs[1].Held != time.Second {
		t.Fatalf("release event %+v", evs[1])
	}

	// The next lease's ending archives them again; then nothing is left to
	// the item alone.
	e.checkout(t, "t", "b", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b"}))
	e.checkout(t, "t", "c", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "c"}))
	got := kinds(e.events(t, "t"))
	if !slices.Equal(got, []lease.EventType{"checkout", "release", "checkout", "release", "checkout", "release"}) {
		t.Fatalf("events %v", got)
	}
	if n := len(archived(t, e, "t")); n != 6 {
		t.Fatalf("%d events archived, want all 6", n)
	}
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

// A release whose answer was lost, retried under the same run id, is
// answered as released; its event is recorded once and each watcher is told
// once, whether or not the first attempt's audit batch made it.
func TestRetriedReleaseIsIdempotent(t *testing.T) {
	t.Parallel()
	for _, batchLost := range []bool{false, true} {
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
		// The lost answer means the store never recorded: with batchLost the
		// event exists only on the item; without it, pretend the first
		// attempt recorded by replaying through a store that did.
		if !batchLost {
			if _, err := store.Release(c, p); err != nil {
				t.Fatalf("first retry: %v", err)
			}
		}
		for range 2 {
			got, err := store.Release(c, p)
			if err != nil || got.Held != 3*time.Second || got.ReleasedBy != "a" {
				t.Fatalf("retried release (batch lost %v): %+v %v", batchLost, got, err)
			}
		}
		if got := archived(t, e, "t"); !slices.Equal(got, []string{"checkout", "release"}) {
			t.Fatalf("archived %v", got)
		}
		if msgs := must[[]lease.Message](t)(e.store.Inbox(c, "w")); len(msgs) != 1 {
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
}

func TestRetriedCompleteIsIdempotent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	store, db := lossyStore(e)
	e.task(t, "t")
	held := e.checkout(t, "t", "a", time.Minute)
	db.loseAnswers.Store(1)
	db.dropBatches.Store(100)
	p := lease.CompleteParams{TaskID: "t", AgentID: "a", RunID: held.RunID}
	if _, err := store.Complete(c, p); !errors.Is(err, errLost) {
		t.Fatalf("complete with a lost answer: %v", err)
	}
	db.dropBatches.Store(0)
	done := must[lease.Task](t)(store.Complete(c, p))
	if done.Status != lease.StatusDone || done.CompletedAt == nil {
		t.Fatalf("retried completion %+v", done)
	}
	if got := archived(t, e, "t"); !slices.Equal(got, []string{"checkout", "complete"}) {
		t.Fatalf("archived %v", got)
	}
}
