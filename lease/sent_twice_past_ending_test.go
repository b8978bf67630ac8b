package lease_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// pollAfterTrailRead passes every request on; the first Query of the
// events table (a read of a task's trail) is answered first, and then the
// change stream is drained, before that answer is handed back: a look in
// the trail made then finds nothing, one made after it finds everything.
type pollAfterTrailRead struct {
	http interface {
		Do(*http.Request) (*http.Response, error)
	}
	events string
	poll   func()
	once   sync.Once
}

func (d *pollAfterTrailRead) Do(r *http.Request) (*http.Response, error) {
	isTrail := false
	if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".Query") && r.Body != nil {
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
		isTrail = strings.Contains(string(body), d.events)
	}
	resp, err := d.http.Do(r)
	if isTrail {
		d.once.Do(d.poll)
	}
	return resp, err
}

// laterTransitions sets up task t held by a (run r-a) and runs end, an
// ending of that lease, through a store whose first UpdateItem of the
// tasks table naming verb applies and loses its answer; race runs, a
// second or more later (as the SDK's retry comes after a timeout), before
// the second sending; the change stream is drained just after the call's
// first read of the trail, so that a look made then finds nothing and one
// made after it everything.
func laterTransitions(t *testing.T, verb string, race func(e *env), end func(s *lease.Store, co lease.Checkout) error) error {
	t.Helper()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Minute}))
	e.drain(t)
	e.clock.Advance(3 * time.Second)
	tasks := e.names.Table(schema.TasksTable)
	lossy := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, verb)
		},
		race:    func() { race(e) },
		applied: true,
	}
	doer := &pollAfterTrailRead{http: lossy, events: e.names.Table(schema.EventsTable), poll: func() { e.drain(t) }}
	err := end(e.over(doer), co)
	if !lossy.lost.Load() {
		t.Fatalf("no %s was sent twice", verb)
	}
	return err
}

// takenAndEnded is b's checkout of t and its ending by end, a second on.
func takenAndEnded(t *testing.T, end func(e *env, b lease.Checkout)) func(e *env) {
	return func(e *env) {
		e.clock.Advance(time.Second)
		b := must[lease.Checkout](t)(e.store.Checkout(ctx(t), lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r-b", Timeout: time.Minute}))
		end(e, b)
	}
}

// releasedByB ends b's lease by its release.
func releasedByB(t *testing.T) func(e *env, b lease.Checkout) {
	return func(e *env, b lease.Checkout) {
		must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: "r-b", Fence: b.Fence}))
	}
}

// A named release whose ending applied, its answer lost, sent again by
// the SDK after the task was taken by b and completed (two transitions
// on, each a moment later). The second sending is refused on a transition
// later than its time (lostToLater), and finish tries again: that write
// is refused too, and is known for one whose call sent a write that may
// have applied (resends), so it waits for the trail to archive the first
// sending's ending.
func TestANamedReleaseSentTwiceAfterTwoLaterTransitionsIsAnswered(t *testing.T) {
	t.Parallel()
	var r lease.Released
	err := laterTransitions(t, `"release"`, takenAndEnded(t, func(e *env, b lease.Checkout) {
		must[lease.Task](t)(e.store.Complete(ctx(t), lease.CompleteParams{TaskID: "t", AgentID: "b", RunID: "r-b", Fence: b.Fence}))
	}), func(s *lease.Store, co lease.Checkout) (err error) {
		r, err = s.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: "r-a", Fence: co.Fence})
		return err
	})
	if err != nil || r.ReleasedBy != "a" {
		t.Errorf("a's release, applied and sent twice, the task taken and completed a second later: %+v, %v; want released by a", r, err)
	}
}

