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

// alive.go's aliveCache says it is exact: an entry is used "never past the
// heartbeat's expiry", and no heartbeat landing after the read can make a
// fresh read say otherwise in that window. A heartbeat that lands within
// clockMargin (50 ms) BEFORE the expiry is made a return from the dead
// (alive_since moves to the heartbeat's time, every lease held so far
// ends). So a process that read the holder alive a moment before that
// heartbeat keeps its entry (old alive_since) until the old expiry, while
// every other process already holds the lease ended: it reports the lease
// live, refuses a checkout with 409, and lets the holder renew a lease
// that has ended (API.md: not_checked_out "after its holder died by
// heartbeat"), which another agent then takes over at once.
func TestTheAliveCacheEndsBeforeAReturnWithinTheMargin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second)) // x expires epoch+1s
	co := e.checkout(t, "t1", "x", time.Hour)

	a := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now}) // process A
	b := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now}) // process B

	e.clock.Advance(955 * time.Millisecond)
	if got := must[*lease.Checkout](t)(a.LockStatus(c, "t1")); got == nil {
		t.Fatal("t1 not live in A while x is alive")
	}
	e.clock.Advance(5 * time.Millisecond) // epoch+960ms: 40 ms before x's expiry
	must[lease.Heartbeat](t)(b.Heartbeat(c, "x", time.Second))
	e.clock.Advance(10 * time.Millisecond) // epoch+970ms, x alive throughout

	fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	want := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")) != nil
	got := must[*lease.Checkout](t)(a.LockStatus(c, "t1")) != nil
	if got != want {
		t.Errorf("process A shows t1 live=%v, a fresh process live=%v (A's alive cache kept x's alive_since from before the return)", got, want)
	}
	if !want {
		r, err := a.Renew(c, lease.RenewParams{TaskID: "t1", AgentID: "x", Fence: co.Fence, Timeout: time.Hour})
		if err == nil {
			t.Errorf("process A renewed x's lease on t1 (fence %d, expires %v) though every other process holds it ended", r.Fence, r.ExpiresAt)
			if y, err := fresh.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "y", Timeout: time.Hour}); err == nil {
				t.Errorf("and y then took t1 over at fence %d, right after x was told it holds t1 until %v", y.Fence, r.ExpiresAt)
			}
		} else if !errors.Is(err, lease.ErrNotCheckedOut) {
			t.Logf("renew: %v", err)
		}
	}
}

// heartbeatWritesDB runs before[n] just before the n-th UpdateItem (from
// 1) on the heartbeats table is sent (a heartbeat whose time was read, its
// write on its way), and after[n] just after it has landed, before its
// answer is handed back.
type heartbeatWritesDB struct {
	lease.DB
	table         string
	before, after map[int]func()
	sent          int
}

func (d *heartbeatWritesDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if in.TableName == nil || *in.TableName != d.table {
		return d.DB.UpdateItem(ctx, in, opts...)
	}
	d.sent++
	n := d.sent
	if h := d.before[n]; h != nil {
		h()
	}
	out, err := d.DB.UpdateItem(ctx, in, opts...)
	if h := d.after[n]; h != nil {
		h()
	}
	return out, err
}

// A late heartbeat is still made a return from the dead.
// A heartbeat that lands after x's expiry (x was seen dead, its lease
// reported ended) makes its return in a second write pinned to its first.
// If another heartbeat of x (a client's retry after a timeout, a second
// process of the agent) lands between the two, the pinned return fails,
// the heartbeat is tried again, finds the other one's item alive, and
// answers as an ordinary heartbeat: nobody makes the return. alive_since
// never moves, the lease the death ended is live again for everyone but
// the process that saw the death, which holds it ended for ever (death
// cache) and lets another agent take it over while x renews it.
func TestALateHeartbeatRacedByAnotherIsStillAReturn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second)) // x dies at epoch+1s
	co := e.checkout(t, "t1", "x", time.Hour)
	e.clock.Advance(900 * time.Millisecond)

	seen := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	db := &heartbeatWritesDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), before: map[int]func(){
		1: func() { // the first write is late: x is dead when it lands, and seen so
			e.clock.Advance(200 * time.Millisecond)
			if got := must[*lease.Checkout](t)(seen.LockStatus(c, "t1")); got != nil {
				t.Fatalf("t1 live while x is dead: %+v", got)
			}
		},
		2: func() { // before its return lands, another heartbeat of x lands
			must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second))
		},
	}}
	x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	must[lease.Heartbeat](t)(x.Heartbeat(c, "x", time.Second))
	e.clock.Advance(100 * time.Millisecond)

	fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")); got != nil {
		t.Errorf("x's lease on t1, reported ended while x was dead, is live again: fence %d", got.Fence)
		if _, err := fresh.Renew(c, lease.RenewParams{TaskID: "t1", AgentID: "x", Fence: co.Fence, Timeout: time.Hour}); err == nil {
			t.Errorf("x renewed the lease its death ended")
			if y, err := seen.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "y", Timeout: time.Hour}); err == nil {
				t.Errorf("and the process that saw the death let y take t1 over (fence %d) right after x's renewal", y.Fence)
			}
		}
	}
}
