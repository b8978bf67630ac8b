package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// Tests with the local DynamoDB's index lag on: an index may show what an
// item no longer is, and no decision may trust it.

// indexLag is long enough that a test's next steps run well inside it.
const indexLag = 2 * time.Second

// A stale heartbeats index says an agent is due, though it has renewed its
// heartbeat: the sweep confirms with a consistent read and leaves the
// agent's live lease alone.
func TestSweepIgnoresAStaleDeathInTheIndex(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Second))
	e.lag(t, schema.HeartbeatsTable, indexLag)
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Hour)) // the index still says 1s
	e.clock.Advance(1500 * time.Millisecond)
	co := e.checkout(t, "t1", "a", time.Hour)

	if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res.AgentDeaths != 0 {
		t.Fatalf("sweep = %+v: it ended a live lease on a stale index", res)
	}
	if got := must[*lease.Checkout](t)(e.store.LockStatus(c, "t1")); got == nil || got.Fence != co.Fence {
		t.Fatalf("lock status = %+v, want the live lease", got)
	}
}

// A claim retried with the same run id, while the indexes still show its
// first grant's task as todo and not as the agent's, gets the same lease,
// not a second task.
func TestClaimRetryUnderIndexLagGetsTheSameLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.lag(t, schema.TasksTable, indexLag)
	e.task(t, "t1")
	e.clock.Advance(time.Millisecond)
	e.task(t, "t2")
	eventually(t, "both tasks in the todo index", func() bool {
		page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo}))
		return len(page.Tasks) == 2
	})
	first := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Hour}))
	again := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Hour}))
	if again.TaskID != first.TaskID || again.Fence != first.Fence {
		t.Fatalf("retry got %s fence %d, want %s fence %d", again.TaskID, again.Fence, first.TaskID, first.Fence)
	}
	other := "t1"
	if first.TaskID == "t1" {
		other = "t2"
	}
	if got := must[*lease.Checkout](t)(e.store.LockStatus(c, other)); got != nil {
		t.Fatalf("the retry also took %s: %+v", other, got)
	}
}

// Listings right after a release, while the indexes still show the lease:
// no ended lease is listed live, and no task under a status it left.
func TestListingsUnderIndexLag(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	e.checkout(t, "t1", "a", time.Hour)
	eventually(t, "the lease in the index", func() bool {
		page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusInProgress}))
		return len(page.Tasks) == 1
	})
	e.lag(t, schema.TasksTable, indexLag)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t1", AgentID: "a"}))

	if got := must[[]lease.Checkout](t)(e.store.ListCheckouts(c, "")); len(got) != 0 {
		t.Fatalf("checkouts after release = %+v, want none", got)
	}
	if got := must[[]lease.Checkout](t)(e.store.ListCheckouts(c, "a")); len(got) != 0 {
		t.Fatalf("a's checkouts after release = %+v, want none", got)
	}
	page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusInProgress}))
	for _, task := range page.Tasks {
		if task.Status != lease.StatusInProgress {
			t.Fatalf("in_progress listing shows %s as %s", task.TaskID, task.Status)
		}
	}
	if len(page.Tasks) != 0 {
		t.Fatalf("in_progress listing = %+v, want none", page.Tasks)
	}
	eventually(t, "the released task listed as todo", func() bool {
		page := must[lease.TaskPage](t)(e.store.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo}))
		return len(page.Tasks) == 1 && page.Tasks[0].TaskID == "t1"
	})
}
