package lease_test

import (
	"slices"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// An agent that watches a task again keeps its watch's place: a freeing
// written after its first watch, but not yet handled by the stream
// function when it watched again, still tells it. Found by
// TestLinearizabilityWatchForceRemove.
func TestWatchingAgainKeepsTheWatchsPlace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := e.checkout(t, "t", "a", time.Hour)
	if err := e.store.Watch(c, "t", "w"); err != nil {
		t.Fatal(err)
	}
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID}))
	if err := e.store.Watch(c, "t", "w"); err != nil { // again, before the stream has told it
		t.Fatal(err)
	}
	msgs := e.inbox(t, "w")
	if len(msgs) != 1 || msgs[0].TaskID != "t" || msgs[0].Reason != string(lease.EventRelease) {
		t.Fatalf("w's inbox %+v, want the release that followed its first watch", msgs)
	}
}

// A watch placed again after a freeing, before the stream function has
// handled it, is told of that freeing and stays for the next one: the
// second watch came after the first freeing. Found by
// TestLinearizabilityWatchForceRemove under load.
func TestWatchAgainAfterAFreeingWaitsForTheNextOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	first := e.checkout(t, "t", "a", time.Hour)
	if err := e.store.Watch(c, "t", "w"); err != nil {
		t.Fatal(err)
	}
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: first.RunID}))
	second := e.checkout(t, "t", "a", time.Hour)
	if err := e.store.Watch(c, "t", "w"); err != nil { // after the first freeing, before the stream handled it
		t.Fatal(err)
	}
	if msgs := e.inbox(t, "w"); len(msgs) != 1 {
		t.Fatalf("after the first release, w's inbox %+v, want its message", msgs)
	}
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: second.RunID}))
	if msgs := e.inbox(t, "w"); len(msgs) != 2 {
		t.Fatalf("after the second release, w's inbox %+v, want a message for each", msgs)
	}
}

// An agent that watches again after each of two freeings, both written
// before the stream function handled the first, is told of both: each
// watch placed after a freeing asks for the next one, as a watch list on
// the task item did. The watch kept only its first and its latest place,
// so the watch between the two freeings was lost and the second freeing
// told nobody. Found by TestLinearizabilityWorkGraphSlowStream.
func TestWatchAgainAfterEachOfTwoUnhandledFreeingsIsToldOfBoth(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	watch := func() {
		t.Helper()
		if err := e.store.Watch(c, "t", "w"); err != nil {
			t.Fatal(err)
		}
	}
	var fences []int64
	co := e.checkout(t, "t", "a", time.Hour)
	watch()
	for _, next := range []string{"b", "c"} {
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: co.AgentID, RunID: co.RunID}))
		fences = append(fences, co.Fence)
		co = e.checkout(t, "t", next, time.Hour)
		watch() // after that freeing, before the stream has handled it
	}
	told := func() []int64 {
		var out []int64
		for _, m := range e.inbox(t, "w") {
			out = append(out, m.Fence)
		}
		slices.Sort(out)
		return out
	}
	if got := told(); !slices.Equal(got, fences) {
		t.Fatalf("w was told of the leases with fences %v, want %v: one message for each freeing it watched before", got, fences)
	}
	// The last watch, after the second freeing, waits for the next one.
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: co.AgentID, RunID: co.RunID}))
	if got, want := told(), append(fences, co.Fence); !slices.Equal(got, want) {
		t.Fatalf("after the third release w was told of %v, want %v", got, want)
	}
}

// A watcher told at a failed release, while the task waits for its retry
// delay, is told until when: the message carries not_before, so that it
// comes back then rather than at once to a not_ready. A freeing after
// which the task is claimable at once carries none.
func TestAWatcherIsToldWhenADelayedTaskIsReady(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "t", MaxAttempts: new(5), RetryDelay: new(10 * time.Second)})
	co := e.checkout(t, "t", "x", time.Minute)
	if err := e.store.Watch(c, "t", "w"); err != nil {
		t.Fatal(err)
	}
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	msgs := e.inbox(t, "w")
	want := e.clock.Now().Add(10 * time.Second)
	if len(msgs) != 1 || msgs[0].NotBefore == nil || !msgs[0].NotBefore.Equal(want) {
		t.Fatalf("the watcher's messages after a failed release: %+v, want one with not_before %v", msgs, want)
	}
	e.clock.Advance(10 * time.Second)
	co = e.checkout(t, "t", "x", time.Minute)
	if err := e.store.Watch(c, "t", "v"); err != nil {
		t.Fatal(err)
	}
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", RunID: co.RunID}))
	if msgs := e.inbox(t, "v"); len(msgs) != 1 || msgs[0].NotBefore != nil {
		t.Fatalf("the watcher's messages after a plain release: %+v, want one without not_before", msgs)
	}
}
