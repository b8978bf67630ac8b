package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

// asleep waits until n of store's waiting claims are between two looks:
// what they read from then on is what wakes them makes them read.
func asleep(t *testing.T, store *lease.Store, n int) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); lease.ClaimsAsleep(store) < n; {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d claims waiting", lease.ClaimsAsleep(store), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// A write that frees a task wakes only the claims waiting on its queue.
// It woke every waiting claim of the process, on any queue: each looked
// again (a read of its agent, a Query per shard of each of its queues),
// and again 100 ms, 200 ms ... later, so that on the local server a
// release with 50 claims waiting on other queues took 273 ms instead of
// 11 ms, and a second with claims of ten queues each.
func TestAFreedTaskWakesOnlyTheClaimsWaitingOnItsQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	lease.PollClaims(e.store, time.Hour) // only a wake makes a waiting claim look again
	c := ctx(t)
	const waiters, queuesEach, releases = 8, 3, 5
	e.task(t, "t")
	// Its holder alive in this store's cache: no read of its heartbeat
	// among the requests counted.
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Hour))
	wc, stop := context.WithCancel(c)
	var wg sync.WaitGroup
	for i := range waiters {
		var qs []string
		for j := range queuesEach {
			qs = append(qs, fmt.Sprintf("idle-%d-%d", i, j))
		}
		wg.Go(func() {
			_, err := e.store.Claim(wc, lease.ClaimParams{AgentID: fmt.Sprintf("waiter-%d", i), Queues: qs, Wait: 20 * time.Second})
			if !errors.Is(err, context.Canceled) {
				t.Errorf("claim on %v: %v, want it waiting until cancelled", qs, err)
			}
		})
	}
	asleep(t, e.store, waiters)
	e.count.Take()
	for range releases {
		e.checkout(t, "t", "a", time.Minute)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"}))
	}
	ops := e.count.Take()
	stop()
	wg.Wait()
	t.Logf("%d releases with %d claims waiting on %d other queues each: %d requests %v", releases, waiters, queuesEach, ops.Total(), ops)
	if n := ops["Query"] + ops["GetItem"]; n > 0 {
		t.Errorf("the waiting claims read %d times, want none: no task of their queues was freed", n)
	}
	if n := ops.Total(); n != 2*releases {
		t.Errorf("%d requests, want %d: a checkout and a release each", n, 2*releases)
	}
}

// A waiting claim is woken by each kind of write that makes a task of one
// of its queues claimable, whichever of its queues: with no poll, only that
// wake gets it the task. The write knows the task's queue: it wakes that
// claim once, and not a claim waiting on another queue.
func TestAWaitingClaimIsWokenForItsQueue(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, e *env)
		free  func(t *testing.T, e *env)
	}{
		{"release", func(t *testing.T, e *env) {
			e.queued(t, "t", "q", 5)
			e.checkout(t, "t", "a", time.Hour)
		}, func(t *testing.T, e *env) {
			must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "a"}))
		}},
		{"create", nil, func(t *testing.T, e *env) {
			e.queued(t, "t", "q", 5)
		}},
		{"batch", nil, func(t *testing.T, e *env) {
			must[[]lease.BatchResult](t)(e.store.CreateTasks(ctx(t), []lease.CreateTaskParams{{TaskID: "other", Queue: "elsewhere"}, {TaskID: "t", Queue: "q"}}))
		}},
		{"patch moving it to the queue", func(t *testing.T, e *env) {
			e.queued(t, "t", "elsewhere", 5)
		}, func(t *testing.T, e *env) {
			must[lease.Task](t)(e.store.UpdateTask(ctx(t), lease.UpdateTaskParams{TaskID: "t", Queue: new("q")}))
		}},
		{"sweep ending an expired lease", func(t *testing.T, e *env) {
			e.queued(t, "t", "q", 5)
			e.checkout(t, "t", "a", time.Minute)
		}, func(t *testing.T, e *env) {
			e.clock.Advance(2 * time.Minute)
			e.caughtUp(t) // the sweep finds its work through an index
			if res := must[lease.SweepResult](t)(e.store.Sweep(ctx(t))); res.Timeouts != 1 {
				t.Fatalf("sweep %+v, want one timeout", res)
			}
		}},
		{"sweep ranking a delayed task ready", func(t *testing.T, e *env) {
			ready := e.clock.Now().Add(time.Minute)
			e.create(t, lease.CreateTaskParams{TaskID: "t", Queue: "q", NotBefore: &ready})
		}, func(t *testing.T, e *env) {
			e.clock.Advance(2 * time.Minute)
			e.caughtUp(t) // the sweep finds its work through an index
			if res := must[lease.SweepResult](t)(e.store.Sweep(ctx(t))); res.Ready != 1 {
				t.Fatalf("sweep %+v, want one ranked ready", res)
			}
		}},
		{"unblocking", func(t *testing.T, e *env) {
			e.create(t, lease.CreateTaskParams{TaskID: "blocker", Queue: "elsewhere"})
			e.create(t, lease.CreateTaskParams{TaskID: "t", Queue: "q", BlockedBy: []string{"blocker"}})
		}, func(t *testing.T, e *env) {
			e.complete(t, "blocker", "a")
			// The change stream unblocks it, through this store, as the
			// local server runs it.
			arn := must[string](t)(localstack.StreamARN(ctx(t), e.db, e.names.Table(schema.TasksTable)))
			p := &stream.Poller{Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Handle: stream.Handler(e.store), Saved: stream.MemoryCheckpoints{}}
			must[int](t)(p.Poll(ctx(t)))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			lease.PollClaims(e.store, time.Hour)
			if tc.setup != nil {
				tc.setup(t, e)
			}
			bc, stopBystander := context.WithCancel(ctx(t))
			bystander := make(chan error, 1)
			go func() {
				_, err := e.store.Claim(bc, lease.ClaimParams{AgentID: "c", Queues: []string{"idle"}, Wait: 20 * time.Second})
				bystander <- err
			}()
			asleep(t, e.store, 1)
			got := make(chan lease.Checkout, 1)
			go func() {
				co, err := e.store.Claim(ctx(t), lease.ClaimParams{AgentID: "b", Queues: []string{"x", "q", "y"}, Wait: 20 * time.Second, Timeout: time.Hour})
				if err != nil {
					t.Errorf("waiting claim: %v", err)
				}
				got <- co
			}()
			asleep(t, e.store, 2)
			wakes := lease.ClaimWakes(e.store)
			tc.free(t, e)
			if co := <-got; co.TaskID != "t" {
				t.Fatalf("claimed %+v, want t", co)
			}
			if n := lease.ClaimWakes(e.store) - wakes; n != 1 {
				t.Errorf("%d wakes sent, want 1: to the claim waiting on the task's queue", n)
			}
			stopBystander()
			if err := <-bystander; !errors.Is(err, context.Canceled) {
				t.Errorf("the claim waiting on another queue: %v, want it waiting until cancelled", err)
			}
		})
	}
}

