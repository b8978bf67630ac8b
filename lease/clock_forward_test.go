package lease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
)

// Invariant 10: on each item, time only moves forward. A request reads its
// time, and its write may land after a later one (a saturated server or
// database queues it for seconds). These tests make that happen
// deterministically: a hook runs between a store reading its clock and its
// write reaching the database.

// hookDB runs, once armed, a function just before the next UpdateItem
// reaches the database (before) or just after it returns (after).
type hookDB struct {
	lease.DB
	mu            sync.Mutex
	before, after func()
}

func (d *hookDB) take(f *func()) func() {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := *f
	*f = nil
	return g
}

func (d *hookDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if f := d.take(&d.before); f != nil {
		f()
	}
	out, err := d.DB.UpdateItem(ctx, in, opt...)
	if f := d.take(&d.after); f != nil {
		f()
	}
	return out, err
}

func (d *hookDB) armBefore(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.before = f
}

func (d *hookDB) armAfter(f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.after = f
}

// delayed is a second store on e's tables and clock whose writes can be
// held back by a hook.
func delayed(e *env) (*lease.Store, *hookDB) {
	db := &hookDB{DB: e.db}
	return lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes}), db
}

// inTimeOrder fails the test unless the trail's times never go back.
func inTimeOrder(t *testing.T, evs []lease.Event) {
	t.Helper()
	for i := 1; i < len(evs); i++ {
		if evs[i].At.Before(evs[i-1].At) {
			t.Fatalf("event %d (%s at %v) is earlier than the one before it (%s at %v): %v",
				i, evs[i].Type, evs[i].At, evs[i-1].Type, evs[i-1].At, kinds(evs))
		}
	}
}

// A checkout whose time was read before another agent's checkout and
// release landed: its grant is not stamped before them.
func TestGrantAfterALaterWriteIsNotStampedBeforeIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	slow, db := delayed(e)
	var first lease.Checkout
	var rel lease.Released
	db.armBefore(func() {
		e.clock.Advance(time.Second)
		first = e.checkout(t, "t", "a", time.Minute)
		e.clock.Advance(time.Second)
		rel = must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"}))
	})
	start := e.clock.Now()
	second := must[lease.Checkout](t)(slow.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", Timeout: time.Minute}))
	if second.Fence <= first.Fence {
		t.Fatalf("fence %d after %d", second.Fence, first.Fence)
	}
	if second.LockedAt.Before(first.LockedAt) {
		t.Fatalf("fence %d locked at %v, before fence %d's %v (the request read its time at %v)",
			second.Fence, second.LockedAt, first.Fence, first.LockedAt, start)
	}
	evs := e.events(t, "t")
	inTimeOrder(t, evs)
	// The first lease was live until its release; the next grant is not
	// stamped inside it.
	if end := evs[1]; end.Type != lease.EventRelease || second.LockedAt.Before(end.At) {
		t.Fatalf("grant locked at %v, inside the previous lease (ended %v by %s); released %+v", second.LockedAt, end.At, end.Type, rel)
	}
}

// Renewals whose times were read in one order and landed in the other: the
// later-landing one does not stamp its event, or move the expiry, back.
func TestRenewalLandingLateDoesNotMoveTimeBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	e.checkout(t, "t", "a", time.Minute)
	slow, db := delayed(e)
	var quick lease.Checkout
	db.armBefore(func() {
		e.clock.Advance(time.Second)
		quick = must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a"}))
	})
	late := must[lease.Checkout](t)(slow.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a"}))
	if late.ExpiresAt.Before(quick.ExpiresAt) {
		t.Fatalf("the late renewal moved the expiry back from %v to %v", quick.ExpiresAt, late.ExpiresAt)
	}
	inTimeOrder(t, e.events(t, "t"))
}

