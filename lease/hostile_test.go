package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// Each test in this file reproduces something a hostile or unlucky client
// could do to a lease, and holds the engine to the answer the API gives
// (httpapi/openapi/openapi.yaml).

// A lease whose holder died by heartbeat has ended, whether or not a sweep
// has run: its holder can no longer complete, release or renew it, even
// after it comes back to life, and an admin's force release finds nothing
// to release.
func TestDeadHolderCannotFinishItsEndedLease(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"complete", "release", "renew", "force"} {
		t.Run("the dead holder's "+op+" is not_checked_out", func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t1")
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Second))
			co := e.checkout(t, "t1", "a", time.Hour)
			e.clock.Advance(2 * time.Second)

			finish := func() error {
				var err error
				switch op {
				case "complete":
					_, err = e.store.Complete(c, lease.CompleteParams{TaskID: "t1", AgentID: "a", Fence: co.Fence})
				case "release":
					_, err = e.store.Release(c, lease.ReleaseParams{TaskID: "t1", AgentID: "a", Fence: co.Fence})
				case "renew":
					_, err = e.store.Renew(c, lease.RenewParams{TaskID: "t1", AgentID: "a", Fence: co.Fence})
				case "force":
					_, err = e.store.Release(c, lease.ReleaseParams{TaskID: "t1", AgentID: "admin", Force: true})
				}
				return err
			}
			if err := finish(); !errors.Is(err, lease.ErrNotCheckedOut) {
				t.Fatalf("%s by a dead holder: %v, want not_checked_out", op, err)
			}
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Minute))
			if err := finish(); !errors.Is(err, lease.ErrNotCheckedOut) {
				t.Fatalf("%s after the holder came back: %v, want not_checked_out", op, err)
			}
			task := must[lease.Task](t)(e.store.GetTask(c, "t1"))
			if task.Status != lease.StatusTodo || task.Checkout != nil || task.CompletedAt != nil {
				t.Fatalf("task after the refused %s = %+v, want todo and free", op, task)
			}
		})
	}
}

// A holder that died and came back before any sweep ran still had its
// lease ended by death: the sweep records agent_death and tells the
// watchers, rather than leaving the task blocked until the lease times out.
func TestSweepRecordsADeathTheHolderCameBackFrom(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Second))
	e.checkout(t, "t1", "a", time.Hour)
	if err := e.store.Watch(c, "t1", "w"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(2 * time.Second)
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Minute)) // back, before any sweep

	e.caughtUp(t) // the sweep finds the death through an index
	res := must[lease.SweepResult](t)(e.store.Sweep(c))
	if res.AgentDeaths != 1 {
		t.Fatalf("sweep = %+v, want one death", res)
	}
	if msgs := e.inbox(t, "w"); len(msgs) != 1 || msgs[0].TaskID != "t1" {
		t.Fatalf("w's inbox %+v, want one message for t1", msgs)
	}
	evs := e.events(t, "t1")
	if got := kinds(evs); len(got) != 2 || got[1] != lease.EventAgentDeath {
		t.Fatalf("events = %v, want checkout, agent_death", got)
	}
	if n := e.noticeCount(t, lease.NoticeTaskAvailable, "t1"); n != 1 {
		t.Fatalf("%d TaskAvailable notices, want 1", n)
	}
	// Idempotent: a second sweep finds nothing more to do.
	e.caughtUp(t)
	if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res != (lease.SweepResult{}) {
		t.Fatalf("second sweep = %+v, want nothing", res)
	}
	// The agent is alive: a lease it takes after its return is live and not
	// swept (one taken in the very millisecond of the return is not; see
	// lease/doc.go).
	e.clock.Advance(time.Millisecond)
	co := e.checkout(t, "t1", "a", time.Hour)
	e.caughtUp(t) // the sweep would find the fresh lease through an index
	if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res != (lease.SweepResult{}) {
		t.Fatalf("sweep after a fresh lease = %+v, want nothing", res)
	}
	if got := must[*lease.Checkout](t)(e.store.LockStatus(c, "t1")); got == nil || got.Fence != co.Fence {
		t.Fatalf("lock status = %+v, want the fresh lease", got)
	}
}

