package lease_test

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/checkout-dev/checkout/lease"
)

// seqHistory runs ins one at a time against a fresh store with tasks
// task-0.. (created as the whole model has them) and agents agent-00..
// registered, and returns the history, each operation returned before the
// next is called, and once the indexes show every write before it (the
// model has no index lag). A tick moves the store's clock to in.Now.
func seqHistory(t *testing.T, tasks, agents int, ins []wIn) (start int64, h []porcupine.Operation) {
	t.Helper()
	e := newEnv(t)
	c := ctx(t)
	for i := range agents {
		must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: wAgentID(i), Name: "name-" + wAgentID(i)}))
	}
	for i := range tasks {
		must[lease.Task](t)(e.store.CreateTask(c, wCreate(i, nil)))
		e.clock.Advance(time.Millisecond)
	}
	start = e.clock.Now().UnixMilli()
	for i, in := range ins {
		var out wOut
		if in.Op == "tick" {
			e.clock.Advance(time.Duration(in.Now-e.clock.Now().UnixMilli()) * time.Millisecond)
			out = wOut{Kind: "ok"}
		} else {
			e.caughtUp(t)
			res, err := wApply(c, e.store, in)
			var ok bool
			if out, ok = wOutcome(in, res, err); !ok {
				t.Fatalf("%+v: %v", in, err)
			}
		}
		h = append(h, porcupine.Operation{ClientId: i % 4, Input: in, Output: out, Call: int64(2 * i), Return: int64(2*i + 1)})
	}
	return start, h
}

// checkSeq checks a sequential history with the whole model, and logs it
// when the model rejects it.
func checkSeq(t *testing.T, start int64, tasks, agents int, h []porcupine.Operation) {
	t.Helper()
	if !porcupine.CheckOperations(wholeModel(start, tasks, agents, false, nil), h) {
		for _, op := range h {
			t.Logf("%+v -> %+v", op.Input, op.Output)
		}
		t.Error("the model rejects the store's sequential history")
	}
}

// A named claim retried answers with the lease its receipt names, as it is
// now (renewed: its new expiry; ended: expiring when it ended), after the
// holder renewed it, after the task moved on by two leases, and after the
// holder was removed: the flake of TestLinearizabilityClaim, minimised.
// The model had the retry grant a new lease once the task had moved on, as
// the store did before its receipts kept the grant.
func TestLinearizabilityClaimRetrySequential(t *testing.T) {
	t.Parallel()
	claim := wIn{Op: "claim", Agent: 0, Run: "agent-00-c1", Timeout: 30_000, Queues: "default,q1"}
	for _, c := range []struct {
		name string
		// expires is when the retry says the lease expires (or expired),
		// in ms after start: renewed at 5 s for 30 s, or when it ended.
		expires int64
		ins     func(start int64) []wIn
	}{
		{"renewed", 35_000, func(start int64) []wIn {
			return []wIn{
				claim,
				{Op: "tick", Now: start + 5_000},
				{Op: "renew", Task: 0, Agent: 0, Run: claim.Run},
				claim,
			}
		}},
		{"released and claimed again by another", 0, func(start int64) []wIn {
			return []wIn{
				claim,
				{Op: "release", Task: 0, Agent: 0, Run: claim.Run},
				{Op: "checkout", Task: 0, Agent: 1, Run: "agent-01-r1", Timeout: 10_000},
				{Op: "release", Task: 0, Agent: 1, Run: "agent-01-r1"},
				claim,
			}
		}},
		{"expired, taken over twice", 30_000, func(start int64) []wIn {
			return []wIn{
				claim,
				{Op: "tick", Now: start + 30_000},
				{Op: "checkout", Task: 0, Agent: 1, Run: "agent-01-r1", Timeout: 10_000},
				{Op: "tick", Now: start + 40_000},
				{Op: "checkout", Task: 0, Agent: 2, Run: "agent-02-r1", Timeout: 10_000},
				claim,
			}
		}},
		{"holder removed, task claimed again", 0, func(start int64) []wIn {
			return []wIn{
				claim,
				{Op: "remove", Agent: 0},
				{Op: "checkout", Task: 0, Agent: 1, Run: "agent-01-r1", Timeout: 10_000},
				{Op: "release", Task: 0, Agent: 1, Run: "agent-01-r1"},
				claim,
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// The store's clock starts 3 ms past epoch once the tasks exist.
			start := epoch.Add(3 * time.Millisecond).UnixMilli()
			got, h := seqHistory(t, 3, 3, c.ins(start))
			if got != start {
				t.Fatalf("start %d, want %d", got, start)
			}
			first, last := h[0].Output.(wOut), h[len(h)-1].Output.(wOut)
			want := first
			want.Expires = start + c.expires
			if first.Kind != "ok" || last != want {
				t.Errorf("the retry answered %+v, want %+v (the claim's lease as it is now)", last, want)
			}
			checkSeq(t, start, 3, 3, h)
		})
	}
}
