package client

import (
	"context"
	"sync"
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
