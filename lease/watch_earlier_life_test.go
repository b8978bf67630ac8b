package lease_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
)

// expireHeartbeat deletes agentID's heartbeat item once its TTL has passed
// by the test clock, as DynamoDB's TTL does (the local DynamoDB applies
// none). It fails the test if the item is there and not yet expired.
func (e *env) expireHeartbeat(t testing.TB, agentID string) {
	t.Helper()
	table := aws.String(e.names.Table(schema.HeartbeatsTable))
	out, err := e.db.GetItem(ctx(t), &dynamodb.GetItemInput{TableName: table, Key: lease.AgentKey(agentID), ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Item) == 0 {
		return
	}
	n, ok := out.Item["ttl"].(*types.AttributeValueMemberN)
	if !ok {
		t.Fatalf("the heartbeat item of %s has no ttl: %v", agentID, out.Item)
	}
	if ttl, _ := strconv.ParseInt(n.Value, 10, 64); ttl > e.clock.Now().Unix() {
		t.Fatalf("the heartbeat item of %s expires at %d, after now (%d)", agentID, ttl, e.clock.Now().Unix())
	}
	if _, err := e.db.DeleteItem(ctx(t), &dynamodb.DeleteItemInput{TableName: table, Key: lease.AgentKey(agentID)}); err != nil {
		t.Fatal(err)
	}
}

// An id removed, whose tombstone has expired (about 8 days on) by the
// time it is registered again, is not told of a freeing that its removed
// self's watch (kept 30 days) asked for.
func TestAnIDRegisteredAfterItsTombstoneExpiredIsNotToldOfItsRemovedSelfsWatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "w", Name: "w"}))
	e.checkout(t, "x", "a", lease.MaxTimeout)
	if err := e.store.Watch(c, "x", "w"); err != nil {
		t.Fatal(err)
	}
	e.drain(t)
	e.clock.Advance(time.Millisecond)
	if err := e.store.RemoveAgent(c, "w"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(9 * 24 * time.Hour)
	e.expireHeartbeat(t, "w")
	e.expireWatchPartition(t, "x")
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "w", Name: "w"}))
	e.clock.Advance(time.Millisecond)
	// The new agent has sent a heartbeat, or has not: neither makes the
	// removed agent's watch its own.
	for _, beat := range []bool{false, true} {
		if beat {
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "w", time.Minute))
		}
		// a's lease timed out long ago: the sweep ends it, a freeing.
		must[lease.SweepResult](t)(e.store.Sweep(c))
		if msgs := e.inbox(t, "w"); len(msgs) != 0 {
			t.Fatalf("heartbeat sent %v: the new agent was told of its removed self's watch: %+v", beat, msgs)
		}
		e.clock.Advance(time.Millisecond)
		co := e.checkout(t, "x", "a", time.Minute)
		if beat {
			break
		}
		// The removed self's watch, were it still there, would be told
		// of this release instead.
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a", RunID: co.RunID}))
		if msgs := e.inbox(t, "w"); len(msgs) != 0 {
			t.Fatalf("the new agent was told of its removed self's watch: %+v", msgs)
		}
	}
	// Its own watch is told.
	if err := e.store.Watch(c, "x", "w"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Millisecond)
	e.clock.Advance(lease.MaxTimeout)
	must[lease.SweepResult](t)(e.store.Sweep(c))
	if msgs := e.inbox(t, "w"); len(msgs) != 1 {
		t.Fatalf("the new agent's own watch: %d messages (%+v), want 1", len(msgs), msgs)
	}
}

// An id registered again soon after its removal, whose heartbeat item then
// expires (7 days after its last heartbeat, the agent silent), is not told
// of a freeing that its removed self's watch (kept 30 days) asked for.
func TestAnIDRegisteredAgainWhoseHeartbeatExpiredIsNotToldOfItsRemovedSelfsWatch(t *testing.T) {
	t.Parallel()
	for _, beat := range []bool{false, true} {
		e := newEnv(t)
		c := ctx(t)
		e.task(t, "x")
		must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "w", Name: "w"}))
		e.checkout(t, "x", "a", lease.MaxTimeout)
		if err := e.store.Watch(c, "x", "w"); err != nil {
			t.Fatal(err)
		}
		e.drain(t)
		e.clock.Advance(time.Millisecond)
		if err := e.store.RemoveAgent(c, "w"); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Millisecond)
		must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "w", Name: "w"}))
		e.clock.Advance(time.Millisecond)
		if beat {
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "w", time.Minute))
		}
		e.clock.Advance(9 * 24 * time.Hour)
		e.expireHeartbeat(t, "w")
		e.expireWatchPartition(t, "x")
		must[lease.SweepResult](t)(e.store.Sweep(c))
		if msgs := e.inbox(t, "w"); len(msgs) != 0 {
			t.Fatalf("heartbeat sent %v: the new agent, silent past its heartbeat item's expiry, was told of its removed self's watch: %+v", beat, msgs)
		}
	}
}

