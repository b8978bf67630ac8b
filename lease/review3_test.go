package lease_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

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
	for range 2 {
		must[lease.SweepResult](t)(s.Sweep(c))
	}
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
	for range 2 {
		must[lease.SweepResult](t)(s.Sweep(c))
	}
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
	s, clock := newShardEnv(t)
	c := ctx(t)
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "later"}))
	must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "later", AgentID: "a", Timeout: time.Minute}))
	nb := clock.Now().Add(time.Hour)
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "later", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	clock.Advance(2 * time.Minute)
	must[lease.SweepResult](t)(s.Sweep(c))
	read := must[lease.Task](t)(s.GetTask(c, "later"))
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
	for range 2 {
		must[lease.SweepResult](t)(e.store.Sweep(c))
	}
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
