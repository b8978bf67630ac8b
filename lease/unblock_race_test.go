package lease_test

import (
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// raceDoer is the HTTP client of a store that runs race once, just before
// its first request that match accepts is sent: another writer's request
// landing between the store's read and its write.
type raceDoer struct {
	match func(target, body string) bool
	race  func()
	once  sync.Once
}

func (d *raceDoer) Do(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		if d.match(r.Header.Get("X-Amz-Target"), string(body)) {
			d.once.Do(d.race)
		}
	}
	return http.DefaultClient.Do(r)
}

// A named checkout of a task whose blockers are all done, in the moment
// before the change stream unblocks it, unblocks it in its own grant
// (README, "The work graph"). That grant is pinned to the task's version
// as read; when another write of the task landed first (the stream's
// record of another blocker's completion, a PATCH), it was refused, and
// the checkout, which tried the unblocking once, answered 409 blocked
// with an empty blocked_by, though the task was grantable (a limits probe
// saw 3 of 40 such checkouts refused). It now tries again while the task
// it reads has moved on and still waits on done blockers only.
func TestAnUnblockingCheckoutRacedByAnotherWriteGetsTheTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "b1", "b2")
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "d", Title: "d", BlockedBy: []string{"b1", "b2"}}))
	e.caughtUp(t)
	for _, b := range []string{"b1", "b2"} {
		co := e.checkout(t, b, "x", time.Hour)
		must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: b, AgentID: "x", RunID: co.RunID, Fence: co.Fence}))
	}
	// The stream has applied neither completion: d is blocked, waiting on
	// both blockers, both done.

	tasks := e.names.Table(schema.TasksTable)
	raced := false
	doer := &raceDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, `"`+tasks+`"`) && strings.Contains(body, "unblock_seq")
		},
		race: func() {
			// The stream applies b1's completion: d waits on b2 alone.
			raced = true
			if err := lease.Unblock(e.store, "d", "b1"); err != nil {
				t.Errorf("the stream's pass of b1 over d: %v", err)
			}
		},
	}
	s := e.over(doer)
	got, err := s.Checkout(c, lease.CheckoutParams{TaskID: "d", AgentID: "a", RunID: "r-a", Timeout: time.Hour})
	if !raced {
		t.Fatal("no unblocking grant was made")
	}
	if err != nil || got.Fence != 1 || got.AgentID != "a" {
		t.Fatalf("a checkout of d, its blockers done, its unblocking grant raced by the stream's pass of one: %+v, %v; want the task (fence 1)", got, err)
	}
	if task := e.get(t, "d"); task.Status != lease.StatusInProgress {
		t.Errorf("d after the checkout: %s, want in_progress", task.Status)
	}
}
