package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A TaskAvailable notice of a task that waits (a failed release's retry
// delay) says until when, as the watchers' messages do: it said nothing,
// so an orchestrator told the task was free got 409 not_ready. A plain
// release frees the task at once and its notice says no wait.
func TestTaskAvailableNoticeSaysHowLongTheTaskWaits(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "t", MaxAttempts: new(3), RetryDelay: new(10 * time.Second)})
	available := func() []lease.Notice {
		t.Helper()
		e.drain(t)
		var out []lease.Notice
		for _, n := range e.notes.Notices() {
			if n.Kind == lease.NoticeTaskAvailable && n.Event.TaskID == "t" {
				out = append(out, n)
			}
		}
		return out
	}

	co := e.checkout(t, "t", "x", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID, Outcome: lease.OutcomeFailed, Error: "boom"}))
	task := e.get(t, "t")
	ns := available()
	if len(ns) != 1 || task.NotBefore == nil || ns[0].NotBefore == nil || !ns[0].NotBefore.Equal(*task.NotBefore) {
		t.Fatalf("after a failed release: notices %+v, task not_before %v; want one TaskAvailable with that not_before", ns, task.NotBefore)
	}

	e.clock.Advance(10 * time.Second)
	co = e.checkout(t, "t", "x", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID}))
	if ns = available(); len(ns) != 2 || ns[1].NotBefore != nil {
		t.Fatalf("after a plain release: notices %+v, want a second TaskAvailable without not_before", ns)
	}
}
