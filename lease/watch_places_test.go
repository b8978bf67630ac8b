package lease_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
)

func fencesOf(msgs []lease.Message) []int64 {
	var out []int64
	for _, m := range msgs {
		out = append(out, m.Fence)
	}
	return out
}

// One agent, two watch requests in flight: the stale
// one read the task while b held it (after a's release), the fresh one
// while c held it (after b's release). The fresh one's write lands first;
// the stale one's write then adds no place of its own (its eseq is between
// the watch's places), so b's release, which the stale request's 409
// ("watching": true) was decided before, tells w nothing.
func TestAStaleWatchBetweenPlacesIsToldOfTheFreeingAfterIt(t *testing.T) {
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
	co2 := e.checkout(t, "t", "b", time.Hour)
	var co3 lease.Checkout
	db := &beforeWatchWriteDB{DB: e.db}
	db.hook = func() {
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: co2.RunID}))
		co3 = e.checkout(t, "t", "c", time.Hour)
		if err := e.store.Watch(c, "t", "w"); err != nil {
			t.Fatal(err)
		}
	}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	// Read while b holds the task.
	if err := s.Watch(c, "t", "w"); err != nil {
		t.Fatal(err)
	}
	if !db.done.Load() {
		t.Fatal("the stale watch write was never held")
	}
	e.drain(t)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "c", RunID: co3.RunID}))
	msgs := e.inbox(t, "w")
	if got := fencesOf(msgs); len(got) != 3 || got[0] != co1.Fence || got[1] != co2.Fence || got[2] != co3.Fence {
		t.Errorf("w watched while a (fence %d), b (fence %d) and c (fence %d) held the task, each answered watching; inbox fences %v, want [%d %d %d]",
			co1.Fence, co2.Fence, co3.Fence, got, co1.Fence, co2.Fence, co3.Fence)
	}
}

// settleGateDB holds a watcher's request at its read of the freeing
// records (closes atQuery, waits for goQuery, closes queried after it) and
// at its first DeleteItem in a watch partition (waits for goDelete).
type settleGateDB struct {
	lease.DB
	atQuery, goQuery, queried, goDelete chan struct{}
	q, d                                atomic.Bool
}

func (d *settleGateDB) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	freed := false
	for _, v := range in.ExpressionAttributeValues {
		if s, ok := v.(*types.AttributeValueMemberS); ok && strings.HasPrefix(s.Value, "#freed#") {
			freed = true
		}
	}
	if !freed || !d.q.CompareAndSwap(false, true) {
		return d.DB.Query(ctx, in, opts...)
	}
	close(d.atQuery)
	<-d.goQuery
	out, err := d.DB.Query(ctx, in, opts...)
	close(d.queried)
	return out, err
}

func (d *settleGateDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if k, ok := in.Key["agent_id"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(k.Value, "#watch#") && d.d.CompareAndSwap(false, true) {
		<-d.goDelete
	}
	return d.DB.DeleteItem(ctx, in, opts...)
}

// streamGateDB runs beforeRecord2 just before the stream's second freeing
// record, and beforeMsg just before its first message write (all reads
// of the batch done, no watch dropped yet).
type streamGateDB struct {
	lease.DB
	records                  atomic.Int32
	msg                      atomic.Bool
	beforeRecord2, beforeMsg func()
}

func (d *streamGateDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if k, ok := in.Item["message_id"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(k.Value, "#freed#") {
		if d.records.Add(1) == 2 {
			d.beforeRecord2()
		}
	} else if a, ok := in.Item["agent_id"].(*types.AttributeValueMemberS); ok && !strings.HasPrefix(a.Value, "#") && d.msg.CompareAndSwap(false, true) {
		d.beforeMsg()
	}
	return d.DB.PutItem(ctx, in, opts...)
}

// w watched while a held the task (place p1), and
// again while b held it (place q, after release 1). The stream handles
// both releases in one batch; w's second request reads the freeing
// records between the batch's two records (so it tells itself of release
// 1 only) and moves its watch to q after the batch read it for release 2.
// The batch's drop then finds eseq moved and leaves the watch, although
// both its places are used up: it lingers for 30 days and takes one of
// the task's 100 watcher slots.
func TestAUsedUpWatchDoesNotLingerAndHoldASlot(t *testing.T) {
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
	co2 := e.checkout(t, "t", "b", time.Hour)

	wdb := &settleGateDB{DB: e.db, atQuery: make(chan struct{}), goQuery: make(chan struct{}), queried: make(chan struct{}), goDelete: make(chan struct{})}
	sw := lease.New(lease.Config{DB: wdb, Tables: e.names, Now: e.clock.Now})
	werr := make(chan error, 1)
	go func() { werr <- sw.Watch(c, "t", "w") }()
	<-wdb.atQuery // written (places p1 and q), not yet settled
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: co2.RunID}))

	sdb := &streamGateDB{DB: lease.NewLocalClient(testenv.Endpoint())}
	sdb.beforeRecord2 = func() {
		close(wdb.goQuery)
		<-wdb.queried
	}
	sdb.beforeMsg = func() {
		close(wdb.goDelete)
		if err := <-werr; err != nil {
			t.Errorf("w's second watch: %v", err)
		}
	}
	p := *e.poller
	p.Handle = stream.Handler(lease.New(lease.Config{DB: sdb, Tables: e.names, Now: e.clock.Now, Notifier: e.notes}))
	if _, err := p.Poll(c); err != nil {
		t.Fatal(err)
	}
	if sdb.records.Load() < 2 || !sdb.msg.Load() {
		t.Fatalf("the stream recorded %d freeings (message hook %v), want both releases in one batch", sdb.records.Load(), sdb.msg.Load())
	}
	if got := fencesOf(e.inbox(t, "w")); len(got) != 2 || got[0] != co1.Fence || got[1] != co2.Fence {
		t.Fatalf("w inbox fences %v, want [%d %d]", got, co1.Fence, co2.Fence)
	}
	out, err := e.db.GetItem(c, &dynamodb.GetItemInput{TableName: aws.String(e.names.Table(schema.InboxTable)), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"agent_id": &types.AttributeValueMemberS{Value: "#watch#t"}, "message_id": &types.AttributeValueMemberS{Value: "w"}}})
	if err != nil {
		t.Fatal(err)
	}
	if out.Item != nil {
		t.Errorf("w's watch, told of both releases and with no place left, is still there: %v", out.Item)
	}
	// It tells w nothing more (no duplicate): a later release is not its.
	co3 := e.checkout(t, "t", "c", time.Hour)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "c", RunID: co3.RunID}))
	if got := fencesOf(e.inbox(t, "w")); len(got) != 2 {
		t.Fatalf("after a third release, w inbox fences %v, want [%d %d]", got, co1.Fence, co2.Fence)
	}
	// The slot it holds: 99 other agents fill the bound, the 100th live
	// watcher is refused.
	for i := range lease.MaxWatchers - 1 {
		if err := e.store.Watch(c, "t", fmt.Sprintf("o%d", i)); err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
	}
	if err := e.store.Watch(c, "t", "last"); err != nil {
		t.Errorf("the %dth live watcher: %v (the used-up watch of w holds a slot)", lease.MaxWatchers, err)
	}
}
