package lease_test

import (
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A removal deletes the agent's item under a condition on the key it read.
// When the SDK sent that delete again (its first sending applied, its
// answer lost), the second sending failed on the missing item, and the
// removal read again, found no agent, and answered 404 agent_not_found
// for the agent it had removed, before ending its leases: API.md, "from
// the answer on, no lease of that agent blocks anyone", was left to the
// sweep. A delete sent more than once that finds no item was applied.
func TestARemovalWhoseDeleteWasSentTwiceIsAnswered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	reg := must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "doomed", Name: "doomed"}))
	e.task(t, "t")
	e.checkout(t, "t", reg.AgentID, time.Hour)
	e.clock.Advance(time.Minute)
	e.caughtUp(t) // the removal finds the lease through an index

	agents := e.names.Table(schema.AgentsTable)
	doer := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".DeleteItem") && strings.Contains(body, agents) && strings.Contains(body, `"doomed"`)
		},
		race:    func() {},
		applied: true,
	}
	s := e.over(doer)
	err := s.RemoveAgent(c, reg.AgentID)
	if !doer.lost.Load() {
		t.Fatal("no delete was sent twice")
	}
	if err != nil {
		t.Fatalf("removing an agent whose delete's answer was lost: %v, want done", err)
	}
	if task := must[lease.Task](t)(e.store.GetTask(c, "t")); task.Checkout != nil || task.Status != lease.StatusTodo {
		t.Errorf("the removed agent's task: %s, lease %+v; want todo, its lease ended by the removal", task.Status, task.Checkout)
	}
}
