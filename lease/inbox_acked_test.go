package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
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

// seedInbox writes n task_available messages straight into agentID's
// inbox, one a millisecond from at, about tasks named prefix+i.
func (e *env) seedInbox(t testing.TB, agentID, prefix string, at int64, n int) {
	t.Helper()
	table := e.names.Table(schema.InboxTable)
	ttl := fmt.Sprint(epoch.Add(7 * 24 * time.Hour).Unix())
	var reqs []types.WriteRequest
	for i := range n {
		task := fmt.Sprintf("%s%04d", prefix, i)
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{
			"agent_id": &types.AttributeValueMemberS{Value: agentID}, "message_id": &types.AttributeValueMemberS{Value: fmt.Sprintf("%013d.1.%s", at+int64(i), task)},
			"type": &types.AttributeValueMemberS{Value: "task_available"}, "task_id": &types.AttributeValueMemberS{Value: task},
			"reason": &types.AttributeValueMemberS{Value: "release"}, "at": &types.AttributeValueMemberN{Value: fmt.Sprint(at + int64(i))},
			"ttl": &types.AttributeValueMemberN{Value: ttl},
		}}})
		if len(reqs) == 25 || i == n-1 {
			if _, err := e.db.BatchWriteItem(ctx(t), &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{table: reqs}}); err != nil {
				t.Fatal(err)
			}
			reqs = nil
		}
	}
}

// inboxItems is every item of agentID's partition of the inbox table.
func (e *env) inboxItems(t testing.TB, agentID string) []map[string]types.AttributeValue {
	t.Helper()
	out, err := e.db.Query(ctx(t), &dynamodb.QueryInput{
		TableName:                 aws.String(e.names.Table(schema.InboxTable)),
		KeyConditionExpression:    aws.String("agent_id = :a"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":a": &types.AttributeValueMemberS{Value: agentID}},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Items
}

// An inbox read costs what the agent's unread messages cost: the messages
// it deleted are not read again. An agent polling its inbox (the client's
// CheckLossEvery, the CLI, MCP's read_inbox) used to pay, on every read,
// for the deleted messages of the last 7 days, which were kept, marked, in
// the range the read queries. A deletion now costs three write units
// instead of one (DeleteMessage).
func TestAnInboxReadDoesNotPayForDeletedMessages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const deleted = 500
	at := epoch.UnixMilli()
	e.seedInbox(t, "busy", "t", at, deleted+1)
	e.seedInbox(t, "fresh", "u", at+deleted, 1)
	for _, m := range must[[]lease.Message](t)(e.store.Inbox(c, "busy"))[:deleted] {
		if err := e.store.DeleteMessage(c, "busy", m.MessageID); err != nil {
			t.Fatal(err)
		}
	}
	meter := testenv.NewMeter(t, e.names.Prefix)
	var last lease.Message
	read := func(agentID, unread string) float64 {
		t.Helper()
		meter.Take()
		msgs := must[[]lease.Message](t)(e.store.Inbox(c, agentID))
		if len(msgs) != 1 || msgs[0].TaskID != unread {
			t.Fatalf("inbox of %s: %+v, want its one unread message, about %s", agentID, msgs, unread)
		}
		last = msgs[0]
		return meter.Take().Total().Read
	}
	busy, fresh := read("busy", fmt.Sprintf("t%04d", deleted)), read("fresh", "u0000")
	t.Logf("inbox read with %d deleted messages and 1 unread: %g read units; with 1 unread alone: %g", deleted, busy, fresh)
	if busy != fresh {
		t.Fatalf("an inbox read with %d deleted messages costs %g read units, one without them %g: want the same", deleted, busy, fresh)
	}
	// What that costs a deletion: the mark, the tombstone and the delete.
	meter.Take()
	if err := e.store.DeleteMessage(c, "fresh", last.MessageID); err != nil {
		t.Fatal(err)
	}
	ack := meter.Take().Total()
	t.Logf("a deletion: %g write units, %g read units", ack.Write, ack.Read)
	if ack.Write > 3 || ack.Read > 0 {
		t.Errorf("a deletion costs %g write units and %g read units, budget 3 and 0", ack.Write, ack.Read)
	}
}

// lostLease makes agent a lose its lease of task t to a timeout, found by
// a sweep, and returns the change stream's records so far, unapplied:
// applied, they tell a (a lease_lost message), and applied again, they
// write that message again, as a replay does.
func (e *env) lostLease(t testing.TB) map[string][]events.DynamoDBEventRecord {
	t.Helper()
	e.task(t, "t")
	e.checkout(t, "t", "a", time.Minute)
	e.clock.Advance(2 * time.Minute)
	e.caughtUp(t) // the sweep finds the lease through an index
	if res := must[lease.SweepResult](t)(e.store.Sweep(ctx(t))); res.Timeouts+res.AgentDeaths != 1 {
		t.Fatalf("the sweep ended %+v, want a's lease", res)
	}
	return e.capture(t)
}

// deliver hands batches to the stream function's handler over db.
func (e *env) deliver(t testing.TB, db lease.DB, batches map[string][]events.DynamoDBEventRecord) {
	t.Helper()
	handle := stream.Handler(lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes}))
	for shard, recs := range batches {
		if err := handle(stream.WithShard(ctx(t), shard), events.DynamoDBEvent{Records: recs}); err != nil {
			t.Fatalf("handle %d records: %v", len(recs), err)
		}
	}
}

