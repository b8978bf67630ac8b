package lease_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// get reads a task.
func (e *env) get(t testing.TB, id string) lease.Task {
	t.Helper()
	return must[lease.Task](t)(e.store.GetTask(ctx(t), id))
}

// create creates a task from p.
func (e *env) create(t testing.TB, p lease.CreateTaskParams) lease.Task {
	t.Helper()
	return must[lease.Task](t)(e.store.CreateTask(ctx(t), p))
}

// complete checks taskID out for agentID and completes it.
func (e *env) complete(t testing.TB, taskID, agentID string) {
	t.Helper()
	co := e.checkout(t, taskID, agentID, time.Minute)
	must[lease.Task](t)(e.store.Complete(ctx(t), lease.CompleteParams{TaskID: taskID, AgentID: agentID, RunID: co.RunID}))
}

func count(evs []lease.Event, typ lease.EventType) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

func blockerIDs(bs []lease.Blocker) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b.TaskID + "=" + string(b.Status)
	}
	return out
}

// A dependent is blocked while any blocker is not done: claim skips it, a
// named checkout answers blocked with the open blockers, and when the last
// blocker completes the stream makes it todo, with one unblocked event and
// its watchers told.
func TestDependentIsBlockedUntilItsLastBlockerCompletes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a", "b")
	d := e.create(t, lease.CreateTaskParams{TaskID: "d", Queue: "deps", BlockedBy: []string{"a", "b", "a"}})
	if d.Status != lease.StatusBlocked || !slices.Equal(blockerIDs(d.BlockedBy), []string{"a=todo", "b=todo"}) {
		t.Fatalf("created dependent: status %s, blocked_by %v; want blocked by a and b (a once)", d.Status, blockerIDs(d.BlockedBy))
	}
	if got := e.get(t, "a").Blocks; !slices.Equal(got, []string{"d"}) {
		t.Errorf("a blocks %v, want [d]", got)
	}
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "x", Queues: []string{"deps"}}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("claim of a queue holding only a blocked task: %v, want no task available", err)
	}
	must[any](t)(nil, e.store.Watch(c, "d", "watcher"))
	e.complete(t, "a", "x")
	e.drain(t)
	_, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "d", AgentID: "x"})
	var be *lease.BlockedError
	if !errors.As(err, &be) || !slices.Equal(blockerIDs(be.BlockedBy), []string{"b=todo"}) {
		t.Fatalf("checkout of d blocked by b only: %v, want BlockedError naming b", err)
	}
	if got := blockerIDs(e.get(t, "d").BlockedBy); !slices.Equal(got, []string{"a=done", "b=todo"}) {
		t.Fatalf("d's blockers after a's completion: %v", got)
	}
	e.complete(t, "b", "x")
	e.drain(t)
	if st := e.get(t, "d").Status; st != lease.StatusTodo {
		t.Fatalf("d after its last blocker's completion: %s, want todo", st)
	}
	e.drain(t)
	if n := count(e.events(t, "d"), lease.EventUnblocked); n != 1 {
		t.Errorf("%d unblocked events, want 1", n)
	}
	var told []string
	for _, m := range e.inbox(t, "watcher") {
		told = append(told, m.TaskID+":"+m.Reason)
	}
	if !slices.Equal(told, []string{"d:unblocked"}) {
		t.Errorf("watcher's inbox %v, want one task_available for d, reason unblocked", told)
	}
	if n := e.noticeCount(t, lease.NoticeTaskAvailable, "d"); n != 1 {
		t.Errorf("%d TaskAvailable notices for d, want 1", n)
	}
	e.caughtUp(t) // the claim finds d through an index
	co := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "x", Queues: []string{"deps"}}))
	if co.TaskID != "d" || co.Attempt != 1 {
		t.Fatalf("claim after the unblocking: %s attempt %d, want d attempt 1", co.TaskID, co.Attempt)
	}
	// A completion repeated after a reopen unblocks nothing again.
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "b", Status: new(lease.StatusTodo)}))
	e.complete(t, "b", "y")
	if n := count(e.events(t, "d"), lease.EventUnblocked); n != 1 {
		t.Errorf("%d unblocked events after b completed again, want still 1", n)
	}
}

// Bad blockers are refused with the API's codes and change nothing.
func TestDependencyRulesRefuseBadBlockers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a", "b", "c")
	many := make([]string, lease.MaxBlockers+1)
	for i := range many {
		many[i] = fmt.Sprintf("m%d", i)
		e.task(t, many[i])
	}
	code := func(err error) string {
		var ve *lease.ValidationError
		if errors.As(err, &ve) {
			return ve.Code
		}
		return fmt.Sprint(err)
	}
	for _, tc := range []struct {
		name string
		p    lease.CreateTaskParams
		code string
	}{
		{"unknown blocker", lease.CreateTaskParams{TaskID: "n1", BlockedBy: []string{"a", "nope"}}, errcode.InvalidDependency},
		{"itself", lease.CreateTaskParams{TaskID: "n2", BlockedBy: []string{"n2"}}, errcode.InvalidDependency},
		{"too many", lease.CreateTaskParams{TaskID: "n3", BlockedBy: many}, errcode.InvalidDependency},
		{"bad id", lease.CreateTaskParams{TaskID: "n4", BlockedBy: []string{"no spaces"}}, errcode.InvalidID},
	} {
		if _, err := e.store.CreateTask(c, tc.p); code(err) != tc.code {
			t.Errorf("%s: %v, want %s", tc.name, err, tc.code)
		}
		if _, err := e.store.GetTask(c, tc.p.TaskID); !errors.Is(err, lease.ErrTaskNotFound) {
			t.Errorf("%s: the refused task exists (%v)", tc.name, err)
		}
	}
	if got := e.get(t, "a").Blocks; len(got) != 0 {
		t.Errorf("a refused dependent left a blocks %v", got)
	}
	// a <- b <- c: c naming... a naming c closes a cycle.
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "b", BlockedBy: &[]string{"a"}}))
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "c", BlockedBy: &[]string{"b"}}))
	before := e.get(t, "a")
	if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", BlockedBy: &[]string{"c"}}); code(err) != errcode.DependencyCycle {
		t.Fatalf("a blocked by c, which waits for a through b: %v, want dependency_cycle", err)
	}
	if after := e.get(t, "a"); after.Version != before.Version || after.Status != lease.StatusTodo {
		t.Errorf("the refused PATCH changed a: version %d -> %d, status %s", before.Version, after.Version, after.Status)
	}
	// blocked_by changes only on a todo or blocked task.
	e.checkout(t, "a", "x", time.Minute)
	if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", BlockedBy: &[]string{"m1"}}); !errors.Is(err, lease.ErrInvalidTransition) {
		t.Errorf("blocked_by on an in_progress task: %v, want invalid_transition", err)
	}
	// Even a list that changes nothing (a has no blockers): API.md allows
	// blocked_by on a todo or blocked task only.
	if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", BlockedBy: &[]string{}}); !errors.Is(err, lease.ErrInvalidTransition) {
		t.Errorf("blocked_by [] on an in_progress task without blockers: %v, want invalid_transition", err)
	}
	// Clearing a blocked task's blockers makes it todo.
	if got := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "c", BlockedBy: &[]string{}})); got.Status != lease.StatusTodo || len(got.BlockedBy) != 0 {
		t.Errorf("c with its blockers cleared: %s %v, want todo with none", got.Status, got.BlockedBy)
	}
	if got := e.get(t, "b").Blocks; len(got) != 0 {
		t.Errorf("b still blocks %v after c dropped it", got)
	}
}

