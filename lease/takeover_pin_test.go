package lease_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A takeover of an ended lease is decided on the task as a checkout read
// it, and its write is pinned to what the decision relied on. These tests
// land a write in between that read and the takeover's write: the
// takeover must then fail and the lease be judged again.

// holdWrite arms db so that its next UpdateItem waits, before it is sent,
// until the returned function is called; that function then waits for
// done, which the caller closes once the held request has returned.
// reached is closed when the write is held.
func holdWrite(db *hookDB) (reached chan struct{}, land func(done <-chan struct{})) {
	reached, send := make(chan struct{}), make(chan struct{})
	db.armBefore(func() {
		close(reached)
		<-send
	})
	return reached, func(done <-chan struct{}) {
		close(send)
		<-done
	}
}

// A renewal whose time was read before the lease expired and whose write
// lands after a checkout read the lease as expired extends the lease: the
// takeover, pinned to the lease's last transition (eseq), fails, and the
// checkout finds the renewed lease live.
func TestATakeoverDoesNotEndALeaseRenewedAfterItWasRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	held := e.checkout(t, "t", "a", time.Minute)

	e.clock.Advance(59 * time.Second)
	renewer, rdb := delayed(e)
	reached, land := holdWrite(rdb)
	renewed := make(chan struct{})
	var rerr error
	go func() {
		defer close(renewed)
		_, rerr = renewer.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a", RunID: held.RunID, Timeout: time.Minute})
	}()
	<-reached // the renewal's time is read: 1 s before the expiry

	e.clock.Advance(2 * time.Second) // the lease has expired by the clock
	taker, tdb := delayed(e)
	tdb.armAfter(func() { land(renewed) }) // after the checkout's first write: the renewal lands
	_, err := taker.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", Timeout: time.Minute})
	<-renewed
	if rerr != nil {
		t.Fatalf("renewal read before the expiry: %v", rerr)
	}
	var ce *lease.ConflictError
	if !errors.As(err, &ce) || ce.Holder.AgentID != "a" {
		t.Fatalf("checkout by b after a's renewal landed: %v, want a conflict with a", err)
	}
	if got := e.get(t, "t"); got.Checkout == nil || got.Checkout.AgentID != "a" || got.Checkout.Fence != held.Fence {
		t.Fatalf("task after the renewal: holder %+v, want a's lease, fence %d", got.Checkout, held.Fence)
	}
}

// A PATCH that makes the attempt on the task its last (max_attempts down
// to the attempts used), read while the lease was live and landing after
// a checkout read the lease as expired: the takeover, conditioned on the
// attempt not being the last, fails, and the task fails instead of being
// granted an attempt past its limit.
func TestATakeoverIsNotGrantedPastAMaxAttemptsLoweredAfterItsRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	co, err := takeoverRacingAMaxAttemptsPatch(t, e, 2, 1)
	var me *lease.StatusMismatchError
	if !errors.As(err, &me) || me.Status != lease.StatusFailed {
		t.Fatalf("checkout by b once the expired attempt was made the last: %+v, %v; want the task failed", co, err)
	}
	if got := e.get(t, "t"); got.Status != lease.StatusFailed || got.Attempts != 1 || got.MaxAttempts != 1 {
		t.Fatalf("task: %s, attempts %d of %d; want failed, 1 of 1", got.Status, got.Attempts, got.MaxAttempts)
	}
}

