package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// An agent removed while the agents index lags is gone (GetAgent), and the
// listing must not show it either: the index only proposes agents.
func TestTheAgentListingLeavesOutAnAgentRemovedUnderLag(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "x", Name: "x"}))
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Minute))
	eventually(t, "x listed", func() bool { return len(must[[]lease.Agent](t)(e.store.ListAgents(c))) == 1 })
	e.lag(t, schema.AgentsTable, indexLag)
	if err := e.store.RemoveAgent(c, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.GetAgent(c, "x"); err == nil {
		t.Fatal("x still there")
	}
	if got := must[[]lease.Agent](t)(e.store.ListAgents(c)); len(got) != 0 {
		a := got[0]
		t.Errorf("agents after x's removal = %d: %s alive=%v last_heartbeat_at=%v; want none", len(got), a.AgentID, deref(a.Alive), deref(a.LastHeartbeatAt))
	}
}

// An id registered again under another name while the index lags is
// listed as it now is.
func TestTheAgentListingShowsAnAgentRegisteredAgainAsItIs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "x", Name: "before"}))
	eventually(t, "x listed", func() bool { return len(must[[]lease.Agent](t)(e.store.ListAgents(c))) == 1 })
	e.lag(t, schema.AgentsTable, indexLag)
	if err := e.store.RemoveAgent(c, "x"); err != nil {
		t.Fatal(err)
	}
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "x", Name: "after"}))
	got := must[[]lease.Agent](t)(e.store.ListAgents(c))
	if len(got) != 1 || got[0].Name != "after" {
		t.Fatalf("agents = %+v, want x named after", got)
	}
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
