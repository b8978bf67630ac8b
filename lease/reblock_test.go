package lease_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/stream"
)

// Reopening a done blocker blocks again the dependents that have not
// started: a todo dependent becomes blocked (claim skips it, a named
// checkout answers blocked naming the reopened blocker), one still blocked
// on others waits for the reopened one too, one in progress keeps its
// lease, and one done is left as it is. Completing the blocker again releases them, with one
// unblocked event each per unblocking.
func TestReopeningADoneBlockerBlocksItsDependentsAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a", "b")
	e.create(t, lease.CreateTaskParams{TaskID: "d", Queue: "reblock", BlockedBy: []string{"a"}})
	e.create(t, lease.CreateTaskParams{TaskID: "both", Queue: "reblock-both", BlockedBy: []string{"a", "b"}})
	e.create(t, lease.CreateTaskParams{TaskID: "running", Queue: "reblock-running", BlockedBy: []string{"a"}})
	e.create(t, lease.CreateTaskParams{TaskID: "finished", Queue: "reblock-finished", BlockedBy: []string{"a"}})
	e.complete(t, "a", "x")
	e.drain(t)
	for _, id := range []string{"d", "running", "finished"} {
		if st := e.get(t, id).Status; st != lease.StatusTodo {
			t.Fatalf("%s after a's completion: %s, want todo", id, st)
		}
	}
	run := e.checkout(t, "running", "r", time.Minute)
	e.complete(t, "finished", "f")
	versionBefore := e.get(t, "d").Version

	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", AgentID: "x", Status: new(lease.StatusTodo)}))
	e.drain(t)

	d := e.get(t, "d")
	if d.Status != lease.StatusBlocked || !slices.Equal(blockerIDs(d.BlockedBy), []string{"a=todo"}) {
		t.Fatalf("d after a was reopened: %s, blocked_by %v; want blocked by a", d.Status, blockerIDs(d.BlockedBy))
	}
	if d.Version <= versionBefore {
		t.Errorf("d's version %d after it was blocked again, was %d: a status change moves it", d.Version, versionBefore)
	}
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "y", Queues: []string{"reblock"}}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("claim of d's queue once a is reopened: %v, want no task available", err)
	}
	var be *lease.BlockedError
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "d", AgentID: "y"}); !errors.As(err, &be) || !slices.Equal(blockerIDs(be.BlockedBy), []string{"a=todo"}) {
		t.Fatalf("checkout of d once a is reopened: %v, want BlockedError naming a", err)
	}
	if st := e.get(t, "running").Status; st != lease.StatusInProgress {
		t.Errorf("running, leased when a was reopened: %s, want in_progress", st)
	}
	if _, err := e.store.Renew(c, lease.RenewParams{TaskID: "running", AgentID: "r", RunID: run.RunID, Timeout: time.Minute}); err != nil {
		t.Errorf("the lease of running after a was reopened: %v", err)
	}
	if st := e.get(t, "finished").Status; st != lease.StatusDone {
		t.Errorf("finished, done when a was reopened: %s, want done", st)
	}

	// b's completion leaves "both" waiting on a.
	e.complete(t, "b", "x")
	e.drain(t)
	if got := e.get(t, "both"); got.Status != lease.StatusBlocked {
		t.Fatalf("both after b completed while a is reopened: %s, want blocked", got.Status)
	}
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "y", Queues: []string{"reblock-both"}}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("claim of both's queue: %v, want no task available", err)
	}

	e.complete(t, "a", "x")
	e.drain(t)
	for _, id := range []string{"d", "both"} {
		if st := e.get(t, id).Status; st != lease.StatusTodo {
			t.Fatalf("%s after a completed again: %s, want todo", id, st)
		}
	}
	if n := count(e.events(t, "d"), lease.EventUnblocked); n != 2 {
		t.Errorf("d has %d unblocked events, want 2 (one per unblocking)", n)
	}
	if n := count(e.events(t, "both"), lease.EventUnblocked); n != 1 {
		t.Errorf("both has %d unblocked events, want 1", n)
	}
	e.caughtUp(t) // the claim finds d through an index
	co := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "y", Queues: []string{"reblock"}}))
	if co.TaskID != "d" {
		t.Fatalf("claim after a completed again: %s, want d", co.TaskID)
	}
}

