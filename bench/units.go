package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"cirello.io/dynamolock/v2"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/localstack"
)

// The on-demand list price the cost figures use: DynamoDB in us-east-1,
// Standard table class, per million request units. A write request unit
// is what the meter counts as a write unit; a read request unit is a
// strongly consistent read unit (an eventually consistent read is half).
const (
	WritePricePerMillion = 0.625
	ReadPricePerMillion  = 0.125
	PriceNote            = "DynamoDB on-demand, us-east-1, Standard table class: $0.625 per million write request units, " +
		"$0.125 per million read request units (aws.amazon.com/dynamodb/pricing/on-demand, the list price since the " +
		"reduction of 1 November 2024; checked 2026-12-01)"
	// PartitionWriteUnits is what one partition of a table or index
	// takes a second.
	PartitionWriteUnits = 1000
)

// CostPerMillion is the on-demand price, in US dollars, of a million
// operations that each use u.
func CostPerMillion(u localstack.Units) float64 {
	return u.Write*WritePricePerMillion + u.Read*ReadPricePerMillion
}

// TaskSize is the body of the tasks an operation is measured on.
type TaskSize struct {
	Name        string
	Description string
	Metadata    []byte
}

// TaskSizes are a small task (a title; its item is about half a kilobyte)
// and a large one: a full 8 KiB description and 3.5 KiB of metadata.
var TaskSizes = []TaskSize{
	{Name: "small"},
	{Name: "12 KB", Description: strings.Repeat("d", lease.MaxDescriptionLen),
		Metadata: []byte(`{"notes":"` + strings.Repeat("m", 3584-len(`{"notes":""}`)) + `"}`)},
}

func (z TaskSize) params(id, queue string) lease.CreateTaskParams {
	return lease.CreateTaskParams{TaskID: id, Title: "title of " + id, Queue: queue, Description: z.Description, Metadata: z.Metadata}
}

// UnitCost is what one operation was billed on tasks of one size: by its
// own requests, and by the stream function for its consequences.
type UnitCost struct {
	Op, Size        string
	Request, Stream localstack.Units
}

// Total is the request path and the stream together.
func (u UnitCost) Total() localstack.Units { return u.Request.Add(u.Stream) }

// PeerCost is what one dynamolock operation was billed.
type PeerCost struct {
	Op    string
	Units localstack.Units
}

// Fleet is a run of agents each cycling (checkout, complete) through tasks
// of its own.
type Fleet struct {
	Size           string
	Agents, Cycles int // Cycles: in all
	// Units is the whole run's, the stream function's included.
	Units localstack.Units
	// Busiest is the busiest partition of each table and index.
	Busiest []localstack.PartitionUnits
	Elapsed time.Duration
}

// Top is the busiest partition of any index.
func (f Fleet) Top() localstack.PartitionUnits {
	var top localstack.PartitionUnits
	for _, b := range f.Busiest {
		if b.Index != "" && b.Write > top.Write {
			top = b
		}
	}
	return top
}

// PerCycle is u divided among the fleet's cycles.
func (f Fleet) PerCycle(u localstack.Units) localstack.Units {
	n := float64(max(f.Cycles, 1))
	return localstack.Units{Write: u.Write / n, Read: u.Read / n}
}

// Ceiling is the cycles a second the busiest index partition allows the
// whole fleet.
func (f Fleet) Ceiling() float64 {
	w := f.PerCycle(f.Top().Units).Write
	if w == 0 {
		return 0
	}
	return PartitionWriteUnits / w
}

// UnitReport is what MeasureUnits measured.
type UnitReport struct {
	Ops    []UnitCost
	Peer   []PeerCost
	Fleets []Fleet
}