// ackBeforePutDB runs ack (once) right before the first PutItem of an
// inbox item whose message_id is id.
type ackBeforePutDB struct {
	lease.DB
	id  string
	ack func()
	ran atomic.Bool
}

func (d *ackBeforePutDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if v, ok := in.Item["message_id"].(*types.AttributeValueMemberS); ok && v.Value == d.id && d.ran.CompareAndSwap(false, true) {
		d.ack()
	}
	return d.DB.PutItem(ctx, in, opts...)
}

// A message deleted while the change stream replays the freeing that made
// it stays deleted, however the two interleave: here the deletion lands
// between whatever the replay read before its write and the write, so the
// write finds the id free. The replay learns of the deletion only after
// its write (a read before it would have found none and left the message
// back for good).
func TestAMessageDeletedJustBeforeItsReplayedWriteStaysDeleted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	batches := e.lostLease(t)
	e.deliver(t, e.db, batches)
	msgs := e.inbox(t, "a")
	if len(msgs) != 1 || msgs[0].Type != lease.MessageLeaseLost {
		t.Fatalf("a's inbox: %+v, want its lease_lost message", msgs)
	}
	db := &ackBeforePutDB{DB: e.db, id: msgs[0].MessageID}
	db.ack = func() {
		if err := e.store.DeleteMessage(c, "a", db.id); err != nil {
			t.Errorf("delete the message: %v", err)
		}
	}
	e.deliver(t, db, batches)
	if !db.ran.Load() {
		t.Fatal("the replay wrote no message")
	}
	if msgs := e.inbox(t, "a"); len(msgs) != 0 {
		t.Fatalf("the replay brought back the deleted message: %+v", msgs)
	}
	e.deliver(t, e.db, batches) // once more, the deletion long done
	if msgs := e.inbox(t, "a"); len(msgs) != 0 {
		t.Fatalf("a second replay brought back the deleted message: %+v", msgs)
	}
	if err := e.store.DeleteMessage(c, "a", db.id); !errors.Is(err, lease.ErrMessageNotFound) {
		t.Fatalf("deleting it again: %v, want message_not_found", err)
	}
	// An earlier version reads the agent's whole partition, and shows
	// every item there not marked acked: it must show nothing either.
	for _, it := range e.inboxItems(t, "a") {
		if acked, _ := it["acked"].(*types.AttributeValueMemberBOOL); acked == nil || !acked.Value {
			t.Errorf("an item an earlier version would show as a message: %v", it)
		}
	}
}

// failInboxDeleteDB fails every DeleteItem on the inbox table.
type failInboxDeleteDB struct {
	lease.DB
	table string
}

var errInboxDelete = errors.New("delete refused")

func (d *failInboxDeleteDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if aws.ToString(in.TableName) == d.table {
		return nil, errInboxDelete
	}
	return d.DB.DeleteItem(ctx, in, opts...)
}

// A deletion cut short after it marked the message leaves it hidden: an
// inbox read skips it, a replay of its freeing does not bring it back, and
// deleting it again answers message_not_found, as for a message deleted
// whole.
func TestAMessageDeletionCutShortLeavesItHidden(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	batches := e.lostLease(t)
	e.deliver(t, e.db, batches)
	msgs := e.inbox(t, "a")
	if len(msgs) != 1 {
		t.Fatalf("a has %d messages, want 1", len(msgs))
	}
	cut := lease.New(lease.Config{DB: &failInboxDeleteDB{DB: e.db, table: e.names.Table(schema.InboxTable)}, Tables: e.names, Now: e.clock.Now})
	if err := cut.DeleteMessage(c, "a", msgs[0].MessageID); !errors.Is(err, errInboxDelete) {
		t.Fatalf("a deletion whose last step fails: %v, want its error", err)
	}
	if got := e.inbox(t, "a"); len(got) != 0 {
		t.Fatalf("after a deletion cut short the inbox shows %+v", got)
	}
	e.deliver(t, e.db, batches)
	if got := e.inbox(t, "a"); len(got) != 0 {
		t.Fatalf("a replay after a deletion cut short shows %+v", got)
	}
	if err := e.store.DeleteMessage(c, "a", msgs[0].MessageID); !errors.Is(err, lease.ErrMessageNotFound) {
		t.Fatalf("deleting it again: %v, want message_not_found", err)
	}
}