// A cancelled or failed blocker keeps its dependents blocked, and GET says
// why; reopening and completing it releases them.
func TestCancelledBlockerKeepsItsDependentsBlocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"a"}})
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", Status: new(lease.StatusCancelled)}))
	e.drain(t)
	d := e.get(t, "d")
	if d.Status != lease.StatusBlocked || !slices.Equal(blockerIDs(d.BlockedBy), []string{"a=cancelled"}) {
		t.Fatalf("d with its blocker cancelled: %s %v, want blocked by a=cancelled", d.Status, blockerIDs(d.BlockedBy))
	}
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", Status: new(lease.StatusTodo)}))
	e.complete(t, "a", "x")
	e.drain(t)
	if st := e.get(t, "d").Status; st != lease.StatusTodo {
		t.Fatalf("d after a was reopened and completed: %s, want todo", st)
	}
}

// A dependent created while its blocker completes is never stranded: the
// writer's second look or the stream unblocks it, exactly once.
func TestDependentCreatedWhileItsBlockerCompletes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const rounds, dependents = 6, 4
	for r := range rounds {
		blocker := fmt.Sprintf("b%d", r)
		e.task(t, blocker)
		co := e.checkout(t, blocker, "x", time.Minute)
		var wg sync.WaitGroup
		for i := range dependents {
			wg.Go(func() {
				id := fmt.Sprintf("d%d-%d", r, i)
				if _, err := e.store.CreateTask(c, lease.CreateTaskParams{TaskID: id, BlockedBy: []string{blocker}}); err != nil {
					t.Errorf("create %s: %v", id, err)
				}
			})
		}
		wg.Go(func() {
			if _, err := e.store.Complete(c, lease.CompleteParams{TaskID: blocker, AgentID: "x", RunID: co.RunID}); err != nil {
				t.Errorf("complete %s: %v", blocker, err)
			}
		})
		wg.Wait()
	}
	e.drain(t)
	e.drain(t)
	for r := range rounds {
		for i := range dependents {
			id := fmt.Sprintf("d%d-%d", r, i)
			d := e.get(t, id)
			if d.Status != lease.StatusTodo {
				t.Errorf("%s: %s, want todo: its blocker is done", id, d.Status)
			}
			if n := count(e.events(t, id), lease.EventUnblocked); n > 1 {
				t.Errorf("%s: %d unblocked events, want at most 1", id, n)
			}
		}
	}
}

// Each grant is an attempt; a release with outcome failed waits the retry
// delay, doubled for each failure; the last attempt's failure fails the
// task, which tells its watchers; a reopen starts the attempts anew.
func TestFailedAttemptsDelayThenFailTheTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "t", MaxAttempts: new(3), RetryDelay: new(10 * time.Second)})
	fail := func(text string) lease.Checkout {
		t.Helper()
		co := e.checkout(t, "t", "x", time.Minute)
		e.drain(t) // the trail up to the checkout is archived; the release is not yet
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID, Outcome: lease.OutcomeFailed, Error: text}))
		return co
	}
	for i, wait := range []time.Duration{10 * time.Second, 20 * time.Second} {
		co := fail(fmt.Sprintf("boom %d", i+1))
		if co.Attempt != i+1 {
			t.Fatalf("grant %d has attempt %d", i+1, co.Attempt)
		}
		task := e.get(t, "t")
		if task.Status != lease.StatusTodo || task.Attempts != i+1 || task.NotBefore == nil || !task.NotBefore.Equal(e.clock.Now().Add(wait).Truncate(time.Millisecond)) {
			t.Fatalf("after failure %d: status %s attempts %d not_before %v; want todo, %d, now+%s", i+1, task.Status, task.Attempts, task.NotBefore, i+1, wait)
		}
		if task.LastError != fmt.Sprintf("boom %d", i+1) {
			t.Errorf("last_error %q", task.LastError)
		}
		// The release's event has its error at once, archived or not.
		evs := must[[]lease.Event](t)(e.store.Events(c, "t"))
		if last := evs[max(len(evs)-1, 0)]; last.Type != lease.EventRelease || last.Error != task.LastError || last.Outcome != lease.OutcomeFailed {
			t.Errorf("the failed release's event before the archive: %+v", last)
		}
		var nr *lease.NotReadyError
		if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "y"}); !errors.As(err, &nr) || !nr.NotBefore.Equal(*task.NotBefore) {
			t.Fatalf("checkout before not_before: %v, want not_ready at %v", err, task.NotBefore)
		}
		if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "y"}); !errors.Is(err, lease.ErrNoTaskAvailable) {
			t.Fatalf("claim before not_before: %v, want none available", err)
		}
		e.clock.Advance(wait)
	}
	must[any](t)(nil, e.store.Watch(c, "t", "watcher"))
	fail("boom 3")
	task := e.get(t, "t")
	if task.Status != lease.StatusFailed || task.Attempts != 3 {
		t.Fatalf("after the last attempt failed: %s with %d attempts, want failed with 3", task.Status, task.Attempts)
	}
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "y"}); !errors.Is(err, lease.ErrStatusMismatch) {
		t.Fatalf("checkout of a failed task: %v, want status_mismatch", err)
	}
	evs := e.events(t, "t")
	last := evs[len(evs)-2:]
	if last[0].Type != lease.EventRelease || last[0].Outcome != lease.OutcomeFailed || last[0].Error != "boom 3" ||
		last[1].Type != lease.EventFailed || last[1].Reason != "release" {
		t.Fatalf("last events %+v, want the failed release (with its error) and failed", last)
	}
	if n := e.noticeCount(t, lease.NoticeTaskFailed, "t"); n != 1 {
		t.Errorf("%d TaskFailed notices, want 1", n)
	}
	if msgs := e.inbox(t, "watcher"); len(msgs) != 1 || msgs[0].Reason != "failed" {
		t.Errorf("watcher's inbox %+v, want one message with reason failed", msgs)
	}
	reopened := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", Status: new(lease.StatusTodo)}))
	if reopened.Status != lease.StatusTodo || reopened.Attempts != 0 || reopened.NotBefore != nil {
		t.Fatalf("reopened: %s attempts %d not_before %v", reopened.Status, reopened.Attempts, reopened.NotBefore)
	}
	if co := e.checkout(t, "t", "y", time.Minute); co.Attempt != 1 {
		t.Errorf("first grant after the reopen: attempt %d", co.Attempt)
	}
}

