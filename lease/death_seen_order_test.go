package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// heldHeartbeatReadDB runs hook once, before the first GetItem on the
// heartbeats table is served: a read whose clock was read long before
// the item it finds was written.
type heldHeartbeatReadDB struct {
	lease.DB
	table string
	hook  func()
	done  bool
}

func (d *heldHeartbeatReadDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if !d.done && in.TableName != nil && *in.TableName == d.table {
		d.done = true
		d.hook()
	}
	return d.DB.GetItem(ctx, in, opts...)
}

// A process remembers the latest read that found an agent dead or back
// from the dead (deathCache), by the clock read before each read. A read
// whose clock was read early but which was served late, after the agent
// died again and came back, leaves an older read (x dead at epoch+1.5s)
// as the one remembered, while its return (epoch+4s) says which leases
// have ended. A lease x took at epoch+2.1s, alive by its return at
// epoch+2s until epoch+3s, ended when x died at epoch+3s; the older read,
// which shows x dead before that lease was locked, must not stamp its
// agent_death at the lock, inside the life x's heartbeat answered.
// Found by TestRaceTimeOnlyMovesForward under load.
func TestADeathReadBeforeALeaseDoesNotStampItsEnding(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a", "c")
	epoch := e.clock.Now()
	at := func(d time.Duration) { e.clock.Advance(epoch.Add(d).Sub(e.clock.Now())) }
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second)) // x dies at epoch+1s
	e.checkout(t, "a", "x", time.Hour)

	var life lease.Heartbeat // x's heartbeat at its first return
	var co lease.Checkout    // the lease x takes in that life
	db := &heldHeartbeatReadDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable)}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	db.hook = func() {
		at(1500 * time.Millisecond)
		if got := must[*lease.Checkout](t)(s.LockStatus(c, "a")); got != nil {
			t.Fatalf("a live while x is dead: %+v", got)
		}
		at(2 * time.Second)
		life = must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second)) // back, until epoch+3s
		at(2100 * time.Millisecond)
		co = e.checkout(t, "c", "x", time.Hour)
		at(4 * time.Second)                                              // dead since epoch+3s
		must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second)) // back again
		at(4100 * time.Millisecond)
	}
	at(100 * time.Millisecond)
	if got := must[*lease.Checkout](t)(s.LockStatus(c, "a")); got != nil {
		t.Fatalf("a live after x came back: %+v", got)
	}
	if !db.done {
		t.Fatal("the status read no heartbeat")
	}
	must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "c", AgentID: "y", Timeout: time.Hour}))

	e.drain(t)
	death := deathOf(t, e, "c", co.Fence)
	if death.At.Before(life.ExpiresAt) {
		t.Fatalf("agent_death of x at %v, before the end of the life its heartbeat answered, %v to %v, in which it took the lease at %v",
			death.At, life.ExpiresAt.Add(-time.Second), life.ExpiresAt, co.LockedAt)
	}
}
