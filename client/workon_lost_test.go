package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
)

// WorkOn's checkout whose every try lost its answer may have taken the
// lease, under a run id the caller never saw. WorkOn returned the error,
// and the lease stayed held by the agent until it timed out: calling
// WorkOn again, under a new run, was denied by the agent's own lease. It
// now asks again under the same run id, which answers with the lease, and
// works under it; if the answer stays lost, it releases whatever that run
// holds before it returns.
func TestWorkOnDecidesALostCheckout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	f := testenv.NewFront(t, srv.URL())
	direct := agent(t, admin, "agent-a1b2", "researcher")
	for _, id := range []string{"decided", "undecided"} {
		if _, err := direct.CreateTask(ctx, CreateTaskRequest{TaskID: id}); err != nil {
			t.Fatal(err)
		}
	}
	clock := testclock.New(time.Now())
	a := New(f.URL, direct.apiKey, WithClock(clock.Now), WithSleeper(func(ctx context.Context, d time.Duration) error {
		clock.Advance(d)
		return ctx.Err()
	}))
	lost := []testenv.Fault{testenv.Lose, testenv.Lose, testenv.Lose, testenv.Lose}

	f.Fail("POST /api/tasks/decided/checkout", lost...)
	var fence int64
	err := a.WorkOn(ctx, "decided", func(_ context.Context, l *Lease) error {
		fence = l.Fence()
		return nil
	}, NoHeartbeats())
	if err != nil || fence != 1 {
		t.Errorf("WorkOn after a lost checkout: %v, worked under fence %d; want the lost checkout's lease, fence 1", err, fence)
	}
	if task, err := direct.GetTask(ctx, "decided"); err != nil || task.Status != StatusDone {
		t.Errorf("the task WorkOn worked on: %+v, %v; want it done", task, err)
	}

	for range 100 {
		f.Fail("POST /api/tasks/undecided/checkout", lost...)
	}
	err = a.WorkOn(ctx, "undecided", func(context.Context, *Lease) error {
		t.Error("WorkOn ran its function without an answer to its checkout")
		return nil
	}, NoHeartbeats())
	if !errors.Is(err, ErrUndecided) {
		t.Errorf("WorkOn whose checkout never got an answer: %v, want ErrUndecided", err)
	}
	if s, err := direct.Status(ctx, "undecided"); err != nil || s.Locked {
		t.Errorf("after WorkOn gave up on its checkout: %+v, %v; want the task free", s, err)
	}
}

// WorkOn under a run id its caller gives may resume a lease the run took
// before (an agent restarting with its saved run id). When every answer
// to its checkout was lost, WorkOn released whatever the run held: that
// earlier lease, with the work done under it, and the task went back to
// the pool. Under the caller's run id it now leaves the lease alone and
// returns the undecided error: the caller knows the run, and can ask
// again.
func TestWorkOnKeepsTheCallersRunsLeaseWhenItsCheckoutIsLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	f := testenv.NewFront(t, srv.URL())
	direct := agent(t, admin, "agent-a1b2", "researcher")
	if _, err := direct.CreateTask(ctx, CreateTaskRequest{TaskID: "resumed"}); err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Checkout(ctx, "resumed", CheckoutRequest{RunID: "run-saved"}); err != nil {
		t.Fatal(err)
	}
	clock := testclock.New(time.Now())
	a := New(f.URL, direct.apiKey, WithClock(clock.Now), WithSleeper(func(ctx context.Context, d time.Duration) error {
		clock.Advance(d)
		return ctx.Err()
	}))
	for range 100 {
		f.Fail("POST /api/tasks/resumed/checkout", testenv.Lose, testenv.Lose, testenv.Lose, testenv.Lose)
	}
	err := a.WorkOn(ctx, "resumed", func(context.Context, *Lease) error {
		t.Error("WorkOn ran its function without an answer to its checkout")
		return nil
	}, RunID("run-saved"), NoHeartbeats())
	if !errors.Is(err, ErrUndecided) {
		t.Errorf("WorkOn whose checkout never got an answer: %v, want ErrUndecided", err)
	}
	if s, err := direct.Status(ctx, "resumed"); err != nil || !s.Locked || s.Checkout.RunID != "run-saved" {
		t.Errorf("after WorkOn gave up on its checkout: %+v, %v; want the run's lease still held", s, err)
	}
}

// When WorkOn gives up on a checkout whose answers were all lost, it
// releases whatever the run may hold. When that release's answer was
// lost as well, nothing said so: the lease, under a run id the caller
// never saw, could stay held until it timed out, unknown to anyone.
// OnError now gets the release's error, naming the run.
func TestWorkOnReportsALostCheckoutsFailedRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	f := testenv.NewFront(t, srv.URL())
	direct := agent(t, admin, "agent-a1b2", "researcher")
	if _, err := direct.CreateTask(ctx, CreateTaskRequest{TaskID: "stuck"}); err != nil {
		t.Fatal(err)
	}
	clock := testclock.New(time.Now())
	a := New(f.URL, direct.apiKey, WithClock(clock.Now), WithSleeper(func(ctx context.Context, d time.Duration) error {
		clock.Advance(d)
		return ctx.Err()
	}))
	for range 100 {
		f.Fail("POST /api/tasks/stuck/checkout", testenv.Lose)
	}
	f.Fail("POST /api/tasks/stuck/release", testenv.Drop, testenv.Drop, testenv.Drop, testenv.Drop)
	var reported []error
	err := a.WorkOn(ctx, "stuck", func(context.Context, *Lease) error {
		t.Error("WorkOn ran its function without an answer to its checkout")
		return nil
	}, NoHeartbeats(), OnError(func(_ string, err error) { reported = append(reported, err) }))
	if !errors.Is(err, ErrUndecided) {
		t.Errorf("WorkOn whose checkout never got an answer: %v, want ErrUndecided", err)
	}
	s, serr := direct.Status(ctx, "stuck")
	if serr != nil || !s.Locked {
		t.Fatalf("the task after the lost checkout and release: %+v, %v; want it held", s, serr)
	}
	found := false
	for _, e := range reported {
		found = found || strings.Contains(e.Error(), "release") && strings.Contains(e.Error(), s.Checkout.RunID)
	}
	if !found {
		t.Errorf("OnError got %v; want the release's failure, naming run %s", reported, s.Checkout.RunID)
	}
}

// A checkout answered 503 with a Retry-After longer than WorkOn's 30 s
// of asking again (the server busy, asking callers to come back in a
// minute) matches ErrUndecided, as any 5xx does. WorkOn asked again every
// few seconds regardless, a dozen times, where the server had asked for
// a minute's rest. It now waits what the answer asks, and gives up at
// once when that is past its 30 s.
func TestWorkOnHonoursRetryAfterOfAnUndecidedCheckout(t *testing.T) {
	t.Parallel()
	var checkouts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/checkout") {
			checkouts.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "60")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":"the service is busy","code":"unavailable"}`)
	}))
	t.Cleanup(srv.Close)
	clock := testclock.New(time.Now())
	a := New(srv.URL, "ck_x", WithClock(clock.Now), WithSleeper(func(ctx context.Context, d time.Duration) error {
		clock.Advance(d)
		return ctx.Err()
	}))
	err := a.WorkOn(context.Background(), "busy", func(context.Context, *Lease) error { return nil }, NoHeartbeats())
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("WorkOn: %v, want ErrUnavailable", err)
	}
	if n := checkouts.Load(); n != 1 {
		t.Errorf("checkouts sent: %d; want 1 (the answer asked for a minute's wait)", n)
	}
}
