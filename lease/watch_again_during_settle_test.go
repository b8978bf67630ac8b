package lease_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
)

// beforeWatchDeleteDB runs hook once, just before the first DeleteItem of
// an item in a task's watch partition (dropWatch: a watcher using up its
// own watch after telling itself of a freeing).
type beforeWatchDeleteDB struct {
	lease.DB
	hook func()
	done atomic.Bool
}

func (d *beforeWatchDeleteDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if k, ok := in.Key["agent_id"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(k.Value, "#watch#") && d.done.CompareAndSwap(false, true) {
		d.hook()
	}
	return d.DB.DeleteItem(ctx, in, opts...)
}

// A watch written late (it missed release 1, which its writer tells it
// of) that the same agent watches again while the task is held by b gains
// a place for b's release. The stream handles b's release while the watch
// still has its first place (before release 1, a recorded freeing), and
// after the watcher's settle read the freeing records: the stream must
// tell the watch by its later place, for the first place before a
// recorded freeing does not make the whole watch its writer's.
func TestAWatchAgainDuringASettleIsToldOfTheNextFreeing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := e.checkout(t, "t", "a", time.Hour)
	var second, third lease.Checkout
	db := &afterWatchWriteDB{DB: e.db}
	db.before = func() {
		// Release 1, handled by the stream before the watch lands.
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID}))
		e.drain(t)
	}
	db.after = func() {
		// The watch has landed at its place before release 1. b takes
		// the task; w, refused, watches again (a place for b's release).
		second = e.checkout(t, "t", "b", time.Hour)
		del := &beforeWatchDeleteDB{DB: e.db}
		del.hook = func() {
			// w's second request has read the freeing records (release
			// 1 alone) and is about to use its place up: b releases and
			// the stream handles it now.
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: second.RunID}))
			e.drain(t)
		}
		s2 := lease.New(lease.Config{DB: del, Tables: e.names, Now: e.clock.Now})
		if err := s2.Watch(c, "t", "w"); err != nil {
			t.Fatalf("watch again while b holds the task: %v", err)
		}
		if !del.done.Load() {
			t.Fatal("the second watch never used a place up")
		}
	}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	if err := s.Watch(c, "t", "w"); err != nil {
		t.Fatal(err)
	}
	if !db.done.Load() {
		t.Fatal("the watch was never written")
	}
	msgs := e.inbox(t, "w")
	fences := func() []int64 {
		var out []int64
		for _, m := range msgs {
			out = append(out, m.Fence)
		}
		return out
	}
	if len(msgs) != 2 || msgs[0].Fence != co.Fence || msgs[1].Fence != second.Fence {
		t.Errorf("w watched before release 1 (fence %d) and again while b held fence %d; inbox fences %v, want [%d %d]",
			co.Fence, second.Fence, fences(), co.Fence, second.Fence)
	}
	// And the watch left behind is never told of anything again.
	third = e.checkout(t, "t", "a", time.Hour)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: third.RunID}))
	msgs = e.inbox(t, "w")
	if len(msgs) < 2 {
		t.Errorf("after a third release (fence %d), w's inbox fences %v: its second watch (answered as placed) was never told of any freeing", third.Fence, fences())
	}
}
