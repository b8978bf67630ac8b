package lease_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// An attempt of a named claim refused the run's turn waits for it in
// awaitTurn, whose only bound is the holder's: so a holder gives the turn
// back before it sleeps. Here the holder waits long and keeps noting a
// task it loses (through index lag; under contention, tasks freed and
// taken again): a retry of the run with wait 0 still answers at once, not
// when the holder does.
func TestARetryDoesNotWaitOutAnotherAttemptsWait(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	e.caughtUp(t)
	e.lag(t, schema.TasksTable, 30*time.Second)
	other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	must[lease.Checkout](t)(other.Checkout(c, lease.CheckoutParams{TaskID: "x", AgentID: "b", Timeout: time.Minute}))
	stop := make(chan struct{})
	var tick sync.WaitGroup
	tick.Go(func() { // the clock moves as real time does
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				e.clock.Advance(50 * time.Millisecond)
			}
		}
	})
	defer func() { close(stop); tick.Wait() }()
	first := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	var wg sync.WaitGroup
	var firstErr error
	wg.Go(func() {
		_, firstErr = first.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "r", Timeout: time.Minute, Wait: 12 * time.Second})
	})
	time.Sleep(300 * time.Millisecond)
	began := time.Now()
	_, err := e.store.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "r", Timeout: time.Minute})
	took := time.Since(began)
	wg.Wait()
	t.Logf("retry (wait 0): %v after %v; first attempt (wait 12s): %v", err, took.Round(time.Millisecond), firstErr)
	if took > 4*time.Second {
		t.Fatalf("a claim with wait 0 answered after %v (its wait + ~3 s is 3 s): it waited on the turn of an attempt with wait 12s", took.Round(time.Millisecond))
	}
}

// slowFirstGrantDB delays its first write to the tasks table (a claim's grant).
type slowFirstGrantDB struct {
	lease.DB
	once  *sync.Once
	delay time.Duration
}

func (d slowFirstGrantDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if strings.HasSuffix(*in.TableName, schema.TasksTable) {
		d.once.Do(func() { time.Sleep(d.delay) })
	}
	return d.DB.UpdateItem(ctx, in, opt...)
}

// pausedTaskReadDB pauses after its first read of the tasks table answers.
type pausedTaskReadDB struct {
	lease.DB
	once  *sync.Once
	pause time.Duration
}

func (d pausedTaskReadDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := d.DB.GetItem(ctx, in, opt...)
	if strings.HasSuffix(*in.TableName, schema.TasksTable) {
		d.once.Do(func() { time.Sleep(d.pause) })
	}
	return out, err
}

// An attempt of a named claim that reads the receipt listing a task
// another attempt of the run is writing for, reads the task before that
// grant lands and its trail after it is archived, answers the live lease
// as live, not as ended at its lock time (timeout 0, expires_at =
// locked_at, remaining 0): leaseOfRun reads the task again when the trail
// has the grant. Seen from outside (an outside probe's named claims sent
// at once, 3 of 5 runs).
func TestAnAttemptAnswersTheRunsLiveLeaseAsLive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t0")
	e.caughtUp(t)
	a := lease.New(lease.Config{DB: slowFirstGrantDB{e.db, new(sync.Once), 400 * time.Millisecond}, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	b := lease.New(lease.Config{DB: pausedTaskReadDB{e.db, new(sync.Once), 1500 * time.Millisecond}, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	var first, second lease.Checkout
	var err1, err2 error
	var wg sync.WaitGroup
	wg.Go(func() {
		first, err1 = a.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "r", Timeout: time.Minute})
	})
	time.Sleep(150 * time.Millisecond) // a has noted t0; its grant is on its way
	done := make(chan struct{})
	go func() {
		defer close(done)
		second, err2 = b.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "r", Timeout: time.Minute})
	}()
	wg.Wait()
	e.drain(t) // the grant's checkout event is archived while b is paused
	<-done
	t.Logf("first: %s fence %d timeout %v expires %v, %v", first.TaskID, first.Fence, first.Timeout, first.ExpiresAt, err1)
	t.Logf("second: %s fence %d timeout %v expires %v, %v", second.TaskID, second.Fence, second.Timeout, second.ExpiresAt, err2)
	if err1 != nil || err2 != nil || second.TaskID != first.TaskID || second.Fence != first.Fence ||
		second.Timeout != first.Timeout || !second.ExpiresAt.Equal(first.ExpiresAt) {
		t.Fatalf("the run's two attempts answered different leases: first %s fence %d timeout %v expires %v; second %s fence %d timeout %v expires %v",
			first.TaskID, first.Fence, first.Timeout, first.ExpiresAt, second.TaskID, second.Fence, second.Timeout, second.ExpiresAt)
	}
}
