package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// Sweep is the cost of ending n expired leases in one sweep.
type Sweep struct {
	Leases   int
	Ended    int
	Elapsed  time.Duration
	Requests Ops // the sweep's own
	// Stream is what the stream function then did for the endings (their
	// events, the holders' lease_lost messages, queue counts), and how
	// long it took.
	Stream        Ops
	StreamElapsed time.Duration
	Setup         time.Duration
	// CPU is what the sweep itself cost the local server and this process
	// (zero on another server): the server's, per lease, bounds its rate.
	CPU CPU
}

// RunSweep checks out n tasks with a 1m lease, moves the store's clock past
// their expiry and times one Sweep, with the stream function held off (it
// has caught up with the checkouts first), as the sweep runs in AWS: the
// stream function has capacity of its own there, here it would share the
// one local server. The stream function's consequences are then applied
// and counted apart.
func RunSweep(ctx context.Context, endpoint string, n int) (Sweep, error) {
	clk := NewClock()
	o, err := NewOurs(ctx, endpoint, clk.Now)
	if err != nil {
		return Sweep{}, err
	}
	t0 := time.Now()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("task-%05d", i)
	}
	if err := o.Prepare(ctx, keys); err != nil {
		return Sweep{}, err
	}
	if err := parallel(ctx, 16, n, func(i int) error {
		_, err := o.Store.Checkout(ctx, lease.CheckoutParams{TaskID: keys[i], AgentID: fmt.Sprintf("agent-%d", i%50), Timeout: time.Minute})
		return err
	}); err != nil {
		return Sweep{}, err
	}
	res := Sweep{Leases: n, Setup: time.Since(t0)}
	clk.Advance(2 * time.Minute)
	var r lease.SweepResult
	meter := &CPUMeter{Endpoint: endpoint}
	if err := o.Quiet(ctx, func() error {
		before := meter.Read(ctx)
		start := time.Now()
		r, err = o.Store.Sweep(ctx)
		res.Elapsed = time.Since(start)
		res.CPU = meter.Read(ctx).Sub(before)
		res.Requests = o.Count.Take()
		return err
	}); err != nil {
		return res, err
	}
	start := time.Now()
	if res.Stream, err = o.CatchUp(ctx); err != nil {
		return res, err
	}
	res.StreamElapsed = time.Since(start)
	res.Ended = r.Timeouts
	if res.Ended != n {
		return res, fmt.Errorf("sweep ended %d of %d expired leases", res.Ended, n)
	}
	return res, nil
}
