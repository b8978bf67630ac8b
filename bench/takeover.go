package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"cirello.io/dynamolock/v2"

	"github.com/checkout-dev/checkout/lease"
)

// Takeover is how long a new agent waited for a task whose holder died.
type Takeover struct {
	System string
	Setup  string
	Waited time.Duration
	Expect string
}

// pollEvery is how often the waiting agent tries again, for both systems.
const pollEvery = 50 * time.Millisecond

// OursTakeover measures this project's takeover: the holder sends a heartbeat with ttl, checks out with a long
// timeout and dies at once. The waiter, arriving at the death, tries to check
// out every pollEvery; it gets the task at the first try after the ttl.
//
// arrive is how long after the death the waiter first tries.
func OursTakeover(ctx context.Context, endpoint string, ttl, arrive time.Duration) (Takeover, error) {
	o, err := NewOurs(ctx, endpoint, nil)
	if err != nil {
		return Takeover{}, err
	}
	if err := o.Prepare(ctx, []string{"job"}); err != nil {
		return Takeover{}, err
	}
	if _, err := o.Store.Heartbeat(ctx, "holder", ttl); err != nil {
		return Takeover{}, err
	}
	died := time.Now() // the last heartbeat: the ttl runs from here
	if _, err := o.Store.Checkout(ctx, lease.CheckoutParams{TaskID: "job", AgentID: "holder", Timeout: time.Hour}); err != nil {
		return Takeover{}, err
	}
	time.Sleep(time.Until(died.Add(arrive)))
	for {
		_, err := o.Store.Checkout(ctx, lease.CheckoutParams{TaskID: "job", AgentID: "successor", Timeout: time.Hour})
		if err == nil {
			break
		}
		if !errors.Is(err, lease.ErrCheckedOut) {
			return Takeover{}, err
		}
		select {
		case <-ctx.Done():
			return Takeover{}, ctx.Err()
		case <-time.After(pollEvery):
		}
	}
	waited := time.Since(died)
	evs, err := o.Store.Events(ctx, "job")
	if err != nil {
		return Takeover{}, err
	}
	if len(evs) < 2 || evs[len(evs)-2].Type != lease.EventAgentDeath {
		return Takeover{}, fmt.Errorf("takeover recorded %v, want agent_death then checkout", evs)
	}
	return Takeover{
		System: "checkout (lease.Store)",
		Setup:  fmt.Sprintf("heartbeat ttl %v, lease timeout 1h; waiter arrives %v after the death", ttl, arrive),
		Waited: waited,
		Expect: fmt.Sprintf("max(ttl, arrival) + up to one poll (%v)", pollEvery),
	}, nil
}

// PeerTakeover measures dynamolock's takeover: the holder acquires with leaseDuration and dies at once (no
// heartbeat after the acquire). The waiter calls AcquireLock, which reads
// the lock, then waits a whole lease for its version to stay unchanged.
func PeerTakeover(ctx context.Context, endpoint string, leaseDuration, arrive time.Duration) (Takeover, error) {
	p, err := NewPeer(ctx, endpoint, leaseDuration)
	if err != nil {
		return Takeover{}, err
	}
	holder, err := p.NewClient(1, leaseDuration, 0)
	if err != nil {
		return Takeover{}, err
	}
	if _, err := holder.AcquireLockWithContext(ctx, "job", dynamolock.FailIfLocked()); err != nil {
		return Takeover{}, err
	}
	died := time.Now()
	// Closing would release the lock; a dead process does not. Leave it.
	successor, err := p.NewClient(2, leaseDuration, 0)
	if err != nil {
		return Takeover{}, err
	}
	defer func() { _ = successor.Close() }()
	time.Sleep(time.Until(died.Add(arrive)))
	if _, err := successor.AcquireLockWithContext(ctx, "job",
		dynamolock.WithRefreshPeriod(pollEvery),
		dynamolock.WithAdditionalTimeToWaitForLock(leaseDuration)); err != nil {
		return Takeover{}, fmt.Errorf("dynamolock takeover: %w", err)
	}
	return Takeover{
		System: "dynamolock v2.0.2",
		Setup:  fmt.Sprintf("lease duration %v; waiter arrives %v after the death", leaseDuration, arrive),
		Waited: time.Since(died),
		Expect: "arrival + one whole lease from the waiter's first read + up to one poll",
	}, nil
}