// Timeouts and deaths are failed attempts too, claimable again at once; at
// the limit the sweep, or a checkout that would take the lease over, fails
// the task instead.
func TestTimeoutOfTheLastAttemptFailsTheTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	for _, id := range []string{"swept", "taken"} {
		e.create(t, lease.CreateTaskParams{TaskID: id, MaxAttempts: new(2)})
		e.checkout(t, id, "x", time.Minute)
	}
	e.clock.Advance(time.Minute)
	e.caughtUp(t) // the sweep finds the leases through an index
	must[lease.SweepResult](t)(e.store.Sweep(c))
	if task := e.get(t, "swept"); task.Status != lease.StatusTodo || task.NotBefore != nil {
		t.Fatalf("after a timeout below the limit: %s not_before %v, want todo at once", task.Status, task.NotBefore)
	}
	e.checkout(t, "swept", "x", time.Minute)
	e.checkout(t, "taken", "y", time.Minute) // takes the expired lease over: attempt 2
	e.clock.Advance(time.Minute)
	e.caughtUp(t) // the sweep finds the leases through an index
	must[lease.SweepResult](t)(e.store.Sweep(c))
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "taken", AgentID: "z"}); !errors.Is(err, lease.ErrStatusMismatch) {
		t.Fatalf("checkout over the last attempt's expired lease: %v, want status_mismatch (failed)", err)
	}
	for _, id := range []string{"swept", "taken"} {
		if st := e.get(t, id).Status; st != lease.StatusFailed {
			t.Errorf("%s: %s, want failed", id, st)
		}
		evs := e.events(t, id)
		if got := kinds(evs[len(evs)-2:]); !slices.Equal(got, []lease.EventType{lease.EventTimeout, lease.EventFailed}) {
			t.Errorf("%s ends with %v, want timeout then failed", id, got)
		}
		if n := count(evs, lease.EventFailed); n != 1 {
			t.Errorf("%s: %d failed events", id, n)
		}
	}
}

// The retry wait doubles with each failure and stops at an hour.
func TestRetryWaitDoublesUpToAnHour(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "t", MaxAttempts: new(10), RetryDelay: new(20 * time.Minute)})
	for i, want := range []time.Duration{20 * time.Minute, 40 * time.Minute, time.Hour, time.Hour} {
		co := e.checkout(t, "t", "x", time.Minute)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
		task := e.get(t, "t")
		if got := task.NotBefore.Sub(e.clock.Now()); got != want {
			t.Fatalf("failure %d waits %s, want %s", i+1, got, want)
		}
		if task.LastError != "" {
			t.Errorf("last_error %q without an error given", task.LastError)
		}
		e.clock.Advance(want)
	}
	// A release with outcome done is no failure: no wait.
	co := e.checkout(t, "t", "x", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID, Outcome: lease.OutcomeDone}))
	if task := e.get(t, "t"); task.NotBefore != nil || task.Status != lease.StatusTodo {
		t.Errorf("after a release with outcome done: %s not_before %v", task.Status, task.NotBefore)
	}
	if _, err := e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", Outcome: "maybe"}); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("outcome maybe: %v, want invalid", err)
	}
	if _, err := e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", Error: "no outcome"}); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("an error without outcome failed: %v, want invalid", err)
	}
	if _, err := e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", Outcome: lease.OutcomeFailed, Error: strings.Repeat("x", lease.MaxErrorLen+1)}); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("an error over 2 KiB: %v, want invalid", err)
	}
}

// A delayed task is not claimed before its not_before, ranks by priority
// once ready, and the sweep gives it its ready rank back.
func TestClaimWaitsForNotBefore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	later := e.clock.Now().Add(time.Minute)
	e.create(t, lease.CreateTaskParams{TaskID: "urgent-later", Queue: "q", Priority: new(9), NotBefore: &later})
	e.create(t, lease.CreateTaskParams{TaskID: "low-now", Queue: "q", Priority: new(0)})
	e.create(t, lease.CreateTaskParams{TaskID: "low-now-2", Queue: "q", Priority: new(0)})
	if got := e.get(t, "urgent-later").NotBefore; got == nil || !got.Equal(later) {
		t.Fatalf("not_before %v, want %v", got, later)
	}
	e.caughtUp(t) // the claims find the tasks through an index
	co := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "x", Queues: []string{"q"}}))
	if co.TaskID != "low-now" {
		t.Fatalf("claim before not_before: %s, want low-now", co.TaskID)
	}
	e.clock.Advance(time.Minute)
	e.caughtUp(t)
	co = must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "x", Queues: []string{"q"}}))
	if co.TaskID != "urgent-later" {
		t.Fatalf("claim once ready: %s, want urgent-later (priority 9)", co.TaskID)
	}
	// PATCH sets and clears not_before; the sweep ranks a ready one again.
	later = e.clock.Now().Add(time.Second)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "low-now-2", SetNotBefore: true, NotBefore: &later}))
	e.clock.Advance(time.Second)
	e.drain(t)    // the queue is counted, so the sweep knows it
	e.caughtUp(t) // and finds the delay through an index
	if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res.Ready != 1 {
		t.Errorf("sweep ranked %d ready tasks, want 1", res.Ready)
	}
	cleared := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "low-now-2", SetNotBefore: true}))
	if cleared.NotBefore != nil {
		t.Errorf("not_before after clearing: %v", cleared.NotBefore)
	}
}

