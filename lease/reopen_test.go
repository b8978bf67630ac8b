package lease_test

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// failTask creates id with max_attempts 1 and fails its one attempt.
func (e *env) failTask(t testing.TB, id string, p lease.CreateTaskParams) {
	t.Helper()
	p.TaskID, p.MaxAttempts = id, new(1)
	e.create(t, p)
	co := e.checkout(t, id, "x", time.Minute)
	must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: id, AgentID: "x", RunID: co.RunID, Outcome: lease.OutcomeFailed, Error: "boom"}))
	if got := e.get(t, id).Status; got != lease.StatusFailed {
		t.Fatalf("%s after its one attempt failed: %s, want failed", id, got)
	}
}

// A checkout that expects failed reopens a failed task and grants it in
// one write, as a PATCH to todo and a checkout would: attempt 1, its
// failures forgotten, the queue counts moved from failed to in_progress.
// Before, naming failed was 400, and a checkout could not take the task at
// all.
func TestCheckoutExpectingFailedReopensTheTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.failTask(t, "t", lease.CreateTaskParams{Queue: "reopen-failed"})
	co, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "y", ExpectedStatuses: []lease.Status{lease.StatusFailed}})
	if err != nil || co.AgentID != "y" || co.Attempt != 1 || co.Fence != 2 {
		t.Fatalf("checkout of failed t expecting failed: %+v, %v; want y's lease, attempt 1, fence 2", co, err)
	}
	got := e.get(t, "t")
	if got.Status != lease.StatusInProgress || got.Attempts != 1 {
		t.Fatalf("t after the reopening grant: %s, attempts %d; want in_progress, 1", got.Status, got.Attempts)
	}
	raw, err := e.db.GetItem(c, &dynamodb.GetItemInput{TableName: aws.String(e.names.Table(schema.TasksTable)), Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: "t"}}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := raw.Item["failures"]; ok {
		t.Errorf("t's failures after the reopening grant: %v, want none (counted anew)", f)
	}
	if evs := kinds(e.events(t, "t")); !slices.Equal(evs, []lease.EventType{lease.EventCheckout, lease.EventRelease, lease.EventFailed, lease.EventCheckout}) {
		t.Errorf("trail %v, want checkout, release, failed, checkout", evs)
	}
	counts := e.queueCounts(t)["reopen-failed"].Counts
	if counts[lease.StatusFailed] != 0 || counts[lease.StatusInProgress] != 1 {
		t.Errorf("queue counts after the reopening: %v, want failed 0, in_progress 1", counts)
	}
	// The reopened task's one attempt is this one: failing it fails the
	// task again.
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "y", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	if got := e.get(t, "t").Status; got != lease.StatusFailed {
		t.Errorf("t after its reopened attempt failed: %s, want failed", got)
	}
}

// A checkout reopening a done task counts its attempts anew, as a PATCH
// to todo does. Before, it counted on: a task done at its last attempt
// was granted an attempt past max_attempts (attempt 3 of 2).
func TestCheckoutReopeningADoneTaskCountsAttemptsAnew(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "t", MaxAttempts: new(2)})
	co := e.checkout(t, "t", "x", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID}))
	e.complete(t, "t", "x")
	co, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "y", ExpectedStatuses: []lease.Status{lease.StatusDone}})
	if err != nil || co.Attempt != 1 {
		t.Fatalf("checkout of done t expecting done: %+v, %v; want attempt 1", co, err)
	}
	if got := e.get(t, "t"); got.Attempts != 1 || got.Status != lease.StatusInProgress {
		t.Fatalf("t reopened: %s, attempts %d; want in_progress, 1", got.Status, got.Attempts)
	}
}

// A checkout expecting failed of a task whose last attempt's lease has
// expired, unswept, ends that lease as the sweep would (timeout, failed)
// and reopens the task. Before, it was 400; a list without todo or failed
// still names the status GET shows.
func TestCheckoutExpectingFailedEndsAnExpiredLastAttemptAndReopens(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "t", MaxAttempts: new(1)})
	e.checkout(t, "t", "x", time.Minute)
	e.clock.Advance(2 * time.Minute)
	var mm *lease.StatusMismatchError
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "y", ExpectedStatuses: []lease.Status{lease.StatusDone}}); !errors.As(err, &mm) || mm.Status != lease.StatusFailed {
		t.Fatalf("checkout expecting done: %v, want status_mismatch naming failed", err)
	}
	co, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "y", ExpectedStatuses: []lease.Status{lease.StatusFailed}})
	if err != nil || co.Attempt != 1 {
		t.Fatalf("checkout expecting failed: %+v, %v; want granted, attempt 1", co, err)
	}
	if evs := kinds(e.events(t, "t")); !slices.Equal(evs, []lease.EventType{lease.EventCheckout, lease.EventTimeout, lease.EventFailed, lease.EventCheckout}) {
		t.Errorf("trail %v, want checkout, timeout, failed, checkout", evs)
	}
}

