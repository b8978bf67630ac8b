package lease_test

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// skewedOver is e.over with a clock behind e's by lag (another process).
func (e *env) skewedOver(doer *lossyDoer, lag time.Duration) *lease.Store {
	return lease.New(lease.Config{
		DB:     lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) { o.HTTPClient = doer }),
		Tables: e.names,
		Now:    func() time.Time { return e.clock.Now().Add(-lag) },
	})
}

// A holder's ending whose first write is sent twice (its first sending
// lost before DynamoDB saw it: it cannot have applied) and refused on the
// time rule, because the process that granted the lease runs 50 ms ahead
// of this one and the lease was locked "after" this process's clock. The
// refusal shows no ending at or after the write's time, so the write is
// not taken for one that may have applied: the next write, after the
// lease's time, ends the caller's lease (a review's test: pinned to a
// lease locked before the first write, it answered 404 and left it).
func TestASkewedEndingSentTwiceEndsItsOwnLease(t *testing.T) {
	t.Parallel()
	endsItsOwnLeaseThroughSkew(t, []skewedEnding{namedRelease, unnamedRelease, runIDOnlyRelease, namedCompletion, unnamedCompletion, runIDOnlyCompletion, namedFailedRelease}, func(*testing.T, *env) {})
}

// skewedEnding is an ending of a's lease (run r-a) of task t; verb is in
// its UpdateItem's body.
type skewedEnding struct {
	name string
	verb string
	end  func(t *testing.T, s *lease.Store, co lease.Checkout) error
}

var (
	namedRelease = skewedEnding{"named release", `"release"`, func(t *testing.T, s *lease.Store, co lease.Checkout) error {
		_, err := s.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID, Fence: co.Fence})
		return err
	}}
	unnamedRelease = skewedEnding{"unnamed release", `"release"`, func(t *testing.T, s *lease.Store, _ lease.Checkout) error {
		_, err := s.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "a"})
		return err
	}}
	namedCompletion = skewedEnding{"named completion", `"complete"`, func(t *testing.T, s *lease.Store, co lease.Checkout) error {
		_, err := s.Complete(ctx(t), lease.CompleteParams{TaskID: "t", AgentID: "a", RunID: co.RunID, Fence: co.Fence})
		return err
	}}
	namedFailedRelease = skewedEnding{"named failed release", `"release"`, func(t *testing.T, s *lease.Store, co lease.Checkout) error {
		_, err := s.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID, Fence: co.Fence, Outcome: lease.OutcomeFailed})
		return err
	}}
	unnamedCompletion = skewedEnding{"unnamed completion", `"complete"`, func(t *testing.T, s *lease.Store, _ lease.Checkout) error {
		_, err := s.Complete(ctx(t), lease.CompleteParams{TaskID: "t", AgentID: "a"})
		return err
	}}
	runIDOnlyRelease = skewedEnding{"run-id-only release", `"release"`, func(t *testing.T, s *lease.Store, co lease.Checkout) error {
		_, err := s.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID})
		return err
	}}
	runIDOnlyCompletion = skewedEnding{"run-id-only completion", `"complete"`, func(t *testing.T, s *lease.Store, co lease.Checkout) error {
		_, err := s.Complete(ctx(t), lease.CompleteParams{TaskID: "t", AgentID: "a", RunID: co.RunID})
		return err
	}}
	unnamedFailedRelease = skewedEnding{"unnamed failed release", `"release"`, func(t *testing.T, s *lease.Store, _ lease.Checkout) error {
		_, err := s.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "a", Outcome: lease.OutcomeFailed})
		return err
	}}
)

// endsItsOwnLeaseThroughSkew runs each ending, after before has run on a
// fresh task t and a has checked it out, through a store whose clock is
// 50 ms behind e's and whose first sending of the ending's write is lost
// before DynamoDB sees it (so it never applied): the ending must end a's
// lease. The change stream has archived the task's events, as it does
// within about a second.
func endsItsOwnLeaseThroughSkew(t *testing.T, endings []skewedEnding, before func(t *testing.T, e *env)) {
	for _, tc := range endings {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.task(t, "t")
			e.clock.Advance(time.Second)
			before(t, e)
			co := must[lease.Checkout](t)(e.store.Checkout(ctx(t), lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Minute}))
			e.drain(t)
			lossy := &lossyDoer{match: endingOf(e, tc.verb), race: func() {}}
			start := time.Now()
			err := tc.end(t, e.skewedOver(lossy, 50*time.Millisecond), co)
			took := time.Since(start)
			if !lossy.lost.Load() {
				t.Fatal("no ending was sent twice")
			}
			if got := e.get(t, "t"); err != nil || got.Checkout != nil {
				t.Errorf("a's own live lease, its ending sent twice (the first sending lost, never applied) by a process 50 ms behind: "+
					"answered %v after %v, lease left %+v; want it ended", err, took, got.Checkout)
			}
		})
	}
}

