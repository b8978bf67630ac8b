package lease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
)

// afterBatchGetDB runs a function once, just after the first BatchGetItem
// (the stream function's read of the watchers' heartbeats) returns.
type afterBatchGetDB struct {
	lease.DB
	once sync.Once
	then func()
}

func (d *afterBatchGetDB) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	out, err := d.DB.BatchGetItem(ctx, in, opt...)
	d.once.Do(d.then)
	return out, err
}

// A watcher removed after the stream function read its heartbeat, and
// before that function wrote its message: the message, written after the
// removal emptied the inbox, is not shown to the removed agent, nor to an
// agent registered again under its id.
func TestWatcherMessageDoesNotOutliveItsRemoval(t *testing.T) {
	t.Parallel()
	for _, again := range []bool{false, true} {
		e := newEnv(t)
		c := ctx(t)
		e.task(t, "x")
		must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "w", Name: "w"}))
		if err := e.store.Watch(c, "x", "w"); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Millisecond)
		e.checkout(t, "x", "a", time.Minute)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a"}))
		db := &afterBatchGetDB{DB: e.db, then: func() {
			if err := e.store.RemoveAgent(c, "w"); err != nil {
				t.Error(err)
			}
			if again {
				e.clock.Advance(time.Millisecond)
				if _, err := e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "w", Name: "w"}); err != nil {
					t.Error(err)
				}
			}
		}}
		e.poller.Handle = stream.Handler(lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes}))
		if msgs := e.inbox(t, "w"); len(msgs) != 0 {
			t.Fatalf("registered again %v: the removed watcher's message is shown: %+v", again, msgs)
		}
		// A watch of the agent registered again is told as usual.
		if again {
			if err := e.store.Watch(c, "x", "w"); err != nil {
				t.Fatal(err)
			}
			e.clock.Advance(time.Millisecond)
			e.checkout(t, "x", "a", time.Minute)
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a"}))
			if msgs := e.inbox(t, "w"); len(msgs) != 1 {
				t.Fatalf("the new agent's own watch: %d messages, want 1", len(msgs))
			}
		}
	}
}

// An id registered again that watches a task its removed self watched
// starts a watch of its own: a freeing that came before that watch does
// not tell it (the removed self's watch item kept its place, and the new
// watch, a refresh of that item, took the place over). Found by
// TestLinearizabilityWatchForceRemove.
func TestWatchOfAnIDRegisteredAgainStartsAfresh(t *testing.T) {
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
	// The freeing, before the id is registered again and watches again;
	// the stream has not handled it yet.
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a", RunID: co.RunID}))
	e.clock.Advance(time.Millisecond)
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "w", Name: "w"}))
	e.clock.Advance(time.Millisecond)
	if err := e.store.Watch(c, "x", "w"); err != nil {
		t.Fatal(err)
	}
	if msgs := e.inbox(t, "w"); len(msgs) != 0 {
		t.Fatalf("the new agent was told of a freeing before its watch: %+v", msgs)
	}
	// Its own watch is told at the next freeing.
	e.clock.Advance(time.Millisecond)
	co = e.checkout(t, "x", "a", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a", RunID: co.RunID}))
	if msgs := e.inbox(t, "w"); len(msgs) != 1 || msgs[0].Fence != co.Fence {
		t.Fatalf("the new agent's own watch: %+v, want one message for fence %d", msgs, co.Fence)
	}
}

// A removed agent that watches again while its id is registered again in
// the same millisecond (its read of its heartbeat, which says removed,
// served before the registration) watches as the removed agent: the new
// agent is not told of a freeing the removed agent's watch asked for. The
// watch used to take that millisecond as its time, and so looked placed
// no earlier than the registration, and the new agent was told. Found by
// a variant of TestLinearizabilityWorkGraph whose change stream runs every
// third phase, where every operation of a phase shares one millisecond.
func TestRemovedAgentsWatchAgainAtItsRegistrationStaysItsOwn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "w", Name: "w"}))
	co := e.checkout(t, "x", "a", time.Minute)
	if err := e.store.RemoveAgent(c, "w"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Millisecond)
	// The removed agent watches (its key may pass a cache for a while),
	// and the task is freed.
	if err := e.store.Watch(c, "x", "w"); err != nil {
		t.Fatal(err)
	}
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a", RunID: co.RunID}))
	e.clock.Advance(time.Millisecond)

	// It watches again; its read of its heartbeat is served before the
	// registration again, in the same millisecond, and acted on after it.
	p := &pausingDB{Client: e.db, table: e.names.Table(schema.HeartbeatsTable), key: "w", served: make(chan struct{}), release: make(chan struct{})}
	p.armed.Store(true)
	racing := lease.New(lease.Config{DB: p, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	done := make(chan error, 1)
	go func() { done <- racing.Watch(c, "x", "w") }()
	<-p.served
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "w", Name: "w"}))
	close(p.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if msgs := e.inbox(t, "w"); len(msgs) != 0 {
		t.Fatalf("the new agent was told of a freeing its removed self watched for: %+v", msgs)
	}
}
