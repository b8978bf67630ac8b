package lease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// taskWritesDB holds each UpdateItem of the tasks table until want of them
// are out at once (or a second has passed, after which it holds none), and
// keeps the most that ever were.
type taskWritesDB struct {
	lease.DB
	table string
	want  int

	mu       sync.Mutex
	out, max int
	enough   chan struct{}
}

func (d *taskWritesDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if in.TableName == nil || *in.TableName != d.table {
		return d.DB.UpdateItem(ctx, in, opts...)
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
		d.mu.Lock()
		if d.max < d.want {
			d.want = -1 // they come one at a time: stop holding them
			close(d.enough)
		}
		d.mu.Unlock()
	}
	defer func() {
		d.mu.Lock()
		d.out--
		d.mu.Unlock()
	}()
	return d.DB.UpdateItem(ctx, in, opts...)
}

// holding registers agent holder, with a heartbeat of 1 s, and gives it n
// leases, on tasks "<holder>-<i>"; it returns their ids.
func (e *env) holding(t *testing.T, holder string, n int) []string {
	t.Helper()
	c := ctx(t)
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: holder, Name: holder}))
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, holder, time.Second))
	var ids []string
	for i := range n {
		ids = append(ids, fmt.Sprintf("%s-%d", holder, i))
	}
	e.task(t, ids...)
	for _, id := range ids {
		e.checkout(t, id, holder, time.Hour)
	}
	return ids
}

// endedBy checks that each task's latest event is the agent_death that
// ended holder's lease.
func (e *env) endedBy(t *testing.T, holder string, ids []string) {
	t.Helper()
	for _, id := range ids {
		evs := e.events(t, id)
		if last := evs[len(evs)-1]; last.Type != lease.EventAgentDeath || last.AgentID != holder {
			t.Errorf("%s: events %v, want its lease ended by the death of %s", id, kinds(evs), holder)
		}
	}
}

// An agent may hold hundreds of leases when it dies, and a fleet that
// stops at once leaves thousands: the sweep ended a dead agent's leases
// one write after another (at a few milliseconds a write in AWS, ten
// thousand outran the sweeper's minute), where it ends expired ones
// sweepWorkers at once. It ends them as many at once.
func TestTheSweepEndsDeadHoldersLeasesAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const leases = 8
	ids := e.holding(t, "fleet", leases)
	e.clock.Advance(2 * time.Second)
	e.caughtUp(t)
	db := &taskWritesDB{DB: e.db, table: e.names.Table(schema.TasksTable), want: leases, enough: make(chan struct{})}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	res := must[lease.SweepResult](t)(s.Sweep(ctx(t)))
	if res.AgentDeaths != leases {
		t.Errorf("the sweep ended %d leases, want %d", res.AgentDeaths, leases)
	}
	if db.max < leases {
		t.Errorf("at most %d endings at once, want the %d leases ended at once", db.max, leases)
	}
	e.endedBy(t, "fleet", ids)
}

// Removing an agent ends the leases the expiry index shows before it
// answers: one write after another, so that an agent holding a thousand
// leases outran the agents function's 10 s in AWS (a 5xx, the agent
// already removed). They are ended as many at once as the sweep ends them.
func TestRemovingAnAgentEndsItsLeasesAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const leases = 8
	ids := e.holding(t, "removed", leases)
	e.caughtUp(t)
	db := &taskWritesDB{DB: e.db, table: e.names.Table(schema.TasksTable), want: leases, enough: make(chan struct{})}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	if err := s.RemoveAgent(ctx(t), "removed"); err != nil {
		t.Fatal(err)
	}
	if db.max < leases {
		t.Errorf("at most %d endings at once, want the %d leases ended at once", db.max, leases)
	}
	e.endedBy(t, "removed", ids)
}
