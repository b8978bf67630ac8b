package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// API.md: after DELETE /api/agents/{id}, "from the answer on, no lease of
// that agent blocks anyone"; agents.go: "the local server is one process and
// has no such window". A heartbeat of the agent whose write landed just
// before the removal's tombstone, but whose answer is handled after the
// removal forgot the agent, puts the agent back in the process's alive
// cache (Heartbeat's alive.put skips the forget epoch that heartbeat()'s
// putRead honours). For the next second the same process answers 409
// naming the removed agent for a lease of it the removal's index read did
// not see (one granted while the removal ran).
func TestAHeartbeatAnsweredAfterARemovalKeepsItRemoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "x", Name: "x"}))
	// One process (as the local server is): its store's requests go
	// through db.
	db := &heartbeatWritesDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable)}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	must[lease.Heartbeat](t)(s.Heartbeat(c, "x", time.Minute))
	e.clock.Advance(time.Second)
	// A lease granted while the removal runs: not in the index the removal reads.
	e.lag(t, schema.TasksTable, indexLag)
	co := must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "x", Timeout: time.Hour}))
	e.clock.Advance(time.Millisecond)
	// Just after the next heartbeat's write has landed, before its answer.
	removed := false
	db.sent, db.after = 0, map[int]func(){1: func() {
		removed = true
		if err := s.RemoveAgent(c, "x"); err != nil {
			t.Errorf("remove: %v", err)
		}
	}}
	must[lease.Heartbeat](t)(s.Heartbeat(c, "x", time.Minute)) // its write landed before the tombstone
	if !removed {
		t.Fatal("the removal did not run between the heartbeat's write and its answer")
	}
	// The removal has answered. y checks t1 out in the same process.
	e.clock.Advance(time.Millisecond)
	got, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t1", AgentID: "y", Timeout: time.Hour})
	if err != nil {
		t.Errorf("checkout of t1 after x's removal: %v; want granted (x's lease fence %d must not block)", err, co.Fence)
	} else if got.Fence <= co.Fence {
		t.Errorf("fence %d", got.Fence)
	}
}
