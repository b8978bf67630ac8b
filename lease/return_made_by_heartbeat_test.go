package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// answerLateDB applies the nth UpdateItem on table, then runs within
// before it answers: the same first write answered (no second sending),
// with another write landing while its answer is on its way.
type answerLateDB struct {
	lease.DB
	table  string
	n      int
	before func()
	within func()
	sent   int
}

func (d *answerLateDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if in.TableName == nil || *in.TableName != d.table {
		return d.DB.UpdateItem(ctx, in, opts...)
	}
	d.sent++
	if d.sent != d.n {
		return d.DB.UpdateItem(ctx, in, opts...)
	}
	d.before()
	out, err := d.DB.UpdateItem(ctx, in, opts...)
	d.within()
	return out, err
}

// takenWhileDead: x dead; the return's first write is on its way while
// x's other process takes t1 (x dead) and seen sees x dead, t1 ended.
func takenWhileDead(t *testing.T, e *env, c context.Context, other, seen *lease.Store) func() {
	return func() {
		e.clock.Advance(100 * time.Millisecond)
		must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "x", Timeout: time.Hour}))
		e.clock.Advance(100 * time.Millisecond)
		if got := must[*lease.Checkout](t)(seen.LockStatus(c, "t1")); got != nil {
			t.Fatalf("t1 live while x is dead: %+v", got)
		}
	}
}

// x's other process heartbeats between the return's two sendings
// (answer alive), then checks t2 out and renews it: it was told x is
// alive, then that t2 is live, twice. The SDK's second sending comes
// seconds later (the lost answer's timeout plus the retryer's backoff).
// The return used to be made once more when its own answer came in (or,
// answered late, when it came), and t2 ended with it; the other
// process's heartbeat, landing on the return's first write, now makes
// the return once more itself, at its own time, before it answers
// alive: t2 stays live, and t1 (taken while x was dead) ends
// everywhere.
func TestALeaseTakenAfterAnotherHeartbeatAnsweredDuringAReturnStaysLive(t *testing.T) {
	for _, lost := range []bool{true, false} {
		t.Run(map[bool]string{true: "answer-lost", false: "answered-late"}[lost], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t1", "t2")
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Minute))
			e.clock.Advance(2 * time.Minute) // x is dead

			other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			seen := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			var t2 lease.Checkout
			within := func() {
				e.clock.Advance(50 * time.Millisecond)
				must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Minute)) // answered: x alive
				e.clock.Advance(10 * time.Millisecond)
				t2 = must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "t2", AgentID: "x", Timeout: time.Hour}))
				e.clock.Advance(500 * time.Millisecond)
				must[lease.Checkout](t)(other.Renew(c, lease.RenewParams{TaskID: "t2", AgentID: "x", Fence: t2.Fence}))
				e.clock.Advance(1500 * time.Millisecond) // the SDK's backoff before its second sending
			}
			table := e.names.Table(schema.HeartbeatsTable)
			var db lease.DB
			if lost {
				db = &resendAcrossDB{DB: e.db, table: table, n: 2, before: takenWhileDead(t, e, c, other, seen), within: within}
			} else {
				db = &answerLateDB{DB: e.db, table: table, n: 2, before: takenWhileDead(t, e, c, other, seen), within: within}
			}
			x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			must[lease.Heartbeat](t)(x.Heartbeat(c, "x", time.Minute))
			e.clock.Advance(10 * time.Millisecond)

			fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			if got := must[*lease.Checkout](t)(seen.LockStatus(c, "t1")); got != nil {
				t.Fatalf("t1 live again for the process that saw x dead: %+v", got)
			}
			if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")); got != nil {
				t.Fatalf("t1 live in a fresh process (fence %d): the return was not made once more", got.Fence)
			}
			if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t2")); got == nil {
				t.Errorf("t2, taken (and renewed) by x's other process after its heartbeat answered x alive, %v before x's return answered, has ended", 2*time.Second)
			}
			if _, err := other.Renew(c, lease.RenewParams{TaskID: "t2", AgentID: "x", Fence: t2.Fence}); err != nil {
				t.Errorf("renew of t2: %v", err)
			}
		})
	}
}