// The same for a completion (finish is shared): the task reopened, taken
// by b and released.
func TestANamedCompletionSentTwiceAfterTwoLaterTransitionsIsAnswered(t *testing.T) {
	t.Parallel()
	err := laterTransitions(t, `"complete"`, func(e *env) {
		st := lease.StatusTodo
		e.clock.Advance(time.Second)
		must[lease.Task](t)(e.store.UpdateTask(ctx(t), lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Status: &st}))
		takenAndEnded(t, releasedByB(t))(e)
	}, func(s *lease.Store, co lease.Checkout) error {
		_, err := s.Complete(ctx(t), lease.CompleteParams{TaskID: "t", AgentID: "a", RunID: "r-a", Fence: co.Fence})
		return err
	})
	if err != nil {
		t.Errorf("a's completion, applied and sent twice, the task reopened, taken and released a second later: %v; want answered done", err)
	}
}

// The same for a failed release (failRelease: lostToLater, then a fresh
// read that is not the caller's, whose refusal waits for the trail), the
// task taken by b past its retry wait and released.
func TestANamedFailedReleaseSentTwiceAfterTwoLaterTransitionsIsAnswered(t *testing.T) {
	t.Parallel()
	var r lease.Released
	err := laterTransitions(t, `"release"`, func(e *env) {
		e.clock.Advance(time.Hour) // past the retry wait
		takenAndEnded(t, releasedByB(t))(e)
	}, func(s *lease.Store, co lease.Checkout) (err error) {
		r, err = s.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: "r-a", Fence: co.Fence, Outcome: lease.OutcomeFailed})
		return err
	})
	if err != nil || r.ReleasedBy != "a" {
		t.Errorf("a's failed release, applied and sent twice, the task taken and released later: %+v, %v; want released by a", r, err)
	}
}

// unkeptClaimOfX makes task x and a named claim p of it whose grant is
// never kept in its receipt (unkeptClaim): the run's lease stays on x,
// answered with p's reason.
func unkeptClaimOfX(t *testing.T, e *env, p lease.ClaimParams) lease.Checkout {
	t.Helper()
	e.task(t, "x")
	e.caughtUp(t)
	lossy := e.lossyStore()
	first := unkeptClaim(t, lossy, p, "x")
	if first.Reason != p.Reason {
		t.Fatalf("the lease found on x: reason %q, want %q", first.Reason, p.Reason)
	}
	return first
}

// A named claim whose grant could not be kept in its receipt (the run's
// lease stays on its task, listed as tried), retried after the lease
// ended: the retry finds the lease in the item's record of the ending,
// which keeps no reason (endUpdate), and answers, and keeps in the
// receipt, the claim's reason, as it did while the lease was live.
func TestAnUnkeptClaimRetriedAfterItsLeaseEndedAnswersItsReason(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	p := lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute, Reason: "why a claimed it"}
	first := unkeptClaimOfX(t, e, p)
	e.clock.Advance(time.Second)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "admin", Force: true}))
	e.clock.Advance(time.Second)
	again := must[lease.Checkout](t)(e.store.Claim(c, p))
	if again.Fence != first.Fence {
		t.Fatalf("retry answered fence %d, want %d", again.Fence, first.Fence)
	}
	if again.Reason != p.Reason {
		t.Errorf("a retry of the unkept claim after its lease ended: reason %q, want %q (the lease's, answered while it was live)", again.Reason, p.Reason)
	}
	if again2 := must[lease.Checkout](t)(e.store.Claim(c, p)); again2.Reason != p.Reason {
		t.Errorf("a second retry, from the receipt the first kept: reason %q, want %q", again2.Reason, p.Reason)
	}
}

// A force release naming its lease (run id), its ending applied and its
// answer lost, sent again after the task was taken by b and released (two
// transitions a moment later: end_write is b's now). The second sending
// is refused, lostToLater, tried again pinned to the lease it read and
// refused: its ending is then looked for in the trail, waited for as a
// holder's.
func TestANamedForceReleaseSentTwiceAfterTwoLaterTransitionsIsAnswered(t *testing.T) {
	t.Parallel()
	var r lease.Released
	err := laterTransitions(t, `"force_release"`, takenAndEnded(t, releasedByB(t)), func(s *lease.Store, _ lease.Checkout) (err error) {
		r, err = s.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "admin", RunID: "r-a", Force: true})
		return err
	})
	if err != nil || r.ReleasedBy != "admin" {
		t.Errorf("admin's force release of r-a, applied and sent twice, the task taken and released a second later: %+v, %v; want released by admin", r, err)
	}
}