// A named claim whose grant was not kept, made with no reason, retried
// with a reason while its lease is still live: it answers the lease's
// (none), not the retry's, which no lease ever had.
func TestAnUnkeptClaimRetriedWithAnotherReasonAnswersTheLeasesReason(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	p := lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute}
	first := unkeptClaimOfX(t, e, p)
	p.Reason = "a reason the first attempt never gave"
	again := must[lease.Checkout](t)(e.store.Claim(c, p))
	lock := must[*lease.Checkout](t)(e.store.LockStatus(c, "x"))
	if again.Fence != first.Fence {
		t.Fatalf("retry answered fence %d, want %d", again.Fence, first.Fence)
	}
	if again.Reason != lock.Reason {
		t.Errorf("retry answered reason %q; the live lease it answers has reason %q", again.Reason, lock.Reason)
	}
}

// A force release naming its lease (fence), its write sent twice (the
// first sending lost, never applied), the same admin's other force
// release of that lease landing (and archived) in the gap: the second
// sending cannot tell that ending from its own first sending's, and a
// named force release repeated is answered as made (README).
func TestANamedForceReleaseSentTwiceBeatenByTheSameAdminsOtherIsARepeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	co := e.checkout(t, "x", "ag", time.Hour)
	e.clock.Advance(time.Minute)
	force := lease.ReleaseParams{TaskID: "x", AgentID: "admin", Force: true, Fence: co.Fence}
	var raceErr error
	s, doer := lossyTaskStore(e, taskUpdate(e), func() {
		_, raceErr = e.store.Release(c, force)
		e.drain(t)
	})
	got, err := s.Release(c, force)
	if !doer.lost.Load() {
		t.Fatal("no write was lost and sent again")
	}
	if raceErr != nil {
		t.Fatalf("the other force release: %v", raceErr)
	}
	if err != nil || got.ReleasedBy != "admin" || got.Held != time.Minute {
		t.Errorf("a named force release sent twice, the same admin's other force release of that lease landing in between: %+v, %v; want released by admin after a minute held", got, err)
	}
}

// TestASkewedEndingSentTwiceEndsItsOwnLease with one more transition: the
// task's previous lease (b's) was ended by the fast process 10 ms before
// it granted a's lease, both within the 50 ms skew. The refused item then
// shows an ending (b's) at or after the slow process's write time, but it
// still holds the very lease the write named (or, for a failed release,
// the lease it read and pinned its write to): the write ended nothing,
// and the next ends the lease (a review's test: taken for one that may
// have applied, every later write was pinned to a lease locked before
// it). A release or completion naming no lease cannot be told so by the
// item; it looks for its write's own ending in the trail, and finds none
// (it answered 404 and left the lease to its timeout).
func TestASkewedEndingSentTwiceAfterARecentEndingEndsItsOwnLease(t *testing.T) {
	t.Parallel()
	endsItsOwnLeaseThroughSkew(t, []skewedEnding{namedRelease, unnamedRelease, runIDOnlyRelease, unnamedFailedRelease, namedCompletion, unnamedCompletion, runIDOnlyCompletion, namedFailedRelease}, func(t *testing.T, e *env) {
		b := must[lease.Checkout](t)(e.store.Checkout(ctx(t), lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r-b", Timeout: time.Minute}))
		e.clock.Advance(time.Second)
		must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: b.RunID, Fence: b.Fence}))
		e.clock.Advance(10 * time.Millisecond) // a's lease is granted 10 ms after b's ending
	})
}