// A dependent whose blocker is reopened while its lease has expired
// unswept is marked by the change stream (waiting_on) between a
// checkout's read of the expired lease and its takeover: the takeover,
// conditioned on no mark, fails, and the checkout ends the lease as the
// sweep would, which blocks the task, and answers blocked.
func TestATakeoverIsNotGrantedToATaskMarkedAfterItsRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"a"}})
	e.complete(t, "a", "x")
	e.drain(t)
	e.checkout(t, "d", "r", time.Minute)
	e.clock.Advance(2 * time.Minute) // d's lease has expired, unswept

	taker, tdb := delayed(e)
	tdb.armAfter(func() {
		// After the checkout's first write read the expired lease: a is
		// reopened, and the change stream marks d.
		must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", AgentID: "x", Status: new(lease.StatusTodo)}))
		e.drain(t)
	})
	co, err := taker.Checkout(c, lease.CheckoutParams{TaskID: "d", AgentID: "y", Timeout: time.Minute})
	var be *lease.BlockedError
	if !errors.As(err, &be) || !slices.Equal(blockerIDs(be.BlockedBy), []string{"a=todo"}) {
		t.Fatalf("checkout of d after a was reopened: %+v, %v; want blocked by a", co, err)
	}
	if got := e.get(t, "d"); got.Status != lease.StatusBlocked || got.Checkout != nil {
		t.Fatalf("d: %s, holder %+v; want blocked, no lease", got.Status, got.Checkout)
	}
}

// takeoverRacingAMaxAttemptsPatch makes task t (max_attempts from) held
// by a for a minute; a PATCH of max_attempts to to reads the lease live,
// and lands after a checkout by b read it expired, just before b's write.
// It returns b's checkout.
func takeoverRacingAMaxAttemptsPatch(t *testing.T, e *env, from, to int) (lease.Checkout, error) {
	t.Helper()
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "t", MaxAttempts: new(from)})
	e.checkout(t, "t", "a", time.Minute)

	e.clock.Advance(59 * time.Second)
	patcher, pdb := delayed(e)
	reached, land := holdWrite(pdb)
	patched := make(chan struct{})
	var perr error
	go func() {
		defer close(patched)
		_, perr = patcher.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "a", MaxAttempts: new(to)})
	}()
	<-reached // the PATCH read the lease live

	e.clock.Advance(2 * time.Second)
	taker, tdb := delayed(e)
	tdb.armAfter(func() { land(patched) })
	co, err := taker.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", Timeout: time.Minute})
	<-patched
	if perr != nil {
		t.Fatalf("PATCH read while the lease was live: %v", perr)
	}
	return co, err
}

// A PATCH that reads the holder dead ends its lease as the sweep would
// (endEnded), in a write pinned to the lease's last transition. A renewal
// read while the holder was alive, which shortens the lease, lands in
// between: by the ending's write the lease's own expiry has passed, so it
// ended by that expiry, and is recorded as a timeout, as the sweep
// records a dead holder's lease that had expired when the death was seen
// (sweep.go, endDeadLease). Unpinned, the ending recorded the death.
func TestAnEndingOfADeadHoldersLeaseIsJudgedAfterARenewalLandsFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Second)) // a dies 1 s from now
	held := e.checkout(t, "t", "a", time.Hour)

	e.clock.Advance(500 * time.Millisecond)
	renewer, rdb := delayed(e)
	reached, land := holdWrite(rdb)
	renewed := make(chan struct{})
	var rerr error
	go func() {
		defer close(renewed)
		_, rerr = renewer.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a", RunID: held.RunID, Timeout: time.Second})
	}()
	<-reached // a is alive: the renewal's time is read, its lease to expire 1.5 s in

	e.clock.Advance(1500 * time.Millisecond) // a is dead, and the renewed lease would have expired
	patcher, pdb := delayed(e)
	pdb.armBefore(func() { land(renewed) }) // before the PATCH's ending of the lease: the renewal lands
	must[lease.Task](t)(patcher.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "x", MaxAttempts: new(5)}))
	<-renewed
	if rerr != nil {
		t.Fatalf("renewal read while a was alive: %v", rerr)
	}
	var ends []lease.EventType
	for _, ev := range e.events(t, "t") {
		if ev.Fence == held.Fence && ev.EndsLease() {
			ends = append(ends, ev.Type)
		}
	}
	if len(ends) != 1 || ends[0] != lease.EventTimeout {
		t.Fatalf("the lease's endings: %v, want one timeout (its renewed expiry had passed by the ending)", ends)
	}
}
