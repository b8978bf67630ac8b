package lease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// heartbeatReadsDB holds each consistent read of a heartbeat until want of
// them are out at once (or a second has passed), and keeps the most that
// ever were.
type heartbeatReadsDB struct {
	lease.DB
	table string
	want  int

	mu       sync.Mutex
	out, max int
	enough   chan struct{}
}

func (d *heartbeatReadsDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if in.TableName == nil || *in.TableName != d.table {
		return d.DB.GetItem(ctx, in, opts...)
	}
	d.mu.Lock()
	d.out++
	d.max = max(d.max, d.out)
	if d.out == d.want {
		close(d.enough)
	}
	d.mu.Unlock()
	select {
	case <-d.enough:
	case <-time.After(time.Second):
	}
	defer func() {
		d.mu.Lock()
		d.out--
		d.mu.Unlock()
	}()
	return d.DB.GetItem(ctx, in, opts...)
}

// An agent that stops for good is due at every sweep until its heartbeat
// item expires, days later, and each is judged by a consistent read of its
// heartbeat: a fleet's sweep judged them one after another, so ten
// thousand silent agents at a few milliseconds a read outran the
// sweeper's minute in AWS. The sweep judges them as many at once as it
// ends expired leases, and still ends each dead agent's lease.
func TestTheSweepJudgesDueAgentsAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const agents = 8
	for i := range agents {
		id := fmt.Sprintf("silent-%d", i)
		must[lease.Heartbeat](t)(e.store.Heartbeat(c, id, time.Second))
		e.task(t, "t-"+id)
		e.checkout(t, "t-"+id, id, time.Hour)
	}
	e.clock.Advance(2 * time.Second)
	db := &heartbeatReadsDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), want: agents, enough: make(chan struct{})}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	var res lease.SweepResult
	eventually(t, "every silent agent's lease ended", func() bool {
		r := must[lease.SweepResult](t)(s.Sweep(c))
		res.AgentDeaths += r.AgentDeaths
		return res.AgentDeaths == agents
	})
	if db.max < agents {
		t.Errorf("at most %d heartbeat reads at once, want the %d due agents judged at once", db.max, agents)
	}
	for i := range agents {
		if got := e.get(t, fmt.Sprintf("t-silent-%d", i)); got.Checkout != nil {
			t.Errorf("%s still held by %s", got.TaskID, got.Checkout.AgentID)
		}
	}
}

// heartbeatGetsDB counts the heartbeats read by GetItem, and runs onGet,
// when set, before each of them.
type heartbeatGetsDB struct {
	lease.DB
	table string
	onGet func()

	mu   sync.Mutex
	gets int
}

func (d *heartbeatGetsDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if in.TableName != nil && *in.TableName == d.table {
		d.mu.Lock()
		d.gets++
		f := d.onGet
		d.mu.Unlock()
		if f != nil {
			f()
		}
	}
	return d.DB.GetItem(ctx, in, opts...)
}

func (d *heartbeatGetsDB) take() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.gets
	d.gets = 0
	return n
}

// countingHeartbeats is a second store on e's tables and clock that counts
// the heartbeats it reads.
func countingHeartbeats(e *env) (*lease.Store, *heartbeatGetsDB) {
	db := &heartbeatGetsDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable)}
	return lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes}), db
}

// An agent that stops for good stays due until its heartbeat item expires,
// days later, and every sweep judged each due agent by a consistent read:
// a sweep's reads grew with the agents that ever died, not with the leases
// they left, and enough of them outran the sweeper's minute before any
// lease was ended. A dead agent that holds no lease has nothing to end:
// the sweep reads the live leases first and judges only the due agents
// that hold one.
func TestTheSweepJudgesOnlyDueAgentsThatHoldALease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const idle = 30
	for i := range idle {
		must[lease.Heartbeat](t)(e.store.Heartbeat(c, fmt.Sprintf("idle-%d", i), time.Second))
	}
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "holder", time.Second))
	e.task(t, "t1")
	e.checkout(t, "t1", "holder", time.Hour)
	e.clock.Advance(2 * time.Second)
	e.caughtUp(t) // the sweep finds the deaths and the lease through indexes

	s, db := countingHeartbeats(e)
	res := must[lease.SweepResult](t)(s.Sweep(c))
	if res.AgentDeaths != 1 {
		t.Fatalf("sweep = %+v, want the holder's lease ended", res)
	}
	if n := db.take(); n != 1 {
		t.Errorf("the sweep read %d heartbeats, want 1: the holder's, not the %d idle dead agents'", n, idle)
	}
	if got := e.get(t, "t1"); got.Checkout != nil {
		t.Fatalf("t1 still held by %s", got.Checkout.AgentID)
	}
	if evs := e.events(t, "t1"); evs[len(evs)-1].Type != lease.EventAgentDeath {
		t.Fatalf("events = %v, want the lease ended by agent_death", kinds(evs))
	}
}

