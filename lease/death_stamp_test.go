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
