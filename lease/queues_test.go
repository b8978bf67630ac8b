package lease_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

func ptr[T any](v T) *T { return &v }

func (e *env) queued(t testing.TB, id, queue string, priority int) lease.Task {
	t.Helper()
	task, err := e.store.CreateTask(ctx(t), lease.CreateTaskParams{TaskID: id, Title: "title of " + id, Queue: queue, Priority: &priority})
	if err != nil {
		t.Fatalf("create %s: %v", id, err)
	}
	return task
}

// settles numbers the tasks settle writes, across the tests of the binary.
var settles atomic.Int64

// settle waits until the tasks table's indexes show every write made so
// far, rather than sleeping out their lag: the local DynamoDB applies a
// table's index updates one write at a time, in write order, so once a
// task written now shows in an index, every earlier write does too. That
// task is alone in a queue of its own, which no test claims from.
func (e *env) settle(t testing.TB) {
	t.Helper()
	id := fmt.Sprintf("settle-%d", settles.Add(1))
	e.queued(t, id, id, 0)
	eventually(t, "the indexes to show "+id, func() bool {
		p := lease.ListTasksParams{Queue: id, Status: lease.StatusTodo}
		for {
			page, err := e.store.ListTasks(ctx(t), p)
			if err != nil {
				t.Fatalf("list %s: %v", id, err)
			}
			if len(page.Tasks) > 0 {
				return true
			}
			if page.NextCursor == "" {
				return false
			}
			p.Cursor = page.NextCursor
		}
	})
}

// claimAll claims until nothing is left and returns the task ids in order.
func (e *env) claimAll(t testing.TB, queues ...string) []string {
	t.Helper()
	var out []string
	for i := 0; ; i++ {
		co, err := e.store.Claim(ctx(t), lease.ClaimParams{AgentID: fmt.Sprintf("agent-%d", i), Queues: queues})
		if errors.Is(err, lease.ErrNoTaskAvailable) {
			return out
		}
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		out = append(out, co.TaskID)
	}
}

func TestCreateTaskFieldsAndDefaults(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	plain := e.queued(t, "plain", "", lease.DefaultPriority)
	if plain.Queue != "default" || plain.Priority != 5 || plain.Version != 1 {
		t.Fatalf("defaults: %+v", plain)
	}
	full := must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{
		TaskID: "full", Title: "t", Description: "d", Queue: "research", Priority: ptr(9),
		Metadata: json.RawMessage(`{"a": 1}`),
	}))
	got := must[lease.Task](t)(e.store.GetTask(c, "full"))
	if got.Queue != "research" || got.Priority != 9 || got.Description != "d" || string(got.Metadata) != `{"a":1}` {
		t.Fatalf("read back %+v (created %+v)", got, full)
	}
	for name, p := range map[string]lease.CreateTaskParams{
		"a priority of 10 is invalid":          {Priority: ptr(10)},
		"a priority of -1 is invalid":          {Priority: ptr(-1)},
		"a queue with # is invalid":            {Queue: "a#b"},
		"metadata that is an array is invalid": {Metadata: json.RawMessage(`[1]`)},
		"metadata that is null is invalid":     {Metadata: json.RawMessage(`null`)},
		"metadata over 4 KiB is invalid":       {Metadata: json.RawMessage(`{"a":"` + string(make([]byte, 4096)) + `"}`)},
		"a description over 8 KiB is invalid":  {Description: string(make([]byte, 8<<10+1))},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := e.store.CreateTask(c, p); !errors.Is(err, lease.ErrInvalid) {
				t.Errorf("%v, want invalid", err)
			}
		})
	}
}

func TestCreateTasksBatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.queued(t, "b", "default", 5)
	res := must[[]lease.BatchResult](t)(e.store.CreateTasks(c, []lease.CreateTaskParams{
		{TaskID: "a", Queue: "q"}, {TaskID: "b", Title: "other"}, {Title: "generated"},
	}))
	if len(res) != 3 || res[0].Outcome != lease.BatchCreated || res[1].Outcome != lease.BatchExists ||
		res[1].Task.Title != "title of b" || res[2].Outcome != lease.BatchCreated || res[2].TaskID == "" {
		t.Fatalf("results %+v", res)
	}
	again := must[[]lease.BatchResult](t)(e.store.CreateTasks(c, []lease.CreateTaskParams{{TaskID: "a", Queue: "q"}}))
	if again[0].Outcome != lease.BatchExists || again[0].Task.Queue != "q" {
		t.Fatalf("retry %+v", again)
	}
	if _, err := e.store.CreateTasks(c, []lease.CreateTaskParams{{TaskID: "x"}, {TaskID: "x"}}); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("duplicate ids: %v", err)
	}
	if _, err := e.store.CreateTasks(c, make([]lease.CreateTaskParams, 26)); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("26 tasks: %v", err)
	}
	if _, err := e.store.CreateTasks(c, []lease.CreateTaskParams{{TaskID: "ok"}, {Priority: ptr(11)}}); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("one invalid: %v", err)
	}
	if _, err := e.store.GetTask(c, "ok"); !errors.Is(err, lease.ErrTaskNotFound) {
		t.Fatalf("an invalid batch wrote: %v", err)
	}
}

// Claim grants the highest priority first, the oldest first within a
// priority, from the queues asked for only, with the claim index lagging.
func TestClaimByQueueAndPriority(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.lag(t, "", 150*time.Millisecond)
	e.queued(t, "low-old", "default", 1)
	e.clock.Advance(time.Millisecond)
	e.queued(t, "mid-old", "default", 5)
	e.clock.Advance(time.Millisecond)
	e.queued(t, "urgent", "default", 9)
	e.clock.Advance(time.Millisecond)
	e.queued(t, "mid-new", "default", 5)
	e.clock.Advance(time.Millisecond)
	e.queued(t, "research", "research", 9)
	e.settle(t)
	if got := e.claimAll(t, "default"); !slices.Equal(got, []string{"urgent", "mid-old", "mid-new", "low-old"}) {
		t.Fatalf("claim order %v", got)
	}
	if got := e.claimAll(t, "backend"); len(got) != 0 {
		t.Fatalf("claimed %v from an empty queue", got)
	}
	if got := e.claimAll(t, "backend", "research"); !slices.Equal(got, []string{"research"}) {
		t.Fatalf("claimed %v from research", got)
	}
}

// An expired lease in a queue is claimable from that queue once a sweep has
// ended it, in priority order with the todo tasks; not from another queue.
func TestClaimTakesExpiredLeaseByPriority(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.queued(t, "todo-low", "q", 2)
	e.queued(t, "held-high", "q", 8)
	e.queued(t, "other", "r", 9)
	e.checkout(t, "held-high", "a", time.Second)
	e.checkout(t, "other", "a", time.Second)
	e.clock.Advance(2 * time.Second)
	e.caughtUp(t) // the sweep finds the leases through an index
	must[lease.SweepResult](t)(e.store.Sweep(c))
	e.caughtUp(t) // the claim finds the tasks through an index
	co := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "b", Queues: []string{"q"}}))
	if co.TaskID != "held-high" || co.Queue != "q" || co.Priority != 8 || co.Title != "title of held-high" {
		t.Fatalf("claimed %+v, want held-high with its title, queue and priority", co)
	}
	co = must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "b", Queues: []string{"q"}}))
	if co.TaskID != "todo-low" {
		t.Fatalf("claimed %s", co.TaskID)
	}
}

// A task moved to another queue while the claim index still shows it in the
// old one is not granted to a claimer of the old queue: the grant's write
// checks the queue.
func TestClaimUnderLagSkipsATaskMovedAway(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.queued(t, "moving", "a", 5)
	e.settle(t)
	e.lag(t, "", time.Second)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "moving", AgentID: "x", Queue: ptr("b")}))
	if co, err := e.store.Claim(c, lease.ClaimParams{AgentID: "x", Queues: []string{"a"}}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("claim from a: %+v, %v", co, err)
	}
	e.settle(t)
	if got := e.claimAll(t, "b"); !slices.Equal(got, []string{"moving"}) {
		t.Fatalf("claim from b: %v", got)
	}
}

