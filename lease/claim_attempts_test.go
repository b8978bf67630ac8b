package lease_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// keepGateDB holds the first write that keeps a named claim's grant in its
// receipt until open is closed (or a few seconds have passed), as a slow
// write would.
type keepGateDB struct {
	lease.DB
	open  chan struct{}
	keeps atomic.Int32
}

func (d *keepGateDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	for _, name := range in.ExpressionAttributeNames {
		if name == "granted" && d.keeps.Add(1) == 1 {
			select {
			case <-d.open:
			case <-time.After(5 * time.Second):
			}
			break
		}
	}
	return d.DB.UpdateItem(ctx, in, opt...)
}

// Attempts of one named claim sent at once over a queue holding one task
// answer the same lease: the attempt that finds no task while the other's
// grant is not kept in the receipt yet answers that grant, not 404
// no_task_available (before, it did, and the other attempt then answered
// 200 with the task).
func TestAttemptsOfOneClaimOverItsLastTaskAnswerTheSameLease(t *testing.T) {
	t.Parallel()
	for round := range 4 {
		e := newEnv(t)
		c := ctx(t)
		q := fmt.Sprintf("last-%d", round)
		e.create(t, lease.CreateTaskParams{TaskID: q + "-task", Queue: q})
		e.caughtUp(t) // the claims find the task through an index
		db := &keepGateDB{DB: e.db, open: make(chan struct{})}
		s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
		type answer struct {
			co  lease.Checkout
			err error
		}
		answers := make(chan answer, 2)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 2 {
			wg.Go(func() {
				<-start
				co, err := s.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute, Queues: []string{q}})
				answers <- answer{co, err}
			})
		}
		close(start)
		first := <-answers
		close(db.open) // the first answer is out: the grant may be kept now
		second := <-answers
		wg.Wait()
		if first.err != nil || second.err != nil {
			t.Fatalf("round %d: the attempts answered %v and %v, want both the lease on %s", round, first.err, second.err, q+"-task")
		}
		if first.co.TaskID != second.co.TaskID || first.co.Fence != second.co.Fence {
			t.Fatalf("round %d: the attempts answered %s/%d and %s/%d, want one lease", round, first.co.TaskID, first.co.Fence, second.co.TaskID, second.co.Fence)
		}
	}
}

// taskWriteGateDB holds the first write to table (a claim's grant, on the
// tasks table) until open is closed (or a few seconds have passed),
// closing reached when it gets there.
type taskWriteGateDB struct {
	lease.DB
	table         string
	reached, open chan struct{}
	writes        atomic.Int32
}

func (d *taskWriteGateDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if *in.TableName == d.table && d.writes.Add(1) == 1 {
		close(d.reached)
		select {
		case <-d.open:
		case <-time.After(5 * time.Second):
		}
	}
	return d.DB.UpdateItem(ctx, in, opt...)
}

// behindDB reads the claim index as it was before the test's tasks were
// written (an index read of another process, which lags): it shows none.
type behindDB struct{ lease.DB }

func (d behindDB) Query(ctx context.Context, in *dynamodb.QueryInput, opt ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if in.IndexName != nil && *in.IndexName == schema.TasksByClaim {
		return &dynamodb.QueryOutput{}, nil
	}
	return d.DB.Query(ctx, in, opt...)
}

// An attempt of a named claim that finds no task while another attempt of
// its run, in another process, has noted a task and not yet written for
// it, writes for that task too: both answer the lease of whichever write
// lands first. Without that write, the attempt would answer 404
// no_task_available and the other 200 with the task.
func TestAnAttemptThatFindsNoTaskWritesForTheTaskAnotherAttemptNoted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "noted", Queue: "noted"})
	e.caughtUp(t) // the first attempt finds the task through the index
	e.drain(t)    // its trail holds nothing pending
	gate := &taskWriteGateDB{DB: e.db, table: e.names.Table(schema.TasksTable), reached: make(chan struct{}), open: make(chan struct{})}
	first := lease.New(lease.Config{DB: gate, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	second := lease.New(lease.Config{DB: behindDB{e.db}, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	p := lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute, Queues: []string{"noted"}}
	type answer struct {
		co  lease.Checkout
		err error
	}
	firsts := make(chan answer, 1)
	go func() {
		co, err := first.Claim(c, p)
		firsts <- answer{co, err}
	}()
	select {
	case <-gate.reached: // the first attempt has noted the task and writes for it
	case a := <-firsts:
		t.Fatalf("the first attempt answered %+v, %v before its grant's write", a.co, a.err)
	}
	co, err := second.Claim(c, p)
	close(gate.open)
	a := <-firsts
	if err != nil || a.err != nil {
		t.Fatalf("the attempts answered %v and %v, want both the lease on noted", a.err, err)
	}
	if co.TaskID != "noted" || a.co.TaskID != co.TaskID || a.co.Fence != co.Fence {
		t.Fatalf("the attempts answered %s/%d and %s/%d, want one lease on noted", a.co.TaskID, a.co.Fence, co.TaskID, co.Fence)
	}
}