// Units runs fn with the stream function held off and returns what its
// requests were billed; then it hands fn's changes to the stream function
// and returns what that was billed. The figures are the local DynamoDB's
// meter's for this store's tables.
func (o *Ours) Units(ctx context.Context, fn func() error) (req, str localstack.Units, err error) {
	o.streamMu.Lock()
	defer o.streamMu.Unlock()
	if _, err := o.stream.Poll(ctx); err != nil {
		return req, str, fmt.Errorf("drain the change stream: %w", err)
	}
	c0, err := localstack.ReadCapacity(ctx, o.Endpoint, o.Names.Prefix)
	if err != nil {
		return req, str, err
	}
	if err := fn(); err != nil {
		return req, str, err
	}
	c1, err := localstack.ReadCapacity(ctx, o.Endpoint, o.Names.Prefix)
	if err != nil {
		return req, str, err
	}
	// Until the stream is quiet: the stream function's own writes (an
	// unblocking) have consequences of their own.
	for range 5 {
		n, err := o.stream.Poll(ctx)
		if err != nil {
			return req, str, fmt.Errorf("drain the change stream: %w", err)
		}
		if n == 0 {
			break
		}
	}
	c2, err := localstack.ReadCapacity(ctx, o.Endpoint, o.Names.Prefix)
	if err != nil {
		return req, str, err
	}
	return c1.Sub(c0).Total(), c2.Sub(c1).Total(), nil
}

// MeasureUnits measures the write and read units of each operation on
// tasks of each size, dynamolock's on the same meter, and, with
// fleetAgents > 0, a fleet run of fleetAgents agents doing fleetCycles
// cycles each.
func MeasureUnits(ctx context.Context, endpoint string, sweepLeases, fleetAgents, fleetCycles int) (*UnitReport, error) {
	r := &UnitReport{}
	for _, z := range TaskSizes {
		ops, err := measureOps(ctx, endpoint, z, sweepLeases)
		if err != nil {
			return nil, fmt.Errorf("units, %s task: %w", z.Name, err)
		}
		r.Ops = append(r.Ops, ops...)
	}
	var err error
	if r.Peer, err = peerUnits(ctx, endpoint); err != nil {
		return nil, err
	}
	if fleetAgents > 0 {
		for _, z := range TaskSizes {
			f, err := RunFleet(ctx, endpoint, z, fleetAgents, fleetCycles)
			if err != nil {
				return nil, fmt.Errorf("fleet, %s tasks: %w", z.Name, err)
			}
			r.Fleets = append(r.Fleets, f)
		}
	}
	return r, nil
}

