package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A heartbeat stamped before x's expiry (last_at 900, expiry 1000) that
// lands after it (1100) is made a return from the dead in a second write.
// A process reading x's heartbeat between the two writes sees
// prior_expires 1000, last_at 900: put's "a return may follow" rule
// compared prior_expires with last_at, the time read BEFORE the write, not
// with when the write landed, so the item was cached with the old
// alive_since. After the return has landed, that process still reports the
// lease the death ended live, and lets its holder renew it, while the
// process that saw the death lets another agent take it over.
func TestAReaderBetweenALateWriteAndItsReturnDoesNotKeepTheOldAliveSince(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second)) // x dies at epoch+1s
	co := e.checkout(t, "t1", "x", time.Hour)
	e.clock.Advance(900 * time.Millisecond)

	seen := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	reader := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	db := &heartbeatWritesDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), before: map[int]func(){
		1: func() { // the first write is late: x is dead when it lands, and seen so
			e.clock.Advance(200 * time.Millisecond)
			if got := must[*lease.Checkout](t)(seen.LockStatus(c, "t1")); got != nil {
				t.Fatalf("t1 live while x is dead: %+v", got)
			}
		},
		2: func() { // between the late write and its return, another process reads x
			_ = must[*lease.Checkout](t)(reader.LockStatus(c, "t1"))
		},
	}}
	x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	must[lease.Heartbeat](t)(x.Heartbeat(c, "x", time.Second))
	e.clock.Advance(10 * time.Millisecond)

	fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	want := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")) != nil
	got := must[*lease.Checkout](t)(reader.LockStatus(c, "t1")) != nil
	if want {
		t.Fatalf("t1 live in a fresh process after x's return: the return was not made")
	}
	if got {
		t.Errorf("the reader shows t1 live after x's return, a fresh process shows it ended (reader's alive cache kept x's alive_since from before the death)")
		if _, err := reader.Renew(c, lease.RenewParams{TaskID: "t1", AgentID: "x", Fence: co.Fence, Timeout: time.Hour}); err == nil {
			t.Errorf("the reader let x renew the lease its death ended")
			if y, err := seen.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "y", Timeout: time.Hour}); err == nil {
				t.Errorf("and y then took t1 over at fence %d", y.Fence)
			}
		}
	}
}

// As TestALateHeartbeatRacedByAnotherIsStillAReturn, but looking at the
// process whose heartbeat landed between the late write and its return:
// its own heartbeat's answer (an ordinary one: the old image is the late
// write's item, alive until 1900) went into its alive cache with the
// alive_since from before the death, and stayed there after the return
// had moved it.
func TestAHeartbeatBetweenALateWriteAndItsReturnDoesNotKeepTheOldAliveSince(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second))
	co := e.checkout(t, "t1", "x", time.Hour)
	e.clock.Advance(900 * time.Millisecond)

	seen := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	db := &heartbeatWritesDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), before: map[int]func(){
		1: func() {
			e.clock.Advance(200 * time.Millisecond)
			if got := must[*lease.Checkout](t)(seen.LockStatus(c, "t1")); got != nil {
				t.Fatalf("t1 live while x is dead: %+v", got)
			}
		},
		2: func() { must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second)) },
	}}
	x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	must[lease.Heartbeat](t)(x.Heartbeat(c, "x", time.Second))
	e.clock.Advance(10 * time.Millisecond)

	fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	if must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")) != nil {
		t.Fatalf("t1 live in a fresh process after x's return: the return was not made")
	}
	if got := must[*lease.Checkout](t)(other.LockStatus(c, "t1")); got != nil {
		t.Errorf("the process whose heartbeat landed before x's return shows t1 live (fence %d); a fresh process shows it ended", got.Fence)
		if _, err := other.Renew(c, lease.RenewParams{TaskID: "t1", AgentID: "x", Fence: co.Fence, Timeout: time.Hour}); err == nil {
			t.Errorf("that process let x renew the lease its death ended")
			if y, err := seen.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "y", Timeout: time.Hour}); err == nil {
				t.Errorf("and y then took t1 over at fence %d", y.Fence)
			}
		}
	}
}