// A checkout and release of a task in the default queue while claims wait
// on other queues (each as long as it may, again and again), the probe of
// the local server that found every freeing woke them all: its time, and
// the reads the waiting claims make per cycle (reads/op).
func BenchmarkReleaseWhileClaimsWaitElsewhere(b *testing.B) {
	for _, bc := range []struct{ waiters, queuesEach int }{{0, 1}, {20, 1}, {50, 1}, {50, 10}} {
		b.Run(fmt.Sprintf("waiters=%d/queues=%d", bc.waiters, bc.queuesEach), func(b *testing.B) {
			e := newEnv(b)
			c := ctx(b)
			e.task(b, "t")
			must[lease.Heartbeat](b)(e.store.Heartbeat(c, "a", time.Hour))
			wc, stop := context.WithCancel(c)
			var wg sync.WaitGroup
			for i := range bc.waiters {
				var qs []string
				for j := range bc.queuesEach {
					qs = append(qs, fmt.Sprintf("idle-%d-%d", i, j))
				}
				wg.Go(func() {
					for wc.Err() == nil {
						_, _ = e.store.Claim(wc, lease.ClaimParams{AgentID: fmt.Sprintf("waiter-%d", i), Queues: qs, Wait: 20 * time.Second})
					}
				})
			}
			for lease.ClaimsAsleep(e.store) < bc.waiters {
				time.Sleep(time.Millisecond)
			}
			e.count.Take()
			n := 0
			for b.Loop() {
				e.checkout(b, "t", "a", time.Minute)
				must[lease.Released](b)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"}))
				n++
			}
			ops := e.count.Take()
			b.ReportMetric(float64(ops["Query"]+ops["GetItem"])/float64(n), "reads/op")
			stop()
			wg.Wait()
		})
	}
}

// EndWaits (a server's shutdown) answers each waiting claim at once with
// ErrStopping, which the API answers 503 (retry elsewhere), not 404 (there
// is no work); a claim that does not wait is answered as before, and one
// that comes later and would wait is not made to.
func TestEndWaitsAnswersTheWaitingClaimsAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	lease.PollClaims(e.store, time.Hour) // only EndWaits' wake ends the wait
	c := ctx(t)
	const waiters = 4
	errs := make(chan error, waiters)
	for i := range waiters {
		go func() {
			_, err := e.store.Claim(c, lease.ClaimParams{AgentID: fmt.Sprintf("waiter-%d", i), Queues: []string{"idle"}, Wait: 20 * time.Second})
			errs <- err
		}()
	}
	asleep(t, e.store, waiters)
	e.store.EndWaits()
	for range waiters {
		if err := <-errs; !errors.Is(err, lease.ErrStopping) {
			t.Errorf("a waiting claim ended with %v, want ErrStopping", err)
		}
	}
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "later", Queues: []string{"idle"}, Wait: 20 * time.Second}); !errors.Is(err, lease.ErrStopping) {
		t.Errorf("a claim that would wait after EndWaits: %v, want ErrStopping", err)
	}
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "now", Queues: []string{"idle"}}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Errorf("a claim that does not wait, after EndWaits: %v, want ErrNoTaskAvailable", err)
	}
	e.task(t, "t")
	e.caughtUp(t) // the claim finds t without waiting
	if got, err := e.store.Claim(c, lease.ClaimParams{AgentID: "late", Wait: 20 * time.Second}); err != nil || got.TaskID != "t" {
		t.Errorf("a claim that finds a task after EndWaits: %+v, %v; want it granted", got, err)
	}
}
