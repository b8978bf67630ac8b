package lease_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A PATCH whose write applied, whose answer was lost, and which the SDK
// sent again only after another client's PATCH landed: the second sending
// is refused on the other's version, names neither PATCH's body (a PATCH
// of the title has none), and used to be taken for a write that had not
// applied: the PATCH read the task again and applied once more, over the
// other's, whose title was lost though it was answered as made after
// this one. The task keeps the PATCH before its latest (patch_prev), so
// the second sending knows its own one PATCH on too.
func TestAPatchSentTwiceAfterAnotherPatchIsNotAppliedAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	created := must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "p", Title: "first"}))
	var raceErr error
	db := &updateTwiceDB{DB: e.db, name: "patch", race: func() {
		title := "from b"
		_, raceErr = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", AgentID: "b", Title: &title})
	}}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	title := "from a"
	answered, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", AgentID: "a", Title: &title})
	if !db.sent.Load() {
		t.Fatal("the PATCH was not sent twice")
	}
	if raceErr != nil {
		t.Fatalf("the other client's PATCH: %v", raceErr)
	}
	if err != nil {
		t.Fatalf("the PATCH sent twice answered %v; want it made", err)
	}
	// Its answer is the task as its write left it, as its lost answer
	// said, not as b's PATCH left it after.
	if answered.Title != "from a" || answered.Version != created.Version+1 {
		t.Errorf("a's PATCH answered title %q at version %d; want %q at %d", answered.Title, answered.Version, "from a", created.Version+1)
	}
	got := e.get(t, "p")
	if got.Title != "from b" || got.Version != created.Version+2 {
		t.Fatalf("after a's PATCH and then b's: title %q at version %d (a's answered %q at %d); want %q at %d: a's applied once, before b's",
			got.Title, got.Version, answered.Title, answered.Version, "from b", created.Version+2)
	}
}

// A PATCH that reopens a done task, whose write applied and whose answer
// was lost, sent again after an agent checked the reopened task out: the
// second sending must not reopen it again, ending that agent's lease. It
// used to answer the task as the checkout left it, with the lease hidden
// (todo at the checkout's version, a state the task never had); it now
// answers it as its own write left it.
func TestAReopenSentTwiceAfterACheckoutLeavesTheLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "r"})
	e.complete(t, "r", "a")
	done := e.get(t, "r")
	var co lease.Checkout
	var raceErr error
	db := &updateTwiceDB{DB: e.db, name: "patch", race: func() {
		co, raceErr = e.store.Checkout(c, lease.CheckoutParams{TaskID: "r", AgentID: "b", Timeout: time.Hour})
	}}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	got, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "r", AgentID: "admin", Status: new(lease.StatusTodo)})
	if !db.sent.Load() {
		t.Fatal("the PATCH was not sent twice")
	}
	if raceErr != nil {
		t.Fatalf("b's checkout of the reopened task: %v", raceErr)
	}
	if err != nil {
		t.Fatalf("the PATCH sent twice answered %v; want it made", err)
	}
	// Its answer is the task as its write left it (todo, no lease), not
	// as b's checkout did, nor that version with b's lease hidden.
	if got.Status != lease.StatusTodo || got.Checkout != nil || got.Version != done.Version+1 {
		t.Errorf("the reopen answered %s at version %d, lease %+v; want todo at version %d, no lease", got.Status, got.Version, got.Checkout, done.Version+1)
	}
	now := e.get(t, "r")
	if now.Status != lease.StatusInProgress || now.Checkout == nil || now.Checkout.AgentID != "b" || now.Checkout.Fence != co.Fence {
		t.Fatalf("after the reopen and b's checkout: %s, lease %+v; want in_progress, b's lease (fence %d)", now.Status, now.Checkout, co.Fence)
	}
}

// The same with more PATCHes between the sendings: the item kept the ids
// of the latest PATCH and the one before only, so a reopen sent again
// after a checkout and two PATCHes of the title was taken for one that had
// not applied, applied again to the task as it then was (held), and
// refused: 409 invalid_transition, for a reopen that had been made (the
// lossy linearizability runs refused such a history). The task keeps
// short prefixes of its last four PATCHes' ids before the latest
// (patch_was), so a PATCH sent again knows its own up to four PATCHes on.
func TestAReopenSentTwiceAfterSeveralPatchesIsKnownAsMade(t *testing.T) {
	t.Parallel()
	for _, between := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("%d PATCHes between", between), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.create(t, lease.CreateTaskParams{TaskID: "r"})
			e.complete(t, "r", "a")
			done := e.get(t, "r")
			var raceErr error
			db := &updateTwiceDB{DB: e.db, name: "patch", race: func() {
				if _, raceErr = e.store.Checkout(c, lease.CheckoutParams{TaskID: "r", AgentID: "b", Timeout: time.Hour}); raceErr != nil {
					return
				}
				for i := range between {
					title := fmt.Sprintf("title %d", i)
					if _, raceErr = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "r", AgentID: "c", Title: &title}); raceErr != nil {
						return
					}
				}
			}}
			s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			got, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "r", AgentID: "admin", Status: new(lease.StatusTodo)})
			if !db.sent.Load() {
				t.Fatal("the PATCH was not sent twice")
			}
			if raceErr != nil {
				t.Fatalf("the checkout and PATCHes between the sendings: %v", raceErr)
			}
			if err != nil || got.Status != lease.StatusTodo || got.Checkout != nil || got.Version != done.Version+1 {
				t.Errorf("the reopen sent twice with a checkout and %d PATCHes between: %s at version %d, lease %+v, %v; want todo at version %d, no lease",
					between, got.Status, got.Version, got.Checkout, err, done.Version+1)
			}
			now := e.get(t, "r")
			if now.Status != lease.StatusInProgress || now.Checkout == nil || now.Checkout.AgentID != "b" || now.Version != done.Version+2+int64(between) {
				t.Fatalf("after the reopen, b's checkout and %d PATCHes: %s at version %d, lease %+v; want in_progress at version %d, b's lease",
					between, now.Status, now.Version, now.Checkout, done.Version+2+int64(between))
			}
		})
	}
}
