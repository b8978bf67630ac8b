package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A force release judges the lease live, then writes at a clock read after
// that judgement: a lease that expired in between has ended by its
// timeout, not by the admin. The write, conditioned on the lease being
// unexpired at its own time, fails and answers not_checked_out; the sweep
// records the ending as a timeout.
func TestAForceReleaseOfALeaseThatExpiresBeforeItsWriteIsATimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := e.checkout(t, "t", "holder", time.Minute)
	e.clock.Advance(59 * time.Second)

	// The holder's heartbeat is read (the lease is judged live at the
	// clock before the read), and its answer comes after the expiry.
	db := &slowHeartbeatReadDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), hook: func() {
		e.clock.Advance(2 * time.Second)
	}}
	admin := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	_, err := admin.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true})
	if !db.done {
		t.Fatal("the force release read no heartbeat")
	}
	if !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Fatalf("force release of a lease that expired before its write: %v, want not_checked_out", err)
	}
	e.caughtUp(t) // the sweep finds the lease through an index
	must[lease.SweepResult](t)(e.store.Sweep(c))
	var ends []lease.EventType
	for _, ev := range e.events(t, "t") {
		if ev.Fence == co.Fence && ev.EndsLease() {
			ends = append(ends, ev.Type)
		}
	}
	if len(ends) != 1 || ends[0] != lease.EventTimeout {
		t.Fatalf("the lease's endings: %v, want one timeout", ends)
	}
}
