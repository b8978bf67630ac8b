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