// Removing an agent empties its partition of the inbox: its messages, read
// or not, and what its deletions left.
func TestRemovingAnAgentLeavesNothingOfItsInbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "gone", Name: "gone"}))
	e.seedInbox(t, "gone", "t", epoch.UnixMilli(), 3)
	msgs := must[[]lease.Message](t)(e.store.Inbox(c, "gone"))
	if err := e.store.DeleteMessage(c, "gone", msgs[0].MessageID); err != nil {
		t.Fatal(err)
	}
	if err := e.store.RemoveAgent(c, "gone"); err != nil {
		t.Fatal(err)
	}
	if items := e.inboxItems(t, "gone"); len(items) != 0 {
		t.Fatalf("after the removal the agent's inbox partition holds %d items: %v", len(items), items)
	}
}

// inboxCallsDB counts the calls made on the inbox table, by operation.
type inboxCallsDB struct {
	lease.DB
	table string
	mu    sync.Mutex
	calls map[string]int
}

func (d *inboxCallsDB) count(op, table string) {
	if table == d.table {
		d.mu.Lock()
		d.calls[op]++
		d.mu.Unlock()
	}
}

func (d *inboxCallsDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	d.count("GetItem", *in.TableName)
	return d.DB.GetItem(ctx, in, opt...)
}

func (d *inboxCallsDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	d.count("PutItem", *in.TableName)
	return d.DB.PutItem(ctx, in, opt...)
}

func (d *inboxCallsDB) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	for table := range in.RequestItems {
		d.count("BatchGetItem", table)
	}
	return d.DB.BatchGetItem(ctx, in, opt...)
}

// The tombstones of the messages a batch writes are read together, one
// BatchGetItem for up to 100, not one GetItem each: a freeing that tells
// twenty watchers makes twenty puts and one read of their tombstones.
func TestTheTombstonesOfABatchsMessagesAreReadTogether(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const watchers = 20
	e.task(t, "t")
	e.checkout(t, "t", "holder", time.Minute)
	for i := range watchers {
		if err := e.store.Watch(c, "t", fmt.Sprintf("w%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	e.drain(t)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "holder"}))
	db := &inboxCallsDB{DB: e.db, table: e.names.Table(schema.InboxTable), calls: map[string]int{}}
	e.deliver(t, db, e.capture(t))
	for i := range watchers {
		if msgs := e.inbox(t, fmt.Sprintf("w%02d", i)); len(msgs) != 1 {
			t.Fatalf("w%02d's inbox: %+v, want one message", i, msgs)
		}
	}
	// (The puts are the messages and the record of the freeing's watches.)
	if db.calls["PutItem"] < watchers || db.calls["GetItem"] != 0 || db.calls["BatchGetItem"] != 1 {
		t.Fatalf("calls on the inbox table: %v, want a PutItem a message, one BatchGetItem, no GetItem", db.calls)
	}
}

// failTombstoneReadDB fails the first BatchGetItem on the inbox table.
type failTombstoneReadDB struct {
	lease.DB
	table  string
	failed atomic.Bool
}

var errTombstoneRead = errors.New("read throttled")

func (d *failTombstoneReadDB) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	if _, ok := in.RequestItems[d.table]; ok && d.failed.CompareAndSwap(false, true) {
		return nil, errTombstoneRead
	}
	return d.DB.BatchGetItem(ctx, in, opt...)
}

// A replay cut short after its write brought a deleted message back, and
// before it read the tombstone, leaves the message deleted once the batch
// is handled again (as the stream retries a failed batch): the retry's
// write finds the message there, and must still read its tombstone rather
// than take it for a message never deleted.
func TestAReplayCutShortAfterItsWriteLeavesTheMessageDeletedOnItsRetry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	batches := e.lostLease(t)
	e.deliver(t, e.db, batches)
	msgs := e.inbox(t, "a")
	if len(msgs) != 1 {
		t.Fatalf("a has %d messages, want 1", len(msgs))
	}
	if err := e.store.DeleteMessage(c, "a", msgs[0].MessageID); err != nil {
		t.Fatal(err)
	}
	db := &failTombstoneReadDB{DB: e.db, table: e.names.Table(schema.InboxTable)}
	handle := stream.Handler(lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes}))
	var errs []error
	for shard, recs := range batches {
		errs = append(errs, handle(stream.WithShard(c, shard), events.DynamoDBEvent{Records: recs}))
	}
	if err := errors.Join(errs...); !errors.Is(err, errTombstoneRead) {
		t.Fatalf("the replay cut short: %v, want its error", err)
	}
	e.deliver(t, e.db, batches) // the stream's retry
	if got := e.inbox(t, "a"); len(got) != 0 {
		t.Fatalf("after a replay cut short and its retry the deleted message is back: %+v", got)
	}
}