// TestASkewedEndingSentTwiceAfterARecentEndingEndsItsOwnLease, the lease
// the fast process ended just before granting a's being a's own earlier
// one, ended by a naming it (a release by run id and fence; a completion,
// then a reopen): a release or completion naming no lease finds, in the
// trail, an ending like its own without a write id, which it took for one
// archived by an earlier version's stream function (its own, perhaps),
// answered 404 and left its lease running (a review's test). Endings
// without an id are now archived with noWrite.
func TestASkewedEndingSentTwiceAfterTheCallersOwnNamedEndingEndsItsOwnLease(t *testing.T) {
	t.Parallel()
	endsItsOwnLeaseThroughSkew(t, []skewedEnding{unnamedRelease}, func(t *testing.T, e *env) {
		a0 := must[lease.Checkout](t)(e.store.Checkout(ctx(t), lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a0", Timeout: time.Minute}))
		e.clock.Advance(time.Second)
		must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: a0.RunID, Fence: a0.Fence}))
		e.clock.Advance(10 * time.Millisecond)
	})
	endsItsOwnLeaseThroughSkew(t, []skewedEnding{unnamedCompletion}, func(t *testing.T, e *env) {
		a0 := must[lease.Checkout](t)(e.store.Checkout(ctx(t), lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a0", Timeout: time.Minute}))
		e.clock.Advance(time.Second)
		must[lease.Task](t)(e.store.Complete(ctx(t), lease.CompleteParams{TaskID: "t", AgentID: "a", RunID: a0.RunID, Fence: a0.Fence}))
		e.clock.Advance(5 * time.Millisecond)
		must[lease.Task](t)(e.store.UpdateTask(ctx(t), lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Status: new(lease.StatusTodo)}))
		e.clock.Advance(5 * time.Millisecond)
	})
}

// TestAnUnkeptClaimRetriedAfterItsLeaseEndedAnswersItsReason, the retry
// made on a process 50 ms behind the one that ended the lease, within
// those 50 ms: the ended lease's end is after the retry's clock, and the
// reason comes from the trail all the same (a review's test: taken for a
// live lease by its end, it was answered, and kept, without its reason).
func TestAnUnkeptClaimRetriedRightAfterItsLeaseEndedOnAClockAheadAnswersItsReason(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	p := lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute, Reason: "why a claimed it"}
	first := unkeptClaimOfX(t, e, p)
	e.clock.Advance(time.Second)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "admin", Force: true}))
	e.clock.Advance(10 * time.Millisecond)
	behind := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: func() time.Time { return e.clock.Now().Add(-50 * time.Millisecond) }, Notifier: e.notes})
	again := must[lease.Checkout](t)(behind.Claim(c, p))
	if again.Fence != first.Fence {
		t.Fatalf("retry answered fence %d, want %d", again.Fence, first.Fence)
	}
	if again.Reason != p.Reason {
		t.Errorf("a retry (on a process 50 ms behind) of the unkept claim 10 ms after its lease ended: reason %q, want %q", again.Reason, p.Reason)
	}
	e.clock.Advance(time.Second)
	if again2 := must[lease.Checkout](t)(e.store.Claim(c, p)); again2.Reason != p.Reason {
		t.Errorf("a second retry, from the receipt the first kept: reason %q, want %q", again2.Reason, p.Reason)
	}
}

// TestANamedForceReleaseSentTwiceBeatenByTheSameAdminsOtherIsARepeat with
// the change stream archiving the other force release 300 ms after its
// write (AWS: about a second), not inside the race: the refused item shows
// that ending, a repeat of this named one, and answers it (a review's
// test: only the trail was looked at, and the look stopped at once, the
// trail's view counting the item's latest transition as shown: 404),
// whether the other ending is stamped in this write's millisecond or 5 ms
// before it.
func TestANamedForceReleaseSentTwiceBeatenByTheSameAdminsOtherNotYetArchivedIsARepeat(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		behind time.Duration
	}{{"other stamped at the same ms", 0}, {"other stamped 5 ms earlier", 5 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "x")
			co := e.checkout(t, "x", "ag", time.Hour)
			e.clock.Advance(time.Minute)
			e.drain(t)
			force := lease.ReleaseParams{TaskID: "x", AgentID: "admin", Force: true, Fence: co.Fence}
			other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: func() time.Time { return e.clock.Now().Add(-tc.behind) }})
			var raceErr error
			done := make(chan struct{})
			s, doer := lossyTaskStore(e, taskUpdate(e), func() {
				_, raceErr = other.Release(c, force)
				go func() { // the stream archives it a moment later
					defer close(done)
					time.Sleep(300 * time.Millisecond)
					if _, err := e.poller.Poll(c); err != nil {
						t.Errorf("drain: %v", err)
					}
				}()
			})
			start := time.Now()
			got, err := s.Release(c, force)
			took := time.Since(start)
			<-done
			t.Logf("answered after %v", took)
			if !doer.lost.Load() {
				t.Fatal("no write was lost and sent again")
			}
			if raceErr != nil {
				t.Fatalf("the other force release: %v", raceErr)
			}
			if err != nil || got.ReleasedBy != "admin" {
				t.Errorf("a named force release sent twice, the same admin's other force release (stamped %v earlier) landing in between and archived 300 ms later: %+v, %v; want released (README)", tc.behind, got, err)
			}
		})
	}
}