// An agent that is dead and has already been swept can still take a lease
// (it is dead by heartbeat but its key works). That lease is ended at once
// for everyone, and the next sweep records it.
func TestSweepEndsALeaseTakenWhileDead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Second))
	e.clock.Advance(2 * time.Second)
	e.caughtUp(t)                                // the sweep finds the death through an index
	must[lease.SweepResult](t)(e.store.Sweep(c)) // sees a dead agent with nothing
	e.checkout(t, "t1", "a", time.Hour)          // taken while dead
	e.clock.Advance(time.Millisecond)

	e.caughtUp(t) // the sweep finds the lease through an index
	res := must[lease.SweepResult](t)(e.store.Sweep(c))
	if res.AgentDeaths != 1 {
		t.Fatalf("sweep = %+v, want the lease taken while dead ended", res)
	}
	e.caughtUp(t) // the listing reads the claim index
	page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo}))
	if len(page.Tasks) != 1 || page.Tasks[0].TaskID != "t1" {
		t.Fatalf("todo listing = %+v, want t1", page.Tasks)
	}
}

// Removing an agent ends its leases for everyone at once, including one
// granted after the removal (in AWS the authorizer may still let the key in
// for a while), and an id registered again starts clean: no leases, no
// inbox, no watches of the agent that was removed.
func TestRemovedAgentBlocksNobodyAndItsIDStartsClean(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	for _, id := range []string{"t1", "t2", "t3"} {
		e.task(t, id)
	}
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "gone", Name: "gone"}))
	e.checkout(t, "t1", "gone", time.Hour)
	e.checkout(t, "t3", "b", time.Hour)
	if err := e.store.Watch(c, "t3", "gone"); err != nil {
		t.Fatal(err)
	}
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t3", AgentID: "b"})) // a message for "gone"
	e.checkout(t, "t3", "b", time.Hour)
	if err := e.store.Watch(c, "t3", "gone"); err != nil { // a watch of the old "gone"
		t.Fatal(err)
	}
	if err := e.store.RemoveAgent(c, "gone"); err != nil {
		t.Fatal(err)
	}
	// A lease granted after the removal answered, as a cached key would allow.
	e.clock.Advance(time.Millisecond)
	late := e.checkout(t, "t2", "gone", time.Hour)
	for _, id := range []string{"t1", "t2"} {
		if got := must[*lease.Checkout](t)(e.store.LockStatus(c, id)); got != nil {
			t.Fatalf("%s still held by the removed agent: %+v", id, got)
		}
		if co := e.checkout(t, id, "b", time.Hour); co.AgentID != "b" {
			t.Fatalf("checkout of %s after removal = %+v", id, co)
		}
	}
	_ = late

	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "gone", Name: "new"}))
	if held := must[[]lease.Checkout](t)(e.store.ListCheckouts(c, "gone")); len(held) != 0 {
		t.Fatalf("the new agent inherited leases: %+v", held)
	}
	if msgs := e.inbox(t, "gone"); len(msgs) != 0 {
		t.Fatalf("the new agent inherited messages: %+v", msgs)
	}
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t3", AgentID: "b"}))
	if msgs := e.inbox(t, "gone"); len(msgs) != 0 {
		t.Fatalf("the new agent was told about the old agent's watch: %+v", msgs)
	}
	// The new agent's own leases are live.
	e.clock.Advance(time.Millisecond)
	co := e.checkout(t, "t3", "gone", time.Hour)
	if got := must[*lease.Checkout](t)(e.store.LockStatus(c, "t3")); got == nil || got.Fence != co.Fence {
		t.Fatalf("the new agent's lease = %+v, want live", got)
	}
	if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res.AgentDeaths != 0 {
		t.Fatalf("sweep ended %d leases of the new agent", res.AgentDeaths)
	}
}