// A completed, cancelled or held task is out of the claim index; a released
// or reopened one is back in it.
func TestClaimIndexFollowsClaimability(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.lag(t, "", 100*time.Millisecond)
	for _, id := range []string{"done", "cancelled", "released"} {
		e.queued(t, id, "q", 5)
	}
	co := e.checkout(t, "done", "a", time.Hour)
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "done", AgentID: "a", RunID: co.RunID}))
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "cancelled", AgentID: "a", Status: ptr(lease.StatusCancelled)}))
	e.checkout(t, "released", "a", time.Hour)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "released", AgentID: "a"}))
	e.settle(t)
	if got := e.claimAll(t, "q"); !slices.Equal(got, []string{"released"}) {
		t.Fatalf("claimable %v, want released only", got)
	}
	done := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "done", AgentID: "a", Status: ptr(lease.StatusTodo)}))
	if done.Status != lease.StatusTodo || done.CompletedAt != nil {
		t.Fatalf("reopened %+v", done)
	}
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "cancelled", AgentID: "a", Status: ptr(lease.StatusTodo), Priority: ptr(9)}))
	e.settle(t)
	if got := e.claimAll(t, "q"); !slices.Equal(got, []string{"cancelled", "done"}) {
		t.Fatalf("claimable after reopening %v", got)
	}
}

func TestUpdateTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	v1 := e.queued(t, "t", "q", 5)
	t.Run("fields change, and the version grows", func(t *testing.T) {
		v2 := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{
			TaskID: "t", AgentID: "a", Title: ptr("new title"), Description: ptr("more"),
			Metadata: json.RawMessage(`{"k": "v"}`), IfVersion: v1.Version,
		}))
		if v2.Title != "new title" || v2.Description != "more" || string(v2.Metadata) != `{"k":"v"}` || v2.Version <= v1.Version {
			t.Fatalf("patched %+v", v2)
		}
	})
	t.Run("refusals: a stale version, no task, a status that is not a change", func(t *testing.T) {
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "a", Title: ptr("x"), IfVersion: v1.Version}); !errors.Is(err, lease.ErrVersionMismatch) {
			t.Fatalf("stale If-Match: %v", err)
		}
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "nope", AgentID: "a", Title: ptr("x")}); !errors.Is(err, lease.ErrTaskNotFound) {
			t.Fatalf("missing: %v", err)
		}
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "a", Status: ptr(lease.StatusInProgress)}); !errors.Is(err, lease.ErrInvalid) {
			t.Fatalf("status in_progress: %v", err)
		}
	})
	t.Run("a held task keeps its lease, and cannot be reopened", func(t *testing.T) {
		// A field change never touches a live lease.
		co := e.checkout(t, "t", "a", time.Hour)
		held := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "b", Priority: ptr(1)}))
		if held.Checkout == nil || held.Checkout.Fence != co.Fence || held.Priority != 1 {
			t.Fatalf("patched held task %+v", held)
		}
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "a", Status: ptr(lease.StatusTodo)}); !errors.Is(err, lease.ErrInvalidTransition) {
			t.Fatalf("todo while held: %v", err)
		}
	})
	t.Run("a done task cannot be cancelled", func(t *testing.T) {
		must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "a"}))
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "a", Status: ptr(lease.StatusCancelled)}); !errors.Is(err, lease.ErrInvalidTransition) {
			t.Fatalf("cancel done: %v", err)
		}
	})
}

// Cancelling a task with a live lease is for its holder or an admin; it
// ends the lease with a cancel event and tells the watchers.
func TestCancelEndsTheLiveLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.queued(t, "t", "q", 5)
	e.checkout(t, "t", "a", time.Hour)
	if err := e.store.Watch(c, "t", "w"); err != nil {
		t.Fatal(err)
	}
	var nh *lease.NotHolderError
	if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "b", Status: ptr(lease.StatusCancelled)}); !errors.As(err, &nh) || nh.Holder.AgentID != "a" {
		t.Fatalf("cancel by another agent: %v", err)
	}
	got := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Status: ptr(lease.StatusCancelled)}))
	if got.Status != lease.StatusCancelled || got.Checkout != nil {
		t.Fatalf("cancelled %+v", got)
	}
	evs := e.events(t, "t")
	if k := kinds(evs); !slices.Equal(k, []lease.EventType{"checkout", "cancel"}) || evs[1].Held == nil || evs[1].By != "admin" {
		t.Fatalf("events %v %+v", k, evs)
	}
	msgs := e.inbox(t, "w")
	if len(msgs) != 1 || msgs[0].Reason != "cancel" {
		t.Fatalf("watcher's inbox %+v", msgs)
	}
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b"}); !errors.Is(err, lease.ErrStatusMismatch) {
		t.Fatalf("checkout of a cancelled task: %v", err)
	}
}

