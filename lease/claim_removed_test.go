package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A claim that is waiting when its agent is removed gets no task: the
// agent's key stopped working at the removal's answer, and a grant to it
// would only end at once (agent removed) and use up the task's attempt,
// failing a task of one attempt nobody worked on.
func TestAWaitingClaimOfARemovedAgentGetsNoTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "gone", Name: "gone"}))
	done := make(chan error, 1)
	go func() {
		_, err := e.store.Claim(c, lease.ClaimParams{AgentID: "gone", Queues: []string{"removal"}, Wait: 10 * time.Second, Timeout: time.Minute})
		done <- err
	}()
	time.Sleep(300 * time.Millisecond) // the claim is waiting
	if err := e.store.RemoveAgent(c, "gone"); err != nil {
		t.Fatal(err)
	}
	e.create(t, lease.CreateTaskParams{TaskID: "fresh", Queue: "removal", MaxAttempts: new(1)})
	select {
	case err := <-done:
		if !errors.Is(err, lease.ErrUnauthorized) {
			t.Fatalf("the removed agent's waiting claim: %v, want unauthorized", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the claim did not return")
	}
	if got := e.get(t, "fresh"); got.Status != lease.StatusTodo || got.Attempts != 0 {
		t.Fatalf("the task after the removed agent's claim: %s, %d attempts; want todo, none used", got.Status, got.Attempts)
	}
}
