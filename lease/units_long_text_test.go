package lease_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/localstack"
)

// longTextLeases runs two leases of one task, the first released, the
// second completed, each checked out with reason and released with
// endReason, and returns what each transition was billed (opUnits, the
// request path and the stream's consequences), keyed "checkout",
// "conflict" (another agent's checkout, refused), "renew", "release",
// "checkout again", "complete".
func longTextLeases(t *testing.T, title, reason, endReason string) map[string]opUnits {
	t.Helper()
	e := newEnv(t)
	c := ctx(t)
	m := testenv.NewMeter(t, e.names.Prefix)
	const (
		task  = "0f8fad5b-d9cb-469f-a165-70867728950e"
		agent = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: task, Title: title}))
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, agent, time.Hour))
	got := map[string]opUnits{}
	spent := func(op string, fn func()) {
		t.Helper()
		var req localstack.Capacity
		got[op], req, _ = measure(t, e, m, fn)
		t.Logf("%-14s %v (request path: %s)", op, got[op], unitsByTable(req))
	}
	checkout := func(run string) lease.Checkout {
		t.Helper()
		return must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: task, AgentID: agent, AgentName: "worker-07", RunID: run, Timeout: time.Minute, Reason: reason}))
	}
	var held lease.Checkout
	spent("checkout", func() { held = checkout("e4eaaaf2-d142-11e1-b3e4-080027620cdd") })
	spent("conflict", func() {
		if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: task, AgentID: "another"}); !errors.Is(err, lease.ErrCheckedOut) {
			t.Fatalf("conflict: %v", err)
		}
	})
	e.clock.Advance(time.Second)
	spent("renew", func() {
		must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: task, AgentID: agent, RunID: held.RunID, Fence: held.Fence}))
	})
	spent("release", func() {
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: task, AgentID: agent, RunID: held.RunID, Fence: held.Fence, Reason: endReason}))
	})
	spent("checkout again", func() { held = checkout("2c5ea4c0-4067-11e9-8bad-9b1deb4d3b7d") })
	spent("complete", func() {
		must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: task, AgentID: agent, RunID: held.RunID, Fence: held.Fence}))
	})
	return got
}

// TestUnitBudgetLongestTitle holds a task with the longest title (its
// item past 1 KB) to the design's ceiling of 7 write units a transition
// with its consequences. The title is billed once more on each write of
// the item, so its renewals bill 6 (5 for a title under about 90
// characters: TestUnitBudgetLongIDs), and a conflict, refused on the
// item, bills 2 (the target of 1 holds for an item under 1 KB).
func TestUnitBudgetLongestTitle(t *testing.T) {
	t.Parallel()
	got := longTextLeases(t, strings.Repeat("t", lease.MaxTitleLen), "", "")
	if u := got["conflict"]; u.Total().Write > 2 {
		t.Errorf("a conflict on a task with a %d-character title: %v, budget 2 write units", lease.MaxTitleLen, u)
	}
	delete(got, "conflict")
	for op, u := range got {
		if u.Total().Write > 7 {
			t.Errorf("%s of a task with a %d-character title: %v, the ceiling is 7 write units", op, lease.MaxTitleLen, u)
		}
	}
}

// TestALongReasonIsNotBilledOnTheNextLease: a lease checked out and
// released with reasons of 1 KB each leaves both on the item's record of
// its ending; the next grant takes them off, so that the next lease and
// its ending bill what the first did, not the reasons of a lease gone.
func TestALongReasonIsNotBilledOnTheNextLease(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("r", lease.MaxReasonLen)
	got := longTextLeases(t, "Retry the payment webhook with a backoff on 503s", long, long)
	if again, first := got["checkout again"], got["checkout"]; again.Request.Write > first.Request.Write {
		t.Errorf("the second lease's checkout billed %v on its request path, the first %v: the ended lease's reasons are billed with it", again, first)
	}
	if done, first := got["complete"], got["release"]; done.Request.Write > first.Request.Write {
		t.Errorf("the second lease's completion billed %v on its request path, the first lease's release %v", done, first)
	}
}