// A force release naming no lease, its ending applied and its answer
// lost, sent again after the task was taken by b and released (end_write
// is b's now, so the item no longer knows the force release's write).
// The second sending is refused on b's ending; the call, which sent a
// write that may have applied, looks for its write's id in the trail, as
// a holder's release naming no lease does (endingInTrail), and is
// answered as that ending: released by the admin, held 3s. It answered
// 404 not_checked_out before.
func TestAForceReleaseNamingNoLeaseSentTwiceAfterTwoLaterTransitionsIsAnswered(t *testing.T) {
	t.Parallel()
	var r lease.Released
	err := laterTransitions(t, `"force_release"`, takenAndEnded(t, releasedByB(t)), func(s *lease.Store, _ lease.Checkout) (err error) {
		r, err = s.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true})
		return err
	})
	if err != nil || r.ReleasedBy != "admin" || r.Held != 3*time.Second {
		t.Errorf("admin's force release naming no lease, applied and sent twice, the task taken and released a second later: %+v, %v; want released by admin, held 3s", r, err)
	}
}

// A guard: a named release of a task given a not_before while
// held; its delayed write applied, its answer lost; in the gap the
// not_before passes and b checks the task out a moment later. The second
// sending is refused on b's lease: answered released (replayEnd, after
// the delay is dropped and the ready write refused).
func TestANamedReleaseSentTwiceAcrossItsDelayedWriteAndAGrantIsAnswered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	co := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "x", AgentID: "a", RunID: "r-a", Timeout: time.Hour}))
	nb := e.clock.Now().Add(10 * time.Second)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	tasks := e.names.Table(schema.TasksTable)
	s, doer := lossyTaskStore(e, func(target, body string) bool {
		return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) &&
			strings.Contains(body, "end_type") && strings.Contains(body, "claim_rank")
	}, func() {
		e.clock.Advance(11 * time.Second)
		e.checkout(t, "x", "b", time.Hour)
	})
	doer.applied = true
	r, err := s.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a", RunID: "r-a", Fence: co.Fence})
	if !doer.lost.Load() {
		t.Fatal("the delayed ending's write was not sent twice")
	}
	if err != nil || r.ReleasedBy != "a" {
		t.Fatalf("a's named release, its delayed ending applied before b's checkout: %+v, %v", r, err)
	}
	if got := e.get(t, "x"); got.Checkout == nil || got.Checkout.AgentID != "b" {
		t.Fatalf("x: %+v, want b's lease", got.Checkout)
	}
}

// A release naming no lease, its ending applied and its answer lost. In
// the gap a's other worker takes the task, releases it (naming no lease:
// its own end_write) and takes it again, each a moment later. The SDK's
// second sending is refused (lostToLater); its own ending's id is no
// longer on the item, so finish writes again at a new time: pinned to a
// lease locked no later than the write sent twice, it leaves a's third
// lease alone.
func TestAReleaseNamingNoLeaseSentTwiceLeavesALeaseTwoTransitionsOn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	e.checkout(t, "x", "a", time.Hour)
	tasks := e.names.Table(schema.TasksTable)
	var third lease.Checkout
	s, doer := lossyTaskStore(e, func(target, body string) bool {
		return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, "end_type")
	}, func() {
		e.clock.Advance(time.Second)
		e.checkout(t, "x", "a", time.Hour)
		e.clock.Advance(time.Second)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a"}))
		e.clock.Advance(time.Second)
		third = e.checkout(t, "x", "a", time.Hour)
	})
	doer.applied = true
	_, err := s.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a"})
	if !doer.lost.Load() {
		t.Fatal("no ending was sent twice")
	}
	got := e.get(t, "x")
	t.Logf("release: %v; x: %s, lease %+v", err, got.Status, got.Checkout)
	if got.Checkout == nil || got.Checkout.Fence != third.Fence {
		t.Fatalf("a's third lease (fence %d), granted after the release's ending applied, was ended by that release's second sending: x is %s, lease %v", third.Fence, got.Status, got.Checkout)
	}
}