// Naming blocked changes nothing: a blocked task is answered blocked
// whatever the checkout expects, and is never granted; a failed task with
// a blocker not done stays failed, answered blocked.
func TestExpectingBlockedOrAFailedTasksStatusNeverGrantsPastABlocker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "b", "free")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"b"}})
	var be *lease.BlockedError
	all := []lease.Status{lease.StatusTodo, lease.StatusBlocked, lease.StatusInProgress, lease.StatusDone, lease.StatusCancelled, lease.StatusFailed}
	for _, want := range [][]lease.Status{{lease.StatusBlocked}, all} {
		if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "d", AgentID: "y", ExpectedStatuses: want}); !errors.As(err, &be) {
			t.Fatalf("checkout of blocked d expecting %v: %v, want blocked", want, err)
		}
	}
	var mm *lease.StatusMismatchError
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "free", AgentID: "y", ExpectedStatuses: []lease.Status{lease.StatusBlocked}}); !errors.As(err, &mm) || mm.Status != lease.StatusTodo {
		t.Fatalf("checkout of todo free expecting blocked: %v, want status_mismatch naming todo", err)
	}

	// f is failed with a blocker not done: b2 completed (f unblocked),
	// f's one attempt failed, b2 reopened.
	e.task(t, "b2")
	e.create(t, lease.CreateTaskParams{TaskID: "f", MaxAttempts: new(1), BlockedBy: []string{"b2"}})
	e.complete(t, "b2", "x")
	e.drain(t)
	e.failAgain(t, "f")
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "b2", AgentID: "x", Status: new(lease.StatusTodo)}))
	before := e.get(t, "f")
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "f", AgentID: "y", ExpectedStatuses: []lease.Status{lease.StatusFailed}}); !errors.As(err, &be) || !slices.Equal(blockerIDs(be.BlockedBy), []string{"b2=todo"}) {
		t.Fatalf("checkout of failed f expecting failed while b2 is todo: %v, want blocked by b2", err)
	}
	if after := e.get(t, "f"); after.Status != lease.StatusFailed || after.Version != before.Version {
		t.Fatalf("f after the refused checkout: %s version %d, want failed version %d (unchanged)", after.Status, after.Version, before.Version)
	}
}

// failAgain checks the todo task id out and fails that attempt, its last.
func (e *env) failAgain(t testing.TB, id string) {
	t.Helper()
	co := e.checkout(t, id, "x", time.Minute)
	must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: id, AgentID: "x", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	if got := e.get(t, id).Status; got != lease.StatusFailed {
		t.Fatalf("%s after its attempt failed: %s, want failed", id, got)
	}
}

// Many agents racing to reopen one failed task: exactly one is granted
// (attempt 1), every other is answered checked_out naming it.
func TestRacingReopensOfAFailedTaskGrantOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.failTask(t, "t", lease.CreateTaskParams{})
	const n = 16
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		won    []lease.Checkout
		others []error
	)
	for i := range n {
		wg.Go(func() {
			co, err := e.store.Checkout(ctx(t), lease.CheckoutParams{TaskID: "t", AgentID: "agent-" + string(rune('a'+i)), ExpectedStatuses: []lease.Status{lease.StatusFailed}})
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				won = append(won, co)
			} else {
				others = append(others, err)
			}
		})
	}
	wg.Wait()
	if len(won) != 1 || won[0].Attempt != 1 {
		t.Fatalf("grants %+v, want exactly one, attempt 1", won)
	}
	for _, err := range others {
		var ce *lease.ConflictError
		if !errors.As(err, &ce) || ce.Holder.AgentID != won[0].AgentID {
			t.Errorf("a losing reopen: %v, want checked_out naming %s", err, won[0].AgentID)
		}
	}
	if got := e.get(t, "t"); got.Attempts != 1 {
		t.Errorf("t after the race: attempts %d, want 1", got.Attempts)
	}
}
