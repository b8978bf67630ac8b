package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A WorkOn nested in the function of another (a ClaimLoop or WorkOn
// working on a parent task takes a sub-task's lease) gives its own lease
// back when the outer lease is lost: the outer loss cancels the inner
// function's context with the outer's ErrLeaseLost cause, which says
// nothing of the inner lease, still held.
func TestNestedWorkOnReleasesWhenTheOuterLeaseIsLost(t *testing.T) {
	t.Parallel()
	innerStarted := make(chan struct{})
	f := newFlaky(t, func(r recorded) (int, string) {
		switch {
		case r.Path == "/api/tasks/task-1/checkout":
			return 200, holderJSON
		case r.Path == "/api/tasks/task-2/checkout":
			return 200, taskJSON("task-2", 7)
		case r.Path == "/api/tasks/task-1/renew":
			select {
			case <-innerStarted:
			case <-time.After(10 * time.Second):
			}
			return 404, `{"error":"task task-1 is not checked out","code":"not_checked_out"}`
		case strings.HasSuffix(r.Path, "/release"):
			return 200, `{"task_id":"task-2","released_by":"agent-w","held_seconds":1}`
		}
		return 500, `{"error":"unexpected","code":"x"}`
	})
	c := New(f.URL, "k", WithSleeper(blockLong), WithClock(holderClock))
	var innerErr error
	outerErr := c.WorkOn(context.Background(), "task-1", func(ctx context.Context, _ *Lease) error {
		innerErr = c.WorkOn(ctx, "task-2", func(ctx context.Context, _ *Lease) error {
			close(innerStarted)
			<-ctx.Done()
			return ctx.Err()
		}, NoHeartbeats(), RenewEvery(time.Hour))
		return innerErr
	}, NoHeartbeats(), RenewEvery(time.Millisecond))
	if !errors.Is(outerErr, ErrLeaseLost) {
		t.Fatalf("outer WorkOn = %v, want its lease lost", outerErr)
	}
	released := false
	for _, r := range f.requests() {
		if r.Path == "/api/tasks/task-2/release" && r.Body["fence"] == 7.0 {
			released = true
		}
	}
	if !released {
		t.Errorf("the inner lease (task-2) was never released: it stays held until it times out; inner WorkOn = %v", innerErr)
	}
	if errors.Is(innerErr, ErrLeaseLost) {
		t.Errorf("inner WorkOn = %v: says its lease was lost, but it held task-2 all along", innerErr)
	}
}

// WorkOn holds its lease for as long as the function runs: a function that
// takes a while to wind down once ctx is cancelled (finishing the step it
// is in, as a graceful shutdown does) keeps its lease renewed until it
// returns, rather than losing it to its timeout, and the task to another
// agent, while it still works.
func TestWorkOnRenewsUntilTheFunctionReturnsAfterCancel(t *testing.T) {
	t.Parallel()
	f := newFlaky(t, func(r recorded) (int, string) {
		switch {
		case strings.HasSuffix(r.Path, "/checkout"), strings.HasSuffix(r.Path, "/renew"):
			return 200, holderJSON
		case strings.HasSuffix(r.Path, "/release"):
			return 200, `{"task_id":"task-1","released_by":"agent-w","held_seconds":1}`
		}
		return 500, `{"error":"unexpected","code":"x"}`
	})
	g := newGate()
	c := New(f.URL, "k", WithSleeper(g.sleep), WithClock(holderClock))
	ctx, cancel := context.WithCancel(context.Background())
	windDown := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- c.WorkOn(ctx, "task-1", func(ctx context.Context, _ *Lease) error {
			<-ctx.Done()
			<-windDown // the step in progress ends
			return ctx.Err()
		}, NoHeartbeats())
	}()
	g.await(t, 5*time.Minute) // the renewal loop waits a third of the 15m lease
	cancel()
	renewed := false
	select {
	case g.ticks <- struct{}{}:
		// The renewal loop still runs: let its renewal go, and its next
		// wait begin.
		g.await(t, 5*time.Minute)
		renewed = true
	case <-time.After(2 * time.Second):
	}
	close(windDown)
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("WorkOn = %v, want ctx's cancellation", err)
	}
	if !renewed {
		t.Errorf("the lease's renewals stopped when ctx was cancelled, while the function still ran: it can expire under it")
	}
	n := 0
	for _, r := range f.requests() {
		if strings.HasSuffix(r.Path, "/renew") {
			n++
		}
	}
	if renewed && n != 1 {
		t.Errorf("%d renewals, want 1", n)
	}
}

