package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A not_before PATCHed onto a held task keeps its ready claim key (fix
// 4f0a99e). After a plain release the task is todo, not ready for an
// hour, yet ranked among the ready tasks at priority 9: enough of them
// fill the head a claim reads and hide a ready task behind them.
func TestAHeldNotBeforeHidesNoReadyTask(t *testing.T) {
	t.Parallel()
	s, clock := newShardEnv(t)
	c := ctx(t)
	nine, zero := 9, 0
	nb := clock.Now().Add(time.Hour)
	for i := range 51 {
		id := fmt.Sprintf("later-%02d", i)
		must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: id, Priority: &nine}))
		co := must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: id, AgentID: "a", Timeout: time.Hour}))
		must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: id, AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
		must[lease.Released](t)(s.Release(c, lease.ReleaseParams{TaskID: id, AgentID: "a", RunID: co.RunID}))
	}
	clock.Advance(time.Millisecond)
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "ready", Priority: &zero}))
	storeCaughtUp(t, s) // the sweep and the claim find the tasks through indexes
	must[lease.SweepResult](t)(s.Sweep(c))
	got, err := s.Claim(c, lease.ClaimParams{AgentID: "b"})
	if err != nil || got.TaskID != "ready" {
		t.Fatalf("claim = %s, %v; want the one ready task, \"ready\" (51 tasks not ready for an hour rank ahead of it)", got.TaskID, err)
	}
}

// The same, seen by a listing: README says todo is listed in claim order,
// tasks waiting for their not_before after the ready ones.
func TestAHeldNotBeforeIsListedAfterTheReady(t *testing.T) {
	t.Parallel()
	s, clock := newShardEnv(t)
	c := ctx(t)
	nine, zero := 9, 0
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "later", Priority: &nine}))
	co := must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "later", AgentID: "a", Timeout: time.Hour}))
	nb := clock.Now().Add(time.Hour)
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "later", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	must[lease.Released](t)(s.Release(c, lease.ReleaseParams{TaskID: "later", AgentID: "a", RunID: co.RunID}))
	clock.Advance(time.Millisecond)
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "ready", Priority: &zero}))
	storeCaughtUp(t, s) // the listing finds the tasks through an index
	page := must[lease.TaskPage](t)(s.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo}))
	var ids []string
	for _, tk := range page.Tasks {
		ids = append(ids, tk.TaskID)
	}
	if len(ids) != 2 || ids[0] != "ready" {
		t.Fatalf("todo listed %v; want [ready later]: later waits for its not_before an hour ahead", ids)
	}
}

// 4f0a99e pins a failed release to the decision it read (last attempt or
// not) but not to the wait it read: a PATCH of retry_delay answered before
// the release's write landed is ignored, the task waiting the old 10 s
// instead of the hour the PATCH set.
func TestAFailedReleaseAfterRetryDelayRaisedWaitsTheNewDelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := e.checkout(t, "t", "a", time.Hour)
	slow, db := delayed(e)
	hour := time.Hour
	db.armBefore(func() {
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, RetryDelay: &hour}); err != nil {
			t.Errorf("raise retry_delay: %v", err)
		}
	})
	start := e.clock.Now()
	must[lease.Released](t)(slow.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	got := e.get(t, "t")
	if got.NotBefore == nil || got.NotBefore.Before(start.Add(time.Hour)) {
		t.Fatalf("not_before %v after a failed release landed after retry_delay was set to 1h (at %v); want an hour on", got.NotBefore, start)
	}
}

// A failed release sets not_before to its retry wait, over a later
// not_before the task was PATCHed to while held: a task PATCHed not to run
// for a day becomes claimable 10 s after a failed attempt. (Present before
// today's commits too.)
func TestAFailedReleaseKeepsALaterPatchedNotBefore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := e.checkout(t, "t", "a", time.Hour)
	nb := e.clock.Now().Add(24 * time.Hour)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	got := e.get(t, "t")
	if got.NotBefore == nil || got.NotBefore.Before(nb) {
		t.Fatalf("not_before %v after a failed release; the task was PATCHed not to run before %v", got.NotBefore, nb)
	}
}

