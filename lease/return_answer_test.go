package lease_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A lease is live only when it was locked after its holder's latest return
// from the dead (alive_since): one locked in that very millisecond may
// have been taken while the agent was still dead. A return answered within
// the millisecond it was made, so an agent that checked a task out as soon
// as its heartbeat answered was granted a lease already ended, about one
// time in seven on the local server: a 200 for a task any other agent
// could take at once, whose ending then counted as a failed attempt. A
// return now answers once the clock has passed the millisecond it counts
// from. The clock here runs in real time from the test's epoch, and is
// moved on by hand only to let the heartbeats run out.
func TestALeaseTakenRightAfterAReturnFromTheDeadIsLive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	start := time.Now()
	now := func() time.Time { return e.clock.Now().Add(time.Since(start)) }
	s := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: now})
	const agents = 100
	for i := range agents {
		e.task(t, fmt.Sprintf("t%d", i))
		must[lease.Heartbeat](t)(s.Heartbeat(c, fmt.Sprintf("a%d", i), time.Second))
	}
	e.clock.Advance(2 * time.Second) // every agent is dead
	ended := 0
	for i := range agents {
		agent, task := fmt.Sprintf("a%d", i), fmt.Sprintf("t%d", i)
		must[lease.Heartbeat](t)(s.Heartbeat(c, agent, time.Minute)) // back from the dead
		co := must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: task, AgentID: agent, Timeout: time.Hour}))
		if got := must[*lease.Checkout](t)(s.LockStatus(c, task)); got == nil || got.Fence != co.Fence {
			ended++
		}
	}
	if ended > 0 {
		t.Errorf("%d of %d leases taken right after their holder's return from the dead were granted already ended", ended, agents)
	}
}

// The same for an id registered again after its removal: the registration
// makes the new agent alive since it was made (a lease locked up to then
// is the removed agent's, and ended) and answered within that millisecond,
// so a checkout right after it could be granted already ended. Here the
// clock moves on a tenth of a millisecond at each reading: the checkout
// reads it a few readings after the registration did.
func TestALeaseTakenRightAfterARegistrationAgainIsLive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	var ticks atomic.Int64
	now := func() time.Time { return e.clock.Now().Add(time.Duration(ticks.Add(1)) * 100 * time.Microsecond) }
	s := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: now})
	e.task(t, "t1")
	must[lease.Registration](t)(s.RegisterAgent(c, lease.RegisterParams{AgentID: "x", Name: "x"}))
	must[lease.Heartbeat](t)(s.Heartbeat(c, "x", time.Minute))
	if err := s.RemoveAgent(c, "x"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Hour) // past the hold on a removed id
	must[lease.Registration](t)(s.RegisterAgent(c, lease.RegisterParams{AgentID: "x", Name: "x"}))
	co := must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "x", Timeout: time.Hour}))
	if got := must[*lease.Checkout](t)(s.LockStatus(c, "t1")); got == nil || got.Fence != co.Fence {
		t.Errorf("a lease taken right after its holder's registration again (fence %d) was granted already ended: the task shows %+v", co.Fence, got)
	}
	if _, err := s.Renew(c, lease.RenewParams{TaskID: "t1", AgentID: "x", Fence: co.Fence, Timeout: time.Hour}); err != nil {
		t.Errorf("renewing it: %v", err)
	}
}

// A heartbeat identical to a return's first write finds the agent alive by
// it and notes so (seen_alive) before it answers. When the return is made
// once more, a millisecond on, before that note lands, the note finds the
// item moved on and the agent alive since that later millisecond: the
// heartbeat answered within it (it waited past its own clock only), so a
// checkout sent right after its answer was granted a lease already ended.
// The clock stands still until the note has landed, then runs in real time.
func TestAHeartbeatLikeAReturnMadeAgainBeforeItsNoteAnswersPastIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	var start atomic.Pointer[time.Time]
	now := func() time.Time {
		if at := start.Load(); at != nil {
			return e.clock.Now().Add(time.Since(*at))
		}
		return e.clock.Now()
	}
	e.task(t, "t1")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second))
	e.clock.Advance(2 * time.Second) // x is dead

	firstLanded, goOn := make(chan struct{}), make(chan struct{})
	xdb := &heartbeatWritesDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), after: map[int]func(){
		2: func() { close(firstLanded); <-goOn }, // the return's first write has landed
	}}
	x := lease.New(lease.Config{DB: xdb, Tables: e.names, Now: now})
	done := make(chan error, 1)
	go func() {
		_, err := x.Heartbeat(c, "x", time.Second)
		done <- err
	}()
	<-firstLanded

	// x's other process, in the same millisecond: its write is refused, it
	// finds the return's first write, and before its note lands the return
	// is made once more, a millisecond on.
	odb := &heartbeatWritesDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), before: map[int]func(){
		2: func() {
			e.clock.Advance(time.Millisecond)
			close(goOn)
			if err := <-done; err != nil {
				t.Errorf("the return: %v", err)
			}
		},
	}, after: map[int]func(){
		2: func() { at := time.Now(); start.Store(&at) },
	}}
	other := lease.New(lease.Config{DB: odb, Tables: e.names, Now: now})
	must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second))
	if xdb.sent < 3 || odb.sent < 2 {
		t.Fatalf("the return was made in %d writes, the other heartbeat in %d: want the return made once more, and a note", xdb.sent, odb.sent)
	}
	co := must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "x", Timeout: time.Hour}))
	fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: now})
	if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")); got == nil || got.Fence != co.Fence {
		t.Errorf("a lease taken right after a heartbeat said x was alive (fence %d) was granted already ended: the task shows %+v", co.Fence, got)
	}
}
