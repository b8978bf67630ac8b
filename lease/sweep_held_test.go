package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// Removing an agent at the very instant its lease expires ends that lease
// as the expiry did (timeout), as a takeover at that instant would say,
// rather than leaving it for the sweep.
func TestRemovingAnAgentAtItsLeasesExpiryEndsItByTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "r", Name: "r"}))
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "r", time.Hour))
	e.task(t, "t")
	e.checkout(t, "t", "r", time.Minute)
	e.caughtUp(t) // the removal finds the agent's leases through an index
	e.clock.Advance(time.Minute)
	if err := e.store.RemoveAgent(c, "r"); err != nil {
		t.Fatal(err)
	}
	evs := e.events(t, "t")
	if last := evs[len(evs)-1]; last.Type != lease.EventTimeout || last.AgentID != "r" {
		t.Fatalf("t's events after r was removed at its lease's expiry: %v, want the lease ended by timeout", kinds(evs))
	}
}

// The sweep ranks a delayed task ready only on the expiry entry it read:
// one whose not_before a PATCH moved later after the index showed the old
// one keeps its delay.
func TestASweepUnderIndexLagDoesNotRankReadyADelayMovedLater(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	first := e.clock.Now().Add(time.Minute)
	e.create(t, lease.CreateTaskParams{TaskID: "t", Queue: "moved", NotBefore: &first})
	e.caughtUp(t)
	e.lag(t, schema.TasksTable, indexLag)
	e.clock.Advance(2 * time.Minute)
	later := e.clock.Now().Add(time.Hour)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", SetNotBefore: true, NotBefore: &later}))
	if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res.Ready != 0 {
		t.Errorf("sweep %+v, want none ranked ready: t waits until %v", res, later)
	}
	e.caughtUp(t)
	e.clock.Advance(2 * time.Hour)
	if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res.Ready != 1 {
		t.Errorf("sweep past the later not_before %+v, want t ranked ready", res)
	}
}
