package lease_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A blocked_by PATCH refused after it recorded its edge, while it holds the
// graph's lock (here: status todo on a blocked task, a TransitionError from
// patch()), should take that edge back (deferred takeBackEdges). The
// deferred take-back runs after the loop's `defer cancel()` of lockCtx, so
// its read fails on a cancelled context and the edge stays: b lists x in
// blocks, and counts it toward its bound, for good.
func TestProbeRefusedPatchUnderLockTakesBackItsEdge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a", "b")
	e.create(t, lease.CreateTaskParams{TaskID: "x", BlockedBy: []string{"a"}})
	todo := lease.StatusTodo
	_, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "u", BlockedBy: &[]string{"a", "b"}, Status: &todo})
	var te *lease.TransitionError
	if !errors.As(err, &te) {
		t.Fatalf("PATCH {status todo, blocked_by [a b]} of blocked x: %v; want a TransitionError", err)
	}
	if got := e.get(t, "x").BlockedBy; len(got) != 1 {
		t.Fatalf("x blocked by %v after the refused PATCH", got)
	}
	if got := e.get(t, "b").Blocks; len(got) != 0 {
		t.Fatalf("b blocks %v after x's refused PATCH, want none (x does not name b)", got)
	}
}

// The same with a refused not_before (year 2200), and its effect on the
// bound: b may block one task; the refused PATCH of x left b's edge to x,
// so a create naming b is refused.
func TestProbeRefusedPatchLeavesNoEdgeCountedTowardTheBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	lease.LimitDependents(e.store, 1)
	e.task(t, "x", "b")
	nb := time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "u", BlockedBy: &[]string{"b"}, SetNotBefore: true, NotBefore: &nb}); err == nil {
		t.Fatal("PATCH with not_before in 2300 accepted")
	}
	if got := e.get(t, "x").BlockedBy; len(got) != 0 {
		t.Fatalf("x blocked by %v after the refused PATCH", got)
	}
	if _, err := e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "y", BlockedBy: []string{"b"}}); err != nil {
		t.Fatalf("create y blocked by b (b blocks nothing; bound 1): %v; b blocks %v", err, e.get(t, "b").Blocks)
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
func TestProbeAPatchAfterASweptLeaseLeavesNoEndlessDelay(t *testing.T) {
	t.Parallel()
	s, clock := newShardEnv(t)
	c := ctx(t)
	nine, zero := 9, 0
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "urgent", Priority: &nine}))
	must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "urgent", AgentID: "a", Timeout: time.Minute}))
	nb := clock.Now().Add(10 * time.Minute)
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "urgent", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	clock.Advance(2 * time.Minute) // the lease expires
	must[lease.SweepResult](t)(s.Sweep(c))
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "urgent", AgentID: "b", Title: new("a better title")}))
	for i := range 12 {
		clock.Advance(time.Millisecond)
		must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: fmt.Sprintf("low-%02d", i), Priority: &zero}))
	}
	clock.Advance(20 * time.Minute) // well past not_before
	for range 2 {
		must[lease.SweepResult](t)(s.Sweep(c))
	}
	got := must[lease.Checkout](t)(s.Claim(c, lease.ClaimParams{AgentID: "b"}))
	if got.TaskID != "urgent" {
		t.Fatalf("claim got %s (priority %d); the priority-9 task whose not_before passed 10 min ago, with sweeps since, ranks after every ready task", got.TaskID, got.Priority)
	}
}

// The same by a race with a release: a PATCH (any field) landing between
// the release's write and its keepDelay write gives the delayed key
// without the expiry entry; keepDelay's condition (claim_key as read)
// then fails, and nobody gives the entry.
func TestProbeAPatchBetweenReleaseAndKeepDelayLeavesNoEndlessDelay(t *testing.T) {
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
	for range 2 {
		must[lease.SweepResult](t)(e.store.Sweep(c))
	}
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
func TestProbeAForceReleasedHeldNotBeforeIsListedAfterTheReady(t *testing.T) {
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
	page := must[lease.TaskPage](t)(s.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo}))
	var ids []string
	for _, tk := range page.Tasks {
		ids = append(ids, tk.TaskID)
	}
	if len(ids) != 2 || ids[0] != "ready" {
		t.Fatalf("todo listed %v; want [ready later]: later waits for its not_before an hour ahead", ids)
	}
}

// 37df7f3's batch pre-check counts no task that exists already ("a task
// that exists already is answered as it is, and adds none"), but create
// still links the existing task's blockers before its put finds the id
// taken, and link's own checkDependents refuses a blocker at its bound:
// the commit's own case with the batch in the other order, [t2, t1], is
// refused after t2 was created (x then blocks d0 and t2, its 2; t1 exists).
func TestProbeABatchWithAnExistingTaskLastIsNotRefusedAtTheBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	lease.LimitDependents(e.store, 2)
	e.task(t, "x", "t1")
	e.create(t, lease.CreateTaskParams{TaskID: "d0", BlockedBy: []string{"x"}})
	res, err := e.store.CreateTasks(c, []lease.CreateTaskParams{
		{TaskID: "t2", BlockedBy: []string{"x"}},
		{TaskID: "t1", BlockedBy: []string{"x"}},
	})
	if err != nil {
		t.Fatalf("batch [t2, t1 (exists)]: %v; want t2 created, t1 exists (x then blocks d0 and t2, its 2); t2 now: %+v", err, e.get(t, "t2").Status)
	}
	if len(res) != 2 || res[0].Outcome != lease.BatchCreated || res[1].Outcome != lease.BatchExists {
		t.Fatalf("batch results %+v", res)
	}
}
