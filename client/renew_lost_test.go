package client

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
)

// A renewal whose answer is lost after the server applied it (a
// gateway's 5xx) has extended the lease. When every renewal until the
// lease's last known expiry lost its answer so, WorkOn took the lease for
// lost and returned, neither completing nor releasing it: the task stayed
// held, by nobody at work, until the extended lease timed out, and work
// the function had finished was not recorded. The work is still stopped
// at the last known expiry (nothing vouches for the lease then), but the
// lease is then completed, when the function returns nil, or released,
// each naming the lease, so that one gone meanwhile is left alone.
func TestWorkOnGivesBackALeaseItsLostRenewalsKept(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := testclock.New(time.Now())
	srv, admin := startServer(t, clock.Now)
	f := testenv.NewFront(t, srv.URL())
	direct := agent(t, admin, "agent-a1b2", "researcher")
	for _, id := range []string{"finished", "stopped"} {
		if _, err := direct.CreateTask(ctx, CreateTaskRequest{TaskID: id}); err != nil {
			t.Fatal(err)
		}
	}
	a := New(f.URL, direct.apiKey, WithClock(clock.Now), WithSleeper(func(ctx context.Context, d time.Duration) error {
		clock.Advance(d)
		return ctx.Err()
	}))

	for _, tc := range []struct {
		task    string
		fnErr   func(ctx context.Context) error
		want    string
		wantErr error
	}{
		// The function finished its work as the lease was taken for lost.
		{"finished", func(context.Context) error { return nil }, StatusDone, nil},
		// The function stopped on the cancellation.
		{"stopped", func(ctx context.Context) error { return ctx.Err() }, StatusTodo, ErrLeaseLost},
	} {
		for range 200 {
			f.Fail("POST /api/tasks/"+tc.task+"/renew", testenv.Gateway)
		}
		var cancelled error
		err := a.WorkOn(ctx, tc.task, func(ctx context.Context, _ *Lease) error {
			<-ctx.Done()
			cancelled = context.Cause(ctx)
			return tc.fnErr(ctx)
		}, NoHeartbeats(), LeaseTimeout(30*time.Second))
		if !errors.Is(cancelled, ErrLeaseLost) {
			t.Errorf("%s: the work was cancelled with %v, want ErrLeaseLost at the lease's last known expiry", tc.task, cancelled)
		}
		if (tc.wantErr == nil && err != nil) || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
			t.Errorf("%s: WorkOn = %v, want %v", tc.task, err, tc.wantErr)
		}
		s, serr := direct.Status(ctx, tc.task)
		if serr != nil || s.Locked {
			t.Errorf("%s: after WorkOn returned: %+v, %v; want the lease its lost renewals kept given back", tc.task, s, serr)
		}
		task, terr := direct.GetTask(ctx, tc.task)
		if terr != nil || task.Status != tc.want {
			t.Errorf("%s: the task after WorkOn: status %q, %v; want %q", tc.task, task.Status, terr, tc.want)
		}
	}
}
