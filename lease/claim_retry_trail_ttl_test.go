package lease_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A hole in the middle of the trail older than the events' retention
// (TTL's doing) is no event not archived yet: it is counted past.
//
// b's grant, renewal and release are made, then 31 days pass (the
// events' retention is 30 days); a's unkept claim (attempt 2), a's
// completion, a reopen, b's grant and d's takeover follow (a's ending
// stays the task's record: the trail must tell a's attempt). TTL has
// removed b's renewal but not yet b's grant and release: DynamoDB deletes
// expired items in no order, typically within days of their expiry. The
// count from a's grant back reads b's release, whose prev_seq names the
// renewal, then b's grant: a "hole". gapFree (Trail) does not wait for a
// hole whose prev_at is older than the retention, nor does
// grantInTrailAt's own bottom-of-trail check; its check between two
// events read must not take it for one either (else the count is -1,
// "not archived yet", and every retry answers 503 until TTL removes b's
// release too). Want attempt 2 (b's grant and a's), as when the renewal
// is still stored.
func TestClaimRetryCountsPastAnEventOlderThanTheRetention(t *testing.T) {
	t.Parallel()
	h := newAttemptHist(t)
	b := h.co("b")
	h.renew(b, 1)
	h.tick()
	h.release("")
	h.e.drain(t)
	h.e.clock.Advance(31 * 24 * time.Hour)
	run, want := h.claimAttempt2()
	h.reopenedGrantedTakenOver(0)
	h.e.drain(t)
	h.tick()
	all := archivedX(t, h.e)
	t.Logf("archived:%s", describeEvents(all))
	gone := unarchiveOneX(t, h.e, "b's renewal", func(ev holeEvent) bool { return ev.typ == "renew" && ev.agent == "b" })
	t.Logf("removed by TTL (older than the retention):%s", describeEvents(gone))
	s, logs := h.loggedStore()
	for i := 0; i < 3; i++ {
		got, err := s.Claim(ctx(t), h.params(run))
		switch {
		case errors.Is(err, lease.ErrGrantNotKept):
			t.Errorf("retry %d: %v; want fence %d attempt %d (a hole older than the retention is not waited for: gapFree, and the trail's bottom)", i+1, err, want.Fence, want.Attempt)
		case err != nil:
			t.Fatalf("retry %d: %v", i+1, err)
		case got.Fence != want.Fence || got.Attempt != want.Attempt:
			t.Errorf("retry %d: fence %d attempt %d, want fence %d attempt %d; log: %s", i+1, got.Fence, got.Attempt, want.Fence, want.Attempt, strings.TrimSpace(logs.String()))
		}
		h.tick()
	}
	// The trail itself shows no hole there.
	tr := must[lease.Trail](t)(h.e.store.Trail(ctx(t), "x"))
	t.Logf("Trail: %d events, %d pending", len(tr.Events), tr.Pending)
}

// The same, on a grant sent twice (resentGrantInTrail): o's grant, renewal
// and release of t, 31 days back; then a's checkout of t is sent twice,
// its answer lost, and in between a completes it, an admin reopens it,
// b takes it and dies, and c takes b's lease over: the second sending is
// refused, and looks for a's grant in the trail (the reopen counts the
// attempts anew, so the trail counts a's). Every event is archived, but
// TTL has removed o's renewal (not yet o's grant and release). a's grant
// counted attempt 2 (o's grant, then a's); the count reads o's release,
// whose prev_seq names the renewal, then o's grant, takes that for an
// event not archived yet (-1), and the grant is answered as attempt 1,
// with a warning, whenever it is sent twice so.
func TestAGrantSentTwiceCountsPastAnEventOlderThanTheRetention(t *testing.T) {
	t.Parallel()
	e := oReleasedT(t)
	e.drain(t)
	e.clock.Advance(31 * 24 * time.Hour)
	must[lease.Heartbeat](t)(e.store.Heartbeat(ctx(t), "a", time.Hour))
	e.caughtUp(t)
	co, err := grantSentTwice(t, e, func() {
		gone := passGrantOn(t, e)
		t.Logf("archived:%s; removed by TTL:%s", describeEvents(archivedOf(t, e, "t")), describeEvents(gone))
	}, nil)
	if err != nil || co.AgentID != "a" || co.Fence != 2 || co.Attempt != 2 {
		t.Errorf("a's grant (fence 2, attempt 2), sent twice: fence %d attempt %d, %v; want fence 2 attempt 2", co.Fence, co.Attempt, err)
	}
}

