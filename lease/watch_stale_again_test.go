package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// Two watches of one agent in flight at once, one read before a
// release and one after it (while b holds the task). The later read's
// write lands first and adds a place for b's release (asks); the earlier
// read's write must not set last_eseq back to its own, earlier eseq:
// dropWatch deletes a watch whose last_eseq is before the freeing that
// told it, and would take the place for b's release with it.
func TestAStaleWatchAgainKeepsALaterPlace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co1 := e.checkout(t, "t", "a", time.Hour)
	if err := e.store.Watch(c, "t", "w"); err != nil {
		t.Fatal(err)
	}
	e.drain(t)
	var co2 lease.Checkout
	db := &beforeWatchWriteDB{DB: e.db}
	db.hook = func() {
		// This request read the task while a held it. Meanwhile a
		// releases, b takes it, and w's other request watches again.
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co1.RunID}))
		co2 = e.checkout(t, "t", "b", time.Hour)
		if err := e.store.Watch(c, "t", "w"); err != nil {
			t.Fatal(err)
		}
	}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	if err := s.Watch(c, "t", "w"); err != nil {
		t.Fatal(err)
	}
	if !db.done.Load() {
		t.Fatal("the watch write was never held")
	}
	e.drain(t)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: co2.RunID}))
	msgs := e.inbox(t, "w")
	var fences []int64
	for _, m := range msgs {
		fences = append(fences, m.Fence)
	}
	if len(msgs) != 2 || msgs[0].Fence != co1.Fence || msgs[1].Fence != co2.Fence {
		t.Errorf("w watched while a held fence %d and again while b held fence %d: inbox fences %v, want [%d %d]", co1.Fence, co2.Fence, fences, co1.Fence, co2.Fence)
	}
}