// The return, pinned to alive_since as it was before the death, was made
// at the clock read when it was sent, however long after the intervening
// heartbeat that answered "alive": a lease x took after that answer,
// before the late heartbeat's return landed, reported live to x and
// everyone, was then ended by the return (locked_at <= alive_since). The
// return now counts from when the late write landed.
func TestAReturnAfterAnInterveningHeartbeatKeepsALaterLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	e.task(t, "t2")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second))
	e.checkout(t, "t1", "x", time.Hour)
	e.clock.Advance(900 * time.Millisecond)

	other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	var co2 lease.Checkout
	db := &heartbeatWritesDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), before: map[int]func(){
		1: func() { e.clock.Advance(200 * time.Millisecond) }, // lands late, at 1100
		2: func() {
			// x's other process heartbeats: told alive until 2100.
			must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second))
			e.clock.Advance(100 * time.Millisecond)
			// Then it checks out t2, at 1200, a live lease.
			co2 = must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "t2", AgentID: "x", Timeout: time.Hour}))
			probe := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			if must[*lease.Checkout](t)(probe.LockStatus(c, "t2")) == nil {
				t.Fatalf("t2 not live right after x checked it out")
			}
		},
	}}
	x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	must[lease.Heartbeat](t)(x.Heartbeat(c, "x", time.Second))
	e.clock.Advance(10 * time.Millisecond)

	fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t2")); got == nil {
		t.Errorf("x's lease on t2 (fence %d), taken while x was alive by a heartbeat answered before and reported live, was ended by the late heartbeat's return", co2.Fence)
		if y, err := fresh.Checkout(c, lease.CheckoutParams{TaskID: "t2", AgentID: "y", Timeout: time.Hour}); err == nil {
			t.Errorf("and y took t2 over at fence %d, x having been told it holds t2 for an hour and never missed a heartbeat since", y.Fence)
		}
	}
}

// A heartbeat whose write (last_at and expiry) is the same as a return from
// the dead just made, in the same millisecond with the same ttl, took that
// return for its own first sending and judged it by prior_expires: the
// expiry of the latest ordinary heartbeat, from before the death. So it
// was made a second return, later, which ended a lease the agent took in
// between, while the first return's answer said it was alive; and the
// death, stamped at the second return, fell inside that life.
func TestAHeartbeatLikeAReturnJustMadeIsNoSecondReturn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second))
	e.clock.Advance(100 * time.Millisecond)
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second)) // ordinary: prior_expires epoch+1s
	e.clock.Advance(2 * time.Second)
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second)) // back from the dead

	// A second heartbeat in the same millisecond; once its write has been
	// refused, x (alive, by the return) takes t1.
	var co lease.Checkout
	db := &heartbeatWritesDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), after: map[int]func(){
		1: func() {
			e.clock.Advance(time.Millisecond)
			co = e.checkout(t, "t1", "x", time.Hour)
			e.clock.Advance(time.Millisecond)
		},
	}}
	again := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	must[lease.Heartbeat](t)(again.Heartbeat(c, "x", time.Second))

	fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")); got == nil || got.Fence != co.Fence {
		t.Fatalf("lock status of t1 = %+v, want x's lease, taken while x was alive", got)
	}
}

// A return from the dead whose clock has moved on once its write landed is
// made once more at that later time. A heartbeat identical to the return's
// first write, landing in between, finds the agent alive by it and says
// so: a lease the agent then takes, before the return is made once more,
// was ended by that second write (locked_at <= alive_since), while the
// identical heartbeat's process, which kept the first write's alive_since,
// still showed it live.
func TestAHeartbeatLikeAReturnBeforeItIsMadeAgainKeepsALaterLease(t *testing.T) {
	t.Parallel()
	e, c, other, _ := deadX(t)
	var co lease.Checkout
	db := &heartbeatWritesDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), after: map[int]func(){
		2: func() { // the return's first write has landed
			// x's other process, in the same millisecond: told alive.
			must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second))
			e.clock.Advance(time.Millisecond)
			co = must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "x", Timeout: time.Hour}))
			e.clock.Advance(time.Millisecond) // the return's clock has moved on
		},
	}}
	x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	must[lease.Heartbeat](t)(x.Heartbeat(c, "x", time.Second))
	if db.sent < 3 {
		t.Fatalf("the return was made in %d writes, want it made once more", db.sent)
	}

	fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	inFresh := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1"))
	inOther := must[*lease.Checkout](t)(other.LockStatus(c, "t1"))
	if (inFresh == nil) != (inOther == nil) {
		t.Errorf("t1 live in x's other process: %v, in a fresh one: %v", inOther != nil, inFresh != nil)
	}
	if inFresh == nil || inFresh.Fence != co.Fence {
		t.Fatalf("lock status of t1 = %+v, want x's lease (fence %d), taken after a heartbeat said x was alive", inFresh, co.Fence)
	}
}