// The last blocker completes while claims race for its dependents (and
// for the only task that is claimable before): no dependent is granted
// while it is blocked, none twice, and once the stream has unblocked them
// every one is claimed exactly once. The indexes lag.
func TestRaceClaimsForDependentsAsTheirBlockerCompletes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.lag(t, "", raceLag)
	c := ctx(t)
	const dependents = 12
	e.create(t, lease.CreateTaskParams{TaskID: "blocker", Queue: "graph", Priority: new(0)})
	for i := range dependents {
		e.create(t, lease.CreateTaskParams{TaskID: fmt.Sprintf("dep-%02d", i), Queue: "graph", Priority: new(9), BlockedBy: []string{"blocker"}})
	}
	holder := e.checkout(t, "blocker", "holder", time.Hour)
	var mu sync.Mutex
	owner := map[string]string{}
	stop := make(chan struct{})
	// The stream's consumer, as the local server runs it, all along.
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := e.poller.Poll(c); err != nil {
				t.Errorf("poll: %v", err)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	race(racers, func(i int) {
		agent := fmt.Sprintf("agent-%02d", i)
		if i == 0 {
			must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "blocker", AgentID: "holder", RunID: holder.RunID}))
		}
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
			got, err := e.store.Claim(c, lease.ClaimParams{AgentID: agent, Queues: []string{"graph"}, Timeout: time.Hour})
			if errors.Is(err, lease.ErrNoTaskAvailable) {
				mu.Lock()
				done := len(owner) == dependents
				mu.Unlock()
				if done {
					return
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			if err != nil {
				t.Errorf("claim: %v", err)
				return
			}
			mu.Lock()
			if prev, dup := owner[got.TaskID]; dup {
				t.Errorf("%s claimed by %s and %s", got.TaskID, prev, agent)
			}
			if got.TaskID == "blocker" {
				t.Errorf("the blocker was claimed while held")
			}
			owner[got.TaskID] = agent
			mu.Unlock()
		}
	})
	close(stop)
	wg.Wait()
	if len(owner) != dependents {
		t.Fatalf("%d of %d dependents claimed", len(owner), dependents)
	}
	e.drain(t)
	for i := range dependents {
		id := fmt.Sprintf("dep-%02d", i)
		evs := e.events(t, id)
		// Granted only after it was unblocked, once.
		if got := kinds(evs); !slices.Equal(got, []lease.EventType{lease.EventUnblocked, lease.EventCheckout}) {
			t.Errorf("%s's trail %v, want unblocked then checkout", id, got)
		}
	}
}

// A waiting claim takes a delayed task once its not_before has come,
// never before: it looks again at that moment rather than only at its
// next poll. (The store here runs on the real clock: the claim waits in
// real time.)
func TestWaitingClaimTakesADelayedTaskWhenReady(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	store := lease.New(lease.Config{DB: e.db, Tables: e.names})
	ready := time.Now().Add(300 * time.Millisecond)
	must[lease.Task](t)(store.CreateTask(c, lease.CreateTaskParams{TaskID: "later", Queue: "waits", NotBefore: &ready}))
	got := must[lease.Checkout](t)(store.Claim(c, lease.ClaimParams{AgentID: "x", Queues: []string{"waits"}, Wait: 10 * time.Second}))
	if got.TaskID != "later" {
		t.Fatalf("claimed %s, want later", got.TaskID)
	}
	if got.LockedAt.Before(ready.Truncate(time.Millisecond)) {
		t.Fatalf("granted at %v, before its not_before %v", got.LockedAt, ready)
	}
}

// readHook runs hook, once armed, right after the first GetItem on table
// returns: a write of another that lands between a request's read and its
// write.
type readHook struct {
	*dynamodb.Client
	table string
	armed atomic.Bool
	hook  func()
}

func (r *readHook) GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := r.Client.GetItem(ctx, in, optFns...)
	if *in.TableName == r.table && r.armed.CompareAndSwap(true, false) {
		r.hook()
	}
	return out, err
}

// A failed release decides its ending on the task it read, and is pinned
// to it: a PATCH of the priority that lands between its read and its write
// makes it decide again, so that the delayed task's claim key carries the
// priority the task has (a PATCH that changes nothing afterwards writes
// nothing). Found by TestLinearizabilityWorkGraph: the key kept the old
// priority, and the next PATCH rewrote it.
func TestFailedReleaseRacingAPriorityChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "t", MaxAttempts: new(10)})
	co := e.checkout(t, "t", "a", time.Minute)
	r := &readHook{Client: e.db, table: e.names.Table(schema.TasksTable)}
	r.hook = func() {
		must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "x", Priority: new(0)}))
	}
	s := lease.New(lease.Config{DB: r, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	r.armed.Store(true)
	must[lease.Released](t)(s.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	if r.armed.Load() {
		t.Fatal("the PATCH never ran between the release's read and its write")
	}
	before := e.get(t, "t")
	q := lease.DefaultQueue
	after := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "y", Queue: &q}))
	if after.Version != before.Version || before.Priority != 0 || before.NotBefore == nil {
		t.Fatalf("after the failed release: priority %d, not_before %v; a PATCH changing nothing moved the version %d -> %d",
			before.Priority, before.NotBefore, before.Version, after.Version)
	}
}

