package client

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
)

// A claim of ClaimLoop whose every try was lost may have taken a task.
// The loop claimed again under a new run id, so it took another task and
// left the first held by its agent, worked on by nobody, until its lease
// timed out. It now claims again under the lost claim's run, which
// answers with the lease that claim took: every task is worked on.
func TestClaimLoopClaimsALostClaimsTaskAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	f := testenv.NewFront(t, srv.URL())
	direct := agent(t, admin, "agent-a1b2", "researcher")
	for id, priority := range map[string]int{"first": 9, "second": 5} {
		if _, err := direct.CreateTask(ctx, CreateTaskRequest{TaskID: id, Queue: "lost", Priority: &priority}); err != nil {
			t.Fatal(err)
		}
	}
	// Between claims, a short wait of the loop's: no task may be free
	// for a while.
	short := WithSleeper(func(ctx context.Context, _ time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
			return nil
		}
	})
	a := New(f.URL, direct.apiKey, short)
	f.Fail("POST /api/claim", testenv.Lose, testenv.Lose, testenv.Lose, testenv.Lose)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var mu sync.Mutex
	var worked []string
	err := a.ClaimLoop(ctx, func(_ context.Context, l *Lease) error {
		mu.Lock()
		defer mu.Unlock()
		if worked = append(worked, l.TaskID()); len(worked) == 2 {
			cancel()
		}
		return nil
	}, Queues("lost"), NoHeartbeats(), OnError(func(string, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(worked) != 2 || worked[0] != "first" {
		t.Errorf("the loop worked on %v; want first (whose claim's answer was lost), then second", worked)
	}
	if cos, err := direct.ListCheckouts(context.Background(), "agent-a1b2"); err != nil || len(cos) != 0 {
		t.Errorf("leases left after the loop: %+v, %v", cos, err)
	}
}

// A claim whose lease is a second long is answered with no whole second
// left (remaining_seconds 0) once any time has passed since its grant.
// ClaimLoop took every such answer for the ended lease of a lost claim's
// run and claimed again, leaving the task it had just taken held by
// nobody at work: with LeaseTimeout(time.Second) it never ran its
// function. It now asks the task's lock before it skips a lease.
func TestClaimLoopWorksUnderAOneSecondLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, admin := startServer(t, nil)
	direct := agent(t, admin, "agent-a1b2", "researcher")
	if _, err := direct.CreateTask(ctx, CreateTaskRequest{TaskID: "brief", Queue: "brief"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var worked []string
	err := direct.ClaimLoop(ctx, func(_ context.Context, l *Lease) error {
		worked = append(worked, l.TaskID())
		cancel()
		return nil
	}, Queues("brief"), LeaseTimeout(time.Second), NoHeartbeats(), IdleBackoff(10*time.Millisecond, 50*time.Millisecond), OnError(func(string, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	if len(worked) != 1 || worked[0] != "brief" {
		t.Errorf("the loop worked on %v; want brief", worked)
	}
}

// A claim of ClaimLoop whose every try was lost took a task whose lease
// was then force-released: the claim again under its run answers that
// lease as it ended (remaining_seconds 0). The loop does not work under
// it: it claims anew, under a run of its own, and works on the task
// under the new lease.
func TestClaimLoopSkipsALostClaimsEndedLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	f := testenv.NewFront(t, srv.URL())
	direct := agent(t, admin, "agent-a1b2", "researcher")
	if _, err := direct.CreateTask(ctx, CreateTaskRequest{TaskID: "ended", Queue: "ended"}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	lost := 0
	f.Lost = func(string) {
		mu.Lock()
		defer mu.Unlock()
		if lost++; lost == 4 {
			if _, err := admin.Release(context.Background(), "ended", ReleaseRequest{Force: true, Reason: "taken back"}); err != nil {
				t.Error(err)
			}
		}
	}
	f.Fail("POST /api/claim", testenv.Lose, testenv.Lose, testenv.Lose, testenv.Lose)
	a := New(f.URL, direct.apiKey, WithSleeper(func(ctx context.Context, _ time.Duration) error { return ctx.Err() }))
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var fences []int64
	err := a.ClaimLoop(ctx, func(_ context.Context, l *Lease) error {
		fences = append(fences, l.Fence())
		cancel()
		return nil
	}, Queues("ended"), NoHeartbeats(), OnError(func(string, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	if len(fences) != 1 || fences[0] != 2 {
		t.Errorf("the loop worked under fences %v; want 2 alone (the lost claim's lease, fence 1, had ended)", fences)
	}
	if task, err := direct.GetTask(context.Background(), "ended"); err != nil || task.Status != StatusDone {
		t.Errorf("the task: %+v, %v; want it done", task, err)
	}
}

// A claim of ClaimLoop whose answer was lost and which took nothing (it
// found the queue empty) leaves its run free: the claim again under that
// run, once a task is there, is a fresh claim and takes it.
func TestClaimLoopClaimsAfreshAfterALostClaimTookNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	f := testenv.NewFront(t, srv.URL())
	direct := agent(t, admin, "agent-a1b2", "researcher")
	var mu sync.Mutex
	lost := 0
	f.Lost = func(string) {
		mu.Lock()
		defer mu.Unlock()
		if lost++; lost == 4 { // the claim's every try answered 404, lost
			if _, err := admin.CreateTask(context.Background(), CreateTaskRequest{TaskID: "later", Queue: "empty"}); err != nil {
				t.Error(err)
			}
		}
	}
	f.Fail("POST /api/claim", testenv.Lose, testenv.Lose, testenv.Lose, testenv.Lose)
	a := New(f.URL, direct.apiKey, WithSleeper(func(ctx context.Context, _ time.Duration) error { return ctx.Err() }))
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var worked []string
	err := a.ClaimLoop(ctx, func(_ context.Context, l *Lease) error {
		worked = append(worked, l.TaskID())
		cancel()
		return nil
	}, Queues("empty"), NoHeartbeats(), OnError(func(string, error) {}))
	if err != nil {
		t.Fatal(err)
	}
	if len(worked) != 1 || worked[0] != "later" {
		t.Errorf("the loop worked on %v; want later", worked)
	}
	if task, err := direct.GetTask(context.Background(), "later"); err != nil || task.Status != StatusDone || task.Attempts != 1 {
		t.Errorf("the task: %+v, %v; want it done, in one attempt", task, err)
	}
}

// A claim of ClaimLoop waiting on the server (ClaimWait) when the loop's
// ctx ended was abandoned: behind a gateway that does not pass the
// disconnect on, the server went on waiting and took the next task that
// came for an agent whose loop had returned, held by nobody at work until
// its lease timed out. The loop now waits for that claim's answer and
// gives the task back before it returns.
func TestClaimLoopStoppedDuringAWaitingClaimGivesItsTaskBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	f := testenv.NewFront(t, srv.URL()) // passes no disconnect on
	direct := agent(t, admin, "agent-a1b2", "researcher")
	a := New(f.URL, direct.apiKey)
	loopCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	returned := make(chan error, 1)
	var worked atomic.Int32
	var reported []error
	var mu sync.Mutex
	go func() {
		returned <- a.ClaimLoop(loopCtx, func(context.Context, *Lease) error {
			worked.Add(1)
			return nil
		}, Queues("late"), ClaimWait(5*time.Second), NoHeartbeats(), OnError(func(_ string, err error) {
			mu.Lock()
			reported = append(reported, err)
			mu.Unlock()
		}))
	}()
	// The claim has reached the server, which waits for a task; the loop
	// stops; then a task comes.
	f.WaitFor(t, "POST /api/claim", 15*time.Second)
	cancel()
	if _, err := direct.CreateTask(ctx, CreateTaskRequest{TaskID: "late", Queue: "late"}); err != nil {
		t.Fatal(err)
	}
	if err := <-returned; err != nil {
		t.Fatalf("ClaimLoop stopped by its ctx: %v", err)
	}
	// Once the server's claim has taken the task (it counts an attempt),
	// the task must be free again: given back by the loop.
	deadline := time.Now().Add(15 * time.Second)
	for {
		task, err := direct.GetTask(ctx, "late")
		if err != nil {
			t.Fatal(err)
		}
		if task.Attempts > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	s, err := direct.Status(ctx, "late")
	if err != nil {
		t.Fatal(err)
	}
	if s.Locked {
		t.Errorf("after the loop returned, its waiting claim's task is held: %+v; want it given back", s.Checkout)
	}
	if n := worked.Load(); n != 0 {
		t.Errorf("the loop worked on %d tasks after its ctx ended", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) != 0 {
		t.Errorf("errors reported: %v", reported)
	}
}