// A process that read the heartbeat between a return's first write and
// the return made once more, later, kept the first write's alive_since in
// its alive cache: a lease the agent took in between, ended by the second
// write (locked_at <= alive_since), stayed live there while a fresh
// process showed it ended.
func TestAReadBeforeAReturnIsMadeAgainDoesNotKeepItsAliveSince(t *testing.T) {
	t.Parallel()
	e, c, other, reader := deadX(t)
	db := &heartbeatWritesDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), after: map[int]func(){
		2: func() { // the return's first write has landed
			e.clock.Advance(time.Millisecond)
			// x's other process takes t1; another process reads it.
			must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "x", Timeout: time.Hour}))
			_ = must[*lease.Checkout](t)(reader.LockStatus(c, "t1"))
			e.clock.Advance(time.Millisecond) // the return's clock has moved on
		},
	}}
	x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	must[lease.Heartbeat](t)(x.Heartbeat(c, "x", time.Second))
	if db.sent < 3 {
		t.Fatalf("the return was made in %d writes, want it made once more", db.sent)
	}

	fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	inFresh := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1"))
	inReader := must[*lease.Checkout](t)(reader.LockStatus(c, "t1"))
	if (inFresh == nil) != (inReader == nil) {
		t.Errorf("t1 live in the process that read x during its return: %v, in a fresh one: %v", inReader != nil, inFresh != nil)
	}
}

// A return from the dead whose clock moved on once its first write landed
// is made once more, so that a lease the agent took while still dead,
// which a reader reported ended, stays ended. Another, non-identical
// heartbeat of the agent landing between the two writes made the second
// one fail its pin; the return then started again, found the agent alive,
// and was never made once more: the lease came back live. The process
// whose heartbeat landed in between must not keep the first write's
// alive_since either (a short ttl kept it out of the alive cache by
// chance: prior_expires was within the cache's window).
func TestAReturnOvertakenByAnotherHeartbeatIsStillMadeOnceMore(t *testing.T) {
	for _, ttl := range []time.Duration{time.Second, 30 * time.Second} {
		t.Run(ttl.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t1")
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", ttl))
			e.clock.Advance(ttl + time.Second) // x is dead

			other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			reader := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			third := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			db := &heartbeatWritesDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), before: map[int]func(){
				2: func() { // the return's first write is on its way, stamped before this
					e.clock.Advance(time.Millisecond)
					must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "x", Timeout: time.Hour}))
					if got := must[*lease.Checkout](t)(reader.LockStatus(c, "t1")); got != nil {
						t.Fatalf("t1 live while x is dead: %+v", got)
					}
					e.clock.Advance(time.Millisecond)
				},
			}, after: map[int]func(){
				2: func() { // x's other process beats in between, a millisecond on
					e.clock.Advance(time.Millisecond)
					must[lease.Heartbeat](t)(other.Heartbeat(c, "x", ttl))
					// A process that reads x now sees t1 live, until the
					// return is made once more.
					_ = must[*lease.Checkout](t)(third.LockStatus(c, "t1"))
				},
			}}
			x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			must[lease.Heartbeat](t)(x.Heartbeat(c, "x", ttl))

			fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")); got != nil {
				t.Fatalf("t1, reported ended while x was dead, is live again: %+v", got)
			}
			if got := must[*lease.Checkout](t)(other.LockStatus(c, "t1")); got != nil {
				t.Fatalf("t1 live in the process whose heartbeat landed between the return's writes; a fresh process shows it ended: %+v", got)
			}
			if got := must[*lease.Checkout](t)(third.LockStatus(c, "t1")); got != nil {
				t.Fatalf("t1 live in a process that read x between the return's writes; a fresh process shows it ended: %+v", got)
			}
		})
	}
}