func measureOps(ctx context.Context, endpoint string, z TaskSize, sweepLeases int) ([]UnitCost, error) {
	clk := NewClock()
	o, err := NewOurs(ctx, endpoint, clk.Now)
	if err != nil {
		return nil, err
	}
	var out []UnitCost
	op := func(name string, fn func() error) error {
		req, str, err := o.Units(ctx, fn)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		out = append(out, UnitCost{Op: name, Size: z.Name, Request: req, Stream: str})
		return nil
	}
	create := func(ids ...string) error {
		for _, id := range ids {
			if _, err := o.Store.CreateTask(ctx, z.params(id, "")); err != nil {
				return err
			}
		}
		return nil
	}
	createQueue := func(queue string, n int) error {
		var batch []lease.CreateTaskParams
		for i := range n {
			batch = append(batch, z.params(fmt.Sprintf("%s-%03d", queue, i), queue))
			if len(batch) == lease.MaxBatch || i == n-1 {
				if _, err := o.Store.CreateTasks(ctx, batch); err != nil {
					return err
				}
				batch = nil
			}
		}
		return nil
	}
	checkout := func(id, agent string) (lease.Checkout, error) {
		return o.Store.Checkout(ctx, lease.CheckoutParams{TaskID: id, AgentID: agent, Timeout: time.Minute})
	}
	complete := func(c lease.Checkout) error {
		_, err := o.Store.Complete(ctx, lease.CompleteParams{TaskID: c.TaskID, AgentID: c.AgentID, RunID: c.RunID, Fence: c.Fence})
		return err
	}
	if _, err := o.Store.Heartbeat(ctx, "holder", time.Hour); err != nil {
		return nil, err
	}
	var held lease.Checkout
	steps := []struct {
		name string
		fn   func() error
	}{
		{"create, a queue new to the process", func() error { return create("first") }},
		{"create", func() error { return create("t") }},
		{"", func() error { return create("u", "w", "x") }},
		{"checkout", func() (err error) { held, err = checkout("t", "holder"); return err }},
		{"conflict (409)", func() error {
			_, err := checkout("t", "other")
			if errors.Is(err, lease.ErrCheckedOut) {
				return nil
			}
			return fmt.Errorf("want a conflict, got %w", err)
		}},
		// A renewal comes later than the grant: its new expiry moves the
		// lease's index entry.
		{"", func() error { clk.Advance(time.Second); return nil }},
		{"renew", func() error {
			_, err := o.Store.Renew(ctx, lease.RenewParams{TaskID: "t", AgentID: "holder", RunID: held.RunID, Fence: held.Fence})
			return err
		}},
		{"release", func() error {
			_, err := o.Store.Release(ctx, lease.ReleaseParams{TaskID: "t", AgentID: "holder", RunID: held.RunID, Fence: held.Fence})
			return err
		}},
		{"", func() (err error) { held, err = checkout("u", "holder"); return err }},
		{"complete", func() error { return complete(held) }},
		{"checkout+complete", func() error {
			c, err := checkout("w", "holder")
			if err != nil {
				return err
			}
			return complete(c)
		}},
		{"", func() (err error) { held, err = checkout("x", "holder"); return err }},
		{"watch", func() error { return o.Store.Watch(ctx, "x", "watcher") }},
		{"release (one watcher)", func() error {
			_, err := o.Store.Release(ctx, lease.ReleaseParams{TaskID: "x", AgentID: "holder", RunID: held.RunID, Fence: held.Fence})
			return err
		}},
		{"heartbeat", func() error { _, err := o.Store.Heartbeat(ctx, "holder", time.Hour); return err }},
		{"", func() error { return createQueue("short", 1) }},
		{"claim (queue of 1)", func() error {
			_, err := o.Store.Claim(ctx, lease.ClaimParams{AgentID: "claimer", Queues: []string{"short"}, Timeout: 10 * time.Minute})
			return err
		}},
		// The work graph: a dependent of one blocker; the completion of a
		// blocker of four dependents (the dependents' unblocking is the
		// stream's part).
		{"", func() error { return create("blocker", "blocker4") }},
		{"create a dependent (one blocker)", func() error {
			_, err := o.Store.CreateTask(ctx, lease.CreateTaskParams{TaskID: "dependent", Title: "dependent", BlockedBy: []string{"blocker"}})
			return err
		}},
		{"", func() error {
			for i := range 4 {
				if _, err := o.Store.CreateTask(ctx, lease.CreateTaskParams{TaskID: fmt.Sprintf("dep-%d", i), Title: "dependent", BlockedBy: []string{"blocker4"}}); err != nil {
					return err
				}
			}
			held, err = checkout("blocker4", "holder")
			return err
		}},
		{"complete a blocker of 4 dependents", func() error { return complete(held) }},
		{"", func() error { return createQueue("long", 50) }},
		{"claim (queue of 50)", func() error {
			_, err := o.Store.Claim(ctx, lease.ClaimParams{AgentID: "claimer", Queues: []string{"long"}, Timeout: 10 * time.Minute})
			return err
		}},
	}
	for _, s := range steps {
		if s.name == "" {
			if err := s.fn(); err != nil {
				return nil, err
			}
			continue
		}
		if err := op(s.name, s.fn); err != nil {
			return nil, err
		}
	}

	// The sweep, per lease it ends.
	sweepIDs := make([]string, sweepLeases)
	for i := range sweepIDs {
		sweepIDs[i] = fmt.Sprintf("sweep-%04d", i)
	}
	if err := create(sweepIDs...); err != nil {
		return nil, err
	}
	for _, id := range sweepIDs {
		if _, err := checkout(id, "sweepee"); err != nil {
			return nil, err
		}
	}
	clk.Advance(time.Minute + time.Second)
	var ended int
	if err := op("sweep (per expired lease)", func() error {
		res, err := o.Store.Sweep(ctx)
		ended = res.Timeouts + res.AgentDeaths
		return err
	}); err != nil {
		return nil, err
	}
	// The claimed tasks' leases are ten minutes long: only these expired.
	if ended != sweepLeases {
		return nil, fmt.Errorf("the sweep ended %d leases, want %d", ended, sweepLeases)
	}
	s := &out[len(out)-1]
	per := func(u localstack.Units) localstack.Units {
		return localstack.Units{Write: u.Write / float64(ended), Read: u.Read / float64(ended)}
	}
	s.Request, s.Stream = per(s.Request), per(s.Stream)
	return out, nil
}

