package setup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
)

// stayRig is a sweeper over fresh tables, its requests counted and its
// lines kept.
type stayRig struct {
	store *lease.Store // the other functions' store, uncounted
	sweep SweepHandler
	count *testenv.Counter
	out   *testenv.Buffer
	// prefix is the tables' (and the metrics' Deployment).
	prefix string
}

func newStayRig(t *testing.T, stay time.Duration, now func() time.Time, opts ...func(*Env)) *stayRig {
	t.Helper()
	names := testenv.Tables(t)
	r := &stayRig{count: testenv.NewCounter(), out: &testenv.Buffer{}, prefix: names.Prefix}
	quiet := slog.New(slog.DiscardHandler)
	env := Env{Function: deploy.Sweeper, TablePrefix: names.Prefix, Metrics: r.out, Now: now, SweepStay: stay}
	for _, o := range opts {
		o(&env)
	}
	r.store = NewStore(lease.NewLocalClient(testenv.Endpoint()), nil, env, quiet)
	r.sweep = Sweep(NewStore(r.count.Client(testenv.Endpoint()), nil, env, quiet), nil, env)
	return r
}

// invoke runs one invocation as Lambda does, with the stack's 60 s
// timeout (or timeout), and answers when it returned.
func (r *stayRig) invoke(t *testing.T, timeout time.Duration) (lease.SweepResult, time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	res, err := r.sweep(ctx)
	if err != nil {
		t.Fatalf("the run failed: %v", err)
	}
	return res, time.Now()
}

// sweeps are the run's sweep lines: each one's time (its metrics'
// timestamp, Unix ms, taken as the sweep ends) and the leases it ended.
func (r *stayRig) sweeps(t *testing.T) (at []int64, ended []float64) {
	t.Helper()
	at, _, ended = r.sweepTimes(t)
	return at, ended
}

// sweepTimes is sweeps with each sweep's start too (Unix ms): its line's
// time less its duration_ms. The run waits for a lease from a sweep's
// start, not its end, and a sweep on a loaded machine may take hundreds
// of milliseconds.
func (r *stayRig) sweepTimes(t *testing.T) (at, start []int64, ended []float64) {
	t.Helper()
	lines, _ := emf(t, r.out.Take(), r.prefix)
	for _, l := range lines {
		if l["msg"] != "sweep" {
			t.Errorf("line %v, want only sweep lines", l)
			continue
		}
		meta := l["_aws"].(map[string]any)
		end := int64(meta["Timestamp"].(float64))
		at = append(at, end)
		start = append(start, end-int64(math.Ceil(l["duration_ms"].(float64))))
		ended = append(ended, l[deploy.MetricSweepEnded].(float64))
	}
	return at, start, ended
}

// dueBy is when the run may start the sweep of what falls due at due
// (Unix ms): not before it, not within sweepGap of the start of the sweep
// before (prevStart), and not before that sweep ended (prevEnd). On a
// loaded machine the run's own sweep may start after the test made the
// lease more than a second before its expiry, or end after the expiry.
func dueBy(due, prevStart, prevEnd int64) int64 {
	return max(due, prevStart+sweepGap.Milliseconds(), prevEnd)
}

// sweepLate bounds how long after dueBy the sweep starts: the run looks
// (NextDue, 32 Queries) between two sweeps, which took 1.2 s under load.
// A run that waited for its next look (sweepRelook, 10 s) or left the
// lease to the next run is later still.
const sweepLate = 2000

// sweptInTime checks the run's sweep i, which ended what fell due at due
// (Unix ms): it ended no sooner, and it started within sweepLate of when
// the run could start it (dueBy, after the sweep before); its own
// duration, long on a loaded machine, is not the run's wait.
func sweptInTime(t *testing.T, what string, due int64, at, start []int64, i int) {
	t.Helper()
	if at[i] < due {
		t.Fatalf("%s was ended %d ms before it fell due", what, due-at[i])
	}
	late := start[i] - dueBy(due, start[i-1], at[i-1])
	t.Logf("the sweep ending %s started %d ms after it fell due, %d ms after the run could start it; it took %d ms", what, start[i]-due, late, at[i]-start[i])
	if late > sweepLate {
		t.Fatalf("the sweep ending %s started %d ms after the run could start it, want within %d ms", what, late, sweepLate)
	}
}