// Every answer that shows a task shows its graph as GET does: the
// completion's answer, a PATCH that changes nothing, and a batch create
// that finds the task there already all list the tasks it blocks and its
// blockers with their statuses.
func TestEveryTaskAnswerShowsItsGraph(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "up")
	e.create(t, lease.CreateTaskParams{TaskID: "mid", BlockedBy: []string{"up"}})
	e.create(t, lease.CreateTaskParams{TaskID: "down", BlockedBy: []string{"mid"}})
	co := e.checkout(t, "up", "x", time.Minute)
	done := must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "up", AgentID: "x", RunID: co.RunID}))
	if !slices.Equal(done.Blocks, []string{"mid"}) {
		t.Errorf("complete's answer: blocks %v, want [mid] as GET shows", done.Blocks)
	}
	again := must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "up", AgentID: "x", RunID: co.RunID}))
	if !slices.Equal(again.Blocks, []string{"mid"}) {
		t.Errorf("complete retried: blocks %v, want [mid]", again.Blocks)
	}
	title := "title of mid"
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "mid", AgentID: "x", Title: &title}))
	same := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "mid", AgentID: "x", Title: &title}))
	if !slices.Equal(same.Blocks, []string{"down"}) || !slices.Equal(blockerIDs(same.BlockedBy), []string{"up=done"}) {
		t.Errorf("a PATCH that changes nothing: blocks %v, blocked_by %v; want [down] and [up=done]", same.Blocks, blockerIDs(same.BlockedBy))
	}
	res := must[[]lease.BatchResult](t)(e.store.CreateTasks(c, []lease.CreateTaskParams{{TaskID: "mid", BlockedBy: []string{"up"}}}))
	if len(res) != 1 || res[0].Outcome != lease.BatchExists {
		t.Fatalf("batch create of an existing task: %+v", res)
	}
	if got := res[0].Task; !slices.Equal(got.Blocks, []string{"down"}) || !slices.Equal(blockerIDs(got.BlockedBy), []string{"up=done"}) {
		t.Errorf("batch create, exists: blocks %v, blocked_by %v; want [down] and [up=done]", got.Blocks, blockerIDs(got.BlockedBy))
	}
}

// A task reopened is blocked while any task of its blocked_by is not done
// now, whatever it waited on before: here its blocker was done when it
// was unblocked, and has been reopened since. Completing the blocker
// again unblocks it.
func TestReopenedTaskWaitsForABlockerReopenedSince(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "b")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"b"}})
	e.complete(t, "b", "x")
	e.drain(t)
	e.complete(t, "d", "x")
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "b", AgentID: "x", Status: new(lease.StatusTodo)}))
	d := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "x", Status: new(lease.StatusTodo)}))
	if d.Status != lease.StatusBlocked || !slices.Equal(blockerIDs(d.BlockedBy), []string{"b=todo"}) {
		t.Fatalf("d reopened while b is todo again: %s, blocked_by %v; want blocked by b", d.Status, blockerIDs(d.BlockedBy))
	}
	if got := e.get(t, "d").Status; got != lease.StatusBlocked {
		t.Fatalf("d read after its reopen: %s, want blocked", got)
	}
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "d", AgentID: "y"}); !errors.Is(err, lease.ErrBlocked) {
		t.Fatalf("checkout of the reopened d: %v, want blocked", err)
	}
	e.complete(t, "b", "x")
	e.drain(t)
	if got := e.get(t, "d").Status; got != lease.StatusTodo {
		t.Fatalf("d after b completed again: %s, want todo", got)
	}
}

// A checkout with watch that finds the task blocked puts the caller on its
// watch list, as one that finds it checked out does: the caller is told
// when the task is unblocked.
func TestBlockedCheckoutWithWatchIsToldOfTheUnblocking(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "b")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"b"}})
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "d", AgentID: "w", Watch: true}); !errors.Is(err, lease.ErrBlocked) {
		t.Fatalf("checkout of blocked d with watch: %v, want blocked", err)
	}
	e.complete(t, "b", "x")
	e.drain(t) // d unblocked
	e.drain(t) // its unblocking tells the watchers
	var told []string
	for _, m := range e.inbox(t, "w") {
		told = append(told, m.Type+":"+m.TaskID+":"+m.Reason)
	}
	if want := []string{lease.MessageTaskAvailable + ":d:" + string(lease.EventUnblocked)}; !slices.Equal(told, want) {
		t.Fatalf("w's inbox %v, want %v", told, want)
	}
}

// Two PATCHes that would each close the same cycle, racing: at most one
// of them applies; the other is refused (dependency_cycle). Each round
// races a fresh pair of tasks on real goroutines.
func TestRacingPatchesNeverCloseACycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	for round := range 12 {
		a, b := fmt.Sprintf("a%d", round), fmt.Sprintf("b%d", round)
		e.task(t, a, b)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for i, pair := range [][2]string{{a, b}, {b, a}} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				_, errs[i] = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: pair[0], AgentID: "x", BlockedBy: &[]string{pair[1]}})
			}()
		}
		close(start)
		wg.Wait()
		applied := 0
		for _, err := range errs {
			var ve *lease.ValidationError
			switch {
			case err == nil:
				applied++
			case errors.As(err, &ve) && ve.Code == lease.CodeDependencyCycle:
			default:
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if applied != 1 {
			t.Fatalf("round %d: %d of the two PATCHes that close a cycle applied, want exactly 1: %v", round, applied, errs)
		}
	}
}

// A lease that has ended by time, not swept yet, is shown as the task's
// next state: todo, or failed when it was the last attempt (its timeout
// fails the task), never a todo that the task is never in. And the task
// stays in the listing of every task: it used to be dropped from every
// listing until the sweep, its index entry saying in_progress and its
// view something else.
func TestAnExpiredLastAttemptShowsFailedBeforeTheSweep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "last", Queue: "q", MaxAttempts: new(1)})
	e.create(t, lease.CreateTaskParams{TaskID: "more", Queue: "q", MaxAttempts: new(2)})
	e.checkout(t, "last", "x", time.Minute)
	e.checkout(t, "more", "x", time.Minute)
	e.clock.Advance(2 * time.Minute)
	want := map[string]lease.Status{"last": lease.StatusFailed, "more": lease.StatusTodo}
	for id, st := range want {
		if got := e.get(t, id); got.Status != st || got.Checkout != nil {
			t.Errorf("GET %s after its lease expired: %s (checkout %v), want %s", id, got.Status, got.Checkout, st)
		}
	}
	e.caughtUp(t) // the listing finds the tasks through indexes
	page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Queue: "q"}))
	got := map[string]lease.Status{}
	for _, task := range page.Tasks {
		got[task.TaskID] = task.Status
	}
	if !maps.Equal(got, want) {
		t.Errorf("listing of every task of q: %v, want %v", got, want)
	}
	must[lease.SweepResult](t)(e.store.Sweep(c))
	for id, st := range want {
		if got := e.get(t, id); got.Status != st {
			t.Errorf("GET %s after the sweep: %s, want %s", id, got.Status, st)
		}
	}
}

