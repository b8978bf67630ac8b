package faults_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/localstack"
)

// An on-disk dynalite is stopped and started again on the same directory and
// port in the middle of a run. Agents keep creating, checking out, releasing
// and completing tasks, retrying through the outage. Afterwards everything
// that was acknowledged is still there: every created task, every
// completion, every grant's fence (and the fence never goes back), and the
// checkout event of every acknowledged grant unless the store reported that
// audit write as failed.
func TestDynaliteRestart(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dir := t.TempDir()
	d, err := localstack.Start(ctx, localstack.Options{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	var current atomic.Pointer[localstack.Dynalite]
	current.Store(d)
	t.Cleanup(func() { _ = current.Load().Stop() })

	names := schema.Names{Prefix: testenv.Prefix()}
	if err := lease.EnsureTables(ctx, lease.NewLocalClient(d.Endpoint), names); err != nil {
		t.Fatal(err)
	}
	ls := &lost{}
	s := lease.New(lease.Config{DB: faultyClient(d.Endpoint, ls), Tables: names, Notifier: &testenv.Recorder{}, Logger: slog.New(slog.DiscardHandler)})

	agents, rounds := 6, 12
	if chaos() {
		agents, rounds = 12, 40
	}
	type acked struct {
		task     string
		fence    int64
		complete bool
	}
	var mu sync.Mutex
	var acks []acked
	var created []string
	// persist retries an operation through the outage (up to about 30s).
	persist := func(op func() error) error {
		var err error
		for range 150 {
			if err = op(); err == nil || domainErr(err) || errors.Is(err, lease.ErrTaskExists) {
				return err
			}
			time.Sleep(200 * time.Millisecond)
		}
		return err
	}
	var progress atomic.Int64
	var wg sync.WaitGroup
	for a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			agent := fmt.Sprintf("agent-%02d", a)
			for r := range rounds {
				task := fmt.Sprintf("task-%02d-%02d", a, r)
				err := persist(func() error {
					_, err := s.CreateTask(ctx, lease.CreateTaskParams{TaskID: task, Title: task})
					return err
				})
				if err != nil && !errors.Is(err, lease.ErrTaskExists) {
					t.Errorf("create %s: %v", task, err)
					return
				}
				mu.Lock()
				created = append(created, task)
				mu.Unlock()
				run := agent + "-" + task
				var c lease.Checkout
				if err := persist(func() error {
					c, err = s.Checkout(ctx, lease.CheckoutParams{TaskID: task, AgentID: agent, RunID: run, Timeout: time.Hour})
					return err
				}); err != nil {
					t.Errorf("checkout %s: %v", task, err)
					return
				}
				mu.Lock()
				acks = append(acks, acked{task: task, fence: c.Fence})
				mu.Unlock()
				complete := r%2 == 0
				err = persist(func() error {
					if complete {
						_, err := s.Complete(ctx, lease.CompleteParams{TaskID: task, AgentID: agent, RunID: run, Fence: c.Fence})
						return err
					}
					_, err := s.Release(ctx, lease.ReleaseParams{TaskID: task, AgentID: agent, RunID: run, Fence: c.Fence})
					return err
				})
				if err == nil {
					mu.Lock()
					acks = append(acks, acked{task: task, fence: c.Fence, complete: complete})
					mu.Unlock()
				} else if !errors.Is(err, lease.ErrNotCheckedOut) {
					// ErrNotCheckedOut: a try made before the outage was
					// applied and its answer lost; not acknowledged.
					t.Errorf("end %s: %v", task, err)
				}
				progress.Add(1)
			}
		}()
	}
	// Restart once a third of the work is done.
	for progress.Load() < int64(agents*rounds/3) {
		time.Sleep(20 * time.Millisecond)
	}
	port := d.Port
	if err := d.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	time.Sleep(300 * time.Millisecond) // an outage the clients must ride out
	d2, err := localstack.Start(ctx, localstack.Options{Path: dir, Port: port})
	if err != nil {
		t.Fatalf("restart on port %d: %v", port, err)
	}
	current.Store(d2)
	t.Logf("restarted dynalite on port %d after %d of %d rounds", port, progress.Load(), agents*rounds)
	wg.Wait()
	if t.Failed() {
		return
	}

	// The stream function's part, then audit through a fresh client.
	drain(t, d2.Endpoint, names, &testenv.Recorder{})
	check := lease.New(lease.Config{DB: lease.NewLocalClient(d2.Endpoint), Tables: names})
	missingEvents := 0
	for _, task := range created {
		if _, err := check.GetTask(ctx, task); err != nil {
			t.Errorf("created task %s: %v", task, err)
		}
	}
	for _, a := range acks {
		tk, err := check.GetTask(ctx, a.task)
		if err != nil {
			t.Fatalf("%s: %v", a.task, err)
		}
		if a.complete && tk.Status != lease.StatusDone {
			t.Errorf("%s: completion acknowledged, status %s", a.task, tk.Status)
		}
		evs, err := check.Events(ctx, a.task)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, e := range evs {
			found = found || e.Type == lease.EventCheckout && e.Fence == a.fence
		}
		if !found {
			missingEvents++
		}
		// The fence survives: a new grant after the restart is above it.
		if !a.complete {
			c, err := check.Checkout(ctx, lease.CheckoutParams{TaskID: a.task, AgentID: "auditor", Timeout: time.Minute})
			if err == nil && c.Fence <= a.fence {
				t.Errorf("%s: fence %d granted after fence %d was acknowledged", a.task, c.Fence, a.fence)
			}
		}
	}
	// Every acknowledged grant's write recorded its event, and dynalite
	// keeps its stream on disk with the data: none may be missing.
	if missingEvents > 0 {
		t.Errorf("%d acknowledged grants lost their checkout event (%d answers were lost in the outage)", missingEvents, ls.transport.Load())
	}
	t.Logf("%d tasks, %d acknowledged transitions, all with their events; %d answers lost in the outage", len(created), len(acks), ls.transport.Load())
}
