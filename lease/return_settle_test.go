package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A return's first write whose death the sweep settled (dead_at removed)
// before the return was made once more is still not kept by an alive cache.
func TestAReturnSettledBeforeItIsMadeOnceMoreIsNotCached(t *testing.T) {
	t.Parallel()
	e, c, a, other := deadX(t)
	ran := false
	db := &heartbeatWritesDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), after: map[int]func(){
		2: func() { // the return's first write landed; its answer is slow
			ran = true
			e.clock.Advance(31 * time.Second)
			must[lease.SweepResult](t)(e.store.Sweep(c)) // settles x's death
			must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "x", Timeout: time.Hour}))
			a.LockStatus(c, "t1") // A reads x's heartbeat
		},
	}}
	x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	must[lease.Heartbeat](t)(x.Heartbeat(c, "x", time.Minute))
	if !ran {
		t.Fatal("no return was made")
	}
	fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	want := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")) != nil
	if got := must[*lease.Checkout](t)(a.LockStatus(c, "t1")) != nil; got != want {
		t.Errorf("process A shows t1 live=%v, a fresh process %v: A kept x's alive_since from before the return was made once more", got, want)
	}
}

// A return made once more after the sweep settled its death moves
// alive_since past a lease the agent took in between: that lease has
// ended for every reader, so the sweep must end it too, not leave it to
// its own timeout. When another heartbeat of the agent overtook the
// return's first write, only alive_since was moved, and the agent stayed
// indexed at its new expiry: no sweep looked at it again.
func TestAReturnMadeOnceMoreAfterItsDeathWasSettledIsSweptAgain(t *testing.T) {
	for _, overtaken := range []bool{false, true} {
		t.Run(map[bool]string{false: "made once more", true: "overtaken"}[overtaken], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t1")
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second))
			e.clock.Advance(2 * time.Second) // x is dead

			other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			ran := false
			db := &heartbeatWritesDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), after: map[int]func(){
				2: func() { // the return's first write landed; its answer is slow
					ran = true
					e.clock.Advance(31 * time.Second)
					must[lease.SweepResult](t)(e.store.Sweep(c)) // settles x's death
					must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "x", Timeout: time.Hour}))
					if overtaken {
						e.clock.Advance(time.Millisecond)
						must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Minute))
					}
				},
			}}
			x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			must[lease.Heartbeat](t)(x.Heartbeat(c, "x", time.Minute))
			if !ran {
				t.Fatal("no return was made")
			}
			e.clock.Advance(10 * time.Millisecond)
			fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")); got != nil {
				t.Fatalf("t1 live after the return was made once more past it: %+v", got)
			}
			res := must[lease.SweepResult](t)(e.store.Sweep(c))
			if res.AgentDeaths != 1 {
				t.Errorf("sweep after the return was made once more: %+v, want t1 ended by x's death", res)
			}
		})
	}
}
