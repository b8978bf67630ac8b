package client

import (
	"context"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testclock"
)

// WorkOn heartbeats for the agent while it works; when it returns, the
// agent's liveness must not run out behind its back. Before, the agent's
// last heartbeat (ttl 90 s) then expired, the agent was dead, and every
// other lease it held ended with agent_death 90 s after an unrelated
// WorkOn returned.
func TestAgainstServerWorkOnLeavesTheAgentsOtherLeasesAlive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 3, 20, 14, 35, 0, 0, time.UTC))
	_, admin := startServer(t, clock.Now)
	a := agent(t, admin, "agent-a", "researcher", WithClock(clock.Now))
	for _, id := range []string{"held", "quick"} {
		if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Heartbeat(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Checkout(ctx, "held", CheckoutRequest{Timeout: 30 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	if err := a.WorkOn(ctx, "quick", func(context.Context, *Lease) error { return nil }); err != nil {
		t.Fatal(err)
	}
	clock.Advance(5 * time.Minute) // past WorkOn's heartbeat ttl (90 s)
	st, err := a.Status(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	if !st.Locked || st.Checkout == nil || st.Checkout.AgentID != "agent-a" {
		t.Fatalf("the agent's other lease 5 min after WorkOn returned: %+v, want still held", st)
	}
}