// A checkout that reopens a done blocker (expecting done) blocks its
// todo dependents again, as a PATCH that reopens it does.
func TestCheckoutReopeningADoneBlockerBlocksItsDependentsAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"a"}})
	e.complete(t, "a", "x")
	e.drain(t)
	co := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "a", AgentID: "x", ExpectedStatuses: []lease.Status{lease.StatusDone}}))
	e.drain(t)
	if got := e.get(t, "d"); got.Status != lease.StatusBlocked || !slices.Equal(blockerIDs(got.BlockedBy), []string{"a=in_progress"}) {
		t.Fatalf("d once a is checked out again: %s, blocked_by %v; want blocked by a", got.Status, blockerIDs(got.BlockedBy))
	}
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "a", AgentID: "x", RunID: co.RunID}))
	e.drain(t)
	if st := e.get(t, "d").Status; st != lease.StatusTodo {
		t.Fatalf("d after a completed again: %s, want todo", st)
	}
}

// A reopen whose change reaches the stream after the blocker was completed
// again blocks nothing: the dependents never wait on a done blocker.
func TestAReopenSeenAfterTheBlockerIsDoneAgainBlocksNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"a"}})
	e.complete(t, "a", "x")
	e.drain(t)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", AgentID: "x", Status: new(lease.StatusTodo)}))
	e.complete(t, "a", "x")
	e.drain(t)
	if st := e.get(t, "d").Status; st != lease.StatusTodo {
		t.Fatalf("d: %s, want todo", st)
	}
	if n := count(e.events(t, "d"), lease.EventUnblocked); n != 1 {
		t.Errorf("d has %d unblocked events, want 1: it never waited again", n)
	}
}

// A dependent in progress when its blocker is reopened keeps its lease;
// when that lease ends without a completion (a release, a timeout), the
// task goes back to waiting on the blocker, blocked, rather than to todo:
// claim skips it and a named checkout answers blocked. One whose blocker
// was completed again before its lease ended goes back to todo.
func TestADependentInProgressWhenItsBlockerIsReopenedIsBlockedWhenItsLeaseEnds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a")
	e.create(t, lease.CreateTaskParams{TaskID: "released", Queue: "rb-released", BlockedBy: []string{"a"}})
	e.create(t, lease.CreateTaskParams{TaskID: "expired", Queue: "rb-expired", BlockedBy: []string{"a"}})
	e.complete(t, "a", "x")
	e.drain(t)
	rel := e.checkout(t, "released", "r", time.Hour)
	e.checkout(t, "expired", "s", time.Minute)

	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", AgentID: "x", Status: new(lease.StatusTodo)}))
	e.drain(t)
	if st := e.get(t, "released").Status; st != lease.StatusInProgress {
		t.Fatalf("released, leased when a was reopened: %s, want in_progress", st)
	}

	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "released", AgentID: "r", RunID: rel.RunID}))
	e.clock.Advance(2 * time.Minute)
	e.caughtUp(t) // the sweep finds the expired lease through an index
	must[lease.SweepResult](t)(e.store.Sweep(c))
	e.drain(t)
	for _, id := range []string{"released", "expired"} {
		d := e.get(t, id)
		if d.Status != lease.StatusBlocked || !slices.Equal(blockerIDs(d.BlockedBy), []string{"a=todo"}) {
			t.Fatalf("%s once its lease ended with a reopened: %s, blocked_by %v; want blocked by a", id, d.Status, blockerIDs(d.BlockedBy))
		}
		if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "y", Queues: []string{"rb-" + id}}); !errors.Is(err, lease.ErrNoTaskAvailable) {
			t.Fatalf("claim of %s's queue: %v, want no task available", id, err)
		}
		var be *lease.BlockedError
		if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: id, AgentID: "y"}); !errors.As(err, &be) {
			t.Fatalf("checkout of %s: %v, want BlockedError", id, err)
		}
	}

	// Completed again: both are released, once each.
	e.complete(t, "a", "x")
	e.drain(t)
	for _, id := range []string{"released", "expired"} {
		if st := e.get(t, id).Status; st != lease.StatusTodo {
			t.Fatalf("%s after a completed again: %s, want todo", id, st)
		}
	}

	// Reopened while held, completed again while still held: the lease's
	// end leaves the task todo.
	again := e.checkout(t, "released", "r", time.Hour)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", AgentID: "x", Status: new(lease.StatusTodo)}))
	e.drain(t)
	e.complete(t, "a", "x")
	e.drain(t)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "released", AgentID: "r", RunID: again.RunID}))
	e.drain(t)
	if st := e.get(t, "released").Status; st != lease.StatusTodo {
		t.Fatalf("released after a was reopened and completed again while it was held: %s, want todo", st)
	}
	e.caughtUp(t) // the claim finds released through an index
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "y", Queues: []string{"rb-released"}}); err != nil {
		t.Fatalf("claim of released once free again: %v", err)
	}
}