// An agent back from the dead that holds nothing is read by the sweep once
// its death can be settled, and not before: the sweep settles it then, and
// it is due no more.
func TestTheSweepSettlesAReturnedAgentThatHoldsNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Second))
	e.clock.Advance(2 * time.Second)
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Hour)) // back
	s, db := countingHeartbeats(e)

	e.clock.Advance(lease.SettleAfter / 2)
	e.caughtUp(t) // the sweep finds the death through an index
	must[lease.SweepResult](t)(s.Sweep(c))
	if n := db.take(); n != 0 {
		t.Errorf("a sweep before the death can be settled read %d heartbeats, want none; %s", n, heartbeatState(t, e, "a"))
	}
	e.clock.Advance(lease.SettleAfter)
	must[lease.SweepResult](t)(s.Sweep(c))
	if n := db.take(); n != 1 {
		t.Errorf("the sweep that settles the death read %d heartbeats, want 1; %s", n, heartbeatState(t, e, "a"))
	}
	e.caughtUp(t) // the index shows the settling
	must[lease.SweepResult](t)(s.Sweep(c))
	if n := db.take(); n != 0 {
		t.Errorf("a sweep after the settling read %d heartbeats, want none: the agent is due no more; %s", n, heartbeatState(t, e, "a"))
	}
}

// heartbeatState describes agentID's heartbeat item, and the entries of its
// shard in the sweep's index, for a failure to show what the sweep found.
func heartbeatState(t testing.TB, e *env, agentID string) string {
	t.Helper()
	table := e.names.Table(schema.HeartbeatsTable)
	got, err := e.db.GetItem(ctx(t), &dynamodb.GetItemInput{TableName: &table, Key: lease.AgentKey(agentID), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return fmt.Sprintf("heartbeat of %s not read: %v", agentID, err)
	}
	var hb map[string]any
	if err := attributevalue.UnmarshalMapWithOptions(got.Item, &hb, useNumber); err != nil {
		return fmt.Sprintf("heartbeat of %s not decoded: %v", agentID, err)
	}
	var entries []map[string]any
	if shard, ok := got.Item["hb_shard"]; ok {
		out, err := e.db.Query(ctx(t), &dynamodb.QueryInput{
			TableName: &table, IndexName: aws.String(schema.HeartbeatsByExpiry),
			KeyConditionExpression:    aws.String("hb_shard = :s"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":s": shard},
		})
		if err != nil {
			return fmt.Sprintf("clock %d, heartbeat %v, index not read: %v", e.clock.Now().UnixMilli(), hb, err)
		}
		if err := attributevalue.UnmarshalListOfMapsWithOptions(out.Items, &entries, useNumber); err != nil {
			return fmt.Sprintf("clock %d, heartbeat %v, index not decoded: %v", e.clock.Now().UnixMilli(), hb, err)
		}
	}
	return fmt.Sprintf("clock %d, heartbeat %v, index entries %v", e.clock.Now().UnixMilli(), hb, entries)
}

// useNumber decodes numbers as written (Unix ms), not as floats.
func useNumber(o *attributevalue.DecoderOptions) { o.UseNumber = true }

// passClockDB runs f once, just before the first Query of the live leases
// (the sweep's pass over the lease-expiry index, which has a filter).
type passClockDB struct {
	lease.DB
	once sync.Once
	f    func()
}

func (d *passClockDB) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if in.IndexName != nil && *in.IndexName == schema.TasksByLeaseExpiry && in.FilterExpression != nil {
		d.once.Do(d.f)
	}
	return d.DB.Query(ctx, in, opts...)
}

// A death is settled only when the pass that looked for the agent's leases
// was read more than SettleAfter after its return, the lag the lease index
// is allowed: a pass read earlier, whose agent is judged after that time,
// may miss a lease the agent held when it died, which the next sweep must
// still end.
func TestTheSweepSettlesADeathByWhenItsPassWasRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t0", "t1")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Second))
	e.checkout(t, "t0", "a", time.Hour)
	e.caughtUp(t) // t0 is in the lease index
	e.lag(t, schema.TasksTable, indexLag)
	e.checkout(t, "t1", "a", time.Hour) // not in it yet
	e.clock.Advance(2 * time.Second)
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Hour)) // back
	e.clock.Advance(lease.SettleAfter - time.Second)

	db := &passClockDB{DB: e.db, f: func() { e.clock.Advance(2 * time.Second) }}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	if res := must[lease.SweepResult](t)(s.Sweep(c)); res.AgentDeaths != 1 {
		t.Fatalf("sweep = %+v, want t0 ended", res)
	}
	e.caughtUp(t) // t1 is in the lease index
	if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res.AgentDeaths != 1 {
		t.Fatalf("sweep = %+v, want t1 ended: a's death was settled before a pass could show it", res)
	}
	if got := e.get(t, "t1"); got.Checkout != nil {
		t.Fatalf("t1 still held by %s", got.Checkout.AgentID)
	}
}
