package lease_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A lone claimer taking task after task while the claim index lags makes
// no write for a task it granted itself moments ago, which the index still
// shows as it was before that grant: each claim is its one look (a Query
// per claim shard) and one write, 5 requests, and takes the next best
// task. Before, the tenth claim in a row wrote for the nine tasks it had
// just taken, each refused, before the tenth.
func TestBackToBackClaimsUnderIndexLagWriteOnlyForTheirTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	var batch []lease.CreateTaskParams
	for i := range 12 {
		batch = append(batch, lease.CreateTaskParams{TaskID: fmt.Sprintf("row-%02d", i), Queue: "row"})
	}
	must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	e.caughtUp(t) // the index shows the tasks; from now on it lags
	e.lag(t, schema.TasksTable, 200*time.Millisecond)
	const budget = schema.ClaimShards + 1 // one look and the grant
	e.count.Take()
	for i := range 10 {
		co := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "lone", Queues: []string{"row"}, Timeout: time.Hour}))
		ops := e.count.Take()
		if want := fmt.Sprintf("row-%02d", i); co.TaskID != want {
			t.Fatalf("claim %d took %s, want %s, the best left", i, co.TaskID, want)
		}
		if ops.Total() > budget {
			t.Fatalf("claim %d: %v (%d requests), want at most %d: one look and the grant", i, ops, ops.Total(), budget)
		}
	}
}

// A task this process granted and whose lease has ended since (released,
// here) is claimed again at its priority, whatever the lagging index shows
// of it: its entry from before the grant, or from after the release.
func TestATaskGrantedThenReleasedIsClaimedAgainAtItsPriority(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "high", Queue: "again", Priority: new(9)})
	for i := range 3 {
		e.create(t, lease.CreateTaskParams{TaskID: fmt.Sprintf("low-%d", i), Queue: "again"})
	}
	e.caughtUp(t)
	e.lag(t, schema.TasksTable, 200*time.Millisecond)
	claim := func() lease.Checkout {
		t.Helper()
		return must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "a", Queues: []string{"again"}, Timeout: time.Hour}))
	}
	release := func(co lease.Checkout) {
		t.Helper()
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: co.TaskID, AgentID: "a", RunID: co.RunID, Fence: co.Fence}))
	}
	first := claim()
	if first.TaskID != "high" {
		t.Fatalf("first claim took %s, want high", first.TaskID)
	}
	release(first) // the index still shows high as before its grant
	if again := claim(); again.TaskID != "high" || again.Fence != first.Fence+1 {
		t.Fatalf("a claim right after high's release took %s/%d, want high/%d", again.TaskID, again.Fence, first.Fence+1)
	} else {
		release(again)
	}
	e.caughtUp(t) // the index shows high as its release left it
	if last := claim(); last.TaskID != "high" {
		t.Fatalf("a claim once the index showed high released took %s, want high", last.TaskID)
	}
}

// A task this process granted and another process freed since (its
// holder's release through another Lambda container: in AWS, claims and
// releases run in different functions) is claimed by this process's next
// claim when it is the queue's only task, at once, waiting or not: the
// entry the index shows may be the freeing's, so the claim writes for it
// rather than answer 404 no_task_available, or wait, while it may be
// free. Before, the claim passed it by for a second as the index's entry
// from before the grant.
func TestATaskGrantedHereAndReleasedElsewhereIsClaimedAgainAtOnce(t *testing.T) {
	t.Parallel()
	for _, lag := range []time.Duration{0, 200 * time.Millisecond} {
		for _, wait := range []time.Duration{0, 500 * time.Millisecond} {
			e := newEnv(t)
			c := ctx(t)
			e.create(t, lease.CreateTaskParams{TaskID: "only", Queue: "only"})
			e.caughtUp(t)
			if lag > 0 {
				e.lag(t, schema.TasksTable, lag)
			}
			elsewhere := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
			first := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "a", Queues: []string{"only"}, Timeout: time.Hour}))
			must[lease.Released](t)(elsewhere.Release(c, lease.ReleaseParams{TaskID: first.TaskID, AgentID: "a", RunID: first.RunID, Fence: first.Fence}))
			e.caughtUp(t) // the index shows the task released
			again, err := e.store.Claim(c, lease.ClaimParams{AgentID: "b", Queues: []string{"only"}, Timeout: time.Hour, Wait: wait})
			if err != nil {
				t.Fatalf("lag %v, wait %v: a claim right after the release elsewhere answered %v, want the lease on only", lag, wait, err)
			}
			if again.TaskID != "only" || again.Fence != first.Fence+1 {
				t.Fatalf("lag %v, wait %v: a claim right after the release elsewhere took %s/%d, want only/%d", lag, wait, again.TaskID, again.Fence, first.Fence+1)
			}
		}
	}
}