// Cancelling a task with no lease is a transition of its own: one cancel
// event, by the caller, that names no lease (no agent, fence 0, no
// held_seconds), tells nobody (no lease is lost, nobody is told the task
// is free) and sends no notice. A cancel repeated changes nothing.
func TestCancellingATaskWithoutALeaseRecordsItsEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.queued(t, "t", "q", 5)
	e.checkout(t, "t", "a", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"}))
	e.drain(t)
	notices := len(e.notes.Notices())
	before := e.get(t, "t")
	e.clock.Advance(time.Second)
	got := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "b", Status: ptr(lease.StatusCancelled)}))
	if got.Status != lease.StatusCancelled || got.Version != before.Version+1 {
		t.Fatalf("cancelled: %s version %d, was %d", got.Status, got.Version, before.Version)
	}
	// Before the stream archives it, and after.
	for _, when := range []string{"before the archive", "archived"} {
		evs := must[[]lease.Event](t)(e.store.Events(c, "t"))
		if k := kinds(evs); !slices.Equal(k, []lease.EventType{"checkout", "release", "cancel"}) {
			t.Fatalf("%s: events %v", when, k)
		}
		ev := evs[2]
		if ev.AgentID != "" || ev.RunID != "" || ev.Fence != 0 || ev.Held != nil || ev.By != "b" || ev.Reason != "cancelled" || !ev.At.Equal(e.clock.Now()) {
			t.Fatalf("%s: the cancel event %+v", when, ev)
		}
		if ev.EndsLease() {
			t.Errorf("%s: a cancel with no lease says it ends one", when)
		}
		e.drain(t)
	}
	if n := len(e.notes.Notices()); n != notices {
		t.Errorf("%d notices after the cancel, want none more than the %d before", n, notices)
	}
	if msgs := e.inbox(t, "a"); len(msgs) != 0 {
		t.Errorf("the former holder's inbox %+v, want nothing: it lost no lease", msgs)
	}
	again := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "b", Status: ptr(lease.StatusCancelled)}))
	if again.Version != got.Version || len(e.events(t, "t")) != 3 {
		t.Errorf("a repeated cancel wrote: version %d, was %d", again.Version, got.Version)
	}
}

// Cancelling a task whose lease expired unswept records the lease's timeout
// first, then cancels.
func TestCancelAfterExpiryRecordsTheTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.queued(t, "t", "q", 5)
	e.checkout(t, "t", "a", time.Second)
	e.clock.Advance(2 * time.Second)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "b", Status: ptr(lease.StatusCancelled)}))
	// The cancel ends no lease: its event names none.
	evs := e.events(t, "t")
	if k := kinds(evs); !slices.Equal(k, []lease.EventType{"checkout", "timeout", "cancel"}) || evs[2].Fence != 0 || evs[2].By != "b" {
		t.Fatalf("events %v %+v", k, evs)
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "t")); got.Status != lease.StatusCancelled {
		t.Fatalf("status %s", got.Status)
	}
}

