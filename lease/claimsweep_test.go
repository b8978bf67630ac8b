package lease_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A claim whose grant write took longer than the whole lease timeout must
// not be answered with a lease that has already expired (DESIGN.md
// invariant 10: "A lease is never handed out already expired"). It used to
// be: the claim took its own expired grant for its answer. Now it takes
// that lease over, as any ended lease.
func TestASlowClaimIsNotAnsweredExpired(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	e.caughtUp(t) // the claim finds t through an index
	slow, db := delayed(e)
	const timeout = time.Second
	db.armAfter(func() { e.clock.Advance(timeout + 100*time.Millisecond) }) // the grant's write waited 1.1 s
	co, err := slow.Claim(c, lease.ClaimParams{AgentID: "a", Timeout: timeout})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	now := e.clock.Now()
	if !co.ExpiresAt.After(now) {
		t.Fatalf("claim answered a lease already expired: expires %v, now %v (fence %d)", co.ExpiresAt, now, co.Fence)
	}
}

// newShardEnv is newEnv's store with one claim shard, so that the head a
// claim reads of the queue is exactly one partition's.
func newShardEnv(t *testing.T) (*lease.Store, *testclock.Clock) {
	t.Helper()
	clock := testclock.New(epoch)
	s := testenv.NewStore(t, testenv.WithClock(clock.Now), testenv.WithShards(schema.ShardCounts{Claim: 1}))
	return s.Store, clock
}

// A not_before set by PATCH while the task is held, then the lease ends:
// once not_before has passed and a sweep has run, the task must rank by its
// priority again (README: "Once not_before has passed the task is
// claimable at once, and ranks by its priority and age again within one
// sweep interval"). The PATCH used to give it the delayed claim key,
// with no expiry-index entry to tell the sweep when to rank it ready
// again: it stayed ranked after every ready task for good, and a lone
// claimer got a priority-0 task instead.
func TestANotBeforePatchedWhileHeldRanksReadyOnceItPasses(t *testing.T) {
	t.Parallel()
	s, clock := newShardEnv(t)
	c := ctx(t)
	nine, zero := 9, 0
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "urgent", Priority: &nine}))
	must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "urgent", AgentID: "a", Timeout: time.Hour}))
	nb := clock.Now().Add(time.Minute)
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "urgent", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	must[lease.Released](t)(s.Release(c, lease.ReleaseParams{TaskID: "urgent", AgentID: "a"}))
	for i := range 12 {
		clock.Advance(time.Millisecond)
		must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: fmt.Sprintf("low-%02d", i), Priority: &zero}))
	}
	clock.Advance(2 * time.Minute) // well past not_before
	storeCaughtUp(t, s)            // the sweeps find the delay through an index
	for range 2 {
		must[lease.SweepResult](t)(s.Sweep(c))
	}
	storeCaughtUp(t, s) // the claim finds the tasks through an index
	got := must[lease.Checkout](t)(s.Claim(c, lease.ClaimParams{AgentID: "b"}))
	if got.TaskID != "urgent" {
		t.Fatalf("claim got %s (priority %d); the priority-9 task whose not_before passed 1 min ago, with sweeps since, ranks after every ready task", got.TaskID, got.Priority)
	}
}

// The same through the API's own retry delay: a failed release delays the
// task; once not_before has passed a claim takes it before any sweep has
// ranked it ready (which the README allows: "competes at its priority as
// soon as a claim sees it"); that lease is then released plainly. The
// task used to keep its delayed claim key for good, and every ready task
// of its shard was claimed before it, sweeps or not. A grant now ranks it
// ready again.
func TestARetryDelayClaimedBeforeTheSweepRanksReadyAgain(t *testing.T) {
	t.Parallel()
	s, clock := newShardEnv(t)
	c := ctx(t)
	nine, zero := 9, 0
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "urgent", Priority: &nine}))
	storeCaughtUp(t, s) // the claim finds urgent through an index
	first := must[lease.Checkout](t)(s.Claim(c, lease.ClaimParams{AgentID: "a", Timeout: time.Hour}))
	must[lease.Released](t)(s.Release(c, lease.ReleaseParams{TaskID: first.TaskID, AgentID: "a", Outcome: lease.OutcomeFailed}))
	clock.Advance(11 * time.Second) // past the 10 s retry delay; no sweep yet
	storeCaughtUp(t, s)             // the claim finds the delayed urgent through an index
	second := must[lease.Checkout](t)(s.Claim(c, lease.ClaimParams{AgentID: "a", Timeout: time.Hour}))
	if second.TaskID != "urgent" {
		t.Fatalf("second claim got %s", second.TaskID)
	}
	must[lease.Released](t)(s.Release(c, lease.ReleaseParams{TaskID: "urgent", AgentID: "a"}))
	for i := range 12 {
		clock.Advance(time.Millisecond)
		must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: fmt.Sprintf("low-%02d", i), Priority: &zero}))
	}
	clock.Advance(time.Minute)
	storeCaughtUp(t, s) // the sweeps would find a delay through an index
	for range 2 {
		must[lease.SweepResult](t)(s.Sweep(c))
	}
	storeCaughtUp(t, s) // the claim finds the tasks through an index
	got := must[lease.Checkout](t)(s.Claim(c, lease.ClaimParams{AgentID: "b"}))
	if got.TaskID != "urgent" {
		t.Fatalf("claim got %s (priority %d), not the ready priority-9 task released a minute ago", got.TaskID, got.Priority)
	}
}