// A release made through this process whose write applied, whose answer
// was lost and which the SDK sent again (the second sending refused on
// the first's own ending) frees the task here as any release does: the
// process's next claim takes it at its priority, not a lower-priority
// task while the second after its grant runs. Before, only a release
// whose first sending was answered ended the pass-by of the task's
// entry (claimSpread.freed).
func TestATaskReleasedHereWhoseAnswerWasLostIsClaimedAgainAtItsPriority(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "high", Queue: "lost", Priority: new(9)})
	e.create(t, lease.CreateTaskParams{TaskID: "low", Queue: "lost"})
	e.caughtUp(t)
	db := &updateTwiceDB{DB: e.db, name: "end_by", race: func() {}}
	db.sent.Store(true) // armed for the release only
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	claim := func() lease.Checkout {
		t.Helper()
		return must[lease.Checkout](t)(s.Claim(c, lease.ClaimParams{AgentID: "a", Queues: []string{"lost"}, Timeout: time.Hour}))
	}
	first := claim()
	if first.TaskID != "high" {
		t.Fatalf("first claim took %s, want high", first.TaskID)
	}
	db.sent.Store(false)
	must[lease.Released](t)(s.Release(c, lease.ReleaseParams{TaskID: first.TaskID, AgentID: "a", RunID: first.RunID, Fence: first.Fence}))
	if !db.sent.Load() {
		t.Fatal("the release was not sent twice")
	}
	e.caughtUp(t) // the index shows high released
	if again := claim(); again.TaskID != "high" || again.Fence != first.Fence+1 {
		t.Fatalf("a claim right after high's release took %s/%d, want high/%d, the most urgent task free", again.TaskID, again.Fence, first.Fence+1)
	}
}

// A release made through this process whose write applied, whose answer
// was lost and which the SDK sent again wakes the process's claims
// waiting on the task's queue, as any release does: before, only an
// ending write answered as applied woke them, and they took the task at
// their next poll.
func TestAReleaseHereWhoseAnswerWasLostWakesTheWaitingClaims(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"release", "failed release", "force release"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.create(t, lease.CreateTaskParams{TaskID: "t", Queue: "q", RetryDelay: new(time.Duration(0))})
			e.caughtUp(t)
			db := &updateTwiceDB{DB: e.db, name: "end_by", race: func() {}}
			db.sent.Store(true) // armed for the release only
			s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
			lease.PollClaims(s, time.Hour) // only a wake makes a waiting claim look again
			first := must[lease.Checkout](t)(s.Claim(c, lease.ClaimParams{AgentID: "a", Queues: []string{"q"}, Timeout: time.Hour}))
			wc, stop := context.WithCancel(c)
			defer stop()
			got := make(chan lease.Checkout, 1)
			go func() {
				co, _ := s.Claim(wc, lease.ClaimParams{AgentID: "b", Queues: []string{"q"}, Wait: 20 * time.Second, Timeout: time.Hour})
				got <- co
			}()
			asleep(t, s, 1)
			wakes := lease.ClaimWakes(s)
			db.sent.Store(false)
			p := lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: first.RunID, Fence: first.Fence}
			switch how {
			case "failed release":
				p.Outcome = lease.OutcomeFailed
			case "force release":
				p = lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true}
			}
			must[lease.Released](t)(s.Release(c, p))
			if !db.sent.Load() {
				t.Fatal("the release was not sent twice")
			}
			if n := lease.ClaimWakes(s) - wakes; n != 1 {
				t.Fatalf("%d wakes sent, want 1: to the claim waiting on the released task's queue", n)
			}
			if co := <-got; co.TaskID != "t" || co.Fence != first.Fence+1 {
				t.Fatalf("the waiting claim took %s/%d, want t/%d", co.TaskID, co.Fence, first.Fence+1)
			}
		})
	}
}
