package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
)

// TestUnitBudgetLongIDs holds a task as fleets name it to the budgets of
// TestUnitBudget's small task: task, agent and run ids that are UUIDs (36
// characters), agents with names, a title of a few dozen characters, and a
// history on the item (a lease that expired and was taken over, a
// release), which leaves the last ending's record on it for good. Each of
// its transitions writes the whole task item, so its size decides them:
// an item past 1 KB bills a write unit more for every checkout, renewal
// and ending of the task. Times are of the milliseconds a clock shows
// (whole seconds end in zeros, which DynamoDB does not bill). The same
// task is also held to them done once and reopened first (the reopen
// keeps the attempt of the grant before it on that grant's record: an
// attempt_was of 22 bytes, kept until the next reopen, billed it renew 6
// and release 7), and PATCHed five times while held rather than once (the
// ids of the PATCHes before the latest: patch_was at its 20 characters).
func TestUnitBudgetLongIDs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		reopened bool
		patches  int
	}{
		{name: "as created", patches: 1},
		{name: "reopened", reopened: true, patches: 1},
		{name: "PATCHed five times while held", patches: 5},
		{name: "reopened, PATCHed five times while held", reopened: true, patches: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			longIDsBudgets(t, tc.reopened, tc.patches)
		})
	}
}

// longIDsBudgets is TestUnitBudgetLongIDs's history, reopened first or
// not, with patches PATCHes of the priority while the task is held.
func longIDsBudgets(t *testing.T, reopened bool, patches int) {
	e := newEnv(t)
	c := ctx(t)
	m := testenv.NewMeter(t, e.names.Prefix)
	e.clock.Advance(1237 * time.Millisecond)
	const (
		task   = "0f8fad5b-d9cb-469f-a165-70867728950e"
		agentA = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
		agentB = "a3bb189e-8bf9-3888-9912-ace4e6543002"
	)
	const title = "Retry the payment webhook with a backoff on 503s" // 48 characters
	runs := []string{
		"e4eaaaf2-d142-11e1-b3e4-080027620cdd", "2c5ea4c0-4067-11e9-8bad-9b1deb4d3b7d",
		"6ba7b810-9dad-11d1-80b4-00c04fd430c8", "6ba7b811-9dad-11d1-80b4-00c04fd430c8",
	}
	names := map[string]string{agentA: "worker-07", agentB: "worker-12"}
	checkout := func(agent, run string) lease.Checkout {
		t.Helper()
		return must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: task, AgentID: agent, AgentName: names[agent], RunID: run, Timeout: time.Minute}))
	}
	renew := func(co lease.Checkout) {
		t.Helper()
		must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: task, AgentID: co.AgentID, RunID: co.RunID, Fence: co.Fence}))
	}
	release := func(co lease.Checkout) {
		t.Helper()
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: task, AgentID: co.AgentID, RunID: co.RunID, Fence: co.Fence}))
	}
	spent := func(op string, fn func()) {
		t.Helper()
		got, req, _ := measure(t, e, m, fn)
		b := unitBudgets[op].Small
		t.Logf("%-9s %v  budget %g WU %g RU (request path: %s)", op, got, b.Write, b.Read, unitsByTable(req))
		if got.Total().Write > b.Write || got.Total().Read > b.Read {
			t.Errorf("%s of a task with UUID ids, a %d-character title and a history: %g write units and %g read units, budget %g and %g (%v)",
				op, len(title), got.Total().Write, got.Total().Read, b.Write, b.Read, got)
		}
	}

	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: task, Title: title}))
	for _, a := range []string{agentA, agentB} {
		must[lease.Heartbeat](t)(e.store.Heartbeat(c, a, time.Hour))
	}
	if reopened {
		// Done once, and reopened (a PATCH to todo): its attempts count
		// anew.
		done := checkout(agentA, "0a0a0a0a-0000-4000-8000-000000000000")
		must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: task, AgentID: agentA, RunID: done.RunID, Fence: done.Fence}))
		e.clock.Advance(time.Second)
		must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: task, AgentID: agentB, Status: new(lease.StatusTodo)}))
		e.clock.Advance(time.Second)
	}
	// The history: A's lease renewed and left to expire, B's taking it
	// over (the replaced lease's record) and releasing it (the ending's).
	first := checkout(agentA, runs[0])
	e.clock.Advance(time.Second)
	renew(first)
	e.clock.Advance(2 * time.Minute)
	for _, a := range []string{agentA, agentB} {
		must[lease.Heartbeat](t)(e.store.Heartbeat(c, a, time.Hour))
	}
	if over := checkout(agentB, runs[1]); over.Fence != first.Fence+1 {
		t.Fatalf("B took the expired lease over with fence %d, want %d", over.Fence, first.Fence+1)
	} else {
		release(over)
	}

	var held lease.Checkout
	spent("checkout", func() { held = checkout(agentA, runs[2]) })
	// Two renewals, each later than the one before: the second keeps the
	// first's write id too (renew_prev).
	for range 2 {
		e.clock.Advance(time.Second)
		spent("renew", func() { renew(held) })
	}
	// An orchestrator raises the priority while the task is held: the
	// priority, the PATCH's id and the priority as the grant found it
	// (grant_was: the fields a PATCH changed only) stay on the item, just
	// under 1 KB, until the next grant; the renewal after it bills the
	// same.
	for p := range patches {
		must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: task, AgentID: agentB, Priority: new(8 - p)}))
	}
	e.clock.Advance(time.Second)
	spent("renew", func() { renew(held) })
	spent("release", func() { release(held) })
	// The released item keeps its lease's renewal ids (renew_write,
	// renew_prev) until the next grant, which takes them off: the grant
	// after a renewed lease bills the same.
	spent("checkout", func() { held = checkout(agentB, runs[3]) })
	e.clock.Advance(time.Second)
	renew(held)
	spent("complete", func() {
		must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: task, AgentID: agentB, RunID: held.RunID, Fence: held.Fence}))
	})
}
