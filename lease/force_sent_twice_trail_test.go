package lease_test

// A force release naming no lease, sent twice by the SDK: what its
// second sending's refusal reads of the trail, and when it is answered
// as released (forceRelease).

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// countingDoer counts the requests of each X-Amz-Target operation.
type countingDoer struct {
	next interface {
		Do(*http.Request) (*http.Response, error)
	}
	queries, gets, updates atomic.Int32
}

func (d *countingDoer) Do(r *http.Request) (*http.Response, error) {
	switch target := r.Header.Get("X-Amz-Target"); {
	case strings.HasSuffix(target, ".Query"):
		d.queries.Add(1)
	case strings.HasSuffix(target, ".GetItem"):
		d.gets.Add(1)
	case strings.HasSuffix(target, ".UpdateItem"):
		d.updates.Add(1)
	}
	return d.next.Do(r)
}

// forceSentTwice runs an admin's force release naming no lease of t, held by a,
// whose first force_release UpdateItem is lost: applied or dropped
// (applied), race running before the SDK's second sending. With drain,
// the change stream is drained just after the call's first trail Query.
func forceSentTwice(t *testing.T, applied, drain bool, race func(e *env, a lease.Checkout)) (lease.Released, *countingDoer, time.Duration, error) {
	t.Helper()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	a := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Minute}))
	e.drain(t)
	e.clock.Advance(3 * time.Second)
	tasks := e.names.Table(schema.TasksTable)
	lossy := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"force_release"`)
		},
		race:    func() { race(e, a) },
		applied: applied,
	}
	var next interface {
		Do(*http.Request) (*http.Response, error)
	} = lossy
	if drain {
		next = &pollAfterTrailRead{http: lossy, events: e.names.Table(schema.EventsTable), poll: func() { e.drain(t) }}
	}
	counts := &countingDoer{next: next}
	start := time.Now()
	r, err := e.over(counts).Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true})
	took := time.Since(start)
	if !lossy.lost.Load() {
		t.Fatalf("no force_release was sent twice")
	}
	return r, counts, took, err
}

// aReleasedThenBTookAndReleased: a releases its own lease, then b takes
// the task and releases it, a second apart.
func aReleasedThenBTookAndReleased(t *testing.T) func(e *env, a lease.Checkout) {
	return func(e *env, a lease.Checkout) {
		e.clock.Advance(time.Second)
		must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: "r-a", Fence: a.Fence}))
		takenAndEnded(t, releasedByB(t))(e)
	}
}

// the first sending never applied; a released, b took and released.
// The force ended nothing: it must not be answered released.
func TestAForceReleaseThatEndedNothingIsNotFoundInTheTrail(t *testing.T) {
	t.Parallel()
	r, n, took, err := forceSentTwice(t, false, true, aReleasedThenBTookAndReleased(t))
	t.Logf("answer %+v, %v; %d Queries, %d GetItems, %d UpdateItems, %v", r, err, n.queries.Load(), n.gets.Load(), n.updates.Load(), took)
	if !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Errorf("a force release that ended nothing: %+v, %v; want 404 not_checked_out", r, err)
	}
}

// the first sending never applied; the same admin's other force
// release (another call, another write id) ended a's lease, then b took
// the task and released it. This call ended nothing.
func TestAForceReleaseIsNotTakenForTheSameAdminsOtherInTheTrail(t *testing.T) {
	t.Parallel()
	r, n, took, err := forceSentTwice(t, false, true, func(e *env, a lease.Checkout) {
		e.clock.Advance(time.Second)
		must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true}))
		takenAndEnded(t, releasedByB(t))(e)
	})
	t.Logf("answer %+v, %v; %d Queries, %d GetItems, %d UpdateItems, %v", r, err, n.queries.Load(), n.gets.Load(), n.updates.Load(), took)
	if !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Errorf("a force release whose lease the same admin's other force release ended: %+v, %v; want 404 not_checked_out", r, err)
	}
}

// the same, with only the other force release in between (the task
// not taken again): the item's last ending is the other call's.
func TestAForceReleaseIsNotTakenForTheSameAdminsOtherOnTheItem(t *testing.T) {
	t.Parallel()
	r, n, took, err := forceSentTwice(t, false, true, func(e *env, a lease.Checkout) {
		e.clock.Advance(time.Second)
		must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true}))
	})
	t.Logf("answer %+v, %v; %d Queries, %d GetItems, %d UpdateItems, %v", r, err, n.queries.Load(), n.gets.Load(), n.updates.Load(), took)
	if !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Errorf("%+v, %v; want 404 not_checked_out", r, err)
	}
}

// the first sending never applied, a released its lease
// in between (one transition: the task was not taken and freed again),
// the change stream not run. Its write was pinned to a's lease, whose
// ending (a's own) is still the item's: its ending cannot be in the
// trail, and the refusal is answered at once, reading none (a GetItem, 2
// UpdateItem sendings); it read the trail and waited for the stream
// (trailWait, 3 s) in vain before.
func TestAForceReleaseRefusedOnItsLeasesOwnEndingReadsNoTrail(t *testing.T) {
	t.Parallel()
	r, n, took, err := forceSentTwice(t, false, false, func(e *env, a lease.Checkout) {
		e.clock.Advance(time.Second)
		must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: "r-a", Fence: a.Fence}))
	})
	t.Logf("answer %+v, %v; %d Queries, %d GetItems, %d UpdateItems, %v", r, err, n.queries.Load(), n.gets.Load(), n.updates.Load(), took)
	if !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Errorf("%+v, %v; want 404 not_checked_out", r, err)
	}
	if n.queries.Load() > 0 || took > time.Second {
		t.Errorf("a force release whose first sending never applied, refused on its holder's release (the task not taken and freed again): %d Queries, %v; README's cost row names the trail only for a retry refused once the task was taken and freed again", n.queries.Load(), took)
	}
}

// the first sending applied, b took and released,
// the stream held up (never drained): the call waits in vain and answers
// 404 though it ended the lease, as README says.
func TestAForceReleaseSentTwiceWithTheStreamHeldUpIs404(t *testing.T) {
	t.Parallel()
	r, n, took, err := forceSentTwice(t, true, false, func(e *env, a lease.Checkout) { takenAndEnded(t, releasedByB(t))(e) })
	t.Logf("answer %+v, %v; %d Queries, %d GetItems, %d UpdateItems, %v", r, err, n.queries.Load(), n.gets.Load(), n.updates.Load(), took)
	if !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Errorf("%+v, %v; want 404 not_checked_out (README: the stream held up)", r, err)
	}
}

// a force release sent once costs what it did: a GetItem of the task,
// one of a's heartbeat (when not read in the last second), an UpdateItem.
func TestAForceReleaseSentOnceReadsNoTrail(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Minute}))
	e.clock.Advance(3 * time.Second)
	counts := &countingDoer{next: http.DefaultClient}
	r := must[lease.Released](t)(e.over(counts).Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true}))
	t.Logf("answer %+v; %d Queries, %d GetItems, %d UpdateItems", r, counts.queries.Load(), counts.gets.Load(), counts.updates.Load())
	if counts.queries.Load() != 0 || counts.gets.Load() > 2 || counts.updates.Load() != 1 {
		t.Errorf("a force release sent once: %d Queries, %d GetItems, %d UpdateItems; want 0, at most 2, 1", counts.queries.Load(), counts.gets.Load(), counts.updates.Load())
	}
}
