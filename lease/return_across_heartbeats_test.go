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

// deadX is a fresh env with task t1 and agent x dead by heartbeat (its
// 1 s heartbeat 2 s behind the clock), and two more stores on it, as
// other processes: the start of every return-from-the-dead test.
func deadX(t *testing.T) (e *env, c context.Context, s1, s2 *lease.Store) {
	t.Helper()
	e, c = newEnv(t), ctx(t)
	e.task(t, "t1")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Second))
	e.clock.Advance(2 * time.Second) // x is dead
	s1 = lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	s2 = lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
	return e, c, s1, s2
}

// takenWhileDead: x dead; the return's first write is on its way while
// x's other process takes t1 (x dead) and seen sees x dead, t1 ended.
func takenWhileDead(t *testing.T, e *env, c context.Context, other, seen *lease.Store) func() {
	return func() {
		e.clock.Advance(100 * time.Millisecond)
		must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "x", Timeout: time.Hour}))
		e.clock.Advance(100 * time.Millisecond)
		if got := must[*lease.Checkout](t)(seen.LockStatus(c, "t1")); got != nil {
			t.Fatalf("t1 live while x is dead: %+v", got)
		}
	}
}

// TestAReturnSentTwiceIsMadeOnceMore/answer-lost, with other writes of
// x's heartbeat between the return's two sendings: an ordinary heartbeat
// of x's other process (it finds x alive, by the return's first write),
// the same from a process of the version before (a write that moves the
// expiry only), two heartbeats, a lowering (a shorter ttl: arm, then
// stamp), and x dead again by the other heartbeat's expiry. The second
// sending is refused and used not to match its own write (last_at is the
// other heartbeat's), and alive_since had moved (by its own first
// write), so the heartbeat took it for another's return and started over
// as an ordinary one: the return was never made once more, and t1, which
// x's other process took while x was dead and which the process that saw
// x dead holds ended, was live in every other process. The return's
// first write now keeps its id (return_write): the second sending knows
// it, and moves alive_since to when its answer came in. t1 ends
// everywhere, and a lease x takes once its heartbeat has answered is live.
func TestAReturnSentTwiceAcrossAnotherHeartbeatIsMadeOnceMore(t *testing.T) {
	beat := func(ttl time.Duration) func(t *testing.T, e *env, c context.Context, other *lease.Store) {
		return func(t *testing.T, e *env, c context.Context, other *lease.Store) {
			e.clock.Advance(50 * time.Millisecond)
			must[lease.Heartbeat](t)(other.Heartbeat(c, "x", ttl))
			e.clock.Advance(50 * time.Millisecond)
		}
	}
	cases := map[string]struct {
		ttl    time.Duration // the return's
		within func(t *testing.T, e *env, c context.Context, other *lease.Store)
	}{
		"one heartbeat": {time.Second, beat(time.Second)},
		"a heartbeat of the version before": {time.Second, func(t *testing.T, e *env, c context.Context, other *lease.Store) {
			e.clock.Advance(50 * time.Millisecond)
			now := e.clock.Now().UnixMilli()
			table := e.names.Table(schema.HeartbeatsTable)
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
			e.clock.Advance(50 * time.Millisecond)
		}},
		"two heartbeats": {2 * time.Second, func(t *testing.T, e *env, c context.Context, other *lease.Store) {
			beat(time.Second)(t, e, c, other)
			must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second))
		}},
		"lowering": {2 * time.Second, func(t *testing.T, e *env, c context.Context, other *lease.Store) {
			e.clock.Advance(50 * time.Millisecond)
			must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second)) // x's return has 2s
		}},
		"dead again": {2 * time.Second, func(t *testing.T, e *env, c context.Context, other *lease.Store) {
			e.clock.Advance(50 * time.Millisecond)
			must[lease.Heartbeat](t)(other.Heartbeat(c, "x", time.Second))
			e.clock.Advance(1500 * time.Millisecond)
		}},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e, c, other, seen := deadX(t)
			db := &resendHeartbeatWriteDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), n: 2, resend: true,
				hook: takenWhileDead(t, e, c, other, seen), within: func() { tc.within(t, e, c, other) }}
			x := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			must[lease.Heartbeat](t)(x.Heartbeat(c, "x", tc.ttl))
			if db.sent < 2 {
				t.Fatal("the return's write was not sent twice")
			}
			e.clock.Advance(10 * time.Millisecond)
			fresh := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now})
			if got := must[*lease.Checkout](t)(seen.LockStatus(c, "t1")); got != nil {
				t.Fatalf("t1 live again in the process that saw x dead: %+v", got)
			}
			if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t1")); got != nil {
				t.Errorf("t1, ended for the process that saw x dead after it was taken, is live in a fresh one (fence %d): the return, sent twice across another heartbeat of x, was not made once more", got.Fence)
			}
			// x is alive by its own answer: a lease it takes now is live.
			e.task(t, "t3")
			must[lease.Checkout](t)(x.Checkout(c, lease.CheckoutParams{TaskID: "t3", AgentID: "x", Timeout: time.Hour}))
			e.clock.Advance(time.Millisecond)
			if got := must[*lease.Checkout](t)(fresh.LockStatus(c, "t3")); got == nil {
				t.Errorf("t3, taken by x after its heartbeat answered, is not live")
			}
		})
	}
}