// Naming a task as a blocker changes nothing a client of that task sees
// but its blocks, which no version guards (a PATCH of the dependent's
// blocked_by changes it too): so the blocker's version stays. It used to
// grow at its first dependent's link, and a create refused because its
// id was taken (409 task_exists, a batch's "exists") still moved it, so
// a client's If-Match on the blocker failed for a change nobody made.
func TestNamingABlockerLeavesItsVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "b1", "b2", "taken")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"b1"}})
	if _, err := e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "taken", BlockedBy: []string{"b2"}}); !errors.Is(err, lease.ErrTaskExists) {
		t.Fatalf("create of a taken id: %v, want task_exists", err)
	}
	res := must[[]lease.BatchResult](t)(e.store.CreateTasks(c, []lease.CreateTaskParams{{TaskID: "taken", BlockedBy: []string{"b2"}}}))
	if len(res) != 1 || res[0].Outcome != lease.BatchExists {
		t.Fatalf("batch create of a taken id: %+v, want exists", res)
	}
	for _, id := range []string{"b1", "b2"} {
		if v := e.get(t, id).Version; v != 1 {
			t.Errorf("%s: version %d after being named a blocker, want 1", id, v)
		}
	}
	if got := e.get(t, "b1").Blocks; !slices.Equal(got, []string{"d"}) {
		t.Errorf("b1 blocks %v, want [d]", got)
	}
	if got := e.get(t, "b2").Blocks; len(got) != 0 {
		t.Errorf("b2 blocks %v after creates that were refused, want none", got)
	}
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "b1", AgentID: "x", Title: new("t"), IfVersion: 1}))
}

// A change of blocked_by that cannot take the graph's lock in time (too
// many run at once, fleet-wide) says so, ErrBusy, which the API answers
// with 503 and Retry-After: it used to be an error that read as the
// database being down.
func TestABlockedByChangeThatCannotLockTheGraphIsBusy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a", "b")
	// Another change holds the lock, for ten seconds from now.
	_, err := e.db.PutItem(c, &dynamodb.PutItemInput{TableName: aws.String(e.names.Table(schema.HeartbeatsTable)), Item: map[string]types.AttributeValue{
		"agent_id": &types.AttributeValueMemberS{Value: "#graph"},
		"token":    &types.AttributeValueMemberS{Value: "graph-other"},
		"until":    &types.AttributeValueMemberN{Value: strconv.FormatInt(e.clock.Now().Add(10*time.Second).UnixMilli(), 10)},
	}})
	if err != nil {
		t.Fatal(err)
	}
	lease.WaitForGraphLock(e.store, 50*time.Millisecond)
	_, err = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", AgentID: "x", BlockedBy: &[]string{"b"}})
	if !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("PATCH of blocked_by while the graph is locked: %v, want ErrBusy", err)
	}
	if got := e.get(t, "a"); got.Status != lease.StatusTodo || len(got.BlockedBy) != 0 || got.Version != 1 {
		t.Fatalf("a after the busy PATCH: %s, blocked_by %v, version %d; want it unchanged", got.Status, got.BlockedBy, got.Version)
	}
}

// last_error is the error of the latest failed release: one that gave no
// error clears it (it used to keep the error of an earlier one).
func TestAFailedReleaseWithoutErrorClearsLastError(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "t", MaxAttempts: new(5), RetryDelay: new(time.Duration(0))})
	co := e.checkout(t, "t", "x", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID, Outcome: lease.OutcomeFailed, Error: "disk full"}))
	if got := e.get(t, "t").LastError; got != "disk full" {
		t.Fatalf("last_error after a failed release with an error: %q", got)
	}
	co = e.checkout(t, "t", "x", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	if got := e.get(t, "t").LastError; got != "" {
		t.Errorf("last_error after a later failed release with none: %q, want none", got)
	}
	co = e.checkout(t, "t", "x", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID, Outcome: lease.OutcomeFailed, Error: "again"}))
	co = e.checkout(t, "t", "x", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID}))
	if got := e.get(t, "t").LastError; got != "again" {
		t.Errorf("last_error after a plain release: %q, want the last failed release's, again", got)
	}
}

// max_attempts may not be lowered to attempts already used by a task that
// waits for its next one (todo or blocked), nor below them on a task in
// progress: the next grant would be an attempt past the limit. It used
// to be accepted, and claim then handed out attempt 4 of 2. With a reopen
// in the same PATCH the attempts count anew, so any limit goes.
func TestMaxAttemptsBelowTheAttemptsUsedIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "t", MaxAttempts: new(5), RetryDelay: new(time.Duration(0))})
	for range 2 {
		co := e.checkout(t, "t", "x", time.Minute)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	}
	var verr *lease.ValidationError
	for _, n := range []int{1, 2} {
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "x", MaxAttempts: &n}); !errors.As(err, &verr) || verr.Field != "max_attempts" {
			t.Errorf("max_attempts %d on a todo task after 2 attempts: %v, want invalid max_attempts", n, err)
		}
	}
	if got := e.get(t, "t"); got.MaxAttempts != 5 || got.Version != 5 {
		t.Fatalf("t after the refused PATCHes: max_attempts %d, version %d; want 5, 5", got.MaxAttempts, got.Version)
	}
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "x", MaxAttempts: new(3)}))
	co := e.checkout(t, "t", "x", time.Minute) // attempt 3 of 3
	if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "x", MaxAttempts: new(2)}); !errors.As(err, &verr) {
		t.Errorf("max_attempts 2 during attempt 3: %v, want invalid max_attempts", err)
	}
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "x", MaxAttempts: new(3)}))
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	if got := e.get(t, "t"); got.Status != lease.StatusFailed {
		t.Fatalf("after its third failed attempt of 3: %s, want failed", got.Status)
	}
	reopened := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "x", Status: new(lease.StatusTodo), MaxAttempts: new(1)}))
	if reopened.Status != lease.StatusTodo || reopened.Attempts != 0 || reopened.MaxAttempts != 1 {
		t.Errorf("reopened with max_attempts 1: %s, attempts %d of %d; want todo, 0 of 1", reopened.Status, reopened.Attempts, reopened.MaxAttempts)
	}
}

