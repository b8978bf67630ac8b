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
		co := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "lone", Queues: []string{"after-burst"}, Timeout: time.Hour}))
		if co.Priority != want {
			t.Fatalf("claim %d after the burst passed: %s (priority %d), want priority %d", 10-want, co.TaskID, co.Priority, want)
		}
	}
}
