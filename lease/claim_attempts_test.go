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
