package lease_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A claim spread wide over the queue's head reads one claim shard, chosen
// at random: one Query and the grant. It reads the other shards only when
// that one has nothing, so a task in any shard is still found, and a queue
// is empty only when every shard is.
func TestSpreadClaimReadsOneShard(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	for b := range 8 {
		var batch []lease.CreateTaskParams
		for i := range lease.MaxBatch {
			batch = append(batch, lease.CreateTaskParams{TaskID: fmt.Sprintf("deep-%d-%02d", b, i), Queue: "deep"})
		}
		must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	}
	for i := range 8 {
		e.caughtUp(t) // the index shows the tasks, and no task claimed before
		lease.SpreadClaims(e.store, 1000)
		e.count.Take()
		must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: fmt.Sprintf("a%d", i), Queues: []string{"deep"}, Timeout: time.Minute}))
		if ops := e.count.Take(); ops["Query"] != 1 || ops.Total() != 2 {
			t.Fatalf("claim %d from a queue of 200: %v, want one Query and the grant", i, ops)
		}
	}

	// One task at a time in a queue of its own: found whatever its shard.
	fallbacks := 0
	for i := range 12 {
		id := fmt.Sprintf("lone-%02d", i)
		must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: id, Queue: "lone"}))
		e.caughtUp(t)
		lease.SpreadClaims(e.store, 1000)
		e.count.Take()
		got := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "solo", Queues: []string{"lone"}, Timeout: time.Minute}))
		ops := e.count.Take()
		if got.TaskID != id {
			t.Fatalf("claim %d got %s, want %s", i, got.TaskID, id)
		}
		if q := ops["Query"]; q != 1 && q != schema.ClaimShards {
			t.Fatalf("claim of %s: %v, want one Query, or one per shard when the first was empty", id, ops)
		} else if q > 1 {
			fallbacks++
		}
		must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: id, AgentID: "solo", RunID: got.RunID, Fence: got.Fence}))
	}
	if fallbacks == 0 {
		t.Fatalf("12 lone tasks were each in the shard read first; want the other shards read for some")
	}
	e.caughtUp(t)
	lease.SpreadClaims(e.store, 1000)
	e.count.Take()
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "solo", Queues: []string{"lone"}}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("claim of an empty queue: %v, want ErrNoTaskAvailable", err)
	}
	if ops := e.count.Take(); ops["Query"] != schema.ClaimShards {
		t.Fatalf("claim of an empty queue: %v, want every shard read", ops)
	}
}

// What a burst of lost races taught the process's claims fades with time:
// once contention has passed, a lone claimer takes the best task again at
// once, in any queue, rather than after dozens of claims picked at random.
func TestALoneClaimerTakesTheBestOnceContentionHasPassed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	var batch []lease.CreateTaskParams
	for i := range 10 {
		batch = append(batch, lease.CreateTaskParams{TaskID: fmt.Sprintf("p%d", i), Queue: "after-burst", Priority: new(i)})
	}
	must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	lease.SpreadClaims(e.store, 1000) // as a burst of claims elsewhere leaves it
	e.clock.Advance(30 * time.Second)
	for want := 9; want >= 5; want-- {
		e.caughtUp(t) // the claim finds the tasks, and not those taken before, through an index
		co := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "lone", Queues: []string{"after-burst"}, Timeout: time.Hour}))
		if co.Priority != want {
			t.Fatalf("claim %d after the burst passed: %s (priority %d), want priority %d", 10-want, co.TaskID, co.Priority, want)
		}
	}
}

// Claims of one process never race each other: a burst of them teaches
// the process nothing of claimers elsewhere, so a lone claim right after
// it takes the best task, in any queue (before, the burst's window made
// the next claims of the next 15 s pick at random among the head).
func TestALoneClaimRightAfterABurstOfThisProcessTakesTheBest(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	var batch []lease.CreateTaskParams
	for i := range 20 {
		batch = append(batch, lease.CreateTaskParams{TaskID: fmt.Sprintf("hot-%02d", i), Queue: "hot"})
	}
	must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	e.caughtUp(t) // the burst finds the tasks through an index
	race(30, func(i int) {
		_, err := e.store.Claim(c, lease.ClaimParams{AgentID: fmt.Sprintf("b%02d", i), Queues: []string{"hot"}, Timeout: time.Hour})
		if err != nil && !errors.Is(err, lease.ErrNoTaskAvailable) {
			t.Errorf("claim in the burst: %v", err)
		}
	})
	batch = batch[:0]
	for i := range 10 {
		batch = append(batch, lease.CreateTaskParams{TaskID: fmt.Sprintf("p%d", i), Queue: "after", Priority: new(i)})
	}
	must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	for want := 9; want >= 5; want-- {
		e.caughtUp(t) // the claim finds the tasks, and not those taken before, through an index
		co := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "lone", Queues: []string{"after"}, Timeout: time.Hour}))
		if co.Priority != want {
			t.Fatalf("claim %d right after the burst: %s (priority %d), want priority %d", 10-want, co.TaskID, co.Priority, want)
		}
	}
}

// Concurrent claims of one process take the best tasks between them: 20
// claims at once over 5 tasks of priority 9 and 30 of priority 0 leave no
// task of priority 9 unclaimed (before, each picked at random among the
// best 60, and two of the five were left while fifteen of priority 0
// went).
func TestConcurrentClaimsOfOneProcessTakeTheBestTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	var batch []lease.CreateTaskParams
	for i := range 35 {
		p := 0
		if i%7 == 3 {
			p = 9
		}
		batch = append(batch, lease.CreateTaskParams{TaskID: fmt.Sprintf("mix-%02d", i), Queue: "mix", Priority: new(p)})
		if len(batch) == lease.MaxBatch || i == 34 {
			must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
			batch = batch[:0]
		}
	}
	for round := range 3 {
		e.caughtUp(t) // the claims find the tasks, created or given back, through an index
		got := make([]lease.Checkout, 20)
		race(20, func(i int) {
			co, err := e.store.Claim(c, lease.ClaimParams{AgentID: fmt.Sprintf("r%d-%02d", round, i), Queues: []string{"mix"}, Timeout: time.Hour})
			if err != nil {
				t.Errorf("claim: %v", err)
			}
			got[i] = co
		})
		high := 0
		for _, co := range got {
			if co.Priority == 9 {
				high++
			}
		}
		if high != 5 {
			t.Fatalf("round %d: 20 claims at once took %d of the 5 tasks of priority 9", round, high)
		}
		// The same again: every lease given back.
		for _, co := range got {
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: co.TaskID, AgentID: co.AgentID, RunID: co.RunID, Fence: co.Fence}))
		}
	}
}
