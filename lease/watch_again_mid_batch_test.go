package lease_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/stream"
)

// gatedWatcherDB holds a watcher's request just before its watch write
// (readDone is closed, then it waits for goWrite), and closes queried once
// its read of the freeing records (settleWatch's freedAfter) has answered.
type gatedWatcherDB struct {
	lease.DB
	readDone, goWrite, queried chan struct{}
	wrote, asked               atomic.Bool
}

func (d *gatedWatcherDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if k, ok := in.Key["agent_id"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(k.Value, "#watch#") && d.wrote.CompareAndSwap(false, true) {
		close(d.readDone)
		<-d.goWrite
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}

func (d *gatedWatcherDB) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	out, err := d.DB.Query(ctx, in, opts...)
	freed := false
	for _, v := range in.ExpressionAttributeValues {
		if s, ok := v.(*types.AttributeValueMemberS); ok && strings.HasPrefix(s.Value, "#freed#") {
			freed = true
		}
	}
	if freed && d.wrote.Load() && d.asked.CompareAndSwap(false, true) {
		close(d.queried)
	}
	return out, err
}

// beforeNthFreedRecordDB runs hook once, just before the stream function
// writes its nth freeing record ("#freed#<seq>").
type beforeNthFreedRecordDB struct {
	lease.DB
	n    int32
	seen atomic.Int32
	hook func()
}

func (d *beforeNthFreedRecordDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if k, ok := in.Item["message_id"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(k.Value, "#freed#") && d.seen.Add(1) == d.n {
		d.hook()
	}
	return d.DB.PutItem(ctx, in, opts...)
}

// The stream function handles two releases of one task in one batch.
// w's watch (placed before release 1) is read and told for release 1; w,
// refused while b held the task between the two releases, watches again,
// and that write, and w's read of the freeing records, land while the
// batch is between the two freeings. Release 2's own read of the watches
// must count the new place, although the watch was read for release 1.
func TestAWatchAgainLandingMidBatchIsToldOfTheNextFreeing(t *testing.T) {
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

	// w watches again while b holds the task: its read is now, its write
	// waits.
	wdb := &gatedWatcherDB{DB: e.db, readDone: make(chan struct{}), goWrite: make(chan struct{}), queried: make(chan struct{})}
	sw := lease.New(lease.Config{DB: wdb, Tables: e.names, Now: e.clock.Now})
	werr := make(chan error, 1)
	go func() { werr <- sw.Watch(c, "t", "w") }()
	<-wdb.readDone
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: co2.RunID}))

	// The stream function handles both releases in one batch; w's write,
	// and its read of the freeing records, land between the two.
	sdb := &beforeNthFreedRecordDB{DB: lease.NewLocalClient(testenv.Endpoint()), n: 2}
	sdb.hook = func() {
		close(wdb.goWrite)
		select {
		case <-wdb.queried:
		case <-time.After(10 * time.Second):
			t.Error("w's request never read the freeing records")
		}
	}
	p := *e.poller
	p.Handle = stream.Handler(lease.New(lease.Config{DB: sdb, Tables: e.names, Now: e.clock.Now, Notifier: e.notes}))
	if _, err := p.Poll(c); err != nil {
		t.Fatal(err)
	}
	if sdb.seen.Load() < 2 {
		t.Fatalf("the stream recorded %d freedings, want both releases in one batch", sdb.seen.Load())
	}
	if err := <-werr; err != nil {
		t.Fatalf("w's second watch: %v", err)
	}
	fences := func(msgs []lease.Message) []int64 {
		var out []int64
		for _, m := range msgs {
			out = append(out, m.Fence)
		}
		return out
	}
	if got := fences(e.inbox(t, "w")); len(got) != 2 || got[0] != co1.Fence || got[1] != co2.Fence {
		t.Errorf("w watched before release 1 and again while b held fence %d: inbox fences %v, want [%d %d]", co2.Fence, got, co1.Fence, co2.Fence)
	}
	co3 := e.checkout(t, "t", "a", time.Hour)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co3.RunID}))
	if got := fences(e.inbox(t, "w")); len(got) < 2 {
		t.Errorf("after a third release (fence %d), w's inbox fences %v: its second watch (answered as placed) is never told of anything", co3.Fence, got)
	}
}