// A not_before PATCHed onto a held task; the lease then ends by the sweep
// (timeout), which leaves the task todo under its ready key with no
// expiry-index entry (keepDelay runs at a release or claim only). Any
// later PATCH of it (a title fix) before its not_before gives it the
// delayed claim key, but no expiry entry (patch() sets lease_expires only
// when not_before itself changes). Once not_before has passed the sweep
// never ranks it ready again: it stays ranked after every ready task for
// good (README allows "until the next sweep" only).
func TestAPatchAfterASweptLeaseLeavesNoEndlessDelay(t *testing.T) {
	t.Parallel()
	s, clock := newShardEnv(t)
	c := ctx(t)
	nine, zero := 9, 0
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "urgent", Priority: &nine}))
	must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "urgent", AgentID: "a", Timeout: time.Minute}))
	nb := clock.Now().Add(10 * time.Minute)
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "urgent", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	clock.Advance(2 * time.Minute) // the lease expires
	storeCaughtUp(t, s)            // the sweep finds the lease through an index
	must[lease.SweepResult](t)(s.Sweep(c))
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "urgent", AgentID: "b", Title: new("a better title")}))
	for i := range 12 {
		clock.Advance(time.Millisecond)
		must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: fmt.Sprintf("low-%02d", i), Priority: &zero}))
	}
	clock.Advance(20 * time.Minute) // well past not_before
	storeCaughtUp(t, s)             // the sweeps find the delay through an index
	for range 2 {
		must[lease.SweepResult](t)(s.Sweep(c))
	}
	storeCaughtUp(t, s) // the claim finds the tasks through an index
	got := must[lease.Checkout](t)(s.Claim(c, lease.ClaimParams{AgentID: "b"}))
	if got.TaskID != "urgent" {
		t.Fatalf("claim got %s (priority %d); the priority-9 task whose not_before passed 10 min ago, with sweeps since, ranks after every ready task", got.TaskID, got.Priority)
	}
}

// The same by a race with a release: a PATCH (any field) landing between
// the release's write and its keepDelay write gives the delayed key
// without the expiry entry; keepDelay's condition (claim_key as read)
// then fails, and nobody gives the entry.
func TestAPatchBetweenReleaseAndKeepDelayLeavesNoEndlessDelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	nine, zero := 9, 0
	e.create(t, lease.CreateTaskParams{TaskID: "urgent", Priority: &nine})
	co := e.checkout(t, "urgent", "a", time.Hour)
	nb := e.clock.Now().Add(10 * time.Minute)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "urgent", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	slow, h := delayed(e)
	h.armAfter(func() { // the release's write landed: another client's PATCH
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "urgent", AgentID: "b", Title: new("a better title")}); err != nil {
			t.Errorf("the PATCH: %v", err)
		}
	})
	must[lease.Released](t)(slow.Release(c, lease.ReleaseParams{TaskID: "urgent", AgentID: "a", RunID: co.RunID}))
	for i := range 12 {
		e.clock.Advance(time.Millisecond)
		e.create(t, lease.CreateTaskParams{TaskID: fmt.Sprintf("low-%02d", i), Priority: &zero})
	}
	e.clock.Advance(20 * time.Minute)
	e.caughtUp(t) // the sweeps find the delay through an index
	for range 2 {
		must[lease.SweepResult](t)(e.store.Sweep(c))
	}
	e.caughtUp(t) // the listing finds the tasks through an index
	// Listed: README orders todo by claim order, the waiting ones after
	// the ready; urgent (priority 9) waits for nothing any more.
	page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo}))
	if len(page.Tasks) == 0 || page.Tasks[0].TaskID != "urgent" {
		var ids []string
		for _, tk := range page.Tasks {
			ids = append(ids, tk.TaskID)
		}
		t.Fatalf("todo listed %v; want urgent (priority 9, not_before passed 10 min ago, sweeps since) first", ids)
	}
}

// A force release of a held task whose not_before was PATCHed while held
// does not call keepDelay (only Release's plain path does): the task is
// todo, waiting an hour, yet listed (and ranked) among the ready tasks at
// its priority, ahead of a ready one (what 37df7f3 fixed for a plain
// release, TestAHeldNotBeforeIsListedAfterTheReady).
func TestAForceReleasedHeldNotBeforeIsListedAfterTheReady(t *testing.T) {
	t.Parallel()
	s, clock := newShardEnv(t)
	c := ctx(t)
	nine, zero := 9, 0
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "later", Priority: &nine}))
	co := must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "later", AgentID: "a", Timeout: time.Hour}))
	nb := clock.Now().Add(time.Hour)
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "later", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	must[lease.Released](t)(s.Release(c, lease.ReleaseParams{TaskID: "later", AgentID: "admin", RunID: co.RunID, Force: true}))
	clock.Advance(time.Millisecond)
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "ready", Priority: &zero}))
	storeCaughtUp(t, s) // the listing finds the tasks through an index
	page := must[lease.TaskPage](t)(s.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo}))
	var ids []string
	for _, tk := range page.Tasks {
		ids = append(ids, tk.TaskID)
	}
	if len(ids) != 2 || ids[0] != "ready" {
		t.Fatalf("todo listed %v; want [ready later]: later waits for its not_before an hour ahead", ids)
	}
}

