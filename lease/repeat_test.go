package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A release that names its lease and repeats one that took effect is
// answered as the first one was, even once a later lease has been taken
// (and ended): the ending is found in the task's trail. A release that
// names a lease that ended otherwise (here by a takeover of the expired
// lease) is still refused.
func TestReleaseRepeatedAfterALaterLeaseIsAnsweredAsTheFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	first := e.checkout(t, "t", "a", time.Minute)
	e.clock.Advance(3 * time.Second)
	want := must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: first.RunID, Fence: first.Fence}))
	if want.ReleasedBy != "a" || want.Held != 3*time.Second {
		t.Fatalf("first release: %+v", want)
	}
	later := e.checkout(t, "t", "b", time.Minute)
	e.drain(t)
	for _, p := range []lease.ReleaseParams{
		{TaskID: "t", AgentID: "a", RunID: first.RunID},
		{TaskID: "t", AgentID: "a", Fence: first.Fence},
		{TaskID: "t", AgentID: "a", RunID: first.RunID, Fence: first.Fence},
	} {
		got, err := e.store.Release(c, p)
		if err != nil || got != want {
			t.Errorf("release %+v repeated while b holds the task: %+v, %v; want %+v", p, got, err, want)
		}
	}
	// Naming no lease is never a repeat; naming another run of a is not
	// this one.
	var nh *lease.NotHolderError
	if _, err := e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"}); !errors.As(err, &nh) {
		t.Errorf("release naming no lease while b holds the task: %v, want not_holder", err)
	}
	if _, err := e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: "run-other"}); !errors.As(err, &nh) {
		t.Errorf("release naming another run while b holds the task: %v, want not_holder", err)
	}
	// b's lease expires and c takes it over: b's lease ended by timeout,
	// so b's release is refused, while a's repeat is still answered.
	e.clock.Advance(2 * time.Minute)
	e.checkout(t, "t", "c", time.Minute)
	e.drain(t)
	if _, err := e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: later.RunID}); !errors.As(err, &nh) {
		t.Errorf("release of b's lease, ended by timeout: %v, want not_holder", err)
	}
	if got, err := e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", Fence: first.Fence}); err != nil || got != want {
		t.Errorf("a's release repeated after two later leases: %+v, %v; want %+v", got, err, want)
	}
	// c releases: the item's last ending is c's now, and a's repeat is
	// found in the trail.
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "c"}))
	e.drain(t)
	if got, err := e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: first.RunID}); err != nil || got != want {
		t.Errorf("a's release repeated after a later release: %+v, %v; want %+v", got, err, want)
	}
	if _, err := e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: later.RunID}); !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Errorf("release of b's lease, ended by timeout, once the task is free: %v, want not_checked_out", err)
	}
}

// A completion repeated after the task was reopened, taken and released
// is answered as the first one was: the task, done, completed when it
// was, at the version that completion left, with no holder.
func TestCompletionRepeatedAfterALaterLeaseIsAnsweredAsTheFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := e.checkout(t, "t", "a", time.Minute)
	first := must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "a", RunID: co.RunID}))
	e.clock.Advance(time.Second)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "a", Status: new(lease.StatusTodo)}))
	e.checkout(t, "t", "b", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b"}))
	e.drain(t)
	got, err := e.store.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "a", RunID: co.RunID})
	if err != nil {
		t.Fatalf("completion repeated after the reopened task was taken and released: %v", err)
	}
	if got.Status != lease.StatusDone || got.CompletedAt == nil || !got.CompletedAt.Equal(*first.CompletedAt) || got.Checkout != nil || got.Version != first.Version {
		t.Errorf("repeat answered %s v%d completed %v holder %v; want done v%d, completed %v, no holder",
			got.Status, got.Version, got.CompletedAt, got.Checkout, first.Version, first.CompletedAt)
	}
}

