package lease_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// lossyTaskStore is a store on e's tables whose first request that match
// accepts is lost before DynamoDB sees it (lossyDoer), race running in
// that gap.
func lossyTaskStore(e *env, match func(target, body string) bool, race func()) (*lease.Store, *lossyDoer) {
	doer := &lossyDoer{match: match, race: race}
	client := lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) { o.HTTPClient = doer })
	return lease.New(lease.Config{DB: client, Tables: e.names, Now: e.clock.Now}), doer
}

// taskUpdate matches an UpdateItem of e's tasks table.
func taskUpdate(e *env) func(target, body string) bool {
	tasks := e.names.Table(schema.TasksTable)
	return func(target, body string) bool {
		return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks)
	}
}

// An admin's force release that names no lease (no run id, no fence)
// ends whichever lease is live, and is never a repeat: sent once after
// the same admin's earlier force release ended that lease, it is 404
// not_checked_out. When its write was sent twice by the SDK (the first
// sending lost, never applied) and the earlier force release landed in
// that gap, in the same millisecond, the second sending's refusal was
// taken for its own ending (the check named type, admin, the lease and
// the instant, all of which the earlier one had): answered released, for
// a lease it never ended.
func TestAForceReleaseNamingNoLeaseSentTwiceIsNotAnEarlierOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	e.checkout(t, "x", "ag", time.Hour)
	e.clock.Advance(time.Minute)

	force := lease.ReleaseParams{TaskID: "x", AgentID: "admin", Force: true}
	var raceErr error
	s, doer := lossyTaskStore(e, taskUpdate(e), func() {
		_, raceErr = e.store.Release(c, force)
	})
	got, err := s.Release(c, force)
	if !doer.lost.Load() {
		t.Fatal("no write was lost and sent again")
	}
	if raceErr != nil {
		t.Fatalf("the force release that landed first: %v", raceErr)
	}
	if !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Fatalf("a second force release naming no lease, after the first ended the lease: answered %+v, %v; want 404 not_checked_out", got, err)
	}
	if evs := kinds(e.events(t, "x")); !slices.Equal(evs, []lease.EventType{lease.EventCheckout, lease.EventForceRelease}) {
		t.Fatalf("x's trail %v, want one checkout and one force release", evs)
	}
}

// A PATCH with If-Match of a task whose lease has expired (not swept yet)
// first ends that lease as the sweep would, with its own event, and then
// counts on the version that ending left. When that ending's write
// applied, its answer was lost and the SDK sent it again, the second
// sending's refusal (the lease it was pinned to is gone: by its own
// write) was taken for another writer's: 412 version_mismatch, for a
// task nobody else had touched.
func TestAnIfMatchCancelEndingAnExpiredLeaseSentTwiceIsMade(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	e.checkout(t, "x", "ag", time.Minute)
	e.clock.Advance(2 * time.Minute) // expired, not swept
	v := e.get(t, "x").Version

	db := &sentTwiceDB{DB: e.db, name: "end_type"} // the ending's write
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	st := lease.StatusCancelled
	got, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "admin", Status: &st, IfVersion: v})
	if !db.sent.Load() {
		t.Fatal("no ending was sent twice")
	}
	if err != nil {
		t.Fatalf("If-Match: %d on a task only this PATCH wrote: %v; want it cancelled", v, err)
	}
	if got.Status != lease.StatusCancelled || got.Version != v+2 {
		t.Fatalf("answered %s version %d, want cancelled version %d (the ending, then the cancel)", got.Status, got.Version, v+2)
	}
	if evs := kinds(e.events(t, "x")); !slices.Equal(evs, []lease.EventType{lease.EventCheckout, lease.EventTimeout, lease.EventCancel}) {
		t.Fatalf("x's trail %v, want the checkout, one timeout and the cancel", evs)
	}
}

// trailReadDoer passes every request on, and closes read at the first
// Query of the events table (a read of a task's trail).
type trailReadDoer struct {
	http   *lossyDoer
	events string
	once   sync.Once
	read   chan struct{}
}

func (d *trailReadDoer) Do(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".Query") && r.Body != nil {
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
		if strings.Contains(string(body), d.events) {
			d.once.Do(func() { close(d.read) })
		}
	}
	return d.http.Do(r)
}

// A release naming its lease whose answer was lost, sent again by the SDK
// after the task it freed was taken and finished again (two transitions
// on, its ending no longer on the item), looks for its ending in the
// trail; the change stream archives it about a second after the write,
// so that look found nothing and the release, which had applied, was
// answered 404 not_checked_out. A refused named ending now waits, up to
// trailWait, while the task's trail has events not archived yet.
func TestANamedReleaseSentTwiceAfterTwoTransitionsWaitsForItsArchivedEnding(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Minute}))
	e.drain(t) // the checkout archived: what the trail holds before the release
	e.clock.Advance(3 * time.Second)
	tasks := e.names.Table(schema.TasksTable)
	doer := &trailReadDoer{
		http: &lossyDoer{
			match: func(target, body string) bool {
				return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"release"`)
			},
			race: func() {
				b := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r-b", Timeout: time.Minute}))
				must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "b", RunID: "r-b", Fence: b.Fence}))
			},
			applied: true,
		},
		events: e.names.Table(schema.EventsTable),
		read:   make(chan struct{}),
	}
	drained := make(chan struct{})
	go func() {
		// The change stream comes round once the release has looked in
		// the trail and found nothing there yet.
		defer close(drained)
		select {
		case <-doer.read:
			if _, err := e.poller.Poll(c); err != nil {
				t.Errorf("drain the change stream: %v", err)
			}
		case <-c.Done():
		}
	}()
	s := e.over(doer)
	r, err := s.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: "r-a", Fence: co.Fence})
	<-drained
	if !doer.http.lost.Load() {
		t.Fatal("no release was sent twice")
	}
	if err != nil || r.ReleasedBy != "a" || r.Held != 3*time.Second {
		t.Errorf("a's release, sent twice, the task taken and completed in between: %+v, %v; want released by a after 3s held", r, err)
	}
}