func todoIDs(t *testing.T, s *lease.Store) []string {
	t.Helper()
	page := must[lease.TaskPage](t)(s.ListTasks(ctx(t), lease.ListTasksParams{Status: lease.StatusTodo, Limit: 1000}))
	var ids []string
	for _, tk := range page.Tasks {
		ids = append(ids, tk.TaskID)
	}
	return ids
}

// A task delayed while idle (created with not_before: delayed claim key and
// an expiry entry). Its not_before passes; before any sweep, a PATCH clears
// not_before (null, or any time not after now). patch() removes the expiry
// entry (the not_before changed, the task is idle) but keeps the delayed
// claim key (the "delay that has passed, which the sweep ranks again"
// shortcut). Nothing ranks it ready again, ever: a sweep finds no entry.
func TestClearingAPassedNotBeforeLeavesAnEndlessDelayedKey(t *testing.T) {
	t.Parallel()
	s, clock := newShardEnv(t)
	c := ctx(t)
	nine, zero := 9, 0
	nb := clock.Now().Add(time.Minute)
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "urgent", Priority: &nine, NotBefore: &nb}))
	for i := range 12 {
		clock.Advance(time.Millisecond)
		must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: fmt.Sprintf("low-%02d", i), Priority: &zero}))
	}
	clock.Advance(2 * time.Minute) // not_before has passed; no sweep yet
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "urgent", AgentID: "u", SetNotBefore: true, NotBefore: nil}))
	clock.Advance(time.Minute)
	storeCaughtUp(t, s) // the sweeps find the delay through an index
	for range 2 {
		must[lease.SweepResult](t)(s.Sweep(c))
	}
	storeCaughtUp(t, s) // the listing and the claim find the tasks through an index
	if ids := todoIDs(t, s); len(ids) == 0 || ids[0] != "urgent" {
		t.Errorf("todo listed %v; want urgent (priority 9, no not_before, sweeps since) first", ids)
	}
	got := must[lease.Checkout](t)(s.Claim(c, lease.ClaimParams{AgentID: "b"}))
	if got.TaskID != "urgent" {
		t.Fatalf("claim got %s; want urgent (priority 9, ready, sweeps since): it stays ranked after every ready task for good", got.TaskID)
	}
}

// The same by a cancel and a reopen: the cancel (PATCH status cancelled)
// of a task whose not_before has passed, not yet swept, removes its expiry
// entry and keeps its delayed key; the reopen (PATCH status todo) clears
// not_before and keeps that key too. The reopened task is never ranked
// ready again.
func TestCancelAndReopenAfterAPassedDelayLeavesAnEndlessDelayedKey(t *testing.T) {
	t.Parallel()
	s, clock := newShardEnv(t)
	c := ctx(t)
	nine, zero := 9, 0
	nb := clock.Now().Add(time.Minute)
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "urgent", Priority: &nine, NotBefore: &nb}))
	for i := range 12 {
		clock.Advance(time.Millisecond)
		must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: fmt.Sprintf("low-%02d", i), Priority: &zero}))
	}
	clock.Advance(2 * time.Minute)
	cancelled, todo := lease.StatusCancelled, lease.StatusTodo
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "urgent", AgentID: "u", Status: &cancelled}))
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "urgent", AgentID: "u", Status: &todo}))
	clock.Advance(time.Minute)
	storeCaughtUp(t, s) // the sweeps find the delay through an index
	for range 2 {
		must[lease.SweepResult](t)(s.Sweep(c))
	}
	storeCaughtUp(t, s) // the listing and the claim find the tasks through an index
	if ids := todoIDs(t, s); len(ids) == 0 || ids[0] != "urgent" {
		t.Errorf("todo listed %v; want urgent (priority 9, reopened, no not_before) first", ids)
	}
	got := must[lease.Checkout](t)(s.Claim(c, lease.ClaimParams{AgentID: "b"}))
	if got.TaskID != "urgent" {
		t.Fatalf("claim got %s; want the reopened priority-9 urgent", got.TaskID)
	}
}

