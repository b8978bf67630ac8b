package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// resendHeartbeatWriteDB runs hook before the nth UpdateItem on the
// heartbeats table, then, with resend, sends it twice and answers with the
// second answer: what the SDK does when the first answer was lost. within,
// if set, runs between the two sendings: another write landing in the gap
// before the SDK sends it again.
type resendHeartbeatWriteDB struct {
	lease.DB
	table  string
	n      int
	hook   func()
	within func()
	resend bool
	sent   int
}

func (d *resendHeartbeatWriteDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if in.TableName == nil || *in.TableName != d.table {
		return d.DB.UpdateItem(ctx, in, opts...)
	}
	d.sent++
	if d.sent == d.n {
		d.hook()
		if d.resend {
			if _, err := d.DB.UpdateItem(ctx, in, opts...); err != nil {
				return nil, err
			}
			if d.within != nil {
				d.within()
			}
		}
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}

// A return from the dead whose clock has moved on once its write landed is
// made once more at that later time, so that a death seen while the write
// was on its way does not fall inside the life the answer states. When the
// return's first write applied but its answer was lost, the SDK's second
// sending failed its condition (the expiry it was pinned to had moved, by
// that very write), the heartbeat started over as an ordinary one, and the
// return was never made once more: a lease x took while dead, which a
// process that saw x dead after that lock holds ended for ever, was live
// again everywhere else.
func TestAReturnSentTwiceIsMadeOnceMore(t *testing.T) {
	for _, resend := range []bool{false, true} {
		t.Run(map[bool]string{false: "answered", true: "answer-lost"}[resend], func(t *testing.T) {
			t.Parallel()
			e, c, other, seen := deadX(t)
			db := &resendHeartbeatWriteDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), n: 2, resend: resend, hook: func() {
				// The return's first write is on its way: x's other
				// process takes t1, while x is dead, and another process
				// then sees x dead, t1 ended.
				e.clock.Advance(100 * time.Millisecond)
				must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "x", Timeout: time.Hour}))
				e.clock.Advance(100 * time.Millisecond)
				if got := must[*lease.Checkout](t)(seen.LockStatus(c, "t1")); got != nil {
					t.Fatalf("t1 live while x is dead: %+v", got)
				}
			}}
			x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			must[lease.Heartbeat](t)(x.Heartbeat(c, "x", time.Second))
			e.clock.Advance(10 * time.Millisecond)

			fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			inFresh := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1"))
			inSeen := must[*lease.Checkout](t)(seen.LockStatus(c, "t1"))
			if inSeen != nil {
				t.Fatalf("t1 live again in the process that saw x dead: %+v", inSeen)
			}
			if inFresh != nil {
				t.Errorf("t1, held ended by the process that saw x dead after it was taken, is live in a fresh one (fence %d): the return was not made once more", inFresh.Fence)
			}
		})
	}
}
