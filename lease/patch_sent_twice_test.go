package lease_test

import (
	"testing"

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
	got := e.get(t, "p")
	if got.Title != "from b" || got.Version != created.Version+2 {
		t.Fatalf("after a's PATCH and then b's: title %q at version %d (a's answered %q at %d); want %q at %d: a's applied once, before b's",
			got.Title, got.Version, answered.Title, answered.Version, "from b", created.Version+2)
	}
}