// A release read before a renewal that landed first is stamped after it.
func TestEndingLandingLateIsStampedAfterTheLatestTransition(t *testing.T) {
	t.Parallel()
	for _, force := range []bool{false, true} {
		e := newEnv(t)
		c := ctx(t)
		e.task(t, "t")
		e.checkout(t, "t", "a", time.Minute)
		slow, db := delayed(e)
		db.armBefore(func() {
			e.clock.Advance(time.Second)
			must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a"}))
		})
		must[lease.Released](t)(slow.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", Force: force}))
		evs := e.events(t, "t")
		if len(evs) != 3 {
			t.Fatalf("force %v: trail %v", force, kinds(evs))
		}
		inTimeOrder(t, evs)
	}
}

// A grant whose write took most of its lease is not answered as though it
// were fresh: it is renewed before the answer, so the lease answered has at
// least half its timeout left when the answer is given.
func TestSlowGrantIsRenewedBeforeItIsAnswered(t *testing.T) {
	t.Parallel()
	for _, claim := range []bool{false, true} {
		e := newEnv(t)
		c := ctx(t)
		e.task(t, "t")
		e.caughtUp(t) // the claim finds t through an index
		slow, db := delayed(e)
		const timeout = time.Second
		db.armAfter(func() { e.clock.Advance(timeout * 9 / 10) }) // the grant's write waited 0.9 s
		var co lease.Checkout
		var err error
		if claim {
			co, err = slow.Claim(c, lease.ClaimParams{AgentID: "a", Timeout: timeout})
		} else {
			co, err = slow.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", Timeout: timeout})
		}
		if err != nil {
			t.Fatalf("claim %v: %v", claim, err)
		}
		if left := co.ExpiresAt.Sub(e.clock.Now()); left < timeout/2 {
			t.Fatalf("claim %v: answered with %v of its %v left", claim, left, timeout)
		}
		got := must[*lease.Checkout](t)(e.store.LockStatus(c, "t"))
		if got == nil || !got.ExpiresAt.Equal(co.ExpiresAt) || got.Fence != co.Fence {
			t.Fatalf("claim %v: answered %+v, the task holds %+v", claim, co, got)
		}
		evs := e.events(t, "t")
		inTimeOrder(t, evs)
	}
}

// Heartbeats whose times were read in one order and landed in the other:
// the later-landing one does not move the agent's time or expiry back.
func TestHeartbeatLandingLateDoesNotMoveTimeBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	slow, db := delayed(e)
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Minute))
	var quick lease.Heartbeat
	db.armBefore(func() {
		e.clock.Advance(time.Second)
		quick = must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Minute))
	})
	late := must[lease.Heartbeat](t)(slow.Heartbeat(c, "a", time.Minute))
	if late.ExpiresAt.Before(quick.ExpiresAt) {
		t.Fatalf("the late heartbeat moved the expiry back from %v to %v", quick.ExpiresAt, late.ExpiresAt)
	}
}

// A heartbeat that read its time while the agent was alive, and landed
// after the agent had been seen dead and its lease ended: its answer does
// not claim a life that contains that death, and the ended lease stays
// ended.
func TestHeartbeatLandingAfterADeathDoesNotContainIt(t *testing.T) {
	t.Parallel()
	const ttl = time.Second
	for _, how := range []string{"sweep", "takeover", "read", "sweep after a lapse"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t")
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", ttl))
			held := e.checkout(t, "t", "a", time.Hour)
			// The heartbeat reads its time here: 100 ms before a dies, or,
			// after a lapse, 200 ms after.
			read := 900 * time.Millisecond
			if how == "sweep after a lapse" {
				read = 1200 * time.Millisecond
			}
			e.clock.Advance(read)
			slow, db := delayed(e)
			db.armBefore(func() {
				e.clock.Advance(1500*time.Millisecond - read) // a died 500 ms ago
				switch how {
				case "sweep", "sweep after a lapse":
					e.caughtUp(t) // the sweep finds the death through an index
					if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res.AgentDeaths != 1 {
						t.Fatalf("sweep %+v", res)
					}
				case "takeover":
					e.checkout(t, "t", "b", time.Hour)
				case "read":
					if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, "t")); lock != nil {
						t.Fatalf("a dead holder's lease shown live: %+v", lock)
					}
				}
			})
			hb := must[lease.Heartbeat](t)(slow.Heartbeat(c, "a", ttl))
			stamped := hb.ExpiresAt.Add(-ttl)
			if how != "read" {
				death := deathOf(t, e, "t", held.Fence)
				if death.At.After(stamped) && death.At.Before(hb.ExpiresAt) {
					t.Fatalf("death stamped %v, inside the heartbeat's life %v to %v", death.At, stamped, hb.ExpiresAt)
				}
				return
			}
			// Read by another process, which has not seen the death itself.
			other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
			if lock := must[*lease.Checkout](t)(other.LockStatus(c, "t")); lock != nil {
				t.Fatalf("the lease ended by a's death is live again after its late heartbeat: %+v (heartbeat from %v)", lock, stamped)
			}
		})
	}
}