// Watchers are bounded: one agent cannot grow a task's item past
// DynamoDB's 400 KB limit by watching it under many long ids, and the task
// keeps working.
func TestWatchersAreBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	e.checkout(t, "t1", "holder", time.Hour)
	long := strings.Repeat("w", 120)
	var refused error
	for i := range lease.MaxWatchers + 5 {
		if err := e.store.Watch(c, "t1", fmt.Sprintf("%s%05d", long, i)); err != nil {
			refused = err
			if i < lease.MaxWatchers {
				t.Fatalf("watch %d refused below the bound: %v", i, err)
			}
		}
	}
	if !errors.Is(refused, lease.ErrTooManyWatchers) {
		t.Fatalf("watch past the bound: %v, want ErrTooManyWatchers", refused)
	}
	// Watching again is not a new watcher.
	if err := e.store.Watch(c, "t1", fmt.Sprintf("%s%05d", long, 0)); err != nil {
		t.Fatalf("a watcher watching again: %v", err)
	}
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t1", AgentID: "holder"}))
	e.checkout(t, "t1", "next", time.Hour)
}

// Reopening a done task by checking it out clears its completion.
func TestReopenedTaskForgetsItsCompletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	e.checkout(t, "t1", "a", time.Hour)
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "t1", AgentID: "a"}))
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "b", ExpectedStatuses: []lease.Status{lease.StatusDone}}))
	task := must[lease.Task](t)(e.store.GetTask(c, "t1"))
	if _, ok := task.Duration(); task.Status != lease.StatusInProgress || task.CompletedAt != nil || ok {
		t.Fatalf("reopened task = %+v, want in_progress with no completion", task)
	}
}

// slowDB moves the test clock on every write, as a loaded server's
// requests take time.
type slowDB struct {
	lease.DB
	advance func()
}

func (d slowDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := d.DB.UpdateItem(ctx, in, opt...)
	d.advance()
	return out, err
}

// A grant's locked_at and expires_at are read from the clock at the write
// that decided it, not when the operation started: a checkout that first
// meets a dead holder's lease and then takes it over is locked at the
// takeover.
func TestGrantTimesBelongToTheDecidingWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Second))
	e.checkout(t, "t1", "a", time.Hour)
	e.clock.Advance(2 * time.Second)
	var mu sync.Mutex
	slow := lease.New(lease.Config{DB: slowDB{DB: e.db, advance: func() {
		mu.Lock()
		defer mu.Unlock()
		e.clock.Advance(500 * time.Millisecond)
	}}, Tables: e.names, Now: e.clock.Now})
	start := e.clock.Now()
	co := must[lease.Checkout](t)(slow.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "b", Timeout: time.Second}))
	if !co.LockedAt.After(start) {
		t.Fatalf("locked at %v, the operation's start; want the takeover's own time", co.LockedAt)
	}
	if got := co.ExpiresAt.Sub(co.LockedAt); got != time.Second {
		t.Fatalf("expires %v after locked_at, want 1s", got)
	}
}

// Claim takes the oldest available task: a todo task, or one whose lease
// expired or whose holder is dead once a sweep has ended that lease,
// whichever was created first.
func TestClaimTakesTheOldestAvailable(t *testing.T) {
	t.Parallel()
	t.Run("an expired lease before a newer todo task", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		c := ctx(t)
		e.task(t, "old")
		e.clock.Advance(time.Millisecond)
		e.task(t, "new")
		e.checkout(t, "old", "a", time.Second)
		e.clock.Advance(2 * time.Second)
		e.caughtUp(t) // the sweep finds the lease or the death through an index
		must[lease.SweepResult](t)(e.store.Sweep(c))
		e.caughtUp(t) // the claim finds the swept task through an index
		co := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "b"}))
		if co.TaskID != "old" {
			t.Fatalf("claimed %s, want old", co.TaskID)
		}
	})
	t.Run("a dead holder's task is available", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t)
		c := ctx(t)
		e.task(t, "held")
		must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Second))
		e.checkout(t, "held", "a", time.Hour)
		e.clock.Advance(2 * time.Second)
		e.caughtUp(t) // the sweep finds the lease or the death through an index
		must[lease.SweepResult](t)(e.store.Sweep(c))
		e.caughtUp(t) // the claim finds the swept task through an index
		co := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "b"}))
		if co.TaskID != "held" {
			t.Fatalf("claimed %s, want the dead holder's task", co.TaskID)
		}
		evs := e.events(t, "held")
		if got := kinds(evs); len(got) != 3 || got[1] != lease.EventAgentDeath {
			t.Fatalf("events = %v, want checkout, agent_death, checkout", got)
		}
	})
}