// A task whose last attempt's lease has expired, not swept yet, is shown
// failed; a PATCH of its max_attempts ends that lease first, as the sweep
// would, and so finds it failed: it used to raise the limit under the
// ended lease, and the task came back as todo though it had failed.
func TestRaisingMaxAttemptsDoesNotReviveAnExpiredLastAttempt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "t", MaxAttempts: new(1)})
	e.checkout(t, "t", "x", time.Minute)
	e.clock.Advance(2 * time.Minute)
	if got := e.get(t, "t"); got.Status != lease.StatusFailed {
		t.Fatalf("before the PATCH: %s, want failed", got.Status)
	}
	got := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "x", MaxAttempts: new(5)}))
	if got.Status != lease.StatusFailed || got.MaxAttempts != 5 {
		t.Errorf("PATCH max_attempts 5: %s, max_attempts %d; want failed, 5", got.Status, got.MaxAttempts)
	}
	must[lease.SweepResult](t)(e.store.Sweep(c))
	if got := e.get(t, "t"); got.Status != lease.StatusFailed {
		t.Errorf("after the sweep: %s, want failed", got.Status)
	}
	if evs := kinds(e.events(t, "t")); !slices.Equal(evs, []lease.EventType{lease.EventCheckout, lease.EventTimeout, lease.EventFailed}) {
		t.Errorf("trail %v, want checkout, timeout, failed", evs)
	}
}

// A checkout that does not expect todo, of a task whose last attempt's
// lease has expired unswept, names the status GET shows, failed (it named
// todo, a status the task is never in).
func TestAMismatchNamesTheStatusShown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "t", MaxAttempts: new(1)})
	e.checkout(t, "t", "x", time.Minute)
	e.clock.Advance(2 * time.Minute)
	_, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "y", ExpectedStatuses: []lease.Status{lease.StatusInProgress}})
	var mm *lease.StatusMismatchError
	if !errors.As(err, &mm) || mm.Status != lease.StatusFailed {
		t.Fatalf("checkout expecting in_progress: %v, want status_mismatch naming failed", err)
	}
}

// A checkout that takes a cancelled or done task again is a reopening: it
// answers blocked, naming the open blockers, while any blocker is not
// done, as a PATCH that reopens the task would leave it blocked; once they
// are all done it grants. It used to grant at once, and the task's
// release then left it todo with an open blocker, for claims to hand out.
func TestCheckoutReopeningATaskWaitsForItsBlockers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "b")
	e.create(t, lease.CreateTaskParams{TaskID: "d", Queue: "reopen", Priority: new(9), BlockedBy: []string{"b"}})
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "x", Status: new(lease.StatusCancelled)}))
	_, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "d", AgentID: "y", ExpectedStatuses: []lease.Status{lease.StatusCancelled}})
	var be *lease.BlockedError
	if !errors.As(err, &be) || !slices.Equal(blockerIDs(be.BlockedBy), []string{"b=todo"}) {
		t.Fatalf("checkout of cancelled d while b is todo: %v, want blocked by b", err)
	}
	if got := e.get(t, "d").Status; got != lease.StatusCancelled {
		t.Fatalf("d after the refused checkout: %s, want cancelled (unchanged)", got)
	}
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "z", Queues: []string{"reopen"}}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("claim of d's queue: %v, want no task available", err)
	}
	e.complete(t, "b", "x")
	co, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "d", AgentID: "y", ExpectedStatuses: []lease.Status{lease.StatusCancelled}})
	if err != nil || co.AgentID != "y" {
		t.Fatalf("checkout of cancelled d once b is done: %+v, %v; want granted", co, err)
	}
}

// Plain releases are grants but not failures, so a task can have had more
// attempts than its max_attempts. A PATCH that keeps max_attempts as it is
// (a client writing back what it read) or raises it takes nothing away and
// is accepted; one that lowers it is still held to the attempts used.
func TestMaxAttemptsKeptOrRaisedPastTheAttemptsUsedIsAccepted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "t", MaxAttempts: new(2)})
	for range 3 {
		co := e.checkout(t, "t", "x", time.Minute)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID}))
	}
	if got := e.get(t, "t"); got.Attempts != 3 || got.MaxAttempts != 2 {
		t.Fatalf("t after three plain releases: attempts %d of %d, want 3 of 2", got.Attempts, got.MaxAttempts)
	}
	for _, n := range []int{2, 3} {
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "x", MaxAttempts: &n}); err != nil {
			t.Errorf("max_attempts %d (kept or raised) after 3 attempts: %v, want accepted", n, err)
		}
	}
	var verr *lease.ValidationError
	if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "x", MaxAttempts: new(1)}); !errors.As(err, &verr) || verr.Field != "max_attempts" {
		t.Errorf("max_attempts 1 (lowered) after 3 attempts: %v, want invalid max_attempts", err)
	}
	if got := e.get(t, "t"); got.MaxAttempts != 3 {
		t.Fatalf("t's max_attempts %d, want 3", got.MaxAttempts)
	}
}