// A return sent twice across other heartbeats of x: a third heartbeat,
// a lowering (a shorter ttl: arm, then stamp), and x dead again by the
// other heartbeat's expiry before the second sending. t1 (taken while x
// was dead, after the return's first time) ends everywhere, and a lease
// x takes once its heartbeat has answered is live.
func TestAReturnSentTwiceAcrossOtherHeartbeatsIsMadeOnceMore(t *testing.T) {
	cases := map[string]func(t *testing.T, e *env, c context.Context, other *lease.Store){
		"two-heartbeats": func(t *testing.T, e *env, c context.Context, other *lease.Store) {
			e.clock.Advance(50 * time.Millisecond)
			must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second))
			e.clock.Advance(50 * time.Millisecond)
			must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second))
		},
		"lowering": func(t *testing.T, e *env, c context.Context, other *lease.Store) {
			e.clock.Advance(50 * time.Millisecond)
			must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second)) // x's return has 2s
		},
		"dead-again": func(t *testing.T, e *env, c context.Context, other *lease.Store) {
			e.clock.Advance(50 * time.Millisecond)
			must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second))
			e.clock.Advance(1500 * time.Millisecond)
		},
	}
	for name, within := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t1")
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second))
			e.clock.Advance(2 * time.Second)
			other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			seen := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			db := &resendAcrossDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), n: 2,
				before: takenWhileDead(t, e, c, other, seen), within: func() { within(t, e, c, other) }}
			x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			must[lease.Heartbeat](t)(x.Heartbeat(c, "x", 2*time.Second))
			e.clock.Advance(10 * time.Millisecond)
			fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")); got != nil {
				t.Errorf("t1 live in a fresh process (fence %d)", got.Fence)
			}
			if got := must[*lease.Checkout](t)(seen.LockStatus(c, "t1")); got != nil {
				t.Errorf("t1 live for seen: %+v", got)
			}
			// x is alive by its own answer: a lease it takes now is live.
			e.task(t, "t3")
			must[lease.Checkout](t)(x.Checkout(c, lease.CheckoutParams{TaskID: "t3", AgentID: "x", Timeout: time.Hour}))
			e.clock.Advance(time.Millisecond)
			if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t3")); got == nil {
				t.Errorf("t3, taken by x after its heartbeat answered, is not live")
			}
		})
	}
}

// failAfterDB applies the nth UpdateItem on table, then answers an error:
// a return whose first write applied and whose call then failed (the
// Lambda's deadline during the SDK's resend gap; a crash).
type failAfterDB struct {
	lease.DB
	table  string
	n      int
	before func()
	sent   int
}

func (d *failAfterDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if in.TableName == nil || *in.TableName != d.table {
		return d.DB.UpdateItem(ctx, in, opts...)
	}
	d.sent++
	if d.sent != d.n {
		return d.DB.UpdateItem(ctx, in, opts...)
	}
	d.before()
	if _, err := d.DB.UpdateItem(ctx, in, opts...); err != nil {
		return nil, err
	}
	return nil, context.DeadlineExceeded
}

// A return that stops after its first write (an error, the Lambda's
// deadline during the SDK's resend gap, a crash) used to leave t1, which
// seen holds ended, live everywhere else for good: no later heartbeat
// made the return once more. The next heartbeat of x, landing on the
// pending mark, now does.
func TestAReturnStoppedAfterItsFirstWriteLeavesNoSplit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second))
	e.clock.Advance(2 * time.Second)
	other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	seen := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	db := &failAfterDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), n: 2, before: takenWhileDead(t, e, c, other, seen)}
	x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	if _, err := x.Heartbeat(c, "x", time.Second); err == nil {
		t.Fatal("want the heartbeat's error")
	}
	for range 3 { // x's client heartbeats again (other process, or a retry)
		e.clock.Advance(300 * time.Millisecond)
		must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second))
	}
	e.clock.Advance(10 * time.Millisecond)
	fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	inSeen := must[*lease.Checkout](t)(seen.LockStatus(c, "t1"))
	inFresh := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1"))
	if (inSeen == nil) != (inFresh == nil) {
		t.Errorf("t1: live in seen %v, live in a fresh process %v", inSeen != nil, inFresh != nil)
	}
}