// A release or completion naming only its run id (CLI with CHECKOUT_RUN_ID
// and no --fence; MCP sessions share one run id across checkouts), its
// first sending applied and its answer lost; in the gap the same run checks
// the task out again (fence 2). The second sending is refused (time rule)
// on an item holding a lease of run r-a, whose last ending is a's of that
// run: the write may have applied, and fence 2, granted after it, is left
// alone (a review's test: taken for the lease the request named, fence 2
// was ended).
func TestARunIDOnlyEndingSentTwiceLeavesTheRunsNextLease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		verb string
		end  func(s *lease.Store) error
	}{
		{"release", `"release"`, func(s *lease.Store) error {
			_, err := s.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: "r-a"})
			return err
		}},
		{"completion", `"complete"`, func(s *lease.Store) error {
			_, err := s.Complete(ctx(t), lease.CompleteParams{TaskID: "t", AgentID: "a", RunID: "r-a"})
			return err
		}},
		{"failed release", `"release"`, func(s *lease.Store) error {
			_, err := s.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: "r-a", Outcome: lease.OutcomeFailed})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t")
			first := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Minute}))
			e.drain(t)
			e.clock.Advance(3 * time.Second)
			tasks := e.names.Table(schema.TasksTable)
			var second lease.Checkout
			lossy := &lossyDoer{
				match: func(target, body string) bool {
					return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, tc.verb)
				},
				race: func() {
					e.clock.Advance(time.Second)
					if tc.name == "failed release" {
						e.clock.Advance(time.Minute) // past its retry wait
					}
					if tc.verb == `"complete"` {
						st := lease.StatusTodo
						must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Status: &st}))
					}
					second = must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Minute}))
				},
				applied: true,
			}
			err := tc.end(e.over(lossy))
			if !lossy.lost.Load() {
				t.Fatal("no ending was sent twice")
			}
			got := e.get(t, "t")
			if got.Checkout == nil || got.Checkout.Fence != second.Fence {
				t.Errorf("a %s naming run r-a only, applied to fence %d and sent again after the run took fence %d: lease left %+v (answered %v); want fence %d left alone",
					tc.name, first.Fence, second.Fence, got.Checkout, err, second.Fence)
			}
		})
	}
}

// TestASkewedEndingSentTwiceAfterARecentEndingEndsItsOwnLease with the
// change stream archiving the task's events only 800 ms into the call (in
// AWS, about a second after each write), for the endings judged by their
// write's id: the call waits for the archive, finds no ending of its
// write there, and ends its own lease.
func TestASkewedEndingSentTwiceWhileTheStreamLagsEndsItsOwnLease(t *testing.T) {
	t.Parallel()
	for _, tc := range []skewedEnding{unnamedRelease, runIDOnlyRelease, runIDOnlyCompletion} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.task(t, "t")
			e.clock.Advance(time.Second)
			e.drain(t)
			b := must[lease.Checkout](t)(e.store.Checkout(ctx(t), lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r-b", Timeout: time.Minute}))
			e.clock.Advance(time.Second)
			must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: b.RunID, Fence: b.Fence}))
			e.clock.Advance(10 * time.Millisecond)
			co := must[lease.Checkout](t)(e.store.Checkout(ctx(t), lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Minute}))
			archived := make(chan struct{})
			lossy := &lossyDoer{
				match: endingOf(e, tc.verb),
				race: func() {
					go func() { // the stream, a moment behind (real time: the trail's wait is)
						defer close(archived)
						time.Sleep(800 * time.Millisecond)
						if _, err := e.poller.Poll(ctx(t)); err != nil {
							t.Errorf("drain: %v", err)
						}
					}()
				},
			}
			err := tc.end(t, e.skewedOver(lossy, 50*time.Millisecond), co)
			<-archived
			if !lossy.lost.Load() {
				t.Fatal("no ending was sent twice")
			}
			if got := e.get(t, "t"); err != nil || got.Checkout != nil {
				t.Errorf("a's own live lease, its %s sent twice (the first sending lost, never applied) by a process 50 ms behind, the stream 800 ms behind: "+
					"answered %v, lease left %+v; want it ended", tc.name, err, got.Checkout)
			}
		})
	}
}
