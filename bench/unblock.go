package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// Unblocking is how long dependents took to become claimable after their
// last blocker's completion was answered: the change stream's delay (the
// local server polls it every 200 ms, as NewOurs does), the unblocking
// write, and the claim index's.
type Unblocking struct {
	Rounds        int
	P50, P99, Max time.Duration
	// ClaimEvery is how often the waiting agent tried to claim.
	ClaimEvery time.Duration
}

// RunUnblocking runs rounds of: a blocker and a dependent in a queue of
// their own; the blocker checked out and completed; then an agent claims
// from the dependent's queue every claimEvery until it gets it. Each
// round's time runs from the completion's answer to the claim's.
func RunUnblocking(ctx context.Context, endpoint string, rounds int, claimEvery time.Duration) (Unblocking, error) {
	o, err := NewOurs(ctx, endpoint, nil)
	if err != nil {
		return Unblocking{}, err
	}
	took := make([]time.Duration, 0, rounds)
	for i := range rounds {
		blocker, dep, queue := fmt.Sprintf("blocker-%d", i), fmt.Sprintf("dependent-%d", i), fmt.Sprintf("graph-%d", i)
		if _, err := o.Store.CreateTask(ctx, lease.CreateTaskParams{TaskID: blocker, Title: blocker, Queue: "blockers"}); err != nil {
			return Unblocking{}, err
		}
		if _, err := o.Store.CreateTask(ctx, lease.CreateTaskParams{TaskID: dep, Title: dep, Queue: queue, BlockedBy: []string{blocker}}); err != nil {
			return Unblocking{}, err
		}
		c, err := o.Store.Checkout(ctx, lease.CheckoutParams{TaskID: blocker, AgentID: "worker", Timeout: time.Minute})
		if err != nil {
			return Unblocking{}, err
		}
		if _, err := o.Store.Complete(ctx, lease.CompleteParams{TaskID: blocker, AgentID: "worker", RunID: c.RunID}); err != nil {
			return Unblocking{}, err
		}
		done := time.Now()
		for {
			got, err := o.Store.Claim(ctx, lease.ClaimParams{AgentID: "waiter", Queues: []string{queue}, Timeout: time.Minute})
			if err == nil {
				if got.TaskID != dep {
					return Unblocking{}, fmt.Errorf("claimed %s, want %s", got.TaskID, dep)
				}
				break
			}
			if !errors.Is(err, lease.ErrNoTaskAvailable) {
				return Unblocking{}, err
			}
			if time.Since(done) > 30*time.Second {
				return Unblocking{}, fmt.Errorf("%s not claimable 30 s after its blocker's completion", dep)
			}
			select {
			case <-ctx.Done():
				return Unblocking{}, ctx.Err()
			case <-time.After(claimEvery):
			}
		}
		took = append(took, time.Since(done))
	}
	slices.Sort(took)
	at := func(q float64) time.Duration { return took[min(len(took)-1, int(q*float64(len(took))))] }
	return Unblocking{Rounds: rounds, P50: at(0.5), P99: at(0.99), Max: took[len(took)-1], ClaimEvery: claimEvery}, nil
}