// A cancel racing a checkout: either the checkout wins and the cancel (not
// by the holder) is not_holder, or the cancel wins and the checkout is a
// status mismatch. Never both, never a lease on a cancelled task.
func TestRaceCancelAgainstCheckout(t *testing.T) {
	t.Parallel()
	for round := range 8 {
		e := newEnv(t)
		c := ctx(t)
		id := fmt.Sprintf("t%d", round)
		e.queued(t, id, "q", 5)
		var coErr, cancelErr error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, coErr = e.store.Checkout(c, lease.CheckoutParams{TaskID: id, AgentID: "a"})
		}()
		go func() {
			defer wg.Done()
			_, cancelErr = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: id, AgentID: "b", Status: ptr(lease.StatusCancelled)})
		}()
		wg.Wait()
		got := must[lease.Task](t)(e.store.GetTask(c, id))
		switch {
		case coErr == nil && errors.Is(cancelErr, lease.ErrNotHolder):
			if got.Status != lease.StatusInProgress || got.Checkout == nil {
				t.Fatalf("checkout won, task %+v", got)
			}
		case cancelErr == nil && errors.Is(coErr, lease.ErrStatusMismatch):
			if got.Status != lease.StatusCancelled || got.Checkout != nil {
				t.Fatalf("cancel won, task %+v", got)
			}
		default:
			t.Fatalf("checkout: %v, cancel: %v, task %+v", coErr, cancelErr, got)
		}
	}
}

// A PATCH racing a release keeps both: the release's ending and the PATCH's
// field, and the task is claimable at its new priority.
func TestRacePatchAgainstRelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.lag(t, "", 50*time.Millisecond)
	c := ctx(t)
	for round := range 6 {
		id := fmt.Sprintf("t%d", round)
		e.queued(t, id, "q", 5)
		e.checkout(t, id, "a", time.Hour)
		var relErr, patchErr error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, relErr = e.store.Release(c, lease.ReleaseParams{TaskID: id, AgentID: "a"})
		}()
		go func() {
			defer wg.Done()
			_, patchErr = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: id, AgentID: "b", Priority: ptr(9), Title: ptr("patched")})
		}()
		wg.Wait()
		if relErr != nil || patchErr != nil {
			t.Fatalf("release: %v, patch: %v", relErr, patchErr)
		}
		got := must[lease.Task](t)(e.store.GetTask(c, id))
		if got.Status != lease.StatusTodo || got.Checkout != nil || got.Priority != 9 || got.Title != "patched" {
			t.Fatalf("task %+v", got)
		}
	}
	e.queued(t, "plain", "q", 5)
	e.settle(t)
	if got := e.claimAll(t, "q"); len(got) != 7 || got[6] != "plain" {
		t.Fatalf("claim order %v, want the six patched to priority 9 first", got)
	}
}

// A waiting claim is woken by a release in this process and gets the task.
func TestClaimWaitIsWokenByARelease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.queued(t, "t", "q", 5)
	e.checkout(t, "t", "a", time.Hour)
	start := time.Now()
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "b", Queues: []string{"q"}, Wait: 300 * time.Millisecond}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("wait with nothing free: %v", err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Fatalf("answered after %v, before its wait", d)
	}
	done := make(chan lease.Checkout, 1)
	go func() {
		co, err := e.store.Claim(c, lease.ClaimParams{AgentID: "b", Queues: []string{"q"}, Wait: 10 * time.Second})
		if err != nil {
			t.Errorf("waiting claim: %v", err)
		}
		done <- co
	}()
	// Wall time, not index lag: the claim above must be waiting before the
	// release, so that the release is what wakes it.
	time.Sleep(200 * time.Millisecond)
	released := time.Now()
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"}))
	co := <-done
	if co.TaskID != "t" || co.AgentID != "b" {
		t.Fatalf("claimed %+v", co)
	}
	// Woken, it looks at once (then at 100 ms, 200 ms, ...); under a
	// loaded machine's index lag that can still take a while, so only the
	// wait's bound is held here.
	t.Logf("claimed %v after the release", time.Since(released))
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "b", Wait: 21 * time.Second}); !errors.Is(err, lease.ErrInvalid) {
		t.Fatalf("wait 21s: %v", err)
	}
}

func TestListTasksByQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.queued(t, "a1", "a", 5)
	e.queued(t, "b1", "b", 5)
	e.queued(t, "a2", "a", 5)
	e.caughtUp(t) // the listing reads the claim index
	page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Queue: "a", Status: lease.StatusTodo}))
	var ids []string
	for _, tk := range page.Tasks {
		ids = append(ids, tk.TaskID)
	}
	if !slices.Equal(ids, []string{"a1", "a2"}) {
		t.Fatalf("queue a lists %v", ids)
	}
}
