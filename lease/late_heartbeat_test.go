package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// lateHeartbeatDB makes the first UpdateItem on the heartbeats table land
// late: before it is sent, hook runs (the clock moves past the agent's
// expiry and another process sees it dead); then, with resend, it is sent
// twice and the second answer returned, as the SDK does when the first
// answer was lost.
type lateHeartbeatDB struct {
	lease.DB
	table  string
	hook   func()
	resend bool
	done   bool
}

func (d *lateHeartbeatDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if !d.done && in.TableName != nil && *in.TableName == d.table {
		d.done = true
		d.hook()
		if d.resend {
			if _, err := d.DB.UpdateItem(ctx, in, opts...); err != nil {
				return nil, err
			}
		}
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}

// alive.go: a heartbeat "that lands after the expiry it replaced may land
// after the agent was seen dead and its leases ended": it is made a return
// from the dead, "so the leases that death ended stay ended". It decides
// so from the write's ALL_OLD image. When the write's first answer is lost
// and the SDK sends it again, the second write's old image is the first
// write's own (alive), and the late heartbeat is taken as an ordinary one:
// alive_since does not move, and a lease that was reported ended while the
// agent was dead (GET showed it free) is live again, renewable by its
// holder, while the process that saw the death still holds it ended.
func TestALateHeartbeatSentTwiceIsAReturn(t *testing.T) {
	for _, resend := range []bool{false, true} {
		t.Run(map[bool]string{false: "answered", true: "answer-lost"}[resend], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t1")
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second)) // x dies at epoch+1s
			co := e.checkout(t, "t1", "x", time.Hour)
			e.clock.Advance(900 * time.Millisecond)

			seen := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			db := &lateHeartbeatDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), resend: resend, hook: func() {
				e.clock.Advance(200 * time.Millisecond) // epoch+1.1s: x is dead
				if got := must[*lease.Checkout](t)(seen.LockStatus(c, "t1")); got != nil {
					t.Fatalf("t1 live while x is dead: %+v", got)
				}
			}}
			x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			must[lease.Heartbeat](t)(x.Heartbeat(c, "x", time.Minute))
			e.clock.Advance(time.Second)

			fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")); got != nil {
				t.Errorf("x's lease on t1, reported ended while x was dead, is live again: fence %d", got.Fence)
			}
			if _, err := fresh.Renew(c, lease.RenewParams{TaskID: "t1", AgentID: "x", Fence: co.Fence}); err == nil {
				t.Errorf("x renewed the lease its death ended")
			}
		})
	}
}
