package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Throughput is one acquire-then-release scenario's result.
type Throughput struct {
	System    string
	Scenario  string
	Workers   int
	Cycles    int // acquire + release completed
	Conflicts int // acquire attempts that found the key held
	Elapsed   time.Duration
	// Latencies of successful cycles (acquire + release) and, contended, of
	// every acquire attempt.
	CycleP50, CycleP99     time.Duration
	AttemptP50, AttemptP99 time.Duration
	Requests               int
	// Abandoned counts attempts cut off a second after the run's end.
	Abandoned int
	// CPU is what the run cost the local DynamoDB's process and this one
	// (zero where not measured).
	CPU CPU
}

// CyclesPerSec is the rate of completed cycles.
func (t Throughput) CyclesPerSec() float64 {
	if t.Elapsed <= 0 {
		return 0
	}
	return float64(t.Cycles) / t.Elapsed.Seconds()
}

// RunThroughput runs workers for d: each acquires its key (distinct keys, or
// one shared key when contended), releases it, and repeats.
//
// backoff is how long a worker waits after a conflict before trying again
// (0: at once).
//
// cpu, when not nil, measures what the run costs the server and the client.
func RunThroughput(ctx context.Context, sys System, count *Counter, cpu *CPUMeter, workers int, contended bool, backoff, d time.Duration) (Throughput, error) {
	scenario := "uncontended"
	keys := make([]string, workers)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%s-%03d", randomPrefix("")[1:9], i)
		if contended {
			keys[i] = keys[0]
		}
	}
	if contended {
		scenario = "contended (one key)"
		if backoff > 0 {
			scenario = fmt.Sprintf("contended (one key), %v back-off", backoff)
		}
	}
	if err := sys.Prepare(ctx, slices.Compact(slices.Clone(keys))); err != nil {
		return Throughput{}, err
	}
	res := Throughput{System: sys.Name(), Scenario: scenario, Workers: workers}
	var mu sync.Mutex
	var cycles, attempts []time.Duration
	var firstErr error
	count.Take()
	cpu0 := cpu.Read(ctx)
	start := time.Now()
	deadline := start.Add(d)
	// An attempt still running a second after the deadline is abandoned
	// (dynamolock can sleep inside AcquireLock for seconds under contention).
	runCtx, cancel := context.WithDeadline(ctx, deadline.Add(time.Second))
	defer cancel()
	var abandoned atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var myCycles, myAttempts []time.Duration
			conflicts := 0
			var err error
			// Every worker makes one attempt however long it takes, so that
			// a slow machine still measures something; later attempts end
			// at the deadline.
			for (len(myAttempts) == 0 || time.Now().Before(deadline)) && ctx.Err() == nil {
				actx := runCtx
				if len(myAttempts) == 0 {
					actx = ctx
				}
				t0 := time.Now()
				release, held, aerr := sys.Acquire(actx, w, keys[w])
				if aerr != nil && runCtx.Err() != nil && ctx.Err() == nil {
					abandoned.Add(1)
					break
				}
				myAttempts = append(myAttempts, time.Since(t0))
				if aerr != nil {
					err = aerr
					break
				}
				if !held {
					conflicts++
					if backoff > 0 {
						time.Sleep(backoff)
					}
					continue
				}
				if rerr := release(ctx); rerr != nil {
					err = rerr
					break
				}
				myCycles = append(myCycles, time.Since(t0))
			}
			mu.Lock()
			defer mu.Unlock()
			cycles = append(cycles, myCycles...)
			attempts = append(attempts, myAttempts...)
			res.Conflicts += conflicts
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}()
	}
	wg.Wait()
	res.Elapsed = time.Since(start)
	if cpu != nil {
		res.CPU = cpu.Read(ctx).Sub(cpu0)
	}
	res.Abandoned = int(abandoned.Load())
	res.Requests = count.Take().Total()
	if firstErr != nil {
		return res, fmt.Errorf("%s %s x%d: %w", sys.Name(), scenario, workers, firstErr)
	}
	res.Cycles = len(cycles)
	res.CycleP50, res.CycleP99 = quantile(cycles, 0.5), quantile(cycles, 0.99)
	res.AttemptP50, res.AttemptP99 = quantile(attempts, 0.5), quantile(attempts, 0.99)
	return res, nil
}

// ServerPerCycle and ClientPerCycle are the CPU time a completed cycle
// cost each side (0 when not measured).
func (t Throughput) ServerPerCycle() time.Duration { return perCycle(t.CPU.Server, t.Cycles) }

func (t Throughput) ClientPerCycle() time.Duration { return perCycle(t.CPU.Client, t.Cycles) }

func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}
