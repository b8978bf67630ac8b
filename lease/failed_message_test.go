package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A task that fails with a not_before still to come (PATCHed while it was
// held) is terminal: its watchers are told it failed, with no time to come
// back at, and so is the notice.
func TestAFailedTaskWithANotBeforeTellsNoTimeToComeBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "t", MaxAttempts: new(1)})
	must[any](t)(nil, e.store.Watch(c, "t", "watcher"))
	co := e.checkout(t, "t", "x", time.Hour)
	later := e.clock.Now().Add(time.Hour)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", SetNotBefore: true, NotBefore: &later}))
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	if got := e.get(t, "t"); got.Status != lease.StatusFailed {
		t.Fatalf("t after its only attempt failed: %s, want failed", got.Status)
	}
	msgs := e.inbox(t, "watcher")
	if len(msgs) != 1 || msgs[0].Reason != "failed" || msgs[0].NotBefore != nil {
		t.Errorf("watcher's inbox %+v, want one message, reason failed, with no not_before", msgs)
	}
	for _, n := range e.notes.Notices() {
		if n.Event.TaskID == "t" && n.NotBefore != nil {
			t.Errorf("%s notice says not before %v: the task failed", n.Kind, n.NotBefore)
		}
	}
}
