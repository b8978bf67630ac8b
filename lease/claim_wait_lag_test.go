package lease_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// grantCountDB counts the grant writes (a checkout's or a claim's) sent
// through it.
type grantCountDB struct {
	lease.DB
	tasks  string // the tasks table's name
	grants atomic.Int32
}

func (d *grantCountDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	for _, name := range in.ExpressionAttributeNames {
		if name == "prev_agent" && aws.ToString(in.TableName) == d.tasks {
			d.grants.Add(1)
			break
		}
	}
	return d.DB.UpdateItem(ctx, in, opt...)
}

// A waiting claim that found a task taken, which the claim index still
// shows (it lags the grant of another process), does not write for it
// again at its next looks while the index may still show it: one refused
// write, not one a look. Before, each look started with no task found
// taken, and under 200 ms of index lag a claim looking every 20 ms wrote
// for the taken task at each of them.
func TestAWaitingClaimDoesNotWriteAgainForATaskItFoundTaken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.queued(t, "t", "lagging", 5)
	e.caughtUp(t)
	e.lag(t, "", 200*time.Millisecond)
	e.checkout(t, "t", "rival", time.Hour) // another process takes it; the index shows it a while yet
	db := &grantCountDB{DB: e.db, tasks: e.names.Table(schema.TasksTable)}
	waiter := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	lease.PollClaims(waiter, 20*time.Millisecond)
	_, err := waiter.Claim(c, lease.ClaimParams{AgentID: "w", Queues: []string{"lagging"}, Wait: 600 * time.Millisecond})
	if !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("claim: %v, want no task available", err)
	}
	switch n := db.grants.Load(); {
	case n == 0:
		t.Fatalf("the claim wrote for no task: the index did not show the taken one")
	case n > 1:
		t.Errorf("the waiting claim wrote %d times for the task it found taken, want once", n)
	}
}

// grantHookDB runs before ahead of the first grant write sent through it,
// and after once that write has been answered.
type grantHookDB struct {
	lease.DB
	tasks         string // the tasks table's name
	fired         atomic.Bool
	before, after func()
}

func (d *grantHookDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	first := aws.ToString(in.TableName) == d.tasks && slices.Contains(slices.Collect(maps.Values(in.ExpressionAttributeNames)), "prev_agent") && d.fired.CompareAndSwap(false, true)
	if first {
		d.before()
	}
	out, err := d.DB.UpdateItem(ctx, in, opt...)
	if first {
		d.after()
	}
	return out, err
}

// A waiting claim that found a task taken and passes it by at its next
// looks still answers 404 no_task_available only once it has written for
// every candidate: a task another process freed since (which no wake
// tells this one of) is taken by the wait's last look, at its deadline,
// however recently the claim found it taken. Here the rival takes the
// task just before the claim's write and releases it right after, and
// the wait ends within the second the claim passes the task by.
func TestAWaitingClaimTakesATaskItPassedByThatWasFreedElsewhere(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.queued(t, "t", "freed", 5)
	e.caughtUp(t)
	var rival lease.Checkout
	var errs []error
	db := &grantHookDB{DB: e.db, tasks: e.names.Table(schema.TasksTable)}
	db.before = func() { // another process takes it before the claim's write
		var err error
		rival, err = e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "rival", Timeout: time.Hour})
		errs = append(errs, err)
	}
	db.after = func() { // and releases it once that write is refused
		_, err := e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "rival", RunID: rival.RunID, Fence: rival.Fence})
		errs = append(errs, err)
		e.caughtUp(t) // the index shows it free
	}
	waiter := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	lease.PollClaims(waiter, 20*time.Millisecond)
	co, err := waiter.Claim(c, lease.ClaimParams{AgentID: "w", Queues: []string{"freed"}, Timeout: time.Hour, Wait: 500 * time.Millisecond})
	if err := errors.Join(errs...); err != nil || !db.fired.Load() {
		t.Fatalf("the rival's checkout and release: %v (fired %v)", err, db.fired.Load())
	}
	if err != nil {
		t.Fatalf("the waiting claim answered %v, want the lease on t, free since the rival's release", err)
	}
	if co.TaskID != "t" || co.Fence != rival.Fence+1 {
		t.Fatalf("the waiting claim took %s/%d, want t/%d", co.TaskID, co.Fence, rival.Fence+1)
	}
}

// A waiting claim that found a task taken does not pass it by once this
// process has freed it since (its holder's release through this process,
// which wakes the claim): the claim takes it at its next look, not once
// the second it passes such tasks by has run.
func TestAWaitingClaimTakesATaskItFoundTakenOnceThisProcessFreesIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.queued(t, "t", "freed-here", 5)
	e.caughtUp(t)
	var rival lease.Checkout
	var errs []error
	var released time.Time
	db := &grantHookDB{DB: e.db, tasks: e.names.Table(schema.TasksTable)}
	waiter := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	db.before = func() { // another process takes it before the claim's write
		var err error
		rival, err = e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "rival", Timeout: time.Hour})
		errs = append(errs, err)
	}
	db.after = func() { // its holder releases it through the claim's process
		_, err := waiter.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "rival", RunID: rival.RunID, Fence: rival.Fence})
		errs = append(errs, err)
		e.caughtUp(t) // the index shows it free
		released = time.Now()
	}
	co, err := waiter.Claim(c, lease.ClaimParams{AgentID: "w", Queues: []string{"freed-here"}, Timeout: time.Hour, Wait: 5 * time.Second})
	took := time.Since(released)
	if err := errors.Join(errs...); err != nil || !db.fired.Load() {
		t.Fatalf("the rival's checkout and release: %v (fired %v)", err, db.fired.Load())
	}
	if err != nil {
		t.Fatalf("the waiting claim answered %v, want the lease on t", err)
	}
	if co.TaskID != "t" || co.Fence != rival.Fence+1 {
		t.Fatalf("the waiting claim took %s/%d, want t/%d", co.TaskID, co.Fence, rival.Fence+1)
	}
	if took >= 500*time.Millisecond {
		t.Errorf("the waiting claim took t %v after its release through this process, want at its next look", took)
	}
}