// A force release that names a lease ends that lease only: repeated by an
// admin after another agent took the task, it is answered as the first
// one was and leaves the new lease live. Naming a lease that is not the
// live one is not_holder.
func TestForceReleaseNamingAnEndedLeaseLeavesTheLiveOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	first := e.checkout(t, "t", "a", time.Minute)
	e.clock.Advance(2 * time.Second)
	want := must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true, Fence: first.Fence}))
	live := e.checkout(t, "t", "b", time.Minute)
	e.drain(t)
	got, err := e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true, Fence: first.Fence})
	if err != nil || got != want {
		t.Errorf("force release repeated: %+v, %v; want %+v", got, err, want)
	}
	var nh *lease.NotHolderError
	if _, err := e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true, Fence: live.Fence + 1}); !errors.As(err, &nh) || nh.Holder.Fence != live.Fence {
		t.Errorf("force release naming a lease never taken: %v, want not_holder naming b's", err)
	}
	if _, err := e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "b", RunID: live.RunID}); err != nil {
		t.Fatalf("b's lease after force releases naming other leases: %v", err)
	}
}

// A release repeats another only if both are failures or neither is (no
// outcome and outcome done are one plain release): a release marked
// failed after a plain release of the same lease (or the other way round)
// is no retry of it, and is refused, whether the first ending is still the
// task's last or only in its trail. It was answered as the first one was,
// so that the caller was told its attempt was recorded as failed when
// nothing was.
func TestAReleaseWithAnotherOutcomeIsNoRepeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "plain", "failed")
	plain := e.checkout(t, "plain", "a", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "plain", AgentID: "a", RunID: plain.RunID}))
	failed := e.checkout(t, "failed", "a", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "failed", AgentID: "a", RunID: failed.RunID, Outcome: lease.OutcomeFailed, Error: "it broke"}))

	check := func(when string) {
		t.Helper()
		for _, p := range []lease.ReleaseParams{
			{TaskID: "plain", AgentID: "a", RunID: plain.RunID, Outcome: lease.OutcomeFailed, Error: "it broke"},
			{TaskID: "failed", AgentID: "a", RunID: failed.RunID},
			{TaskID: "failed", AgentID: "a", Fence: failed.Fence, Outcome: lease.OutcomeDone},
		} {
			if got, err := e.store.Release(c, p); !errors.Is(err, lease.ErrNotCheckedOut) {
				t.Errorf("%s: release %+v: %+v, %v; want not_checked_out", when, p, got, err)
			}
		}
		// The same outcome is a repeat, and so is done for none.
		if _, err := e.store.Release(c, lease.ReleaseParams{TaskID: "plain", AgentID: "a", RunID: plain.RunID}); err != nil {
			t.Errorf("%s: plain release repeated: %v", when, err)
		}
		if _, err := e.store.Release(c, lease.ReleaseParams{TaskID: "plain", AgentID: "a", Fence: plain.Fence, Outcome: lease.OutcomeDone}); err != nil {
			t.Errorf("%s: plain release repeated with outcome done: %v", when, err)
		}
		if _, err := e.store.Release(c, lease.ReleaseParams{TaskID: "failed", AgentID: "a", RunID: failed.RunID, Outcome: lease.OutcomeFailed, Error: "it broke"}); err != nil {
			t.Errorf("%s: failed release repeated: %v", when, err)
		}
	}
	check("the ending is the task's last")
	task := must[lease.Task](t)(e.store.GetTask(c, "plain"))
	if task.Attempts != 1 || task.LastError != "" {
		t.Errorf("plain: attempts %d, last error %q after a plain release and refused failed ones", task.Attempts, task.LastError)
	}
	// Later leases end on both tasks: the first endings are in the trail only.
	e.clock.Advance(time.Hour)
	for _, id := range []string{"plain", "failed"} {
		co := e.checkout(t, id, "b", time.Minute)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: id, AgentID: "b", RunID: co.RunID}))
	}
	e.drain(t)
	check("the ending is in the trail")
}
