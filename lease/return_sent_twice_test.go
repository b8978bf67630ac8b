package lease_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// resendHeartbeatWriteDB runs hook before the nth UpdateItem on the
// heartbeats table, then, with resend, sends it twice and answers with the
// second answer: what the SDK does when the first answer was lost.
type resendHeartbeatWriteDB struct {
	lease.DB
	table  string
	n      int
	hook   func()
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
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t1")
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second))
			e.clock.Advance(2 * time.Second) // x is dead

			other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			seen := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
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

// resendAcrossDB sends the nth UpdateItem on table twice, running before
// first (ahead of its first sending) and between (after the first
// sending applied, before the second), and answers with the second
// answer: the first sending's answer lost, another write landing in the
// gap before the SDK sends it again.
type resendAcrossDB struct {
	lease.DB
	table          string
	n              int
	before, within func()
	sent           int
}

func (d *resendAcrossDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if in.TableName == nil || *in.TableName != d.table {
		return d.DB.UpdateItem(ctx, in, opts...)
	}
	d.sent++
	if d.sent == d.n {
		d.before()
		if _, err := d.DB.UpdateItem(ctx, in, opts...); err != nil {
			return nil, err
		}
		d.within()
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}

// TestAReturnSentTwiceIsMadeOnceMore/answer-lost, with one more step: an
// ordinary heartbeat of x's other process lands between the return's two
// sendings (it finds x alive, by the return's first write). The second
// sending is refused; it does not match its own write (last_at is the
// other heartbeat's), and alive_since has moved (by its own first write),
// so the heartbeat took it for another's return and started over as an
// ordinary one: the return was never made once more, and t1, which x's
// other process took while x was dead and which the process that saw x
// dead holds ended, was live in every other process. The return's first
// write now keeps its id (return_write): the second sending knows it,
// and moves alive_since to when its answer came in.
func TestAReturnSentTwiceAcrossAnotherHeartbeatIsMadeOnceMore(t *testing.T) {
	// Another heartbeat of this version makes the return once more itself
	// (it lands on the pending mark); one of the version before moves the
	// expiry only, and the return's second sending knows its own first
	// write by return_write.
	for _, older := range []bool{false, true} {
		t.Run(map[bool]string{false: "this version", true: "the version before"}[older], func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t1")
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second))
			e.clock.Advance(2 * time.Second) // x is dead

			other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			seen := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			table := e.names.Table(schema.HeartbeatsTable)
			db := &resendAcrossDB{DB: e.db, table: table, n: 2, before: func() {
				e.clock.Advance(100 * time.Millisecond)
				must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "x", Timeout: time.Hour}))
				e.clock.Advance(100 * time.Millisecond)
				if got := must[*lease.Checkout](t)(seen.LockStatus(c, "t1")); got != nil {
					t.Fatalf("t1 live while x is dead: %+v", got)
				}
			}, within: func() {
				e.clock.Advance(50 * time.Millisecond)
				if !older {
					must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second))
				} else {
					now := e.clock.Now().UnixMilli()
					if _, err := e.db.UpdateItem(c, &dynamodb.UpdateItemInput{
						TableName:        &table,
						Key:              map[string]types.AttributeValue{"agent_id": &types.AttributeValueMemberS{Value: "x"}},
						UpdateExpression: aws.String("SET last_at = :now, expires_at = :exp"),
						ExpressionAttributeValues: map[string]types.AttributeValue{
							":now": &types.AttributeValueMemberN{Value: strconv.FormatInt(now, 10)},
							":exp": &types.AttributeValueMemberN{Value: strconv.FormatInt(now+1000, 10)},
						},
					}); err != nil {
						t.Fatal(err)
					}
				}
				e.clock.Advance(50 * time.Millisecond)
			}}
			x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			must[lease.Heartbeat](t)(x.Heartbeat(c, "x", time.Second))
			if db.sent < 2 {
				t.Fatal("the return's write was not sent twice")
			}
			e.clock.Advance(10 * time.Millisecond)

			fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			inFresh := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1"))
			inSeen := must[*lease.Checkout](t)(seen.LockStatus(c, "t1"))
			if inSeen != nil {
				t.Fatalf("t1 live again in the process that saw x dead: %+v", inSeen)
			}
			if inFresh != nil {
				t.Errorf("t1, ended for the process that saw x dead after it was taken, is live in a fresh one (fence %d): the return, sent twice across another heartbeat of x, was not made once more", inFresh.Fence)
			}
		})
	}
}