// claimTally is one claim's conditional task writes, in order: true for a
// write that won.
type claimTally struct{ writes []bool }

type tallyKey struct{}

// countingDB records each claim's conditional task writes in the claim's
// tally, carried by its context.
type countingDB struct{ lease.DB }

func (d countingDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := d.DB.UpdateItem(ctx, in, opt...)
	tally, _ := ctx.Value(tallyKey{}).(*claimTally)
	if tally != nil && in.ConditionExpression != nil && strings.HasSuffix(*in.TableName, schema.TasksTable) {
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) || err == nil {
			tally.writes = append(tally.writes, err == nil)
		}
	}
	return out, err
}

// Forty agents claiming from 150 tasks at once spread over the head of the
// queue: most claims win with their first write, and no task is claimed
// twice.
func TestConcurrentClaimersSpreadOverTheQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const tasks, claimers = 150, 40
	for i := range tasks {
		e.task(t, fmt.Sprintf("job-%03d", i))
		e.clock.Advance(time.Millisecond)
	}
	e.caughtUp(t) // the claims find the tasks through an index
	store := lease.New(lease.Config{DB: countingDB{DB: e.db}, Tables: e.names, Now: e.clock.Now})
	var mu sync.Mutex
	owner := map[string]string{}
	tallies := make([]claimTally, claimers)
	race(claimers, func(i int) {
		agent := fmt.Sprintf("agent-%02d", i)
		got, err := store.Claim(context.WithValue(c, tallyKey{}, &tallies[i]), lease.ClaimParams{AgentID: agent, Timeout: time.Hour})
		if err != nil {
			t.Errorf("claim by %s: %v", agent, err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if prev, dup := owner[got.TaskID]; dup {
			t.Errorf("%s claimed by %s and %s", got.TaskID, prev, agent)
		}
		owner[got.TaskID] = agent
	})
	if len(owner) != claimers {
		t.Fatalf("%d claims granted, want %d", len(owner), claimers)
	}
	first, writes := 0, 0
	for _, tl := range tallies {
		writes += len(tl.writes)
		if len(tl.writes) > 0 && tl.writes[0] {
			first++
		}
	}
	t.Logf("%d of %d claims won with their first write; %d conditional writes in all", first, claimers, writes)
	if first*2 <= claimers {
		t.Fatalf("only %d of %d claims won with their first write", first, claimers)
	}
}

// completed_at and the duration are a completion's: a task cancelled
// (held or not) or failed has neither, and a completion sets both.
func TestOnlyACompletionSetsCompletedAt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "idle", "held", "done")
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "idle", AgentID: "x", Status: new(lease.StatusCancelled)}))
	e.checkout(t, "held", "x", time.Minute)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "held", AgentID: "x", Status: new(lease.StatusCancelled)}))
	one := 1
	e.create(t, lease.CreateTaskParams{TaskID: "failing", MaxAttempts: &one})
	co := e.checkout(t, "failing", "x", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "failing", AgentID: "x", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	for id, st := range map[string]lease.Status{"idle": lease.StatusCancelled, "held": lease.StatusCancelled, "failing": lease.StatusFailed} {
		task := e.get(t, id)
		if _, ok := task.Duration(); task.Status != st || task.CompletedAt != nil || ok {
			t.Errorf("%s: %s, completed_at %v; want %s with no completed_at or duration", id, task.Status, task.CompletedAt, st)
		}
	}
	e.complete(t, "done", "x")
	if task := e.get(t, "done"); task.CompletedAt == nil {
		t.Errorf("a completed task has no completed_at")
	}
}