// A checkout of a task whose lease has expired (not swept yet) and whose
// not_before was PATCHed (an hour ahead) while it was held. The takeover
// grant is refused by readyCond, Checkout takes the expired lease over
// again, and again, until its retry budget runs out: 503 ErrBusy after
// ~10 s. API.md: before not_before a checkout answers 409 not_ready;
// DESIGN: an expired lease never blocks a checkout.
func TestCheckoutOverAnExpiredLeaseWithAPatchedNotBeforeIsNotReady(t *testing.T) {
	t.Parallel()
	s, clock := newShardEnv(t)
	c := ctx(t)
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "t"}))
	must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", Timeout: time.Minute}))
	nb := clock.Now().Add(time.Hour)
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	clock.Advance(2 * time.Minute) // the lease expires; no sweep
	start := time.Now()
	_, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", Timeout: time.Minute})
	if !errors.Is(err, lease.ErrNotReady) {
		t.Fatalf("checkout of t (expired lease, not_before in 58 min) = %v after %v; want ErrNotReady", err, time.Since(start).Round(time.Millisecond))
	}
}

// keepDelay, new today, is a write that moves the version: a claim that
// merely tries a task (not ready: its not_before was PATCHed while held,
// the lease since ended by the sweep) makes a client's If-Match PATCH of
// that task, with the version it just read, 412. Before keepDelay a
// failed grant wrote nothing.
func TestAClaimThatTriesATaskDoesNotRefuseAnIfMatchPatch(t *testing.T) {
	t.Parallel()
	clock := testclock.New(epoch)
	ts := testenv.NewStore(t, testenv.WithClock(clock.Now), testenv.WithShards(schema.ShardCounts{Claim: 1}))
	s := ts.Store
	c := ctx(t)
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "later"}))
	must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "later", AgentID: "a", Timeout: time.Minute}))
	nb := clock.Now().Add(time.Hour)
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "later", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	clock.Advance(2 * time.Minute)
	storeCaughtUp(t, s) // the sweep finds the lease through an index
	must[lease.SweepResult](t)(s.Sweep(c))
	leaveReadyKeyed(t, ts.DB, ts.Names.Table(schema.TasksTable), "later")
	read := must[lease.Task](t)(s.GetTask(c, "later"))
	storeCaughtUp(t, s) // the claim finds later, ready keyed, and tries it
	if _, err := s.Claim(c, lease.ClaimParams{AgentID: "b"}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("claim: %v; want none available", err)
	}
	if _, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "later", AgentID: "u", IfVersion: read.Version, Title: new("new title")}); err != nil {
		after := must[lease.Task](t)(s.GetTask(c, "later"))
		t.Fatalf("If-Match %d PATCH after a claim that found nothing: %v (version now %d; the task shows no change)", read.Version, err, after.Version)
	}
}

// The new branch of patch() gives an idle task with a future not_before
// and a ready key an expiry entry, even when the PATCH cancels it: a
// cancelled task lands in the lease-expiry index, and at its not_before
// the sweep "ranks it ready" (SweepResult.Ready counts it) and moves its
// version.
func TestACancelledTaskGetsNoExpiryEntry(t *testing.T) {
	t.Parallel()
	s, clock := newShardEnv(t)
	c := ctx(t)
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "t"}))
	must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", Timeout: time.Minute}))
	nb := clock.Now().Add(10 * time.Minute)
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	clock.Advance(2 * time.Minute)
	must[lease.SweepResult](t)(s.Sweep(c))
	cancelled := lease.StatusCancelled
	v := must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "u", Status: &cancelled})).Version
	clock.Advance(20 * time.Minute)
	res := must[lease.SweepResult](t)(s.Sweep(c))
	after := must[lease.Task](t)(s.GetTask(c, "t"))
	if res.Ready != 0 || after.Version != v {
		t.Fatalf("sweep of a cancelled task: Ready %d, version %d -> %d; want no ranking write", res.Ready, v, after.Version)
	}
}