// OnError's function is called from one goroutine at a time: during an
// outage both the heartbeat loop and the renewals fail, and a function
// that counts or collects the errors (as a test, or a metrics counter
// without a lock, does) must not be entered by both at once.
func TestOnErrorIsNotCalledConcurrently(t *testing.T) {
	t.Parallel()
	var beats atomic.Int32
	f := newFlaky(t, func(r recorded) (int, string) {
		switch {
		case r.Path == "/api/heartbeat":
			if beats.Add(1) == 1 {
				return 200, `{"agent_id":"agent-w","expires_at":"2026-03-20T14:36:30.000Z"}`
			}
			return 503, unavailableJSON
		case strings.HasSuffix(r.Path, "/checkout"):
			return 200, holderJSON
		case strings.HasSuffix(r.Path, "/renew"):
			return 503, unavailableJSON
		case strings.HasSuffix(r.Path, "/complete"):
			return 200, `{"task_id":"task-1","status":"done"}`
		}
		return 500, `{"error":"unexpected","code":"x"}`
	})
	short := func(ctx context.Context, d time.Duration) error {
		if d >= time.Hour {
			<-ctx.Done()
			return ctx.Err()
		}
		return sleepCtx(ctx, min(d, 2*time.Millisecond))
	}
	c := New(f.URL, "k", WithSleeper(short), WithClock(holderClock))
	var in atomic.Int32
	overlap := make(chan struct{})
	var once sync.Once
	err := c.WorkOn(context.Background(), "task-1", func(ctx context.Context, _ *Lease) error {
		select {
		case <-overlap:
		case <-time.After(time.Second):
		}
		return nil
	}, HeartbeatTTL(3*time.Second), RenewEvery(time.Millisecond), OnError(func(string, error) {
		if in.Add(1) > 1 {
			once.Do(func() { close(overlap) })
		}
		select {
		case <-overlap:
		case <-time.After(20 * time.Millisecond):
		}
		in.Add(-1)
	}))
	if err != nil {
		t.Fatalf("WorkOn = %v", err)
	}
	select {
	case <-overlap:
		t.Errorf("OnError was called by two goroutines at once (the heartbeat loop's and the renewals' failures)")
	default:
	}
}

// A RetryPolicy that sets no MaxDelay still backs off exponentially: its
// delays are bounded by BaseDelay, 2×BaseDelay, 4×BaseDelay, ..., not all
// by BaseDelay (a gateway's 502s during a restart would use up the tries
// within a few BaseDelays).
func TestRetryPolicyWithoutMaxDelayDoubles(t *testing.T) {
	c := New("http://127.0.0.1:1", "k", WithRetryPolicy(RetryPolicy{MaxAttempts: 6, BaseDelay: 100 * time.Millisecond}))
	c.jitter = func(n int64) int64 { return n - 1 } // the longest delay each time
	for attempt, want := range []time.Duration{100, 200, 400, 800, 1600} {
		want *= time.Millisecond
		if got := c.backoff(attempt + 1); got != want-1 {
			t.Errorf("delay before retry %d = %v, want just under %v", attempt+1, got, want)
		}
	}
}

// Every 400 matches ErrInvalid, as every 404 matches ErrNotFound (README:
// "every 404 also matches ErrNotFound, and every 400 ErrInvalid"), the
// code-less 400 of a gateway or proxy in front of the server included.
func TestEvery400IsInvalid(t *testing.T) {
	for _, body := range []string{`{"message":"Bad Request"}`, `<html><body>400 Bad Request</body></html>`, `{"error":"x","code":"some_new_code"}`} {
		if err := decodeError(400, []byte(body)); !errors.Is(err, ErrInvalid) {
			t.Errorf("a 400 %s = %v, does not match ErrInvalid", body, err)
		}
	}
}

// RecordResponse records the answer of the caller's last request: under
// WorkOn, the function's own requests, not the renewals the background
// sends meanwhile (which also wrote the Response from another goroutine:
// a data race that -race reports).
func TestWorkOnsRenewalsAreNotRecorded(t *testing.T) {
	t.Parallel()
	const statusJSON = `{"task_id":"task-1","locked":true,"checkout":null}`
	f := newFlaky(t, func(r recorded) (int, string) {
		switch {
		case r.Method == "GET":
			return 200, statusJSON
		case strings.HasSuffix(r.Path, "/complete"):
			return 200, `{"task_id":"task-1","status":"done"}`
		}
		return 200, holderJSON
	})
	short := func(ctx context.Context, d time.Duration) error {
		if d >= time.Hour {
			<-ctx.Done()
			return ctx.Err()
		}
		return sleepCtx(ctx, time.Millisecond)
	}
	c := New(f.URL, "k", WithSleeper(short), WithClock(holderClock))
	var rec Response
	err := c.WorkOn(RecordResponse(context.Background(), &rec), "task-1", func(ctx context.Context, _ *Lease) error {
		for range 30 {
			if _, err := c.Status(ctx, "task-1"); err != nil {
				return err
			}
			if string(rec.Body) != statusJSON {
				return fmt.Errorf("recorded %s after the function's own request, want its answer", rec.Body)
			}
			time.Sleep(time.Millisecond)
		}
		return nil
	}, NoHeartbeats(), RenewEvery(time.Millisecond))
	if err != nil {
		t.Fatalf("WorkOn = %v", err)
	}
}
