package bench

import (
	"context"
	"fmt"
	"time"
)

// unitSweepLeases is how many expired leases the sweep's units are shared
// among.
const unitSweepLeases = 10

// Config sizes a run.
type Config struct {
	Endpoint string
	Root     string // the product's repository root (for functions/)
	// Throughput runs each scenario for this long.
	Throughput time.Duration
	Workers    []int // uncontended worker counts
	Contended  int   // workers on one key
	// Takeover: this project's heartbeat ttl and dynamolock's lease.
	TTL, PeerLease time.Duration
	SweepLeases    int
	LambdaRuns     int // start-ups per function; 0 skips the Lambdas
	// Drain: agents claiming from one queue of DrainTasks tasks until it is
	// empty; 0 skips it. DrainOnly runs nothing else.
	DrainAgents, DrainTasks int
	DrainOnly               bool
	// SweepOnly runs the sweep alone (on a fresh server, unlike the full
	// run, whose earlier phases leave their data in it).
	SweepOnly bool
	DrainMode string // "process", "agent", or both when empty or "both"
	// Units: the fleet run has FleetAgents agents doing FleetCycles
	// checkout+complete cycles each; 0 agents skips it.
	FleetAgents, FleetCycles int
	// UnblockRounds: dependents timed from their blocker's completion to
	// their claim; 0 skips it.
	UnblockRounds int
	Log           func(format string, args ...any)
}

// Full is the configuration of `make bench`.
func Full() Config {
	return Config{Throughput: 5 * time.Second, Workers: []int{1, 8, 32}, Contended: 32,
		TTL: 2 * time.Second, PeerLease: 6 * time.Second, SweepLeases: 10000, LambdaRuns: 5,
		DrainAgents: 32, DrainTasks: 2000, FleetAgents: 16, FleetCycles: 25, UnblockRounds: 200}
}

// Quick is the configuration of `make bench-quick`.
func Quick() Config {
	return Config{Throughput: 500 * time.Millisecond, Workers: []int{1, 8, 32}, Contended: 32,
		TTL: time.Second, PeerLease: 2 * time.Second, SweepLeases: 200, LambdaRuns: 1,
		DrainAgents: 32, DrainTasks: 200, FleetAgents: 16, FleetCycles: 4, UnblockRounds: 20}
}

// Results is everything a run measured.
type Results struct {
	Config     Config
	Requests   []OpCost
	Units      *UnitReport
	Throughput []Throughput
	// Floor holds, for each throughput scenario in order, the floor's run
	// (floor.go).
	Floor      []Throughput
	Takeover   []Takeover
	Sweep      *Sweep
	Unblocking *Unblocking
	Drains     []Drain
	Lambdas    []Lambda
	LambdaErr  string
	Started    time.Time
	Took       time.Duration
}

