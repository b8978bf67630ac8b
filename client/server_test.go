package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/internal/testenv/testserver"
	"github.com/checkout-dev/checkout/localserver"
)

// These tests run the client against the real local server, on one dynalite
// per test binary and a table prefix per server.

func TestMain(m *testing.M) { testenv.Main(m) }

// StartServer starts a local server with its own tables and returns it with
// an admin client; the caller closes it. now may be nil (the real clock).
func StartServer(now func() time.Time) (srv *localserver.Server, admin *Client, err error) {
	srv, err = testserver.StartConfig(testserver.WithClock(now))
	if err != nil {
		return nil, nil, err
	}
	return srv, New(srv.URL(), srv.AdminKey()), nil
}

// startServer is StartServer for a test, which closes the server when it
// ends.
func startServer(t *testing.T, now func() time.Time) (*localserver.Server, *Client) {
	t.Helper()
	srv := testserver.Start(t, testserver.WithClock(now))
	return srv, New(srv.URL(), srv.AdminKey())
}

func agent(t *testing.T, admin *Client, id, name string, opts ...Option) *Client {
	t.Helper()
	reg, err := admin.CreateAgent(context.Background(), CreateAgentRequest{AgentID: id, Name: name})
	if err != nil {
		t.Fatal(err)
	}
	return New(admin.BaseURL(), reg.APIKey, opts...)
}

// heldTask starts a server on which the researcher (agent-a1b2) holds
// task-d4e5 for run-1, and returns it, the researcher's client, the
// writer's (agent-c3d4) and the checkout.
func heldTask(t *testing.T) (srv *localserver.Server, a, b *Client, co Checkout) {
	t.Helper()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	a = agent(t, admin, "agent-a1b2", "researcher")
	b = agent(t, admin, "agent-c3d4", "writer")
	if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: "task-d4e5", Title: "Fix login bug"}); err != nil {
		t.Fatal(err)
	}
	co, err := a.Checkout(ctx, "task-d4e5", CheckoutRequest{Timeout: 30 * time.Minute, Reason: "fix", RunID: "run-1"})
	if err != nil {
		t.Fatal(err)
	}
	return srv, a, b, co
}

func TestAgainstServerConflictNamesTheHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, a, b, co := heldTask(t)
	if co.AgentName != "researcher" || co.Timeout() != 30*time.Minute || co.RunID != "run-1" || co.Fence < 1 {
		t.Fatalf("checkout %+v", co)
	}
	// A retry of the same run is the same lease.
	again, err := a.Checkout(ctx, "task-d4e5", CheckoutRequest{RunID: "run-1"})
	if err != nil || again.Fence != co.Fence {
		t.Fatalf("idempotent retry: %+v %v", again, err)
	}
	_, err = b.Checkout(ctx, "task-d4e5", CheckoutRequest{})
	var ce *ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCheckedOut) {
		t.Fatalf("second checkout: %v", err)
	}
	if ce.Holder.AgentID != "agent-a1b2" || ce.Holder.AgentName != "researcher" || ce.Holder.Fence != co.Fence {
		t.Fatalf("holder %+v", ce.Holder)
	}
	_, err = b.Renew(ctx, "task-d4e5", RenewRequest{})
	var ne *NotHolderError
	if !errors.As(err, &ne) || ne.Holder.AgentID != "agent-a1b2" {
		t.Fatalf("renew by another: %v", err)
	}
	st, err := b.Status(ctx, "task-d4e5")
	if err != nil || !st.Locked || st.Checkout.AgentID != "agent-a1b2" {
		t.Fatalf("status %+v %v", st, err)
	}
}

// A completed task refuses a checkout with its status, a release says it is
// not checked out, a claim passes it over, and its trail runs from the
// checkout to the completion.
func TestAgainstServerCompletedTask(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, a, b, co := heldTask(t)
	if _, err := a.Complete(ctx, "task-d4e5", CompleteRequest{RunID: "run-1", Fence: co.Fence}); err != nil {
		t.Fatal(err)
	}
	_, err := b.Checkout(ctx, "task-d4e5", CheckoutRequest{})
	var se *StatusMismatchError
	if !errors.As(err, &se) || se.Status != StatusDone {
		t.Fatalf("checkout of a done task: %v", err)
	}
	if _, err := b.Release(ctx, "task-d4e5", ReleaseRequest{}); !errors.Is(err, ErrNotCheckedOut) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("release of a free task: %v", err)
	}
	if _, err := a.Claim(ctx, ClaimRequest{}); !errors.Is(err, ErrNoTaskAvailable) {
		t.Fatalf("claim from an empty pool: %v", err)
	}
	// The trail is written from the change stream.
	if err := srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := a.Events(ctx, "task-d4e5")
	if err != nil || len(evs) < 2 || evs[0].Type != "checkout" || evs[len(evs)-1].Type != "complete" || evs[len(evs)-1].HeldSeconds == nil {
		t.Fatalf("events %+v %v", evs, err)
	}
}

// A key the server never issued is unauthorized.
func TestAgainstServerRefusesAWrongKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, admin := startServer(t, nil)
	if _, err := New(admin.BaseURL(), "ck_wrong").GetTask(ctx, "task-d4e5"); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("bad key: %v", err)
	}
}

