package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A return made once more, overtaken by two heartbeats of the agent (the
// second's prior_last is the first's, not the return's): an alive cache
// that read the item after both kept the alive_since the return then
// moved, and showed live a lease the move had ended.
func TestAReturnOvertakenTwiceIsNotCached(t *testing.T) {
	t.Parallel()
	e, c, a, other := deadX(t)
	ran := false
	db := &heartbeatWritesDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), after: map[int]func(){
		2: func() { // the return's first write landed
			ran = true
			e.clock.Advance(time.Millisecond)
			must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "x", Timeout: time.Hour}))
			e.clock.Advance(time.Millisecond)
			must[lease.Heartbeat](t)(other.Heartbeat(c, "x", 10*time.Second))
			e.clock.Advance(time.Millisecond)
			must[lease.Heartbeat](t)(other.Heartbeat(c, "x", 10*time.Second))
			a.LockStatus(c, "t1") // A reads x's heartbeat
		},
	}}
	x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	must[lease.Heartbeat](t)(x.Heartbeat(c, "x", time.Second))
	if !ran {
		t.Fatal("no return was made")
	}
	fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	want := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")) != nil
	if got := must[*lease.Checkout](t)(a.LockStatus(c, "t1")) != nil; got != want {
		t.Errorf("process A shows t1 live=%v, a fresh process %v: A kept x's alive_since from before the return was made once more", got, want)
	}
}

// A return not made once more (its clock had not moved on by the time its
// write landed) is over: once ordinary heartbeats follow, a process reads
// the agent's heartbeat once for a storm of reads, as before its death.
func TestAReturnMadeOnceIsCachedAfterItsHeartbeats(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second))
	e.clock.Advance(2 * time.Second)                                 // x is dead
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Minute)) // back, in one millisecond
	for range 2 {
		e.clock.Advance(10 * time.Millisecond)
		must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Minute))
	}
	e.checkout(t, "t1", "x", time.Hour)

	a, db := countingHeartbeats(e)
	for range 3 {
		if got := must[*lease.Checkout](t)(a.LockStatus(c, "t1")); got == nil {
			t.Fatal("t1 not live: x is alive and took it after its return")
		}
	}
	if n := db.take(); n != 1 {
		t.Errorf("%d reads of x's heartbeat for 3 lock statuses, want 1: x's return left it uncacheable", n)
	}
}

// Removing a return's pending mark only lets caches keep the agent again:
// a return that applied is answered as applied even when that last write
// fails (a throttle), and the mark stays, as after a crash.
func TestAReturnWhoseMarkRemovalFailsIsAnsweredAlive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second))
	e.checkout(t, "t1", "x", time.Hour)
	e.clock.Advance(2 * time.Second) // x is dead

	db := &failingHeartbeatWrite{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), fail: 3}
	x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	hb, err := x.Heartbeat(c, "x", time.Minute)
	if db.sent != 3 {
		// The ordinary write refused (x is dead), the return's, then the
		// removal of its mark.
		t.Fatalf("%d heartbeat writes, want 3: the return's mark removal was not the write that failed", db.sent)
	}
	if err != nil {
		t.Fatalf("the return applied, but the heartbeat answered %v", err)
	}
	if want := e.clock.Now().Add(time.Minute); !hb.ExpiresAt.Equal(want) {
		t.Errorf("expires_at %v, want %v", hb.ExpiresAt, want)
	}
	fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")); got != nil {
		t.Errorf("t1 live after x's return ended it: %+v", got)
	}
}

// failingHeartbeatWrite fails the fail-th UpdateItem of the heartbeats
// table, as a throttle would, without sending it.
type failingHeartbeatWrite struct {
	lease.DB
	table      string
	fail, sent int
}

func (d *failingHeartbeatWrite) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if in.TableName != nil && *in.TableName == d.table {
		if d.sent++; d.sent == d.fail {
			return nil, errors.New("ProvisionedThroughputExceededException: throttled")
		}
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}