// hookedDB runs hook once, before the first UpdateItem of key that only
// ADDs (the stream's mark of a dependent in progress, lease/deps.go).
type hookedDB struct {
	*dynamodb.Client
	key  string
	once sync.Once
	hook func()
}

func (d *hookedDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if k, ok := in.Key["task_id"].(*types.AttributeValueMemberS); ok && k.Value == d.key &&
		in.UpdateExpression != nil && strings.HasPrefix(*in.UpdateExpression, "ADD ") && !strings.Contains(*in.UpdateExpression, "SET ") {
		d.once.Do(d.hook)
	}
	return d.Client.UpdateItem(ctx, in, optFns...)
}

// A dependent's lease that ends while the stream reblocks it, between the
// write that finds it in progress and the write that marks it, leaves it
// todo: the stream looks again and blocks it.
func TestADependentReleasedWhileItIsReblockedIsBlocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a")
	e.create(t, lease.CreateTaskParams{TaskID: "d", Queue: "reblock-race", BlockedBy: []string{"a"}})
	e.complete(t, "a", "x")
	e.drain(t)
	co := e.checkout(t, "d", "r", time.Minute)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", AgentID: "x", Status: new(lease.StatusTodo)}))

	released := false
	db := &hookedDB{Client: e.db, key: "d", hook: func() {
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "d", AgentID: "r", RunID: co.RunID}))
		released = true
	}}
	store := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	drainer := *e.poller
	drainer.Handle = stream.Handler(store)
	for range 2 { // the reopen, then the release's own change
		if _, err := drainer.Poll(c); err != nil {
			t.Fatalf("drain: %v", err)
		}
	}
	if !released {
		t.Fatal("the stream never marked d: the race did not happen")
	}
	if got := e.get(t, "d"); got.Status != lease.StatusBlocked {
		t.Fatalf("d released while the stream reblocked it: %s, want blocked (a is not done)", got.Status)
	}
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "y", Queues: []string{"reblock-race"}}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("claim of d's queue: %v, want no task available", err)
	}
}

// A dependent marked as waiting on its reopened blocker is blocked by the
// very write that ends its lease, not a moment later: no claim or checkout
// can take it in between, a checkout that finds its lease expired ends it
// and answers blocked rather than taking it over, and its watchers are
// told when it is unblocked, not when it is blocked.
func TestAMarkedDependentIsBlockedByTheWriteThatEndsItsLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a")
	e.create(t, lease.CreateTaskParams{TaskID: "released", Queue: "rb2-released", BlockedBy: []string{"a"}})
	e.create(t, lease.CreateTaskParams{TaskID: "expired", Queue: "rb2-expired", BlockedBy: []string{"a"}})
	e.complete(t, "a", "x")
	e.drain(t)
	rel := e.checkout(t, "released", "r", time.Hour)
	e.checkout(t, "expired", "s", time.Minute)
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "released", AgentID: "w", Watch: true}); !errors.Is(err, lease.ErrCheckedOut) {
		t.Fatalf("w's checkout with watch: %v, want checked out", err)
	}
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", AgentID: "x", Status: new(lease.StatusTodo)}))
	e.drain(t) // marks both

	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "released", AgentID: "r", RunID: rel.RunID}))
	e.clock.Advance(2 * time.Minute)
	var be *lease.BlockedError
	for _, id := range []string{"released", "expired"} {
		// Before the change stream runs.
		if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "y", Queues: []string{"rb2-" + id}}); !errors.Is(err, lease.ErrNoTaskAvailable) {
			t.Fatalf("claim of %s's queue: %v, want no task available", id, err)
		}
		if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: id, AgentID: "y"}); !errors.As(err, &be) || !slices.Equal(blockerIDs(be.BlockedBy), []string{"a=todo"}) {
			t.Fatalf("checkout of %s: %v, want BlockedError naming a", id, err)
		}
		if d := e.get(t, id); d.Status != lease.StatusBlocked {
			t.Fatalf("%s: %s, want blocked", id, d.Status)
		}
	}
	if k := kinds(e.events(t, "expired")); !slices.Equal(k, []lease.EventType{"unblocked", "checkout", "timeout"}) {
		t.Errorf("expired's trail %v: its lease ended by time, and nobody took it over", k)
	}
	if msgs := e.inbox(t, "w"); len(msgs) != 0 {
		t.Fatalf("w was told %+v while released is blocked", msgs)
	}
	e.complete(t, "a", "x")
	e.drain(t)
	for _, id := range []string{"released", "expired"} {
		if st := e.get(t, id).Status; st != lease.StatusTodo {
			t.Fatalf("%s after a completed again: %s, want todo", id, st)
		}
	}
	if msgs := e.inbox(t, "w"); len(msgs) != 1 || msgs[0].TaskID != "released" || msgs[0].Reason != string(lease.EventUnblocked) {
		t.Fatalf("w's inbox once released is unblocked: %+v, want one unblocked message", msgs)
	}
}