// A not_before PATCHed while the task was held keeps its ready claim key
// (update.go, patch); the sweep then ends the lease (timeout): todo, ready
// key, not_before to come, no expiry-index entry (README, known limit). A
// PATCH of blocked_by then blocks it: patch() gives it the delayed key
// but, the task not being claimable, no expiry-index entry. Its blocker
// completes and the change stream unblocks it (no key written). Once its
// not_before has passed, nothing ranked it ready again: sweeps or not, it
// ranked after every ready task for good. The blocking PATCH now gives
// it the entry too.
func TestABlockedTaskAfterAHeldDelayRanksReadyAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	nine, zero := 9, 0
	e.create(t, lease.CreateTaskParams{TaskID: "urgent", Priority: &nine})
	e.create(t, lease.CreateTaskParams{TaskID: "blocker", Priority: &zero})
	e.checkout(t, "urgent", "a", time.Second)
	nb := e.clock.Now().Add(time.Minute)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "urgent", AgentID: "admin", Admin: true, SetNotBefore: true, NotBefore: &nb}))
	e.clock.Advance(2 * time.Second)
	e.caughtUp(t)                                // the sweep finds the lease through an index
	must[lease.SweepResult](t)(e.store.Sweep(c)) // a's lease times out
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "urgent", AgentID: "admin", Admin: true, BlockedBy: &[]string{"blocker"}}))
	e.complete(t, "blocker", "w")
	e.drain(t) // the completion unblocks urgent
	if st := must[lease.Task](t)(e.store.GetTask(c, "urgent")).Status; st != lease.StatusTodo {
		t.Fatalf("urgent is %s after its blocker completed; want todo", st)
	}
	for i := range 40 {
		e.clock.Advance(time.Millisecond)
		e.create(t, lease.CreateTaskParams{TaskID: fmt.Sprintf("low-%02d", i), Priority: &zero})
	}
	e.clock.Advance(2 * time.Minute) // well past not_before
	e.caughtUp(t)                    // the sweeps find the delay through an index
	for range 2 {
		must[lease.SweepResult](t)(e.store.Sweep(c))
	}
	e.caughtUp(t) // the claim finds the tasks through an index
	raw := must[*dynamodb.GetItemOutput](t)(e.db.GetItem(c, &dynamodb.GetItemInput{TableName: aws.String(e.names.Table(schema.TasksTable)),
		Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: "urgent"}}, ConsistentRead: aws.Bool(true)}))
	for _, k := range []string{"status", "claim_key", "claim_rank", "not_before", "lease_expires", "claim_shard"} {
		t.Logf("urgent %s = %v", k, raw.Item[k])
	}
	lease.SpreadClaims(e.store, 1)
	got := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "b"}))
	if got.TaskID != "urgent" {
		t.Fatalf("claim got %s (priority %d); want urgent (priority 9, ready since its not_before passed 2 min ago, sweeps since)", got.TaskID, got.Priority)
	}
}

func rawTask(t *testing.T, e *env, id string) map[string]types.AttributeValue {
	t.Helper()
	out := must[*dynamodb.GetItemOutput](t)(e.db.GetItem(ctx(t), &dynamodb.GetItemInput{TableName: aws.String(e.names.Table(schema.TasksTable)),
		Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: id}}, ConsistentRead: aws.Bool(true)}))
	return out.Item
}

// P1: a PATCH that cancels an idle delayed task and changes its not_before
// in the same request: the status rule REMOVEs lease_expires and the
// not_before rule REMOVEs (null) or SETs (later time) it again: overlapping
// paths, DynamoDB's ValidationException (a 500).
func TestACancelWithANotBeforeIsOneWrite(t *testing.T) {
	t.Parallel()
	for _, later := range []bool{false, true} {
		t.Run(fmt.Sprint("later=", later), func(t *testing.T) {
			e := newEnv(t)
			c := ctx(t)
			nb := e.clock.Now().Add(time.Hour)
			e.create(t, lease.CreateTaskParams{TaskID: "t", NotBefore: &nb})
			cancelled := lease.StatusCancelled
			p := lease.UpdateTaskParams{TaskID: "t", AgentID: "u", Status: &cancelled, SetNotBefore: true}
			if later {
				nb2 := nb.Add(time.Hour)
				p.NotBefore = &nb2
			}
			if _, err := e.store.UpdateTask(c, p); err != nil {
				t.Fatalf("PATCH {status: cancelled, not_before: %v}: %v", p.NotBefore, err)
			}
		})
	}
}