func (r *stayRig) checkout(t *testing.T, task, agent string, timeout time.Duration) lease.Checkout {
	t.Helper()
	ctx := context.Background()
	if _, err := r.store.CreateTask(ctx, lease.CreateTaskParams{TaskID: task}); err != nil {
		t.Fatal(err)
	}
	c, err := r.store.Checkout(ctx, lease.CheckoutParams{TaskID: task, AgentID: agent, AgentName: agent, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A run stays after its sweep and ends a lease that expires within its
// stay about as soon as it expires, not at the next minute's run.
func TestSweepRunEndsALeaseAsItExpiresWithinItsStay(t *testing.T) {
	t.Parallel()
	r := newStayRig(t, 8*time.Second, nil)
	c := r.checkout(t, "t1", "alice", 2*time.Second)
	testenv.CaughtUp(t, r.prefix)
	res, returned := r.invoke(t, time.Minute)
	if res != (lease.SweepResult{Timeouts: 1}) {
		t.Fatalf("the run swept %+v, want the lease's timeout", res)
	}
	at, start, ended := r.sweepTimes(t)
	if len(at) != 2 || ended[0] != 0 || ended[1] != 1 {
		t.Fatalf("sweeps ending %v, want the run's sweep (nothing) and one as the lease expired (1)", ended)
	}
	expires := c.ExpiresAt.UnixMilli()
	sweptInTime(t, "the lease", expires, at, start, 1)
	if task, err := r.store.GetTask(context.Background(), "t1"); err != nil || task.Status != lease.StatusTodo {
		t.Fatalf("task %+v, %v: want it back to todo", task, err)
	}
	// Nothing else fell due in the rest of its stay: the run returned
	// after one look, without waiting the stay out (about 6 s more).
	if after := returned.Sub(time.UnixMilli(at[len(at)-1])); after > sweepLate*time.Millisecond {
		t.Fatalf("the run returned %v after its last sweep ended, want within %d ms (one look: nothing else falls due in its 8 s stay)", after, sweepLate)
	}
}

// agentsEvery sets a rig's least time between whole sweeps.
func agentsEvery(d time.Duration) func(*Env) { return func(e *Env) { e.SweepAgentsEvery = d } }

// A holder whose heartbeat expires within the stay loses its lease to its
// death in the same run: the run sweeps whole (judging agents) when a
// heartbeat falls due, a whole sweep at most each SweepAgentsEvery (here
// a second, passed when the heartbeat expires).
func TestSweepRunEndsADeadHoldersLeaseWithinItsStay(t *testing.T) {
	t.Parallel()
	r := newStayRig(t, 4*time.Second, nil, agentsEvery(time.Second))
	hb, err := r.store.Heartbeat(context.Background(), "bob", 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r.checkout(t, "t1", "bob", time.Hour)
	testenv.CaughtUp(t, r.prefix)
	res, _ := r.invoke(t, time.Minute)
	if res != (lease.SweepResult{AgentDeaths: 1}) {
		t.Fatalf("the run swept %+v, want the holder's death", res)
	}
	at, start, ended := r.sweepTimes(t)
	if len(at) != 2 || ended[1] != 1 {
		t.Fatalf("sweeps ending %v, want the run's sweep and one as the heartbeat expired", ended)
	}
	// Here SweepAgentsEvery is sweepGap, a second: the death is judged as
	// soon as the leases' timeouts are.
	sweptInTime(t, "the dead holder's lease", hb.ExpiresAt.UnixMilli(), at, start, 1)
}

// Deaths falling due one after another within the stay are swept
// together, by one whole sweep (which reads every live lease) at most each
// SweepAgentsEvery after the last, while a lease's timeout between them is
// ended as it falls due by the leases' pass alone.
//
// The stay leaves room for a slow machine: the deaths' sweep comes
// sweepGap after the timeout's at the soonest, and under load the
// timeout's once started 4.2 s into the run, not 2 s, so that the
// deaths' fell after a 5 s stay. The run returns after the deaths'
// sweep, so the longer stay costs nothing.
func TestSweepRunJudgesDeathsAtMostEachAgentsInterval(t *testing.T) {
	t.Parallel()
	const every = 3500 * time.Millisecond
	r := newStayRig(t, 10*time.Second, nil, agentsEvery(every))
	ctx := context.Background()
	ttls := []time.Duration{1500 * time.Millisecond, 2 * time.Second, 2500 * time.Millisecond}
	for i := range ttls {
		r.checkout(t, fmt.Sprintf("held-%d", i), fmt.Sprintf("agent-%d", i), time.Hour)
	}
	// The heartbeats come last, the shortest last of all, so that the run's
	// own sweep comes well before the first expires however long the
	// tables and tasks took to make (on a loaded machine the whole of it
	// took over 1.5 s, and the run's sweep ended agent-0's lease).
	var lastHeartbeat time.Time
	for i, ttl := range slices.Backward(ttls) {
		lastHeartbeat = time.Now()
		if _, err := r.store.Heartbeat(ctx, fmt.Sprintf("agent-%d", i), ttl); err != nil {
			t.Fatal(err)
		}
	}
	lease := r.checkout(t, "timing-out", "alice", 2*time.Second)
	testenv.CaughtUp(t, r.prefix)
	began := time.Now()
	res, _ := r.invoke(t, time.Minute)
	at, start, ended := r.sweepTimes(t)
	t.Logf("sweeps from %v to %v (ms after the start), ending %v", msAfter(start, began), msAfter(at, began), ended)
	if res.AgentDeaths != 3 || res.Timeouts != 1 {
		t.Fatalf("the run swept %+v, want the three deaths and the timeout", res)
	}
	// The run's sweep, the timeout's (the leases' pass), and one whole
	// sweep for the three deaths, no sooner than every after the first.
	if len(at) != 3 || ended[1] != 1 || ended[2] != 3 {
		t.Fatalf("sweeps ending %v, want the run's, the timeout's (1), and one for the deaths (3); the run began %v after the last heartbeat", ended, began.Sub(lastHeartbeat))
	}
	sweptInTime(t, "the timed-out lease", lease.ExpiresAt.UnixMilli(), at, start, 1)
	// A line is stamped as its sweep ends, and the run's own sweep may
	// take longer than the deaths' (a loaded machine), so the deaths'
	// sweep is timed from the run's start, which the run's sweep began at.
	if gap := time.Duration(at[2]-began.UnixMilli()) * time.Millisecond; gap < every {
		t.Fatalf("the deaths' whole sweep ended %v after the run began, want no sooner than %v", gap, every)
	}
}

// msAfter is each of at (Unix ms) as milliseconds after t.
func msAfter(at []int64, t time.Time) []int64 {
	out := make([]int64, len(at))
	for i, a := range at {
		out[i] = a - t.UnixMilli()
	}
	return out
}

// A run with nothing due within its minute returns after its sweep and
// one look, NextDue's one Query per shard of each expiry index: an idle
// deployment costs a look a minute more than one sweep, and no wait. A
// lease expiring after the stay is the next run's.
func TestSweepRunWithNothingDueReturnsAfterOneLook(t *testing.T) {
	t.Parallel()
	clock := testclock.New(time.Date(2026, 3, 20, 14, 0, 0, 0, time.UTC))
	r := newStayRig(t, DefaultSweepStay, clock.Now)
	r.checkout(t, "t1", "alice", 5*time.Minute)
	testenv.CaughtUp(t, r.prefix)
	r.count.Take()
	began := time.Now()
	res, returned := r.invoke(t, time.Minute)
	if res != (lease.SweepResult{}) {
		t.Fatalf("the run swept %+v, want nothing", res)
	}
	if took := returned.Sub(began); took > 5*time.Second {
		t.Fatalf("the run took %v with nothing due, want it to return at once", took)
	}
	// The sweep: one Query per shard of each expiry index (16 each by
	// default); the look: as many.
	if ops := r.count.Take(); ops.Total() != 64 || ops["Query"] != 64 {
		t.Fatalf("requests %v, want 32 Queries for the sweep and 32 for the look", ops)
	}
	if at, _ := r.sweeps(t); len(at) != 1 {
		t.Fatalf("%d sweep lines, want one", len(at))
	}
}

// The stay never passes the invocation's deadline less SweepDeadlineMargin
// and SweepRoom, whatever EnvSweepStay says: a run with a short timeout
// sweeps what falls due before then and leaves what falls due later to
// the next run. Its last sweep may go on into SweepRoom, which the stay
// leaves it: the run returns within the stay and that room.
//
// The stay is 5 s, so that a slow machine's first sweep and look (2 s and
// 1.2 s under load) still leave time to sweep the first lease within it.
func TestSweepStayEndsBeforeTheInvocationsDeadline(t *testing.T) {
	t.Parallel()
	const stay = 5 * time.Second // what the invocation's deadline leaves
	r := newStayRig(t, DefaultSweepStay, nil)
	r.checkout(t, "soon", "alice", time.Second)
	r.checkout(t, "later", "alice", stay+3*time.Second)
	testenv.CaughtUp(t, r.prefix)
	timeout := SweepDeadlineMargin + SweepRoom + stay
	began := time.Now()
	res, returned := r.invoke(t, timeout)
	if res != (lease.SweepResult{Timeouts: 1}) {
		t.Fatalf("the run swept %+v, want the first lease's timeout alone", res)
	}
	if stayed := returned.Sub(began); stayed > stay+SweepRoom {
		t.Fatalf("the run returned %v after it began, past its %v stay (the invocation's deadline less %v) and the %v left for its last sweep", stayed, stay, SweepDeadlineMargin+SweepRoom, SweepRoom)
	}
	if task, err := r.store.GetTask(context.Background(), "later"); err != nil || task.Status != lease.StatusInProgress {
		t.Fatalf("task %+v, %v: want it still held, for the next run", task, err)
	}
}

// EnvSweepStay is a Go duration: unset is DefaultSweepStay, "0s" one
// sweep a run; anything else is refused (MustStore exits).
func TestSweepStayFromEnv(t *testing.T) {
	for v, want := range map[string]time.Duration{"": DefaultSweepStay, " ": DefaultSweepStay, "0s": 0, "30s": 30 * time.Second, "1m": time.Minute} {
		if got, err := SweepStayFromEnv(func(string) string { return v }); err != nil || got != want {
			t.Errorf("%s=%q: %v, %v; want %v", EnvSweepStay, v, got, err, want)
		}
	}
	for _, v := range []string{"-1s", "55", "soon"} {
		if _, err := SweepStayFromEnv(func(string) string { return v }); err == nil || !strings.Contains(err.Error(), EnvSweepStay) {
			t.Errorf("%s=%q: %v, want it refused", EnvSweepStay, v, err)
		}
	}
}

// failingOnce fails the first UpdateItem sent through it.
type failingOnce struct {
	lease.DB
	failed atomic.Bool
}

func (f *failingOnce) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if f.failed.CompareAndSwap(false, true) {
		return nil, errors.New("throttled, say")
	}
	return f.DB.UpdateItem(ctx, in, opts...)
}

// A sweep of the stay that fails is logged, and the run looks at its
// window again and sweeps it later in the stay; the run succeeds.
//
// The stay is long enough for a slow machine: the failed sweep starts a
// second after the run's own sweep at the soonest, or as that one ends
// (which took 2 s under load), and the sweep after it twice sweepGap
// later. The run returns once that one succeeded, so the test takes no
// longer for it.
func TestSweepRunSweepsAgainAfterAFailedSweep(t *testing.T) {
	t.Parallel()
	names := testenv.Tables(t)
	out := &testenv.Buffer{}
	quiet := slog.New(slog.DiscardHandler)
	env := Env{Function: deploy.Sweeper, TablePrefix: names.Prefix, Metrics: out, SweepStay: 10 * time.Second}
	store := NewStore(lease.NewLocalClient(testenv.Endpoint()), nil, env, quiet)
	sweep := Sweep(NewStore(&failingOnce{DB: lease.NewLocalClient(testenv.Endpoint())}, nil, env, quiet), nil, env)
	ctx := context.Background()
	if _, err := store.CreateTask(ctx, lease.CreateTaskParams{TaskID: "t1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Checkout(ctx, lease.CheckoutParams{TaskID: "t1", AgentID: "alice", AgentName: "alice", Timeout: time.Second}); err != nil {
		t.Fatal(err)
	}
	testenv.CaughtUp(t, names.Prefix)
	run, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := sweep(run)
	if err != nil || res != (lease.SweepResult{Timeouts: 1}) {
		t.Fatalf("the run: %+v, %v; want the lease's timeout, and no error", res, err)
	}
	lines, _ := emf(t, out.Take(), names.Prefix)
	var msgs []string
	for _, l := range lines {
		msgs = append(msgs, l["msg"].(string))
	}
	if !slices.Equal(msgs, []string{"sweep", "sweep failed", "sweep"}) {
		t.Fatalf("lines %v, want the run's sweep, the failed one, and the one that ended the lease", msgs)
	}
}
