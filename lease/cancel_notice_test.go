package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A held task cancelled with a not_before still to come (PATCHed while it
// was held) is not waiting to be claimed: the TaskAvailable notice and
// the watchers' message of its cancel say no time to come back at.
func TestACancelledTaskWithANotBeforeTellsNoTimeToComeBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[any](t)(nil, e.store.Watch(c, "t", "watcher"))
	e.checkout(t, "t", "x", time.Hour)
	later := e.clock.Now().Add(time.Hour)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", SetNotBefore: true, NotBefore: &later}))
	if got := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "x", Status: new(lease.StatusCancelled)})); got.Status != lease.StatusCancelled {
		t.Fatalf("t cancelled: %s", got.Status)
	}
	msgs := e.inbox(t, "watcher")
	if len(msgs) != 1 || msgs[0].NotBefore != nil {
		t.Errorf("watcher's inbox %+v, want one message with no not_before", msgs)
	}
	n := 0
	for _, no := range e.notes.Notices() {
		if no.Event.TaskID == "t" && no.Kind == lease.NoticeTaskAvailable {
			n++
			if no.NotBefore != nil {
				t.Errorf("TaskAvailable notice of the cancel says not before %v", no.NotBefore)
			}
		}
	}
	if n != 1 {
		t.Errorf("%d TaskAvailable notices, want 1", n)
	}
}

// A failed release waits the retry delay, or a not_before PATCHed while
// the task was held, whichever ends later: an earlier PATCHed one does not
// cut the retry wait short.
func TestAFailedReleaseWaitsItsRetryDelayPastAnEarlierPatchedNotBefore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	delay := 10 * time.Minute
	e.create(t, lease.CreateTaskParams{TaskID: "t", RetryDelay: &delay})
	co := e.checkout(t, "t", "x", time.Hour)
	sooner := e.clock.Now().Add(time.Minute)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", SetNotBefore: true, NotBefore: &sooner}))
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	got := e.get(t, "t")
	if want := e.clock.Now().Add(delay); got.Status != lease.StatusTodo || got.NotBefore == nil || !got.NotBefore.Equal(want) {
		t.Errorf("t after a failed release: %s not_before %v, want todo until %v (the retry delay)", got.Status, got.NotBefore, want)
	}
}