// P2: a delayed idle task cancelled, then reopened by a PATCH that sends
// its not_before back (status todo, the same not_before): the delayed
// claim key stays, no expiry-index entry is written; once not_before has
// passed nothing ranks it ready again.
func TestAReopenWithTheSameNotBeforeRanksReadyAgain(t *testing.T) {
	t.Parallel()
	s, clock := newShardEnv(t)
	c := ctx(t)
	nine, zero := 9, 0
	nb := clock.Now().Add(time.Minute)
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "urgent", Priority: &nine, NotBefore: &nb}))
	cancelled, todo := lease.StatusCancelled, lease.StatusTodo
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "urgent", AgentID: "u", Status: &cancelled}))
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "urgent", AgentID: "u", Status: &todo, SetNotBefore: true, NotBefore: &nb}))
	for i := range 12 {
		clock.Advance(time.Millisecond)
		must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: fmt.Sprintf("low-%02d", i), Priority: &zero}))
	}
	clock.Advance(3 * time.Minute)
	storeCaughtUp(t, s) // the sweeps find the delay through an index
	for range 2 {
		must[lease.SweepResult](t)(s.Sweep(c))
	}
	storeCaughtUp(t, s) // the claim finds the tasks through an index
	got := must[lease.Checkout](t)(s.Claim(c, lease.ClaimParams{AgentID: "b"}))
	if got.TaskID != "urgent" {
		t.Fatalf("claim got %s; want urgent (priority 9, not_before passed 2 min ago, sweeps since)", got.TaskID)
	}
}

// beforeWriteDB runs before() once, just before the first UpdateItem that writes
// a PATCH (sets the "patch" attribute).
type beforeWriteDB struct {
	lease.DB
	once   sync.Once
	before func()
}

func (h *beforeWriteDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	for _, n := range in.ExpressionAttributeNames {
		if n == "patch" {
			h.once.Do(h.before)
		}
	}
	return h.DB.UpdateItem(ctx, in, o...)
}

// heldDelay: t checked out, PATCHed not_before an hour ahead, lease timed
// out and swept, and left under its ready key (leaveReadyKeyed): todo,
// ready key, not_before to come, no entry.
func heldDelay(t *testing.T, e *env, id string, prio int) time.Time {
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: id, Priority: &prio})
	e.checkout(t, id, "a", time.Minute)
	nb := e.clock.Now().Add(time.Hour)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: id, AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	e.clock.Advance(2 * time.Minute)
	e.caughtUp(t) // the sweep finds the lease through an index
	must[lease.SweepResult](t)(e.store.Sweep(c))
	leaveReadyKeyed(t, e.db, e.names.Table(schema.TasksTable), id)
	return nb
}

// P3: keepDelay no longer moves the version, so a PATCH that read the task
// before it and writes after it (pinned to the version alone) is built on
// the stale item: a cancel leaves the expiry-index entry keepDelay wrote on
// a cancelled task (the sweep then "ranks it ready": a write, a version).
func TestAPatchRacingADelayLeavesACancelledTaskNoExpiryEntry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	heldDelay(t, e, "t", 0)
	h := &beforeWriteDB{DB: e.db, before: func() {
		e.caughtUp(t) // the claim finds the task, ready keyed, and tries it
		if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "b"}); !errors.Is(err, lease.ErrNoTaskAvailable) {
			t.Errorf("claim in between: %v", err)
		}
	}}
	other := lease.New(lease.Config{DB: h, Tables: e.names, Now: e.clock.Now})
	cancelled := lease.StatusCancelled
	v := must[lease.Task](t)(other.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "u", Status: &cancelled})).Version
	raw := rawTask(t, e, "t")
	t.Logf("cancelled item: status=%v lease_expires=%v claim_key=%v", raw["status"], raw["lease_expires"], raw["claim_key"])
	e.clock.Advance(2 * time.Hour)
	e.caughtUp(t) // the sweep would find an expiry entry through an index
	res := must[lease.SweepResult](t)(e.store.Sweep(c))
	after := must[lease.Task](t)(e.store.GetTask(c, "t"))
	if _, ok := raw["lease_expires"]; ok || res.Ready != 0 || after.Version != v {
		t.Fatalf("cancelled task: lease_expires %v; sweep Ready %d, version %d -> %d; want no expiry entry, no ranking write", raw["lease_expires"], res.Ready, v, after.Version)
	}
}