// afterFailDB runs hook once, right after the first UpdateItem of key that
// fails its condition, once armed.
type afterFailDB struct {
	*dynamodb.Client
	key   string
	armed atomic.Bool
	once  sync.Once
	hook  func()
}

func (d *afterFailDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := d.Client.UpdateItem(ctx, in, optFns...)
	var ccf *types.ConditionalCheckFailedException
	if k, ok := in.Key["task_id"].(*types.AttributeValueMemberS); ok && d.armed.Load() && k.Value == d.key && errors.As(err, &ccf) {
		d.once.Do(d.hook)
	}
	return out, err
}

// markedDependent leaves d (of queue q, blocked by a) checked out by r for
// an hour and marked as waiting on a, which was reopened.
func markedDependent(t *testing.T, e *env, q string) lease.Checkout {
	t.Helper()
	c := ctx(t)
	e.task(t, "a")
	e.create(t, lease.CreateTaskParams{TaskID: "d", Queue: q, BlockedBy: []string{"a"}})
	e.complete(t, "a", "x")
	e.drain(t)
	co := e.checkout(t, "d", "r", time.Hour)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", AgentID: "x", Status: new(lease.StatusTodo)}))
	e.drain(t)
	return co
}

// The ending of a marked lease is tried free first, then on the mark; the
// stream taking the mark off in between (its blocker completed again) made
// the release, or an admin's force release, answer not_checked_out and
// leave the lease held.
func TestAReleaseRacingTheUnmarkingOfItsTaskEndsItsLease(t *testing.T) {
	t.Parallel()
	for _, force := range []bool{false, true} {
		e := newEnv(t)
		c := ctx(t)
		co := markedDependent(t, e, "unmark-race")
		e.complete(t, "a", "x") // a done again; the stream has not run
		db := &afterFailDB{Client: e.db, key: "d", hook: func() { e.drain(t) }}
		store := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
		db.armed.Store(true)
		p := lease.ReleaseParams{TaskID: "d", AgentID: "r", RunID: co.RunID}
		if force {
			p = lease.ReleaseParams{TaskID: "d", AgentID: "admin", Force: true}
		}
		if _, err := store.Release(c, p); err != nil {
			t.Fatalf("release (force %v) of a live lease whose mark the stream took off meanwhile: %v", force, err)
		}
		if got := e.get(t, "d"); got.Status != lease.StatusTodo || got.Checkout != nil {
			t.Fatalf("d after its release (force %v): %s, checkout %+v; want todo with no lease (a is done)", force, got.Status, got.Checkout)
		}
	}
}

// A marked dependent that completes keeps its mark until the stream sees
// its blocker done again. A checkout that reopened it in that moment (its
// blockers all done) carried the mark into the new lease, whose release
// then blocked it with every blocker done.
func TestACheckoutReopeningADoneDependentDropsItsMark(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	co := markedDependent(t, e, "reopen-mark")
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "d", AgentID: "r", RunID: co.RunID}))
	e.complete(t, "a", "x") // a done again; the stream has not run
	co2, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "d", AgentID: "s", Timeout: time.Hour, ExpectedStatuses: []lease.Status{lease.StatusDone}})
	if err != nil {
		t.Fatalf("checkout of done d expecting done: %v", err)
	}
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "d", AgentID: "s", RunID: co2.RunID}))
	if got := e.get(t, "d"); got.Status != lease.StatusTodo {
		t.Fatalf("d released with every blocker done: %s, want todo", got.Status)
	}
	e.caughtUp(t) // the claim finds d through an index (the stream still has not run)
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "y", Queues: []string{"reopen-mark"}}); err != nil {
		t.Fatalf("claim of d's queue before the stream runs: %v, want d", err)
	}
}