// A PATCH of blocked_by that leaves a blocked task waiting on nothing
// unblocks it as a blocker's completion would: with an unblocked event,
// and its watchers told (task_available, reason unblocked). They used to
// hear nothing until the task's next freeing. Its event is by the PATCH's
// caller (it was "system").
func TestPatchThatUnblocksTellsTheWatchers(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "b")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"b"}})
	if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "d", AgentID: "w", Watch: true}); !errors.As(err, new(*lease.BlockedError)) {
		t.Fatalf("checkout of blocked d with watch: %v, want blocked", err)
	}
	d := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "x", BlockedBy: new([]string{})}))
	if d.Status != lease.StatusTodo {
		t.Fatalf("d after its blockers were dropped: %s, want todo", d.Status)
	}
	e.drain(t)
	evs := e.events(t, "d")
	if n := count(evs, lease.EventUnblocked); n != 1 {
		t.Fatalf("d's events: %d unblocked, want 1", n)
	}
	// b is not done: the reason names the PATCH, not a blocker's completion.
	if last := evs[len(evs)-1]; last.Type != lease.EventUnblocked || last.Reason != "its blocked_by was changed" {
		t.Errorf("d's unblocked event %+v, want reason %q", last, "its blocked_by was changed")
	}
	// And it names who made the change, as a cancel does.
	if last := evs[len(evs)-1]; last.By != "x" {
		t.Errorf("d's unblocked event by %q, want the PATCH's caller x", last.By)
	}
	var told []string
	for _, m := range e.inbox(t, "w") {
		told = append(told, m.Type+":"+m.TaskID+":"+m.Reason)
	}
	if want := []string{lease.MessageTaskAvailable + ":d:" + string(lease.EventUnblocked)}; !slices.Equal(told, want) {
		t.Fatalf("w's inbox %v, want %v", told, want)
	}
}

// A checkout of a task still blocked in name, whose blockers are all done
// (the change stream has not unblocked it yet), unblocks it in its grant's
// own write rather than answering blocked by no task: the trail shows
// unblocked, then checkout; the stream's unblocking that follows writes
// nothing; watchers are not told (the task was never free) and keep their
// watch for this lease's end. A task waiting on a blocker not done is
// still refused, naming it.
func TestCheckoutRightAfterTheLastBlockerCompletesGrants(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "b", "c")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"b"}})
	e.create(t, lease.CreateTaskParams{TaskID: "d2", BlockedBy: []string{"b", "c"}})
	must[any](t)(nil, e.store.Watch(c, "d", "watcher"))
	e.drain(t)
	e.complete(t, "b", "x") // no drain: d is still blocked in its item
	if st := e.get(t, "d").Status; st != lease.StatusBlocked {
		t.Fatalf("d before the stream ran: %s, want blocked (the test proves nothing)", st)
	}
	co, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "d", AgentID: "y"})
	if err != nil || co.AgentID != "y" || co.Fence != 1 || co.Attempt != 1 {
		t.Fatalf("checkout of d once b is done: %+v, %v; want granted, fence 1, attempt 1", co, err)
	}
	if got := e.get(t, "d"); got.Status != lease.StatusInProgress || got.Version != 2 || len(got.BlockedBy) != 1 {
		t.Fatalf("d after the checkout: %s, version %d, blockers %+v; want in_progress, version 2 (one write)", got.Status, got.Version, got.BlockedBy)
	}
	_, err = e.store.Checkout(c, lease.CheckoutParams{TaskID: "d2", AgentID: "y"})
	var be *lease.BlockedError
	if !errors.As(err, &be) || len(be.BlockedBy) != 1 || be.BlockedBy[0].TaskID != "c" {
		t.Fatalf("checkout of d2, which still waits on c: %v, want blocked by c", err)
	}
	e.drain(t)
	e.drain(t)
	evs := e.events(t, "d")
	if got, want := kinds(evs), []lease.EventType{lease.EventUnblocked, lease.EventCheckout}; !slices.Equal(got, want) {
		t.Fatalf("d's trail %v, want %v", got, want)
	}
	if u := evs[0]; u.By != lease.BySystem || !strings.Contains(u.Reason, "b") || evs[1].Seq != u.Seq+1 || !evs[1].At.Equal(u.At) {
		t.Errorf("d's unblocked event %+v and checkout %+v: want by system, naming b, the checkout next and at the same time", u, evs[1])
	}
	if got := e.get(t, "d"); got.Version != 2 || got.Status != lease.StatusInProgress {
		t.Errorf("d after the stream ran: %s, version %d; want its unblocking to have written nothing", got.Status, got.Version)
	}
	for _, m := range e.inbox(t, "watcher") {
		if m.TaskID == "d" {
			t.Fatalf("the watcher was told %+v while d was checked out", m)
		}
	}
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "d", AgentID: "y", RunID: co.RunID}))
	if msgs := e.inbox(t, "watcher"); len(msgs) != 1 || msgs[0].TaskID != "d" || msgs[0].Reason != string(lease.EventRelease) {
		t.Fatalf("the watcher's inbox after d's release: %+v, want its task_available", msgs)
	}
}

// An attempt that ended by timeout or by its holder's death is a failure
// however it ended: by the sweep, or taken over by a checkout. The next
// failed release waits as after its second failure (retry delay x 2).
func TestATakenOverAttemptCountsAsAFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const delay = 10 * time.Second
	for _, id := range []string{"swept", "expired", "dead"} {
		e.create(t, lease.CreateTaskParams{TaskID: id, MaxAttempts: new(5), RetryDelay: new(delay)})
	}
	e.checkout(t, "swept", "x", time.Minute)
	e.clock.Advance(time.Minute + time.Second)
	must[lease.SweepResult](t)(e.store.Sweep(c))
	if task := e.get(t, "swept"); task.Status != lease.StatusTodo {
		t.Fatalf("swept: %s after the sweep, want todo", task.Status)
	}
	e.checkout(t, "expired", "x", time.Minute)
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "mortal", time.Minute))
	e.checkout(t, "dead", "mortal", time.Hour)
	e.clock.Advance(time.Minute + time.Second) // expired, and mortal dead, unswept
	for _, id := range []string{"swept", "expired", "dead"} {
		co := e.checkout(t, id, "y", time.Minute)
		if co.Attempt != 2 {
			t.Fatalf("%s: the second grant is attempt %d", id, co.Attempt)
		}
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: id, AgentID: "y", RunID: co.RunID, Fence: co.Fence, Outcome: lease.OutcomeFailed}))
		task := e.get(t, id)
		if task.NotBefore == nil || task.NotBefore.Sub(e.clock.Now()) != 2*delay {
			t.Errorf("%s: the failed release after a failed attempt waits until %v, want now+%s", id, task.NotBefore, 2*delay)
		}
	}
}