// A failed release decides from the task as it read it whether this was
// the last attempt, and pinned its write to the attempts and failures it
// read, but not to that decision. A PATCH that raised max_attempts in
// between (always accepted: "a value that keeps or raises the limit is
// always accepted") was answered first, yet the release's write then
// failed the task on the old limit: attempt 1 of 5 ended the task as
// failed. The write now holds only while the decision does.
func TestAFailedReleaseAfterMaxAttemptsRaisedDoesNotFailEarly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	one := 1
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "t", MaxAttempts: &one}))
	co := e.checkout(t, "t", "a", time.Hour)
	slow, db := delayed(e)
	five := 5
	db.armBefore(func() {
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, MaxAttempts: &five}); err != nil {
			t.Errorf("raise max_attempts: %v", err)
		}
	})
	must[lease.Released](t)(slow.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	got := must[lease.Task](t)(e.store.GetTask(c, "t"))
	if got.Status == lease.StatusFailed {
		t.Fatalf("task failed after attempt %d of max_attempts %d (raised before the release's write landed)", got.Attempts, got.MaxAttempts)
	}
}

// An agent removed while the expiry index has yet to show one of its
// leases: the removal's own pass misses it and the sweep ends it later.
// README: an agent_death "keeps the earlier time the agent died"; a
// takeover stamps such a lease at the removal. The sweep used to stamp it
// at its own read, a minute after the removal, with held_seconds running
// to the sweep.
func TestARemovedAgentsLeaseSweptLaterIsStampedAtTheRemoval(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "gone", Name: "gone"}))
	e.lag(t, schema.TasksTable, 700*time.Millisecond)
	co := e.checkout(t, "t", "gone", time.Hour)
	if err := e.store.RemoveAgent(c, "gone"); err != nil {
		t.Fatal(err)
	}
	removedAt := e.clock.Now()
	e.clock.Advance(time.Minute)
	time.Sleep(1500 * time.Millisecond) // the index catches up
	res := must[lease.SweepResult](t)(e.store.Sweep(c))
	if res.AgentDeaths != 1 {
		t.Fatalf("sweep %+v: no reproduction (the removal's own pass ended the lease?)", res)
	}
	death := deathOf(t, e, "t", co.Fence)
	if !death.At.Equal(removedAt) || death.Held == nil || *death.Held != removedAt.Sub(co.LockedAt) {
		t.Fatalf("agent_death at %v, held %v, reason %q; want at the removal %v, held %v", death.At, *death.Held, death.Reason, removedAt, removedAt.Sub(co.LockedAt))
	}
}

// The same when the id has been registered again before the sweep (its
// tombstone keeps the pending death): the lease used to be stamped at the
// new registration, a minute after the removal.
func TestARemovedAgentsLeaseSweptAfterItsIdReturnsIsStampedAtTheRemoval(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "gone", Name: "gone"}))
	e.lag(t, schema.TasksTable, 700*time.Millisecond)
	co := e.checkout(t, "t", "gone", time.Hour)
	if err := e.store.RemoveAgent(c, "gone"); err != nil {
		t.Fatal(err)
	}
	removedAt := e.clock.Now()
	e.clock.Advance(time.Minute)
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "gone", Name: "gone again"}))
	e.clock.Advance(time.Second)
	time.Sleep(1500 * time.Millisecond) // the index catches up
	res := must[lease.SweepResult](t)(e.store.Sweep(c))
	if res.AgentDeaths != 1 {
		t.Fatalf("sweep %+v: no reproduction (the removal's own pass ended the lease?)", res)
	}
	death := deathOf(t, e, "t", co.Fence)
	if !death.At.Equal(removedAt) || death.Held == nil || *death.Held != removedAt.Sub(co.LockedAt) {
		t.Fatalf("agent_death at %v, held %v, reason %q; want at the removal %v, held %v", death.At, *death.Held, death.Reason, removedAt, removedAt.Sub(co.LockedAt))
	}
}