// Run measures both systems. An error means a system failed to run; the
// figures themselves are never judged.
func Run(ctx context.Context, cfg Config) (*Results, error) {
	logf := cfg.Log
	if logf == nil {
		logf = func(string, ...any) {}
	}
	r := &Results{Config: cfg, Started: time.Now()}
	var err error
	// The drain runs last: the tasks and events it leaves stay in the one
	// local server, whose every later request they slow (it keeps all
	// tables in one in-memory store).
	if cfg.DrainOnly {
		if err := r.drain(ctx, cfg, logf); err != nil {
			return nil, err
		}
		r.Took = time.Since(r.Started)
		return r, nil
	}
	if cfg.SweepOnly {
		logf("sweep of %d expired leases", cfg.SweepLeases)
		sw, err := RunSweep(ctx, cfg.Endpoint, cfg.SweepLeases)
		if err != nil {
			return nil, err
		}
		r.Sweep = &sw
		r.Took = time.Since(r.Started)
		return r, nil
	}
	logf("requests per operation")
	if r.Requests, err = Requests(ctx, cfg.Endpoint); err != nil {
		return nil, err
	}
	logf("write and read units per operation; fleet of %d agents x %d cycles", cfg.FleetAgents, cfg.FleetCycles)
	if r.Units, err = MeasureUnits(ctx, cfg.Endpoint, unitSweepLeases, cfg.FleetAgents, cfg.FleetCycles); err != nil {
		return nil, err
	}

	ours, err := NewOurs(ctx, cfg.Endpoint, nil)
	if err != nil {
		return nil, err
	}
	peer, err := NewPeer(ctx, cfg.Endpoint, time.Minute)
	if err != nil {
		return nil, err
	}
	defer peer.Close()
	type sc struct {
		workers   int
		contended bool
		backoff   time.Duration
	}
	var scs []sc
	for _, w := range cfg.Workers {
		scs = append(scs, sc{w, false, 0})
	}
	if cfg.Contended > 0 {
		// Losers retry at once (a retry storm on one key), then after a
		// short pause, as a polite client would.
		scs = append(scs, sc{cfg.Contended, true, 0}, sc{cfg.Contended, true, 50 * time.Millisecond})
	}
	floor, err := NewFloor(ctx, cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	for _, s := range scs {
		for _, sys := range []struct {
			System
			count *Counter
		}{{ours, ours.Count}, {peer, peer.Count}, {floor, floor.Count}} {
			logf("throughput: %s, %d workers, contended=%v", sys.Name(), s.workers, s.contended)
			t, err := RunThroughput(ctx, sys.System, sys.count, &CPUMeter{Endpoint: cfg.Endpoint}, s.workers, s.contended, s.backoff, cfg.Throughput)
			if err != nil {
				return nil, err
			}
			if sys.System == floor {
				r.Floor = append(r.Floor, t)
			} else {
				r.Throughput = append(r.Throughput, t)
			}
		}
	}

	logf("takeover after the holder dies")
	// The waiter arrives at the death, then half a ttl later; dynamolock
	// runs with the brief's lease and with a lease equal to the ttl.
	for _, arrive := range []time.Duration{0, cfg.TTL / 2} {
		t1, err := OursTakeover(ctx, cfg.Endpoint, cfg.TTL, arrive)
		if err != nil {
			return nil, err
		}
		r.Takeover = append(r.Takeover, t1)
		leases := []time.Duration{cfg.PeerLease}
		if cfg.PeerLease != cfg.TTL {
			leases = append(leases, cfg.TTL)
		}
		for _, l := range leases {
			t2, err := PeerTakeover(ctx, cfg.Endpoint, l, arrive)
			if err != nil {
				return nil, err
			}
			r.Takeover = append(r.Takeover, t2)
		}
	}

	logf("sweep of %d expired leases", cfg.SweepLeases)
	sw, err := RunSweep(ctx, cfg.Endpoint, cfg.SweepLeases)
	if err != nil {
		return nil, err
	}
	r.Sweep = &sw

	if cfg.UnblockRounds > 0 {
		logf("unblocking: %d dependents", cfg.UnblockRounds)
		u, err := RunUnblocking(ctx, cfg.Endpoint, cfg.UnblockRounds, 10*time.Millisecond)
		if err != nil {
			return nil, err
		}
		r.Unblocking = &u
	}

	if cfg.LambdaRuns > 0 {
		logf("lambda packages and start-up")
		if r.Lambdas, err = MeasureLambdas(ctx, cfg.Root, cfg.LambdaRuns); err != nil {
			// The Lambdas are the product's, not a system under comparison:
			// report what failed and carry on.
			r.LambdaErr = err.Error()
		}
	}
	if err := r.drain(ctx, cfg, logf); err != nil {
		return nil, err
	}
	r.Took = time.Since(r.Started)
	return r, nil
}

// drain runs the queue-drain benchmark in the modes cfg asks for.
func (r *Results) drain(ctx context.Context, cfg Config, logf func(string, ...any)) error {
	if cfg.DrainTasks <= 0 {
		return nil
	}
	for _, perAgent := range []bool{false, true} {
		if cfg.DrainMode == "process" && perAgent || cfg.DrainMode == "agent" && !perAgent {
			continue
		}
		logf("drain: %d agents, %d tasks, one store per agent=%v", cfg.DrainAgents, cfg.DrainTasks, perAgent)
		d, err := RunDrain(ctx, cfg.Endpoint, cfg.DrainAgents, cfg.DrainTasks, perAgent)
		if err != nil {
			return err
		}
		logf("drain: %s: %d granted, %.3f claims and %.3f grant writes per grant, %v, %.1f claim requests per grant (%s)",
			d.Mode, d.Granted, d.ClaimsPerGrant(), d.WritesPerGrant(), d.Elapsed.Round(time.Millisecond),
			float64(d.Requests.Total())/float64(max(d.Granted, 1)), opsString(d.Requests))
		r.Drains = append(r.Drains, d)
	}
	return nil
}

func (r *Results) String() string { return fmt.Sprintf("bench results (%v)", r.Took) }