// P4: the same race with a PATCH that clears not_before: the task, with no
// not_before, keeps the delayed key keepDelay gave it, ranked after every
// ready task for the hour its old not_before had to run.
func TestAPatchRacingADelayClearsItsDelayedKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	heldDelay(t, e, "urgent", 9)
	h := &beforeWriteDB{DB: e.db, before: func() {
		e.caughtUp(t) // the claim finds the task, ready keyed, and tries it
		if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "b"}); !errors.Is(err, lease.ErrNoTaskAvailable) {
			t.Errorf("claim in between: %v", err)
		}
	}}
	other := lease.New(lease.Config{DB: h, Tables: e.names, Now: e.clock.Now})
	must[lease.Task](t)(other.UpdateTask(c, lease.UpdateTaskParams{TaskID: "urgent", AgentID: "u", SetNotBefore: true, NotBefore: nil}))
	raw := rawTask(t, e, "urgent")
	t.Logf("item: not_before=%v lease_expires=%v claim_key=%v", raw["not_before"], raw["lease_expires"], raw["claim_key"])
	zero := 0
	for i := range 3 {
		e.clock.Advance(time.Millisecond)
		e.create(t, lease.CreateTaskParams{TaskID: fmt.Sprintf("low-%02d", i), Priority: &zero})
	}
	e.clock.Advance(time.Minute)
	e.caughtUp(t) // the sweeps find the delay through an index
	for range 2 {
		must[lease.SweepResult](t)(e.store.Sweep(c))
	}
	e.caughtUp(t) // the claim finds the tasks through an index
	lease.SpreadClaims(e.store, 1)
	got := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "b"}))
	if got.TaskID != "urgent" {
		t.Fatalf("claim got %s; want urgent (priority 9, no not_before, sweeps since)", got.TaskID)
	}
}

// A cancel with a not_before, of a task with no expiry entry yet, and a
// not_before given to a finished task, used to give the finished task an
// entry: the sweep then "ranked it ready", moving its version.
func TestACancelWithANotBeforeOfAnUndelayedTaskPutsNoEntry(t *testing.T) {
	t.Parallel()
	for _, blocked := range []bool{false, true} {
		t.Run(fmt.Sprint("blocked=", blocked), func(t *testing.T) {
			e := newEnv(t)
			c := ctx(t)
			p := lease.CreateTaskParams{TaskID: "t"}
			if blocked {
				e.create(t, lease.CreateTaskParams{TaskID: "blk"})
				p.BlockedBy = []string{"blk"}
			}
			e.create(t, p)
			cancelled := lease.StatusCancelled
			nb := e.clock.Now().Add(time.Hour)
			v := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "u", Status: &cancelled, SetNotBefore: true, NotBefore: &nb})).Version
			raw := rawTask(t, e, "t")
			e.clock.Advance(2 * time.Hour)
			res := must[lease.SweepResult](t)(e.store.Sweep(c))
			after := must[lease.Task](t)(e.store.GetTask(c, "t"))
			if _, ok := raw["lease_expires"]; ok || res.Ready != 0 {
				t.Fatalf("cancelled task: status %v lease_expires %v; sweep Ready %d (version %d -> %d); want no expiry entry, no ranking write",
					raw["status"], raw["lease_expires"], res.Ready, v, after.Version)
			}
		})
	}
}

// A PATCH {not_before: <future>} of a finished task (done, cancelled,
// failed) gives it an expiry-index entry: idle is true for any task with no
// lease, whatever its status.
func TestANotBeforeOnAFinishedTaskPutsNoEntry(t *testing.T) {
	t.Parallel()
	for _, st := range []string{"done", "cancelled", "failed"} {
		t.Run(st, func(t *testing.T) {
			e := newEnv(t)
			c := ctx(t)
			switch st {
			case "done":
				e.create(t, lease.CreateTaskParams{TaskID: "t"})
				e.complete(t, "t", "a")
			case "cancelled":
				e.create(t, lease.CreateTaskParams{TaskID: "t"})
				cancelled := lease.StatusCancelled
				must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "u", Status: &cancelled}))
			case "failed":
				e.failTask(t, "t", lease.CreateTaskParams{})
			}
			nb := e.clock.Now().Add(time.Hour)
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "u", SetNotBefore: true, NotBefore: &nb}))
			raw := rawTask(t, e, "t")
			e.clock.Advance(2 * time.Hour)
			res := must[lease.SweepResult](t)(e.store.Sweep(c))
			if _, ok := raw["lease_expires"]; ok || res.Ready != 0 {
				t.Fatalf("%s task after PATCH not_before: lease_expires %v; sweep Ready %d; want no expiry entry, no ranking write", st, raw["lease_expires"], res.Ready)
			}
		})
	}
}

