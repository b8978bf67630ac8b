package lease_test

import (
	"slices"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A read of a task's events right after its checkout and completion, while
// the change stream has archived neither: at once (TrailWait 0) it shows
// nothing and counts the completion as pending; with TrailWait, as the
// functions run, it waits for the stream to fill the hole and shows both.
func TestTrailWaitsForTheStreamToFillAHole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	e.complete(t, "t", "x")

	at := must[lease.Trail](t)(e.store.TrailPage(c, lease.TrailParams{TaskID: "t"}))
	if len(at.Events) != 0 || at.Pending != 1 {
		t.Fatalf("at once: %d events, %d pending; want 0 and 1 (the checkout not archived yet)", len(at.Events), at.Pending)
	}

	waiting := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes, TrailWait: time.Minute})
	got := make(chan lease.Trail, 1)
	go func() {
		tr, err := waiting.TrailPage(c, lease.TrailParams{TaskID: "t"})
		if err != nil {
			t.Error(err)
		}
		got <- tr
	}()
	e.drain(t) // the stream function catches up
	tr := <-got
	if tr.Pending != 0 || !slices.Equal(kinds(tr.Events), []lease.EventType{lease.EventCheckout, lease.EventComplete}) {
		t.Fatalf("waiting: %v, %d pending; want checkout, complete and none pending", kinds(tr.Events), tr.Pending)
	}
}