// An id registered again soon after its removal, silent until its
// heartbeat item expired, that then sends a heartbeat again (a new item)
// is not told of a freeing that its removed self's watch asked for.
func TestAnIDRegisteredAgainBeatingAfterItsHeartbeatExpiredIsNotToldOfItsRemovedSelfsWatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "w", Name: "w"}))
	e.checkout(t, "x", "a", lease.MaxTimeout)
	if err := e.store.Watch(c, "x", "w"); err != nil {
		t.Fatal(err)
	}
	e.drain(t)
	e.clock.Advance(time.Millisecond)
	if err := e.store.RemoveAgent(c, "w"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Millisecond)
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "w", Name: "w"}))
	e.clock.Advance(time.Millisecond)
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "w", time.Minute))
	e.clock.Advance(9 * 24 * time.Hour)
	e.expireHeartbeat(t, "w")
	e.expireWatchPartition(t, "x")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "w", time.Minute))
	must[lease.SweepResult](t)(e.store.Sweep(c))
	if msgs := e.inbox(t, "w"); len(msgs) != 0 {
		t.Fatalf("the new agent, beating again after its heartbeat item expired, was told of its removed self's watch: %+v", msgs)
	}
	// Its own watch, placed before its next heartbeat item, is told.
	if err := e.store.Watch(c, "x", "w"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Millisecond)
	co := e.checkout(t, "x", "a", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a", RunID: co.RunID}))
	if msgs := e.inbox(t, "w"); len(msgs) != 1 || msgs[0].Fence != co.Fence {
		t.Fatalf("the new agent's own watch: %+v, want one message for fence %d", msgs, co.Fence)
	}
}

// A named claim of an id registered again after its removal's tombstone
// expired is the new agent's, even where the removed agent's receipt of
// the same run id is still there (DynamoDB's TTL deletes late, by days):
// sent before the new agent's first heartbeat, or after it.
func TestAClaimOfAnIDRegisteredAfterItsTombstoneExpiredIgnoresTheRemovedAgentsReceipt(t *testing.T) {
	t.Parallel()
	for _, beat := range []bool{false, true} {
		e := newEnv(t)
		c := ctx(t)
		q := lease.CreateTaskParams{Queue: "again"}
		for _, id := range []string{"x", "y"} {
			q.TaskID = id
			e.create(t, q)
		}
		claim := lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute, Queues: []string{"again"}}
		must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "a", Name: "a"}))
		e.caughtUp(t) // the claim finds the tasks through an index
		first := must[lease.Checkout](t)(e.store.Claim(c, claim))
		e.clock.Advance(time.Second)
		e.caughtUp(t) // the removal finds the claimed lease through an index
		if err := e.store.RemoveAgent(c, "a"); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(9 * 24 * time.Hour)
		e.expireHeartbeat(t, "a") // the receipt, kept 48 h, is not deleted yet
		must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "a", Name: "a again"}))
		registered := e.clock.Now()
		e.clock.Advance(time.Second)
		if beat {
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Hour))
		}
		e.caughtUp(t)
		got := must[lease.Checkout](t)(e.store.Claim(c, claim))
		if got.Fence == first.Fence && got.TaskID == first.TaskID || got.LockedAt.Before(registered) {
			t.Fatalf("heartbeat sent %v: the claim of the agent registered again answered %s/%d locked %v, the removed agent's lease; want a lease of its own",
				beat, got.TaskID, got.Fence, got.LockedAt)
		}
		if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, got.TaskID)); lock == nil || lock.Fence != got.Fence || lock.AgentID != "a" {
			t.Fatalf("heartbeat sent %v: %s holds %+v, want the new claim's lease %d", beat, got.TaskID, lock, got.Fence)
		}
	}
}

// A removed agent's task_available message written after its removal
// emptied its inbox (the stream function read its heartbeat just before
// the removal) is not shown to the agent of the id registered again after
// the removal's tombstone expired (DynamoDB's TTL deletes late, by days:
// the message is still there), before the new agent's first heartbeat or
// after it.
func TestARemovedAgentsMessageIsNotShownToItsIDRegisteredAfterTheTombstoneExpired(t *testing.T) {
	t.Parallel()
	for _, beat := range []bool{false, true} {
		e := newEnv(t)
		c := ctx(t)
		e.task(t, "x")
		must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "w", Name: "w"}))
		must[lease.Heartbeat](t)(e.store.Heartbeat(c, "w", time.Minute))
		if err := e.store.Watch(c, "x", "w"); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Millisecond)
		co := e.checkout(t, "x", "a", time.Minute)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a", RunID: co.RunID}))
		db := &afterBatchGetDB{DB: e.db, then: func() {
			if err := e.store.RemoveAgent(c, "w"); err != nil {
				t.Error(err)
			}
		}}
		e.poller.Handle = stream.Handler(lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes}))
		e.drain(t)
		if n := len(e.inboxItems(t, "w")); n == 0 {
			t.Fatal("the stream function wrote no message to the removed agent's inbox")
		}
		e.clock.Advance(9 * 24 * time.Hour)
		e.expireHeartbeat(t, "w")
		must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "w", Name: "w"}))
		e.clock.Advance(time.Millisecond)
		if beat {
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "w", time.Minute))
		}
		if msgs := e.inbox(t, "w"); len(msgs) != 0 {
			t.Fatalf("heartbeat sent %v: the new agent is shown its removed self's message: %+v", beat, msgs)
		}
	}
}