// The sweep ranking a delayed task ready again changes nothing the task
// shows, and so not its version: an If-Match PATCH of what a client read
// before still holds (it was refused 412 with nothing changed before).
func TestADelayRankedReadyKeepsTheVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	nb := e.clock.Now().Add(time.Minute)
	before := must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "later", NotBefore: &nb}))
	e.clock.Advance(2 * time.Minute)
	e.caughtUp(t) // the sweep finds the delay through an index
	if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res.Ready != 1 {
		t.Fatalf("sweep ranked %d delayed tasks ready, want 1", res.Ready)
	}
	after := must[lease.Task](t)(e.store.GetTask(c, "later"))
	if after.Version != before.Version {
		t.Fatalf("version %d after the sweep ranked it ready, want %d as created", after.Version, before.Version)
	}
	title := "now"
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "later", AgentID: "a", Title: &title, IfVersion: before.Version}))
}

// Cancelling a task that is cancelled already changes nothing, whatever
// its not_before: it was written again once (its claim key delayed, its
// version moved) when the not_before had been set while it was held.
func TestCancellingACancelledTaskWithANotBeforeChangesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	e.checkout(t, "x", "a", time.Hour)
	nb := time.Date(2199, 1, 1, 0, 0, 0, 0, time.UTC)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	cancelled := lease.StatusCancelled
	first := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", Status: &cancelled}))
	e.drain(t)
	// A cancelled task is in no index the sweep reads.
	e.clock.Advance(25 * time.Hour)
	if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res.Ready != 0 || res.Timeouts != 0 {
		t.Fatalf("a sweep found the cancelled task: %+v", res)
	}
	for i := range 2 {
		again := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", Status: &cancelled}))
		if again.Version != first.Version {
			t.Fatalf("cancel %d of a cancelled task: version %d, want %d", i+2, again.Version, first.Version)
		}
	}
}

// A not_before finer than a millisecond is kept as the next millisecond,
// not the one before: the task must not be granted before the time given.
// It was truncated, so a checkout in the millisecond before the time got
// the task.
func TestASubMillisecondNotBeforeIsNotGrantedEarly(t *testing.T) {
	t.Parallel()
	s, clock := newShardEnv(t)
	c := ctx(t)
	nb := clock.Now().Add(10*time.Second + 500*time.Microsecond)
	task := must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "t1", NotBefore: &nb}))
	if task.NotBefore == nil || task.NotBefore.Before(nb) {
		t.Fatalf("not_before shown as %v, before the %v given", task.NotBefore, nb)
	}
	clock.Advance(10 * time.Second)
	if _, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "a", Timeout: time.Minute}); !errors.Is(err, lease.ErrNotReady) {
		t.Fatalf("checkout 500µs before not_before: %v, want ErrNotReady", err)
	}
	later := clock.Now().Add(5*time.Second + 250*time.Microsecond)
	task = must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t1", AgentID: "a", SetNotBefore: true, NotBefore: &later}))
	if task.NotBefore == nil || task.NotBefore.Before(later) {
		t.Fatalf("PATCHed not_before shown as %v, before the %v given", task.NotBefore, later)
	}
	clock.Advance(5 * time.Second)
	if _, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "a", Timeout: time.Minute}); !errors.Is(err, lease.ErrNotReady) {
		t.Fatalf("checkout 250µs before the PATCHed not_before: %v, want ErrNotReady", err)
	}
	clock.Advance(time.Millisecond)
	must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "a", Timeout: time.Minute}))
}

// A not_before in the last millisecond of 2199, finer than a millisecond,
// is kept as the next millisecond: 2200-01-01T00:00:00.000Z, a time the
// same field refuses ("before the year 2200"). It was accepted and shown
// as that time, so a client sending the task's not_before back got 400.
func TestANotBeforeRoundedUpToTheYear2200IsRefused(t *testing.T) {
	t.Parallel()
	s, _ := newShardEnv(t)
	c := ctx(t)
	nb := time.Date(2199, 12, 31, 23, 59, 59, 999_500_000, time.UTC)
	if task, err := s.CreateTask(c, lease.CreateTaskParams{TaskID: "t1", NotBefore: &nb}); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("create with not_before %v: %v (not_before shown as %v), want ErrInvalid", nb, err, task.NotBefore)
	}
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "t2"}))
	if task, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t2", AgentID: "a", SetNotBefore: true, NotBefore: &nb}); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("PATCH with not_before %v: %v (not_before shown as %v), want ErrInvalid", nb, err, task.NotBefore)
	}
	last := nb.Truncate(time.Millisecond)
	task := must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "t3", NotBefore: &last}))
	if task.NotBefore == nil || !task.NotBefore.Equal(last) {
		t.Fatalf("not_before %v shown as %v", last, task.NotBefore)
	}
}
