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

// slowHeartbeatReadDB runs hook once, after the first GetItem on the
// heartbeats table has been served and before its answer is handed back:
// a read whose answer is slow to come.
type slowHeartbeatReadDB struct {
	lease.DB
	table string
	hook  func()
	done  bool
}

func (d *slowHeartbeatReadDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := d.DB.GetItem(ctx, in, opts...)
	if !d.done && in.TableName != nil && *in.TableName == d.table {
		d.done = true
		d.hook()
	}
	return out, err
}

// A checkout judges a holder's heartbeat by a consistent read: what the
// read shows was so when it was served, which is after the clock was read
// before it and before any clock read after it. The holder x, alive until
// epoch+1s, heartbeats while the read's answer is on its way, and the
// answer comes back after that old expiry. Judged by a clock read after
// the answer, x was dead; but x was alive throughout:
//
//   - landing 60 ms before its expiry, the heartbeat is an ordinary one,
//     x's lease lives on, and y must not take it over;
//   - landing within clockMargin (50 ms) of its expiry, it is made a
//     return from the dead (README, Known limits): x's lease ends there,
//     and its agent_death must not be stamped later, inside the life the
//     heartbeat's answer states.
func TestACheckoutJudgesTheHolderWhenItsHeartbeatWasRead(t *testing.T) {
	for _, tc := range []struct {
		name   string
		landed time.Duration // after epoch
	}{{"ordinary", 940 * time.Millisecond}, {"return", 985 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t1")
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second)) // x dies at epoch+1s
			co := e.checkout(t, "t1", "x", time.Hour)
			e.clock.Advance(900 * time.Millisecond)

			other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			var hb lease.Heartbeat
			db := &slowHeartbeatReadDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), hook: func() {
				e.clock.Advance(tc.landed - 900*time.Millisecond)
				hb = must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second))
				e.clock.Advance(time.Second + time.Millisecond - tc.landed) // the answer comes at epoch+1.001s
			}}
			a := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			y, err := a.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "y", Timeout: time.Hour})
			life := hb.ExpiresAt.Add(-time.Second) // the heartbeat the hook made, during the checkout
			if !db.done {
				t.Fatal("the checkout read no heartbeat")
			}
			var ce *lease.ConflictError
			switch {
			case err == nil && tc.name == "ordinary":
				t.Errorf("y took t1 over at fence %d, from x, alive by its heartbeat of %v until %v", y.Fence, life, hb.ExpiresAt)
				if _, err := e.store.Renew(c, lease.RenewParams{TaskID: "t1", AgentID: "x", Fence: co.Fence}); err != nil {
					t.Logf("and x, alive, cannot renew it: %v", err)
				}
			case err == nil:
			case errors.As(err, &ce):
				if tc.name == "ordinary" {
					if _, err := e.store.Renew(c, lease.RenewParams{TaskID: "t1", AgentID: "x", Fence: co.Fence}); err != nil {
						t.Errorf("x renews its lease: %v", err)
					}
					return
				}
				// The return has ended x's lease: a checkout now takes it over.
				must[lease.Checkout](t)(a.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "y", Timeout: time.Hour}))
			default:
				t.Fatalf("checkout by y: %v", err)
			}
			e.drain(t)
			for _, ev := range e.events(t, "t1") {
				if ev.Type == lease.EventAgentDeath && ev.At.After(life) && ev.At.Before(hb.ExpiresAt) {
					t.Errorf("agent_death of x (fence %d) at %v, inside the life x's heartbeat answered: from %v until %v", ev.Fence, ev.At, life, hb.ExpiresAt)
				}
			}
		})
	}
}

// A holder's renew, release or complete reads the caller's heartbeat too,
// and what that read shows was so when it was served, not when its answer
// came. The holder x, alive until epoch+1s, renews at epoch+0.9s; its
// heartbeat is read, and x heartbeats while the answer is on its way,
// which comes after that old expiry:
//
//   - landing 60 ms before its expiry, the heartbeat is an ordinary one:
//     x's lease lives on (a checkout by y is refused), so x's renew must
//     not be told not_checked_out, which stops its work while the lease
//     goes on blocking the task;
//   - landing within clockMargin of its expiry, it is a return from the
//     dead, which ended x's lease: the renew is refused;
//   - with no heartbeat at all, x was dead when the answer came: refused.
func TestARenewJudgesTheCallerWhenItsHeartbeatWasRead(t *testing.T) {
	for _, tc := range []struct {
		name   string
		landed time.Duration // after epoch; 0: no heartbeat
		live   bool
	}{{"ordinary", 940 * time.Millisecond, true}, {"return", 985 * time.Millisecond, false}, {"dead", 0, false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t1")
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second)) // x dies at epoch+1s
			co := e.checkout(t, "t1", "x", time.Hour)
			e.clock.Advance(900 * time.Millisecond)

			other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			db := &slowHeartbeatReadDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), hook: func() {
				if tc.landed != 0 {
					e.clock.Advance(tc.landed - 900*time.Millisecond)
					must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second))
				}
				e.clock.Advance(epoch.Add(1001 * time.Millisecond).Sub(e.clock.Now())) // the answer comes at epoch+1.001s
			}}
			a := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			_, err := a.Renew(c, lease.RenewParams{TaskID: "t1", AgentID: "x", Fence: co.Fence})
			if !db.done {
				t.Fatal("the renew read no heartbeat")
			}
			if tc.live {
				if err != nil {
					t.Errorf("x, alive by the heartbeat it sent while its renew read the old one: renew %v", err)
				}
				if _, err := other.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "y", Timeout: time.Hour}); !errors.Is(err, lease.ErrCheckedOut) {
					t.Errorf("checkout by y of x's live lease: %v, want ErrCheckedOut", err)
				}
				return
			}
			if !errors.Is(err, lease.ErrNotCheckedOut) {
				t.Errorf("renew of a lease its holder's death ended: %v, want ErrNotCheckedOut", err)
			}
			must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "y", Timeout: time.Hour}))
		})
	}
}
