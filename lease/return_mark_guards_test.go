package lease_test

// Guards on returns from the dead and the return_pending mark: another
// process's heartbeat landing on a return's first write must not move
// alive_since back (a clock behind), nor end a lease taken after the
// return answered alive (a move landing late, or the return's clear of
// its mark failing). A heartbeat that made the return once more itself
// (tried, and taken back) failed all three.

import (
	"context"
	"errors"
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

// hookHeartbeatDB runs before (if set) before the nth UpdateItem on table, and
// after (if set) once it applied, before answering; fail answers an error
// instead of sending it.
type hookHeartbeatDB struct {
	lease.DB
	table  string
	n      int
	before func(in *dynamodb.UpdateItemInput)
	after  func()
	fail   bool
	sent   int
}

func (d *hookHeartbeatDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if in.TableName == nil || *in.TableName != d.table {
		return d.DB.UpdateItem(ctx, in, opts...)
	}
	d.sent++
	if d.sent != d.n {
		return d.DB.UpdateItem(ctx, in, opts...)
	}
	if d.before != nil {
		d.before(in)
	}
	if d.fail {
		return nil, errors.New("throttled")
	}
	out, err := d.DB.UpdateItem(ctx, in, opts...)
	if d.after != nil {
		d.after()
	}
	return out, err
}

// A return made once only (the clock had not moved after its first write)
// clears its mark and answers alive; x takes t2. Another process's
// heartbeat of x had landed on the return's first write before the clear,
// and is slow to answer: t2, taken after x's own heartbeat answered
// alive, must stay live (a move of alive_since by that heartbeat, landing
// after the clear, ended it).
func TestALeaseTakenAfterAReturnAnsweredIsNotEndedByAnotherHeartbeat(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t2")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Minute))
	e.clock.Advance(2 * time.Minute) // x is dead
	table := e.names.Table(schema.HeartbeatsTable)

	landed, release, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	// B: its ordinary write applies, then its answer is slow (a GC pause,
	// a slow network): it reads its clock after and moves alive_since.
	bdb := &hookHeartbeatDB{DB: e.db, table: table, n: 1, after: func() { close(landed); <-release }}
	b := lease.New(lease.Config{DB: bdb, Tables: e.names, Now: e.clock.Now})
	// x's return: #1 ordinary (refused: dead), #2 the return's first
	// write, #3 the clear of its mark.
	rdb := &hookHeartbeatDB{DB: e.db, table: table, n: 3, before: func(*dynamodb.UpdateItemInput) {
		e.clock.Advance(time.Millisecond)
		go func() { _, err := b.Heartbeat(c, "x", time.Minute); done <- err }()
		<-landed
	}}
	x := lease.New(lease.Config{DB: rdb, Tables: e.names, Now: e.clock.Now})
	must[lease.Heartbeat](t)(x.Heartbeat(c, "x", time.Minute)) // answered: alive
	if rdb.sent < 3 {
		t.Fatalf("the return sent %d heartbeat writes: no clear", rdb.sent)
	}
	e.clock.Advance(5 * time.Millisecond)
	t2 := must[lease.Checkout](t)(x.Checkout(c, lease.CheckoutParams{TaskID: "t2", AgentID: "x", Timeout: time.Hour}))
	e.clock.Advance(5 * time.Millisecond)
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("B: %v", err)
	}
	e.clock.Advance(5 * time.Millisecond)
	fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t2")); got == nil {
		t.Errorf("t2, taken by x after its own return answered alive (mark cleared), has ended")
	}
	if _, err := x.Renew(c, lease.RenewParams{TaskID: "t2", AgentID: "x", Fence: t2.Fence}); err != nil {
		t.Errorf("renew of t2: %v", err)
	}
}

// A return made once only whose clear of its mark fails (throttled: it is
// only logged) answers alive; x takes t2. x's next ordinary heartbeat
// finds the mark: t2 must stay live (a heartbeat that made the return
// once more at its own time ended it).
func TestAReturnWhoseClearFailedKeepsTheLeasesTakenAfterItsAnswer(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t2")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Minute))
	e.clock.Advance(2 * time.Minute) // x is dead
	rdb := &hookHeartbeatDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), n: 3, fail: true}
	x := lease.New(lease.Config{DB: rdb, Tables: e.names, Now: e.clock.Now})
	if _, err := x.Heartbeat(c, "x", time.Minute); err != nil {
		return // not told alive: no lease was promised on it (the suggested fix)
	}
	if rdb.sent < 3 {
		t.Fatalf("the return sent %d heartbeat writes: no clear", rdb.sent)
	}
	e.clock.Advance(5 * time.Millisecond)
	t2 := must[lease.Checkout](t)(x.Checkout(c, lease.CheckoutParams{TaskID: "t2", AgentID: "x", Timeout: time.Hour}))
	e.clock.Advance(20 * time.Second)
	must[lease.Heartbeat](t)(x.Heartbeat(c, "x", time.Minute)) // x's next heartbeat
	e.clock.Advance(5 * time.Millisecond)
	fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t2")); got == nil {
		t.Errorf("t2, taken by x after its return answered alive, ended at x's next heartbeat")
	}
	if _, err := x.Renew(c, lease.RenewParams{TaskID: "t2", AgentID: "x", Fence: t2.Fence}); err != nil {
		t.Errorf("renew of t2: %v", err)
	}
}

// x's other process B, its clock 40 ms behind (within clockMargin), lands
// its heartbeat on the return's first write (alive_since S). The time rule
// stamps B's write at S (clockAfter): alive_since must not move back
// before S, or t1, taken while x was dead (locked after S-40 ms) and seen
// ended by a process on the return's clock, would be live again in a
// fresh process (a move by B at its raw clock did that).
func TestAHeartbeatWithAClockBehindNeverMovesAliveSinceBack(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Minute))
	e.clock.Advance(2 * time.Minute) // x is dead
	other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	seen := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	behind := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: func() time.Time { return e.clock.Now().Add(-40 * time.Millisecond) }})
	before := func() {
		e.clock.Advance(5 * time.Millisecond)
		must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "x", Timeout: time.Hour}))
		e.clock.Advance(5 * time.Millisecond)
		if got := must[*lease.Checkout](t)(seen.LockStatus(c, "t1")); got != nil {
			t.Fatalf("t1 live while x is dead: %+v", got)
		}
	}
	within := func() {
		must[lease.Heartbeat](t)(behind.Heartbeat(c, "x", 2*time.Minute))
	}
	db := &answerLateDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), n: 2, before: before, within: within}
	x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	must[lease.Heartbeat](t)(x.Heartbeat(c, "x", time.Minute))
	e.clock.Advance(10 * time.Millisecond)
	fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	if got := must[*lease.Checkout](t)(seen.LockStatus(c, "t1")); got != nil {
		t.Fatalf("t1 live again for the process that saw x dead: %+v", got)
	}
	if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")); got != nil {
		t.Errorf("t1, taken while x was dead and seen ended, is live in a fresh process (fence %d): alive_since moved back", got.Fence)
	}
}
