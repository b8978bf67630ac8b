package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A lease whose holder died and came back is ended by that death; taken
// over later, its agent_death is stamped by the return at the latest, not
// at the takeover, which falls inside the life the holder's heartbeat
// after its return states. Found by TestRaceTimeOnlyMovesForward under
// load.
func TestTakeoverStampsADeathTheHolderCameBackFromAtItsReturn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Second))
	e.checkout(t, "t", "a", time.Hour)
	e.clock.Advance(2 * time.Second) // a dies
	back := must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Minute))
	returned := back.ExpiresAt.Add(-time.Minute)
	e.clock.Advance(time.Second)
	e.checkout(t, "t", "b", time.Hour)
	e.drain(t)
	death := deathOf(t, e, "t", 1)
	if death.At.After(returned) {
		t.Fatalf("agent_death stamped at %v, inside a's life from its return at %v", death.At, returned)
	}
}

// A lease ended by its holder's death was held until the holder died, when
// its heartbeat ran out, not until the death was noticed: by a takeover, a
// cancel or the sweep, each half a minute later. A death the holder came
// back from is stamped at its expiry too.
func TestAgentDeathIsHeldUntilTheHeartbeatRanOut(t *testing.T) {
	t.Parallel()
	const ttl = 10 * time.Second
	for _, how := range []string{"takeover", "cancel", "sweep", "sweep after the return"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t")
			e.clock.Advance(time.Second)
			hb := must[lease.Heartbeat](t)(e.store.Heartbeat(c, "mortal", ttl))
			e.clock.Advance(2 * time.Second)
			co := e.checkout(t, "t", "mortal", time.Hour)
			e.clock.Advance(30 * time.Second) // dead since hb.ExpiresAt
			switch how {
			case "takeover":
				e.checkout(t, "t", "heir", time.Hour)
			case "cancel":
				must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Status: new(lease.StatusCancelled)}))
			case "sweep":
				e.caughtUp(t) // the sweep finds the death through an index
				must[lease.SweepResult](t)(e.store.Sweep(c))
			case "sweep after the return":
				must[lease.Heartbeat](t)(e.store.Heartbeat(c, "mortal", time.Minute))
				e.clock.Advance(time.Second)
				e.caughtUp(t) // the sweep finds the death through an index
				must[lease.SweepResult](t)(e.store.Sweep(c))
			}
			death := deathOf(t, e, "t", co.Fence)
			if want := hb.ExpiresAt.Sub(co.LockedAt); death.Held == nil || *death.Held != want || !death.At.Equal(hb.ExpiresAt) {
				t.Fatalf("agent_death at %v held %v; want at %v (the heartbeat's expiry), held %v", death.At, death.Held, hb.ExpiresAt, want)
			}
		})
	}
}

// Removing an agent that had already died by its heartbeat records the
// death it died: agent_death "holder's heartbeat expired", at its
// heartbeat's expiry and held until then, not "agent removed" at the
// removal. A live agent removed loses its leases to the removal.
func TestRemovingAnAgentAlreadyDeadRecordsItsHeartbeatDeath(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "dead-then-removed")
	e.task(t, "removed-alive")
	for _, id := range []string{"mortal", "alive"} {
		must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: id, Name: id}))
	}
	hb := must[lease.Heartbeat](t)(e.store.Heartbeat(c, "mortal", 10*time.Second))
	e.clock.Advance(2 * time.Second)
	co := e.checkout(t, "dead-then-removed", "mortal", time.Hour)
	e.clock.Advance(30 * time.Second) // dead since hb.ExpiresAt, not swept
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "alive", time.Minute))
	live := e.checkout(t, "removed-alive", "alive", time.Hour)
	e.caughtUp(t) // the removals find the leases through an index
	for _, id := range []string{"mortal", "alive"} {
		if err := e.store.RemoveAgent(c, id); err != nil {
			t.Fatal(err)
		}
	}
	death := deathOf(t, e, "dead-then-removed", co.Fence)
	if death.Reason != "holder's heartbeat expired" || !death.At.Equal(hb.ExpiresAt) || death.Held == nil || *death.Held != hb.ExpiresAt.Sub(co.LockedAt) {
		t.Errorf("the dead agent's lease ended %+v; want by its heartbeat, at %v", death, hb.ExpiresAt)
	}
	removed := deathOf(t, e, "removed-alive", live.Fence)
	if removed.Reason != "agent removed" || !removed.At.Equal(e.clock.Now()) {
		t.Errorf("the live agent's lease ended %+v; want by its removal, now", removed)
	}
}
