package lease_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
)

// taskWrites counts the task-item UpdateItem requests made through it.
type taskWrites struct {
	lease.DB
	n *atomic.Int64
}

func (d taskWrites) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if strings.HasSuffix(*in.TableName, schema.TasksTable) {
		d.n.Add(1)
	}
	return d.DB.UpdateItem(ctx, in, opt...)
}

// A blocker reopened and completed again and again while dependents are
// created costs the change stream one pass over its dependents per batch,
// not one per completion or reopen in it. Each pass of the stream reads the blocker as it is
// now, so a batch's completions of one blocker all find the same thing;
// passing each of them on again (a conditional write per dependent, per
// completion) made the stream's work grow with toggles times dependents:
// under such churn the local server's stream fell tens of seconds behind,
// and every dependent left waiting on the blocker's last completion waited
// that long to be unblocked. Once the batch is applied every dependent is
// todo, with one unblocked event per unblocking; a batch that leaves the
// blocker reopened blocks each again once.
func TestBlockerChurnCostsTheStreamOnePassPerBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const dependents, toggles = 40, 20
	e.task(t, "x")
	var ids []string
	for i := range dependents {
		id := fmt.Sprintf("d%02d", i)
		ids = append(ids, id)
		e.create(t, lease.CreateTaskParams{TaskID: id, BlockedBy: []string{"x"}})
	}
	e.complete(t, "x", "a")
	e.drain(t)

	var writes atomic.Int64
	e.poller.Handle = stream.Handler(lease.New(lease.Config{
		DB:     taskWrites{DB: lease.NewLocalClient(testenv.Endpoint()), n: &writes},
		Tables: e.names, Now: e.clock.Now, Notifier: e.notes,
	}))
	reopen := func() lease.Checkout {
		t.Helper()
		return must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "x", AgentID: "a", Timeout: time.Minute,
			ExpectedStatuses: []lease.Status{lease.StatusTodo, lease.StatusDone}}))
	}
	// The churn: x reopened, a dependent created while it is not done (so
	// left blocked, for x's next completion to release), x completed.
	for i := range toggles {
		co := reopen()
		id := fmt.Sprintf("late%02d", i)
		ids = append(ids, id)
		if st := e.create(t, lease.CreateTaskParams{TaskID: id, BlockedBy: []string{"x"}}).Status; st != lease.StatusBlocked {
			t.Fatalf("%s created while x is in progress: %s, want blocked", id, st)
		}
		must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "x", AgentID: "a", RunID: co.RunID}))
	}
	e.drain(t)
	// A pass over every dependent for each of the 20 completions is
	// 20*(40+20) writes; one pass, and the settling of the late ones'
	// creations, is about 80.
	if n, most := writes.Load(), int64(2*(dependents+toggles)); n > most {
		t.Errorf("the stream made %d task writes for one batch of %d toggles of x with %d dependents; want at most %d", n, toggles, dependents+toggles, most)
	}
	for _, id := range ids {
		if st := e.get(t, id).Status; st != lease.StatusTodo {
			t.Errorf("%s once the stream caught up with x's last completion: %s, want todo", id, st)
		}
	}

	// The churn again, ending with x reopened: each dependent is blocked
	// again, once, and x's completion releases each once.
	for range toggles {
		co := reopen()
		must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "x", AgentID: "a", RunID: co.RunID}))
	}
	co := reopen()
	writes.Store(0)
	e.drain(t)
	if n, most := writes.Load(), int64(2*(dependents+toggles)); n > most {
		t.Errorf("the stream made %d task writes for a batch that leaves x reopened with %d dependents; want at most %d", n, dependents+toggles, most)
	}
	for _, id := range ids {
		if st := e.get(t, id).Status; st != lease.StatusBlocked {
			t.Errorf("%s once the stream caught up with x's reopen: %s, want blocked", id, st)
		}
	}
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "x", AgentID: "a", RunID: co.RunID}))
	e.drain(t)
	for _, id := range ids {
		if st := e.get(t, id).Status; st != lease.StatusTodo {
			t.Errorf("%s after x's last completion: %s, want todo", id, st)
		}
		// The early ones: by x's first completion and its last; the late
		// ones: by the first batch and by x's last completion.
		if n := count(e.events(t, id), lease.EventUnblocked); n != 2 {
			t.Errorf("%s has %d unblocked events, want 2 (one per unblocking)", id, n)
		}
	}
}
