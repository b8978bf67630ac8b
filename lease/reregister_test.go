package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// In AWS the authorizer caches a key's answer (30 s): after an agent's
// removal its old key still passes as the id for that long, and would act
// as a new agent registered under the same id. So a store with
// ReRegisterAfter refuses to register a removed id again until that time
// has passed since the removal (409 agent_exists, saying from when), and
// takes back what the refused registration wrote.
func TestARemovedIDIsRegisteredAgainOnlyAfterTheHold(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const hold = 30 * time.Second
	s := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, ReRegisterAfter: hold})
	must[lease.Registration](t)(s.RegisterAgent(c, lease.RegisterParams{AgentID: "x", Name: "x"}))
	must[lease.Heartbeat](t)(s.Heartbeat(c, "x", time.Minute))
	e.clock.Advance(time.Second)
	removedAt := e.clock.Now()
	if err := s.RemoveAgent(c, "x"); err != nil {
		t.Fatal(err)
	}

	e.clock.Advance(hold - time.Millisecond)
	_, err := s.RegisterAgent(c, lease.RegisterParams{AgentID: "x", Name: "x again"})
	var recent *lease.RemovedRecentlyError
	if !errors.Is(err, lease.ErrAgentExists) || !errors.As(err, &recent) {
		t.Fatalf("registering x %v after its removal: %v, want a RemovedRecentlyError (agent_exists)", hold-time.Millisecond, err)
	}
	if want := removedAt.Add(hold); !recent.Until.Equal(want) {
		t.Errorf("may be registered again from %v, want %v", recent.Until, want)
	}
	if _, err := s.GetAgent(c, "x"); !errors.Is(err, lease.ErrAgentNotFound) {
		t.Errorf("x after the refused registration: %v, want not found", err)
	}
	if _, err := s.Heartbeat(c, "x", time.Minute); !errors.Is(err, lease.ErrUnauthorized) {
		t.Errorf("a heartbeat as x after the refused registration: %v, want refused (still removed)", err)
	}

	e.clock.Advance(time.Millisecond)
	reg := must[lease.Registration](t)(s.RegisterAgent(c, lease.RegisterParams{AgentID: "x", Name: "x again"}))
	if p, err := s.Authenticate(c, reg.APIKey); err != nil || p.AgentID != "x" {
		t.Fatalf("the new key: %+v, %v", p, err)
	}
	if _, err := s.Heartbeat(c, "x", time.Minute); err != nil {
		t.Errorf("the registered agent's heartbeat: %v", err)
	}

	// Without the setting (the local server) an id is registered again at once.
	if err := e.store.RemoveAgent(c, "x"); err != nil {
		t.Fatal(err)
	}
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "x", Name: "x at once"}))
}