// A grant sent twice whose count meets an event archived late below the
// grant waits for it, as it waits up to trailWait for events lookInTrail
// sees pending, rather than answer attempt 1 at once.
//
// o's grant, renewal and release of t; then, as in the test above, a's
// checkout sent twice, with a's completion, a reopen, b's grant and c's
// takeover in between. The stream archived o's renewal late (out of
// order: a batch write's unprocessed item, written again 300 ms later).
// The count from a's grant back reads o's release, whose prev_seq names
// the renewal, then o's grant: holed, -1, answered as attempt 1 with a
// warning, in a few ms; a renewal counts nothing, and it is archived
// 300 ms later. Want attempt 2.
func TestAGrantSentTwiceWaitsForAnEventArchivedLateBelowIt(t *testing.T) {
	t.Parallel()
	e := oReleasedT(t)
	e.clock.Advance(time.Second)
	must[lease.Heartbeat](t)(e.store.Heartbeat(ctx(t), "a", time.Hour))
	e.caughtUp(t)
	archived := make(chan struct{})
	var began time.Time // the race's end: the second sending follows
	co, err := grantSentTwice(t, e, func() {
		gone := passGrantOn(t, e)
		t.Logf("archived:%s; late:%s", describeEvents(archivedOf(t, e, "t")), describeEvents(gone))
		go func() {
			defer close(archived)
			time.Sleep(300 * time.Millisecond)
			rearchive(t, e, gone)
		}()
		began = time.Now()
	}, nil)
	took := time.Since(began)
	<-archived
	if err != nil || co.AgentID != "a" || co.Fence != 2 || co.Attempt != 2 {
		t.Errorf("a's grant (fence 2, attempt 2), sent twice, o's renewal archived 300 ms late: fence %d attempt %d, %v (after %v); want fence 2 attempt 2", co.Fence, co.Attempt, err, took)
	}
}

// passGrantOn is what happens to t between the two sendings of a's grant
// (fence 2, attempt 2) in the tests above: a completes it, an admin
// reopens it, b takes it and dies, c takes b's lease over; then every
// event is archived but o's renewal, which passGrantOn takes out of the
// archive and returns (TTL removed it, or the stream archives it late).
func passGrantOn(t *testing.T, e *env) []holeEvent {
	t.Helper()
	c := ctx(t)
	e.clock.Advance(time.Second)
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "a", RunID: "r-a", Fence: 2}))
	e.clock.Advance(time.Second)
	st := lease.StatusTodo
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Status: &st}))
	e.clock.Advance(time.Second)
	bDiesCTakesOver(t, e)
	return unarchiveOf(t, e, "t", func(_ int, ev holeEvent, _ []holeEvent) bool { return ev.typ == "renew" && ev.agent == "o" })
}

// oReleasedT: a new env with a task t, then o's grant of t, its renewal
// and its release, 10 ms apart.
func oReleasedT(t *testing.T) *env {
	t.Helper()
	e := newEnv(t)
	e.task(t, "t")
	c := ctx(t)
	o := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "o", RunID: "r-o", Timeout: time.Hour}))
	e.clock.Advance(10 * time.Millisecond)
	must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "o", RunID: o.RunID, Fence: o.Fence}))
	e.clock.Advance(10 * time.Millisecond)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "o", RunID: o.RunID, Fence: o.Fence}))
	return e
}

// bDiesCTakesOver: b takes t (a heartbeat of a second: b dies), c takes
// b's lease over two seconds later, and the stream archives every event.
func bDiesCTakesOver(t *testing.T, e *env) {
	t.Helper()
	c := ctx(t)
	e.caughtUp(t)
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "b", time.Second))
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r-b", Timeout: time.Hour}))
	e.clock.Advance(2 * time.Second)
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "c", time.Hour))
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "c", RunID: "r-c", Timeout: time.Hour}))
	e.drain(t)
}

// grantSentTwice sends a's checkout of t (run r-a) through a lossyDoer:
// the grant's first sending is applied but its answer lost, race runs,
// and the grant is sent again; it returns what that second sending
// answers, and fails the test if the grant was not sent twice. seen, if
// not nil, is shown each request made once the answer was lost.
func grantSentTwice(t *testing.T, e *env, race func(), seen func(target, body string)) (lease.Checkout, error) {
	t.Helper()
	tasks := e.names.Table(schema.TasksTable)
	var doer *lossyDoer
	doer = &lossyDoer{
		match: func(target, body string) bool {
			if seen != nil && doer.lost.Load() {
				seen(target, body)
			}
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-a"`)
		},
		race:    race,
		applied: true,
	}
	co, err := e.over(doer).Checkout(ctx(t), lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Hour})
	if !doer.lost.Load() {
		t.Fatal("no grant was sent twice")
	}
	return co, err
}