func TestAgainstServerWorkOnLosesItsLease(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"expiry", "force release"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clock := testclock.New(time.Date(2026, 3, 20, 14, 35, 0, 0, time.UTC))
			_, admin := startServer(t, clock.Now)
			g := newGate()
			a := agent(t, admin, "agent-a", "researcher", WithSleeper(g.sleep), WithClock(clock.Now))
			if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: "task-1"}); err != nil {
				t.Fatal(err)
			}
			started := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				done <- a.WorkOn(ctx, "task-1", func(ctx context.Context, l *Lease) error {
					close(started)
					<-ctx.Done()
					return ctx.Err()
				}, LeaseTimeout(time.Minute), NoHeartbeats())
			}()
			<-started
			g.next(t, 20*time.Second) // the first renewal, at a third of the lease, keeps it
			g.await(t, 20*time.Second)
			if how == "expiry" {
				clock.Advance(2 * time.Minute) // the renewals stalled: the lease has run out
			} else if _, err := admin.Release(ctx, "task-1", ReleaseRequest{Force: true, Reason: "stuck"}); err != nil {
				t.Fatal(err)
			}
			g.ticks <- struct{}{}
			select {
			case err := <-done:
				if !errors.Is(err, ErrLeaseLost) || !errors.Is(err, ErrNotCheckedOut) {
					t.Fatalf("WorkOn = %v, want lease lost", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("WorkOn did not notice")
			}
			evs, err := a.Events(ctx, "task-1")
			if err != nil {
				t.Fatal(err)
			}
			var types []string
			for _, e := range evs {
				types = append(types, e.Type)
			}
			// Nothing was completed or released after the loss.
			if got := strings.Join(types, " "); strings.Contains(got, "complete") || strings.Count(got, "release") > 1 {
				t.Fatalf("events %s", got)
			}
		})
	}
}

func TestAgainstServerWorkOnCompletesOrReleases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	a := agent(t, admin, "agent-a", "researcher")
	for _, id := range []string{"ok", "fails"} {
		if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.WorkOn(ctx, "ok", func(ctx context.Context, l *Lease) error { return nil }); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	if err := a.WorkOn(ctx, "fails", func(ctx context.Context, l *Lease) error { return boom }, Reason("try")); !errors.Is(err, boom) {
		t.Fatalf("WorkOn = %v, want fn's error", err)
	}
	for id, want := range map[string]string{"ok": StatusDone, "fails": StatusTodo} {
		task, err := a.GetTask(ctx, id)
		if err != nil || task.Status != want || task.Checkout != nil {
			t.Fatalf("task %s: %+v %v, want %s", id, task, err, want)
		}
	}
	// The trail is written from the change stream.
	if err := srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	evs, _ := a.Events(ctx, "fails")
	if last := evs[len(evs)-1]; last.Type != "release" || last.Reason != "boom" {
		t.Fatalf("last event %+v", last)
	}
	// A held task: WorkOn returns the conflict without running fn.
	b := agent(t, admin, "agent-b", "writer")
	if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: "held"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Checkout(ctx, "held", CheckoutRequest{}); err != nil {
		t.Fatal(err)
	}
	ran := false
	err := a.WorkOn(ctx, "held", func(context.Context, *Lease) error { ran = true; return nil })
	var ce *ConflictError
	if !errors.As(err, &ce) || ce.Holder.AgentName != "writer" || ran {
		t.Fatalf("WorkOn on a held task = %v (ran %v)", err, ran)
	}
}

func TestAgainstServerClaimLoopDrainsThePool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, admin := startServer(t, nil)
	const n = 6
	for i := range n {
		if _, err := admin.CreateTask(ctx, CreateTaskRequest{TaskID: fmt.Sprintf("task-%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for w := range 3 {
		c := agent(t, admin, fmt.Sprintf("worker-%d", w), "worker")
		wg.Go(func() {
			err := c.ClaimLoop(ctx, func(ctx context.Context, l *Lease) error {
				mu.Lock()
				seen[l.TaskID()]++
				if len(seen) == n {
					cancel()
				}
				mu.Unlock()
				return nil
			}, IdleBackoff(time.Millisecond, 5*time.Millisecond))
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for id, k := range seen {
		if k != 1 {
			t.Errorf("%s worked on %d times", id, k)
		}
	}
	if len(seen) != n {
		t.Fatalf("worked on %d tasks, want %d", len(seen), n)
	}
}

// Deleting a message that does not exist matches ErrMessageNotFound (and
// ErrNotFound), whatever code the server gives a missing message.
func TestAgainstServerUnknownMessageIsErrMessageNotFound(t *testing.T) {
	t.Parallel()
	_, admin := startServer(t, nil)
	a := agent(t, admin, "agent-a1b2", "researcher")
	err := a.DeleteMessage(context.Background(), "m-that-never-was")
	if !errors.Is(err, ErrMessageNotFound) || !errors.Is(err, ErrNotFound) {
		t.Fatalf("delete of an unknown message: %v, want ErrMessageNotFound and ErrNotFound", err)
	}
	if errors.Is(err, ErrTaskNotFound) {
		t.Fatalf("delete of an unknown message matches ErrTaskNotFound: %v", err)
	}
}
