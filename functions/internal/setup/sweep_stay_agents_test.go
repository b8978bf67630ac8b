package setup

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// failingAgentsPass fails every read of the heartbeat index made by the
// whole sweep's agents' pass (without a Limit), as throttling or a
// missing permission would; NextDue's look (Limit 1) and the leases' pass
// go through.
type failingAgentsPass struct{ lease.DB }

func (f failingAgentsPass) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if in.IndexName != nil && *in.IndexName == schema.HeartbeatsByExpiry && in.Limit == nil {
		return nil, errors.New("throttled, say")
	}
	return f.DB.Query(ctx, in, opts...)
}

// A run whose whole sweep failed, and that made no whole sweep that
// succeeded afterwards, fails, even when a leases' pass of its stay
// (which judges no agent) succeeded after it: the deaths it was to judge
// are not recorded, and DEPLOY.md's sweeper-errors alarm (a run whose
// last sweep failed; "a sweep that fails during a run's stay is tried
// again within it") must fire. Before the stay the run was that one
// whole sweep and failed with it.
func TestASweepRunFailsWhenItsWholeSweepFailedThoughALeasesPassFollowed(t *testing.T) {
	t.Parallel()
	names := testenv.Tables(t)
	out := &testenv.Buffer{}
	quiet := slog.New(slog.DiscardHandler)
	// The default SweepAgentsEvery (10 s) is past the stay: no whole sweep
	// is tried again within it, as for one failing in a 55 s stay's last
	// 10 s.
	env := Env{Function: deploy.Sweeper, TablePrefix: names.Prefix, Metrics: out, SweepStay: 5 * time.Second}
	store := NewStore(lease.NewLocalClient(testenv.Endpoint()), nil, env, quiet)
	sweep := Sweep(NewStore(failingAgentsPass{lease.NewLocalClient(testenv.Endpoint())}, nil, env, quiet), nil, env)
	ctx := context.Background()
	hb, err := store.Heartbeat(ctx, "bob", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		task, agent string
		timeout     time.Duration
	}{{"held", "bob", time.Hour}, {"t1", "alice", 2 * time.Second}} {
		if _, err := store.CreateTask(ctx, lease.CreateTaskParams{TaskID: c.task}); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Checkout(ctx, lease.CheckoutParams{TaskID: c.task, AgentID: c.agent, AgentName: c.agent, Timeout: c.timeout}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Until(hb.ExpiresAt.Add(100 * time.Millisecond))) // bob is dead
	testenv.CaughtUp(t, names.Prefix)
	run, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := sweep(run)
	t.Logf("the run: %+v, %v", res, err)
	if res != (lease.SweepResult{Timeouts: 1}) {
		t.Fatalf("the run swept %+v, want alice's lease's timeout (its leases' pass) and not bob's death (every whole sweep failed)", res)
	}
	if err == nil {
		t.Fatal("the run answered no error: its whole sweep failed and none succeeded after it (bob's death is not recorded), but its last sweep, a leases' pass, succeeded")
	}
}
