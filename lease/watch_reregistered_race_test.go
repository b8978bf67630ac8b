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

// beforeWatchWriteDB runs hook once, just before the first write of a
// watch item (the inbox table's "#watch#<task>" partition) is sent: what
// happens when the watcher's request stalls between reading the task and
// writing its watch (a GC pause, an SDK retry, a slow Lambda).
type beforeWatchWriteDB struct {
	lease.DB
	hook func()
	done atomic.Bool
}

func (d *beforeWatchWriteDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if k, ok := in.Key["agent_id"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(k.Value, "#watch#") && d.done.CompareAndSwap(false, true) {
		d.hook()
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}

// An id registered again whose watch replaces its removed self's watch
// item loses its watch when the change stream uses up (deletes) that old
// item between the watch's read and its write: the write is conditioned on
// the old item's "at", the condition fails on the missing item, and Watch
// answers success ("watching": true) having placed nothing. The next
// freeing tells the new agent nothing.
func TestReregisteredWatcherRacingTheStreamKeepsItsWatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "w", Name: "w"}))
	co := e.checkout(t, "x", "a", time.Minute)
	if err := e.store.Watch(c, "x", "w"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Millisecond)
	if err := e.store.RemoveAgent(c, "w"); err != nil {
		t.Fatal(err)
	}
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a", RunID: co.RunID}))
	e.clock.Advance(time.Millisecond)
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "w", Name: "w"}))
	e.clock.Advance(time.Millisecond)

	// The new agent watches; the stream handles the freeing (which uses up
	// the removed self's watch, telling nobody) between the watch's read
	// of the task's watches and its write.
	db := &beforeWatchWriteDB{DB: e.db, hook: func() { e.drain(t) }}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	if err := s.Watch(c, "x", "w"); err != nil {
		t.Fatal(err)
	}
	if !db.done.Load() {
		t.Fatal("the watch write was never sent")
	}
	if msgs := e.inbox(t, "w"); len(msgs) != 0 {
		t.Fatalf("the new agent was told of a freeing before its watch: %+v", msgs)
	}
	e.clock.Advance(time.Millisecond)
	co = e.checkout(t, "x", "a", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a", RunID: co.RunID}))
	if msgs := e.inbox(t, "w"); len(msgs) != 1 || msgs[0].Fence != co.Fence {
		t.Fatalf("the new agent's watch (answered as placed): inbox %+v, want one message for fence %d", msgs, co.Fence)
	}
}