// peerUnits measures dynamolock's operations on the same meter.
func peerUnits(ctx context.Context, endpoint string) ([]PeerCost, error) {
	p, err := NewPeer(ctx, endpoint, time.Minute)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	holder, err := p.NewClient(1, time.Minute, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = holder.Close() }()
	other, err := p.NewClient(2, time.Minute, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = other.Close() }()
	var out []PeerCost
	op := func(name string, fn func() error) error {
		c0, err := localstack.ReadCapacity(ctx, endpoint, p.Table)
		if err != nil {
			return err
		}
		if err := fn(); err != nil {
			return fmt.Errorf("dynamolock %s: %w", name, err)
		}
		c1, err := localstack.ReadCapacity(ctx, endpoint, p.Table)
		if err != nil {
			return err
		}
		out = append(out, PeerCost{Op: name, Units: c1.Sub(c0).Total()})
		return nil
	}
	var lock *dynamolock.Lock
	acquire := func() (err error) {
		lock, err = holder.AcquireLockWithContext(ctx, "t", dynamolock.FailIfLocked())
		return err
	}
	release := func() error {
		ok, err := holder.ReleaseLockWithContext(ctx, lock)
		if err == nil && !ok {
			err = errors.New("not released")
		}
		return err
	}
	for _, s := range []struct {
		name string
		fn   func() error
	}{
		{"acquire", acquire},
		{"conflict", func() error {
			_, err := other.AcquireLockWithContext(ctx, "t", dynamolock.FailIfLocked())
			var ng *dynamolock.LockNotGrantedError
			if errors.As(err, &ng) {
				return nil
			}
			return fmt.Errorf("want not granted, got %w", err)
		}},
		{"heartbeat (per held lock)", func() error { return holder.SendHeartbeatWithContext(ctx, lock) }},
		{"release", release},
		{"acquire+release", func() error {
			if err := acquire(); err != nil {
				return err
			}
			return release()
		}},
	} {
		if err := op(s.name, s.fn); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// RunFleet has agents each run cycles checkout+complete cycles on tasks
// of their own, the stream function running alongside, and reports the
// units of the whole run and its busiest partitions.
func RunFleet(ctx context.Context, endpoint string, z TaskSize, agents, cycles int) (Fleet, error) {
	f := Fleet{Size: z.Name, Agents: agents, Cycles: agents * cycles}
	o, err := NewOurs(ctx, endpoint, nil)
	if err != nil {
		return f, err
	}
	id := func(agent, cycle int) string { return fmt.Sprintf("fleet-%02d-%04d", agent, cycle) }
	var batch []lease.CreateTaskParams
	for i := range agents * cycles {
		batch = append(batch, z.params(id(i%agents, i/agents), ""))
		if len(batch) == lease.MaxBatch || i == agents*cycles-1 {
			if _, err := o.Store.CreateTasks(ctx, batch); err != nil {
				return f, err
			}
			batch = nil
		}
	}
	var c0 localstack.Capacity
	if _, _, err := o.Units(ctx, func() (err error) {
		c0, err = localstack.ReadCapacity(ctx, endpoint, o.Names.Prefix)
		return err
	}); err != nil {
		return f, err
	}
	start := time.Now()
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for a := range agents {
		wg.Go(func() {
			agent := fmt.Sprintf("agent-%02d", a)
			for j := range cycles {
				c, err := o.Store.Checkout(ctx, lease.CheckoutParams{TaskID: id(a, j), AgentID: agent, Timeout: time.Minute})
				if err == nil {
					_, err = o.Store.Complete(ctx, lease.CompleteParams{TaskID: c.TaskID, AgentID: agent, RunID: c.RunID, Fence: c.Fence})
				}
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("%s, cycle %d: %w", agent, j, err)
					}
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	f.Elapsed = time.Since(start)
	if firstErr != nil {
		return f, firstErr
	}
	// Hand the stream function what is left, then read the meter.
	var c1 localstack.Capacity
	if _, _, err := o.Units(ctx, func() (err error) {
		c1, err = localstack.ReadCapacity(ctx, endpoint, o.Names.Prefix)
		return err
	}); err != nil {
		return f, err
	}
	d := c1.Sub(c0)
	f.Units = d.Total()
	for _, b := range d.Busiest() {
		b.Table = strings.TrimPrefix(b.Table, o.Names.Prefix)
		f.Busiest = append(f.Busiest, b)
	}
	return f, nil
}
