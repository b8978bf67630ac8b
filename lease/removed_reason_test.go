package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// deathOf returns the agent_death event in taskID's trail that ended the
// lease of fence, failing the test if there is none.
func deathOf(t *testing.T, e *env, taskID string, fence int64) lease.Event {
	t.Helper()
	for _, ev := range e.events(t, taskID) {
		if ev.Type == lease.EventAgentDeath && ev.Fence == fence {
			return ev
		}
	}
	t.Fatalf("no agent_death of fence %d in %v", fence, kinds(e.events(t, taskID)))
	return lease.Event{}
}

// A removed agent's lease that its removal did not end, taken over later,
// ended by the removal: its agent_death says "agent removed", as when the
// removal itself ends it, whichever way the takeover comes. (A claim does
// not take over a dead holder's lease: the sweep ends it first.)
func TestRemovedAgentsLeaseTakenOverSaysAgentRemoved(t *testing.T) {
	t.Parallel()
	register := func(t *testing.T, e *env, id string) {
		t.Helper()
		must[lease.Registration](t)(e.store.RegisterAgent(ctx(t), lease.RegisterParams{AgentID: id, Name: id}))
	}
	// granted within the index lag: the removal's query of the agent's
	// leases does not see it yet.
	missedByLag := func(t *testing.T, e *env) lease.Checkout {
		register(t, e, "a")
		e.lag(t, schema.TasksTable, indexLag)
		co := e.checkout(t, "t", "a", time.Hour)
		if err := e.store.RemoveAgent(ctx(t), "a"); err != nil {
			t.Fatal(err)
		}
		return co
	}
	// granted while the removal ran (its key still cached by the caller).
	grantedAfter := func(t *testing.T, e *env) lease.Checkout {
		register(t, e, "a")
		if err := e.store.RemoveAgent(ctx(t), "a"); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Millisecond)
		return e.checkout(t, "t", "a", time.Hour)
	}
	for _, c := range []struct {
		name  string
		lease func(*testing.T, *env) lease.Checkout
		take  func(*testing.T, *env)
	}{
		{"missed by the index lag, taken by a checkout", missedByLag, func(t *testing.T, e *env) { e.checkout(t, "t", "b", time.Hour) }},
		{"missed by the index lag, ended by the sweep", missedByLag, func(t *testing.T, e *env) {
			if n := count(e.events(t, "t"), lease.EventAgentDeath); n != 0 {
				t.Fatalf("%d agent_death events before the sweep; the removal was to miss the lease", n)
			}
			e.caughtUp(t) // the sweep finds the lease the removal did not
			if res := must[lease.SweepResult](t)(e.store.Sweep(ctx(t))); res.AgentDeaths != 1 {
				t.Fatalf("sweep %+v: want the removed agent's lease ended", res)
			}
		}},
		{"granted after, taken by a checkout", grantedAfter, func(t *testing.T, e *env) { e.checkout(t, "t", "b", time.Hour) }},
		{"granted after, ended by the sweep", grantedAfter, func(t *testing.T, e *env) {
			eventually(t, "the sweep to end the lease", func() bool {
				res, err := e.store.Sweep(ctx(t))
				return err == nil && res.AgentDeaths > 0
			})
		}},
		{"granted after, the id registered again, taken by a checkout", grantedAfter, func(t *testing.T, e *env) {
			e.clock.Advance(time.Millisecond)
			register(t, e, "a")
			e.checkout(t, "t", "b", time.Hour)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.task(t, "t")
			co := c.lease(t, e)
			e.clock.Advance(time.Second)
			c.take(t, e)
			if ev := deathOf(t, e, "t", co.Fence); ev.Reason != "agent removed" {
				t.Fatalf("agent_death of the removed agent's lease: reason %q, want %q", ev.Reason, "agent removed")
			}
		})
	}
}
