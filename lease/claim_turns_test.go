package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
)

// Attempts of one named claim sent at the same time, through processes of
// their own (a retry sent while the first is on its way, reaching another
// Lambda container), take turns: one writes for a task, and the others
// wait for its grant and answer it. No other task is granted and given
// back, which would count an attempt of it (with max_attempts 1, a task
// nobody worked on would fail at its first real failure) and hold it
// from other runs' claims meanwhile. So every answer of a run is the same
// lease, and each task has had as many attempts as leases were answered
// on it.
func TestConcurrentAttemptsOfOneClaimTakeTurns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	tasks := []string{"t0", "t1", "t2", "t3", "t4", "t5"}
	e.task(t, tasks...)
	e.caughtUp(t)
	const attempts = 4
	stores := make([]*lease.Store, attempts)
	for i := range stores {
		stores[i] = lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	}
	granted := map[string]int{}
	for round := range 6 {
		run := fmt.Sprintf("run-%d", round)
		answers := make([]lease.Checkout, attempts)
		errs := make([]error, attempts)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range attempts {
			wg.Go(func() {
				<-start
				answers[i], errs[i] = stores[i].Claim(c, lease.ClaimParams{AgentID: "a", RunID: run, Timeout: time.Minute})
			})
		}
		close(start)
		wg.Wait()
		for i := range attempts {
			if errs[i] != nil || answers[i].TaskID != answers[0].TaskID || answers[i].Fence != answers[0].Fence {
				t.Fatalf("%s, attempt %d: %s fence %d, %v; attempt 0: %s fence %d, %v", run, i,
					answers[i].TaskID, answers[i].Fence, errs[i], answers[0].TaskID, answers[0].Fence, errs[0])
			}
		}
		granted[answers[0].TaskID]++
		e.clock.Advance(time.Second)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: answers[0].TaskID, AgentID: "a", RunID: run}))
		e.clock.Advance(time.Second)
		e.caughtUp(t)
	}
	for _, id := range tasks {
		task := must[lease.Task](t)(e.store.GetTask(c, id))
		if task.Attempts != granted[id] {
			t.Errorf("%s: %d attempts, %d leases answered on it (grants given back: %d)", id, task.Attempts, granted[id], task.Attempts-granted[id])
		}
	}
}

// diesAfterNoteDB is the database of a process that dies just after its
// claim's note: every write after it fails (the grant, the turn's giving
// back), reads go through.
type diesAfterNoteDB struct{ lease.DB }

func (d diesAfterNoteDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	for _, name := range in.ExpressionAttributeNames {
		if name == "created" { // the note
			return d.DB.UpdateItem(ctx, in, opt...)
		}
	}
	return nil, errors.New("the process died")
}

// An attempt that noted a task and went no further (its process died
// between its note and its grant) holds the run's turn until it lapses:
// by the clock, turnLapse after the note, or, on a clock that does not
// move (another process's may run behind), once it has stood still that
// long. A retry of the run then looks for a task itself, and is granted
// one.
func TestARetryTakesTheTurnOfAnAttemptThatDied(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t0", "t1")
	e.caughtUp(t)
	died := lease.New(lease.Config{DB: diesAfterNoteDB{e.db}, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	for _, byClock := range []bool{false, true} {
		run := fmt.Sprintf("run-%v", byClock)
		if _, err := died.Claim(c, lease.ClaimParams{AgentID: "a", RunID: run, Timeout: time.Minute}); err == nil {
			t.Fatal("the attempt whose grant could not be written answered a lease")
		}
		e.drain(t) // the retry finds no event of the task left to archive
		if byClock {
			e.clock.Advance(4 * time.Second) // past turnLapse
		}
		began := time.Now()
		got := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "a", RunID: run, Timeout: time.Minute}))
		waited := time.Since(began)
		t.Logf("lapsed by the clock %v: the retry took %s after %v", byClock, got.TaskID, waited)
		if byClock && waited > time.Second || !byClock && waited < 2*time.Second {
			t.Errorf("the retry waited %v (the turn lapsed by the clock: %v)", waited, byClock)
		}
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: got.TaskID, AgentID: "a", RunID: run}))
		e.clock.Advance(time.Second)
		e.caughtUp(t)
	}
}
