package lease_test

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/localstack"
)

// The unit budgets: what DynamoDB bills per operation, in write and read
// units, the request path and the stream function's consequences together,
// as the local DynamoDB's meter counts them by AWS's rules (localstack's
// shim/meter.js). A change that adds an index write, widens a projection
// or grows the item breaks one of these; one that makes an operation
// cheaper should lower its budget here.
//
// The small task has a title only (its item is about half a kilobyte); the
// large one carries a full description (8 KiB) and 3.5 KiB of metadata.
//
// A transition writes the task item (under 1 KB: the body is an item of its
// own) and each index entry whose keys or projected attributes it changes
// (1 unit each: a todo or in_progress task has no status index entry, so a
// checkout, a release and a sweep's ending touch only the claim and lease
// indexes); its consequences add the archived event and its feed entry and
// the queue's counter. A large task costs what a small one does, but for
// reads that show the task whole (complete's answer reads the body) and
// its creation. Targets: a transition at most 7 write units, a renewal 5,
// a conflict 1, a claim at most 3 read units.
var unitBudgets = map[string]struct{ Small, Large localstack.Units }{
	// A create in a queue this process has put in the queue registry
	// before: the item, its claim entry and the queue's counter (and the
	// body, 12 write units, for the large task). The first in a new queue
	// also reads the registry and adds the queue to it, and the stream
	// function's first count of the queue reads the registry and finds it
	// there: a write unit and two read units more. (Before the registry
	// had pages, that count added the queue blindly: a write unit for a
	// read unit.)
	"create":              {units(3, 1), units(15, 1)},
	"create, a new queue": {units(4, 3), units(16, 3)},
	"checkout":            {units(6, 1), units(6, 1)},
	"conflict":            {units(1, 0), units(1, 0)},
	// A renewal moves the lease's expiry entry (a delete and a put) and
	// reads the holder's heartbeat once its alive cache has lapsed.
	"renew": {units(5, 1), units(5, 1)},
	// A freeing reads the task's watches (one consistent Query) to tell
	// them only if the task has ever been watched (its watched flag).
	"release":  {units(6, 1), units(6, 1)},
	"complete": {units(6, 1), units(6, 4)},
	// Its two transitions' counter writes are one: the stream function
	// sums a batch's changes per queue.
	"checkout+complete": {units(11, 1), units(11, 4)},
	// A watch reads the task and its watches, puts one item, and then
	// reads the records of freeings since its place (one consistent
	// Query, of none but in a race with a freeing: watch.go, "Placing a
	// watch in the past"); the task's first watch also sets its watched
	// flag (1 more write unit), which spares every freeing of a task
	// nobody watches its Query of watches.
	"watch": {units(2, 3), units(2, 3)},
	// A heartbeat sent later than the last one moves the agent's entry in
	// the heartbeats' by_expiry index (a delete and a put).
	"heartbeat":          {units(3, 0), units(3, 0)},
	"claim, queue of 1":  {units(6, 3), units(6, 3)},
	"claim, queue of 50": {units(6, 3), units(6, 3)},
	// Six leases ended by one sweep; its Queries (one per shard of the
	// lease-expiry and heartbeat indexes, 16 read units a run however many
	// leases it ends) are shared among them. Each ending also tells its
	// former holder (a lease_lost message: 1 write unit of the stream
	// function's, and 1 read unit, the read of its tombstone, which keeps
	// a replay from bringing back a deleted message; 6 of each in all):
	// the request path is 3 write units a lease (the item, its lease
	// entry deleted, its claim entry put), and the total is 33 + 6 write
	// units and 19 + 6 read units. None of them was watched: no Query of
	// watches.
	"sweep, per expired lease": {units(39.0/6, 25.0/6), units(39.0/6, 25.0/6)},
	// The work graph (deps.go). A dependent of one blocker: its edge, the
	// blocker's has_dependents, the task item and its status entry, and
	// the queue's counter; its blocker is read three times: before and
	// after the task's write (see settle), and by the stream function,
	// which settles every new dependent again whatever stopped its writer.
	// Each dependent a completion unblocks: its
	// item, its status entry deleted and its claim entry put, its event
	// archived and fed, and its share of the queue's counter and of the
	// Query of the blocker's edges (its freeing reads no watches: none
	// was placed), of the stream's read of the blocker (still done?), and
	// of the blocker's answer, which lists the tasks it blocks as GET
	// does (one more Query of its edges). 21 write units and 4 read units
	// for four.
	"create a dependent":     {units(5, 4), units(5, 4)},
	"unblock, per dependent": {units(21.0/4, 4.0/4), units(21.0/4, 4.0/4)},
	// A dependent of several blockers is read first (eventually
	// consistent, half a read unit: deps.go, unblockDependent), so that
	// a blocker that is not its last is taken out in one write; the last
	// one's unblocking is then as above, with that read.
	"unblock, not the last blocker, per dependent": {units(1, 5.0/4), units(1, 5.0/4)},
	"unblock, the last of two, per dependent":      {units(21.0/4, 6.0/4), units(21.0/4, 6.0/4)},
}

// fleetBudget is the write units per checkout+complete cycle on the
// busiest partition of any index, over a fleet of fleetAgents agents each
// cycling through tasks of its own: every partition takes about 1,000 write
// units a second, so the fleet's ceiling is 1,000 / this many cycles a
// second, whatever the table's capacity.
var fleetBudget = struct{ Small, Large float64 }{0.25, 0.25}

const (
	fleetAgents = 16
	fleetCycles = 3 // per agent
)

// unitsByTable lists the units of each table and index of c.
func unitsByTable(c localstack.Capacity) string {
	var parts []string
	for _, m := range []map[string]localstack.Units{c.Tables, c.Indexes} {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			parts = append(parts, fmt.Sprintf("%s %gW/%gR", k, m[k].Write, m[k].Read))
		}
	}
	return strings.Join(parts, ", ")
}

func units(w, r float64) localstack.Units { return localstack.Units{Write: w, Read: r} }

// unitsByPartition lists the units of c by partition-key value of each
// table and index ("tasks2 \"t#body#…\" 0W/3R"), for a budget exceeded:
// which item or partition took the units.
func unitsByPartition(c localstack.Capacity) string {
	keys := slices.SortedFunc(maps.Keys(c.Partitions), func(a, b localstack.Partition) int {
		return cmp.Or(strings.Compare(a.Table, b.Table), strings.Compare(a.Index, b.Index), strings.Compare(a.Key, b.Key))
	})
	var parts []string
	for _, p := range keys {
		name := p.Table
		if p.Index != "" {
			name += "/" + p.Index
		}
		parts = append(parts, fmt.Sprintf("%s %q %gW/%gR", name, p.Key, c.Partitions[p].Write, c.Partitions[p].Read))
	}
	return strings.Join(parts, ", ")
}

// resentSince is what the SDK sent again, by operation, of the requests
// counted by each of counters, since before (an earlier resentNow).
func resentSince(before []testenv.Ops, counters ...*testenv.Counter) testenv.Ops {
	out := testenv.Ops{}
	for i, now := range resentNow(counters...) {
		for op, n := range now {
			if d := n - before[i][op]; d > 0 {
				out[op] += d
			}
		}
	}
	return out
}

// resentNow is each counter's Resent (nil counters: none).
func resentNow(counters ...*testenv.Counter) []testenv.Ops {
	out := make([]testenv.Ops, len(counters))
	for i, c := range counters {
		out[i] = testenv.Ops{}
		if c != nil {
			out[i] = c.Resent()
		}
	}
	return out
}

// measure runs fn alone and returns what it was billed: on its request
// path (the change stream drained before it) and by the stream
// function's consequences (drained after it), with the capacity of each,
// by table, for the log.
func measure(t testing.TB, e *env, m *testenv.Meter, fn func()) (got opUnits, req, stream localstack.Capacity) {
	t.Helper()
	e.drain(t)
	m.Take()
	fn()
	req = m.Take()
	e.drain(t)
	stream = m.Take()
	return opUnits{Request: req.Total(), Stream: stream.Total()}, req, stream
}

// taskSize makes the tasks of one size.
type taskSize struct {
	name        string
	description string
	metadata    []byte
}

var taskSizes = []taskSize{
	{name: "small"},
	{name: "large", description: strings.Repeat("d", lease.MaxDescriptionLen),
		metadata: []byte(`{"notes":"` + strings.Repeat("m", 3584-len(`{"notes":""}`)) + `"}`)},
}

func (z taskSize) params(id, queue string) lease.CreateTaskParams {
	return lease.CreateTaskParams{TaskID: id, Title: "title of " + id, Queue: queue, Description: z.description, Metadata: z.metadata}
}

func (z taskSize) budget(op string) localstack.Units {
	b := unitBudgets[op]
	if z.name == "small" {
		return b.Small
	}
	return b.Large
}

// opUnits is what one operation was billed: on the request path, and by
// the stream function for its consequences.
type opUnits struct {
	Request, Stream localstack.Units
	// detail says, for a budget exceeded, where the units went: by
	// partition, on the request path and in the stream, and what the SDK
	// sent again (the server billed each sending it received).
	detail string
	// resent says the SDK sent a request of the operation again (an
	// answer lost under load): the server billed both sendings, so the
	// units are more than the operation's own.
	resent bool
}

func (u opUnits) Total() localstack.Units { return u.Request.Add(u.Stream) }

func (u opUnits) String() string {
	return fmt.Sprintf("%5g WU %5g RU  (request %g WU %g RU, stream %g WU %g RU)",
		u.Total().Write, u.Total().Read, u.Request.Write, u.Request.Read, u.Stream.Write, u.Stream.Read)
}

// measureOps runs every budgeted operation once on tasks of size z, each
// measured alone: the change stream is drained before it, and after it
// for its consequences.
func measureOps(t *testing.T, z taskSize) map[string]opUnits {
	e := newEnv(t)
	c := ctx(t)
	m := testenv.NewMeter(t, e.names.Prefix)
	out := map[string]opUnits{}
	op := func(name string, fn func()) {
		t.Helper()
		before := resentNow(e.count, e.streamCount)
		got, req, str := measure(t, e, m, fn)
		t.Logf("%s: request path %s; stream %s", name, unitsByTable(req), unitsByTable(str))
		got.detail = fmt.Sprintf("request path by partition: %s; stream by partition: %s", unitsByPartition(req), unitsByPartition(str))
		if resent := resentSince(before, e.count, e.streamCount); resent.Total() > 0 {
			why := e.count.ResentAfter()
			maps.Copy(why, e.streamCount.ResentAfter())
			t.Logf("%s: the SDK sent again %v, after %v", name, resent, why)
			got.detail += fmt.Sprintf("; the SDK sent again %v, after %v", resent, why)
			got.resent = true
		}
		out[name] = got
	}
	create := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			must[lease.Task](t)(e.store.CreateTask(c, z.params(id, "")))
		}
	}
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "holder", time.Hour))

	op("create, a new queue", func() { create("first") })
	op("create", func() { create("t") })
	create("u", "w", "x")

	var held lease.Checkout
	op("checkout", func() { held = e.checkout(t, "t", "holder", time.Minute) })
	op("conflict", func() {
		if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "other"}); !errors.Is(err, lease.ErrCheckedOut) {
			t.Fatalf("conflict: %v", err)
		}
	})
	// A renewal comes later than the grant, so its new expiry moves the
	// lease's index entry.
	e.clock.Advance(time.Second)
	op("renew", func() {
		must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "holder", RunID: held.RunID, Fence: held.Fence}))
	})
	op("release", func() {
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "holder", RunID: held.RunID, Fence: held.Fence}))
	})
	e.checkout(t, "u", "holder", time.Minute)
	op("complete", func() { must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "u", AgentID: "holder"})) })
	op("checkout+complete", func() {
		e.checkout(t, "w", "holder", time.Minute)
		must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "w", AgentID: "holder"}))
	})
	x := e.checkout(t, "x", "holder", time.Minute)
	op("watch", func() {
		if err := e.store.Watch(c, "x", "watcher"); err != nil {
			t.Fatalf("watch: %v", err)
		}
	})
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "holder", RunID: x.RunID, Fence: x.Fence}))
	op("heartbeat", func() { must[lease.Heartbeat](t)(e.store.Heartbeat(c, "holder", time.Hour)) })

	// Claims: from a queue holding one task, and from one holding 50.
	must[lease.Task](t)(e.store.CreateTask(c, z.params("only", "short")))
	e.caughtUp(t) // each claim finds its tasks through an index
	op("claim, queue of 1", func() {
		must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "claimer", Queues: []string{"short"}, Timeout: time.Minute}))
	})
	var batch []lease.CreateTaskParams
	for i := range 50 {
		batch = append(batch, z.params(fmt.Sprintf("job-%02d", i), "long"))
		if len(batch) == lease.MaxBatch || i == 49 {
			must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
			batch = nil
		}
	}
	e.caughtUp(t)
	op("claim, queue of 50", func() {
		must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "claimer", Queues: []string{"long"}, Timeout: time.Minute}))
	})

	// The work graph: a dependent of one blocker, created; and the
	// unblocking of four dependents by their blocker's completion, per
	// dependent (the completion's own units taken out).
	create("blocker", "blocker4")
	op("create a dependent", func() {
		must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "dependent", Title: "title of dependent", BlockedBy: []string{"blocker"}}))
	})
	for i := range 4 {
		must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: fmt.Sprintf("dep%d", i), BlockedBy: []string{"blocker4"}}))
	}
	b4 := e.checkout(t, "blocker4", "holder", time.Minute)
	op("unblock, per dependent", func() {
		must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "blocker4", AgentID: "holder", RunID: b4.RunID}))
		// The completion's consequences unblock the dependents; theirs
		// follow (each unblocked event archived, fed, counted).
		e.drain(t)
	})
	for i := range 4 {
		if st := e.get(t, fmt.Sprintf("dep%d", i)).Status; st != lease.StatusTodo {
			t.Fatalf("dep%d after its blocker's completion: %s", i, st)
		}
	}
	ub, done := out["unblock, per dependent"], out["complete"]
	quarter := func(u, minus localstack.Units) localstack.Units {
		return localstack.Units{Write: (u.Write - minus.Write) / 4, Read: (u.Read - minus.Read) / 4}
	}
	out["unblock, per dependent"] = opUnits{Request: quarter(ub.Request, done.Request), Stream: quarter(ub.Stream, done.Stream), detail: ub.detail, resent: ub.resent || done.resent}

	// Four dependents of two blockers each: the first blocker's
	// completion takes it out of each (not the last), the second's
	// unblocks each, per dependent as above.
	create("first-of-two", "second-of-two")
	for i := range 4 {
		must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: fmt.Sprintf("two%d", i), BlockedBy: []string{"first-of-two", "second-of-two"}}))
	}
	for _, b := range []struct{ id, op string }{{"first-of-two", "unblock, not the last blocker, per dependent"}, {"second-of-two", "unblock, the last of two, per dependent"}} {
		co := e.checkout(t, b.id, "holder", time.Minute)
		op(b.op, func() {
			must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: b.id, AgentID: "holder", RunID: co.RunID}))
			e.drain(t)
		})
		u := out[b.op]
		out[b.op] = opUnits{Request: quarter(u.Request, done.Request), Stream: quarter(u.Stream, done.Stream), detail: u.detail, resent: u.resent || done.resent}
	}
	for i := range 4 {
		if st := e.get(t, fmt.Sprintf("two%d", i)).Status; st != lease.StatusTodo {
			t.Fatalf("two%d after both its blockers' completions: %s", i, st)
		}
	}

	// The sweep, per lease it ends: the claims' two leases and four more,
	// all expired together.
	create("s0", "s1", "s2", "s3")
	for _, id := range []string{"s0", "s1", "s2", "s3"} {
		e.checkout(t, id, "sweepee", time.Minute)
	}
	e.clock.Advance(time.Minute + time.Second)
	e.caughtUp(t) // the sweep finds the leases through an index
	var ended int
	op("sweep, per expired lease", func() {
		res := must[lease.SweepResult](t)(e.store.Sweep(c))
		ended = res.Timeouts + res.AgentDeaths
	})
	if ended != 6 {
		t.Fatalf("the sweep ended %d leases, want 6", ended)
	}
	s := out["sweep, per expired lease"]
	per := func(u localstack.Units) localstack.Units {
		return localstack.Units{Write: u.Write / float64(ended), Read: u.Read / float64(ended)}
	}
	out["sweep, per expired lease"] = opUnits{Request: per(s.Request), Stream: per(s.Stream), detail: s.detail, resent: s.resent}
	return out
}

// TestUnitBudget holds each operation, on a small and on a large task, to
// its budget of write and read units, the request path and the stream
// function's consequences together. An operation over its budget while
// the SDK sent one of its requests again (an answer lost on a loaded
// machine: the server bills every sending it receives) is measured again,
// up to twice, on a fresh env; one over its budget without a resending
// fails at once.
func TestUnitBudget(t *testing.T) {
	t.Parallel()
	for _, z := range taskSizes {
		t.Run(z.name, func(t *testing.T) {
			t.Parallel()
			got := measureOps(t, z)
			for try := 1; try < 3; try++ {
				resent := overWhileResent(got, z)
				if len(resent) == 0 {
					break
				}
				t.Logf("over budget while the SDK sent a request again, so billed for more than the operation: %v; measuring again", resent)
				got = measureOps(t, z)
			}
			for op := range unitBudgets {
				u, ok := got[op]
				if !ok {
					t.Errorf("%s: not measured", op)
					continue
				}
				b := z.budget(op)
				t.Logf("%-26s %v  budget %g WU %g RU", op, u, b.Write, b.Read)
				if over(u, b) {
					t.Errorf("%s on a %s task: %g write units and %g read units, budget %g and %g (%v; %s)",
						op, z.name, u.Total().Write, u.Total().Read, b.Write, b.Read, u, u.detail)
				}
			}
		})
	}
}

// overWhileResent lists the operations of got over their budget for size
// z while the SDK sent one of their requests again: their measurement is
// not the operation's own cost.
func overWhileResent(got map[string]opUnits, z taskSize) []string {
	var out []string
	for op, u := range got {
		if _, ok := unitBudgets[op]; ok && u.resent && over(u, z.budget(op)) {
			out = append(out, op)
		}
	}
	slices.Sort(out)
	return out
}

// Only an operation over its budget while the SDK sent a request again is
// measured again: one over it without a resending, or resent and within
// it, is not.
func TestUnitBudgetMeasuresAgainOnlyWhatAResendingBilled(t *testing.T) {
	t.Parallel()
	z := taskSizes[1]
	b := z.budget("checkout")
	overBy := opUnits{Request: b.Add(units(0, 3))}
	within := opUnits{Request: b}
	resentOver, resentWithin := overBy, within
	resentOver.resent, resentWithin.resent = true, true
	got := overWhileResent(map[string]opUnits{"checkout": resentOver, "renew": overBy, "release": resentWithin, "not budgeted": resentOver}, z)
	if !slices.Equal(got, []string{"checkout"}) {
		t.Fatalf("measured again: %v, want [checkout]", got)
	}
}

// over says u is over budget b. A sweep's share of its Queries is a
// fraction: it allows for their rounding.
func over(u opUnits, b localstack.Units) bool {
	return u.Total().Write > b.Write+1e-9 || u.Total().Read > b.Read+1e-9
}

// TestUnitBudgetFleet holds the busiest partition of every index to its
// write units per cycle, over a fleet of agents each running
// checkout+complete cycles on tasks of its own, the stream function's
// writes included.
func TestUnitBudgetFleet(t *testing.T) {
	t.Parallel()
	for _, z := range taskSizes {
		t.Run(z.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			var batch []lease.CreateTaskParams
			for i := range fleetAgents * fleetCycles {
				batch = append(batch, z.params(fmt.Sprintf("f-%02d-%d", i%fleetAgents, i/fleetAgents), ""))
				if len(batch) == lease.MaxBatch {
					must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
					batch = nil
				}
			}
			if len(batch) > 0 {
				must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
			}
			e.drain(t)
			m := testenv.NewMeter(t, e.names.Prefix)
			var wg sync.WaitGroup
			errs := make(chan error, fleetAgents)
			for a := range fleetAgents {
				wg.Go(func() {
					agent := fmt.Sprintf("agent-%02d", a)
					for j := range fleetCycles {
						id := fmt.Sprintf("f-%02d-%d", a, j)
						co, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: id, AgentID: agent, Timeout: time.Minute})
						if err == nil {
							_, err = e.store.Complete(c, lease.CompleteParams{TaskID: id, AgentID: agent, RunID: co.RunID, Fence: co.Fence})
						}
						if err != nil {
							errs <- fmt.Errorf("%s on %s: %w", agent, id, err)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			e.drain(t)
			cycles := float64(fleetAgents * fleetCycles)
			var top localstack.PartitionUnits
			for _, b := range m.Take().Busiest() {
				t.Logf("busiest partition of %s/%s: %q, %.3g WU per cycle", b.Table, b.Index, b.Key, b.Write/cycles)
				if b.Index != "" && b.Write > top.Write {
					top = b
				}
			}
			perCycle := top.Write / cycles
			budget := fleetBudget.Small
			if z.name == "large" {
				budget = fleetBudget.Large
			}
			t.Logf("busiest index partition: %s/%s = %q, %.3g WU per cycle: a ceiling of %.0f cycles/s", top.Table, top.Index, top.Key, perCycle, 1000/perCycle)
			if perCycle > budget+1e-9 {
				t.Errorf("the busiest index partition, %s/%s = %q, takes %.3g write units per cycle, budget %g", top.Table, top.Index, top.Key, perCycle, budget)
			}
		})
	}
}

// A task watched by as many agents as it may have costs what any task does
// to check out, renew, conflict over and complete: watches are items of
// their own, and only a freeing reads them (to tell each watcher, one
// message each).
func TestUnitBudgetWatchedTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	large := taskSizes[1]
	m := testenv.NewMeter(t, e.names.Prefix)
	spent := func(name string, budget localstack.Units, fn func()) {
		t.Helper()
		e.drain(t)
		m.Take()
		fn()
		e.drain(t)
		got := m.Take().Total()
		t.Logf("%s on a watched 12 KB task: %g WU %g RU, budget %g WU %g RU", name, got.Write, got.Read, budget.Write, budget.Read)
		if got.Write > budget.Write || got.Read > budget.Read {
			t.Errorf("%s on a task with %d watchers: %g write units and %g read units, budget %g and %g",
				name, lease.MaxWatchers, got.Write, got.Read, budget.Write, budget.Read)
		}
	}
	must[lease.Task](t)(e.store.CreateTask(c, large.params("t", "")))
	co := e.checkout(t, "t", "holder", time.Minute)
	for i := range lease.MaxWatchers {
		if err := e.store.Watch(c, "t", fmt.Sprintf("watcher-%03d", i)); err != nil {
			t.Fatalf("watch %d: %v", i, err)
		}
	}
	if err := e.store.Watch(c, "t", "one-too-many"); !errors.Is(err, lease.ErrTooManyWatchers) {
		t.Fatalf("watch past %d watchers: %v", lease.MaxWatchers, err)
	}
	b := func(op string) localstack.Units { return unitBudgets[op].Large }
	// The holder's heartbeat is read once its alive cache has lapsed (the
	// watches took longer than that): one read unit.
	spent("conflict", b("conflict").Add(units(0, 1)), func() {
		if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "other"}); !errors.Is(err, lease.ErrCheckedOut) {
			t.Fatalf("conflict: %v", err)
		}
	})
	e.clock.Advance(time.Second)
	spent("renew", b("renew"), func() {
		must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "holder", RunID: co.RunID}))
	})
	spent("complete", b("complete"), func() {
		must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "holder"}))
	})
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", Status: new(lease.StatusTodo)}))
	spent("checkout", b("checkout"), func() { e.checkout(t, "t", "holder", time.Minute) })
}

// TestUnitBudgetTellingWatchers holds a freeing's telling of its watchers
// to what each costs: its message put and its used watch deleted (2 write
// units), the watcher's heartbeat read (is it the agent that watched?) and
// its message's tombstone read after the put (2 read units). The release
// itself bills what it does on a task ever watched, with one due. The
// same for watchers that never sent a heartbeat (no heartbeat item): a
// watch placed within the week is theirs, and no agent item is read
// (mayOutliveHeartbeat).
func TestUnitBudgetTellingWatchers(t *testing.T) {
	t.Parallel()
	for _, beating := range []bool{true, false} {
		t.Run(fmt.Sprintf("beating=%v", beating), func(t *testing.T) { unitBudgetTellingWatchers(t, beating) })
	}
}

func unitBudgetTellingWatchers(t *testing.T, beating bool) {
	e := newEnv(t)
	c := ctx(t)
	m := testenv.NewMeter(t, e.names.Prefix)
	release := func(watchers int) localstack.Units {
		t.Helper()
		id := fmt.Sprintf("watched-by-%d", watchers)
		must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: id, Title: "title of " + id}))
		co := e.checkout(t, id, "holder", time.Minute)
		for i := range watchers {
			w := fmt.Sprintf("watcher-%03d", i)
			if beating {
				must[lease.Heartbeat](t)(e.store.Heartbeat(c, w, time.Hour))
			}
			if err := e.store.Watch(c, id, w); err != nil {
				t.Fatalf("watch %d: %v", i, err)
			}
		}
		e.drain(t)
		m.Take()
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: id, AgentID: "holder", RunID: co.RunID, Fence: co.Fence}))
		e.drain(t)
		got := m.Take().Total()
		for i := range watchers {
			msgs := e.inbox(t, fmt.Sprintf("watcher-%03d", i))
			if !slices.ContainsFunc(msgs, func(m lease.Message) bool { return m.TaskID == id }) {
				t.Fatalf("watcher %d of %s was not told: %v", i, id, msgs)
			}
		}
		return got
	}
	const n = 10
	one, many := release(1), release(1+n)
	per := localstack.Units{Write: (many.Write - one.Write) / n, Read: (many.Read - one.Read) / n}
	t.Logf("release with 1 watcher: %g WU %g RU; with %d: %g WU %g RU; each watcher more: %g WU %g RU", one.Write, one.Read, 1+n, many.Write, many.Read, per.Write, per.Read)
	if per.Write > 2 || per.Read > 2 {
		t.Errorf("each watcher told costs %g write units and %g read units, budget 2 and 2", per.Write, per.Read)
	}
}

// TestUnitBudgetReleaseOfATaskDelayedWhileHeld: a plain release of a task
// given a not_before while it was held writes its ending with the delay
// (its delayed claim key and its expiry entry at the not_before), after a
// refused write for a ready task, as the sweep does: 8 write units with
// its consequences (10 when the ready ending's claim entry was moved by a
// second write). The task then waits: no claim takes it before its time,
// and the sweep ranks it ready once that has passed.
func TestUnitBudgetReleaseOfATaskDelayedWhileHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	m := testenv.NewMeter(t, e.names.Prefix)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "later", Title: "title of later"}))
	co := e.checkout(t, "later", "holder", time.Hour)
	nb := e.clock.Now().Add(10 * time.Minute)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "later", AgentID: "holder", SetNotBefore: true, NotBefore: &nb}))
	got, req, _ := measure(t, e, m, func() {
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "later", AgentID: "holder", RunID: co.RunID, Fence: co.Fence}))
	})
	t.Logf("release of a task delayed while held: %v (request path: %s)", got, unitsByTable(req))
	if got.Total().Write > 8 || got.Total().Read > 1 {
		t.Errorf("the release of a task delayed while held: %v, budget 8 write units and 1 read unit", got)
	}
	if task := e.get(t, "later"); task.Status != lease.StatusTodo || task.NotBefore == nil || !task.NotBefore.Equal(nb) {
		t.Fatalf("after the release: %s, not_before %v; want todo, not before %v", task.Status, task.NotBefore, nb)
	}
	e.caughtUp(t)
	if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "claimer"}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("a claim before the task's not_before: %v, want no task available", err)
	}
	e.clock.Advance(10*time.Minute + time.Second)
	must[lease.SweepResult](t)(e.store.Sweep(c))
	e.caughtUp(t)
	if got := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "claimer"})); got.TaskID != "later" {
		t.Fatalf("a claim once the not_before passed got %s, want later", got.TaskID)
	}
}

// TestUnitBudgetAgentWithoutHeartbeat: an agent that never sent a
// heartbeat reads no more when it watches a task it watches already, or
// reads an inbox holding a message of a watch, than one that did. Whether
// that watch is an earlier agent's of its id (registered again since) is
// a question only once a week has passed, long enough for the heartbeat
// item that would say so to have expired (mayOutliveHeartbeat); the
// agent item is read only then.
func TestUnitBudgetAgentWithoutHeartbeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	m := testenv.NewMeter(t, e.names.Prefix)
	reads := func(agent string, beating bool) (watchAgain, inbox float64) {
		t.Helper()
		id := "watched-by-" + agent
		must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: id, Title: "title of " + id}))
		co := e.checkout(t, id, "holder-"+agent, time.Minute)
		if beating {
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, agent, time.Hour))
		}
		if err := e.store.Watch(c, id, agent); err != nil {
			t.Fatalf("watch: %v", err)
		}
		e.drain(t)
		e.clock.Advance(2 * time.Second) // past any cached read of the heartbeat
		m.Take()
		if err := e.store.Watch(c, id, agent); err != nil {
			t.Fatalf("watch again: %v", err)
		}
		watchAgain = m.Take().Total().Read
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: id, AgentID: "holder-" + agent, RunID: co.RunID, Fence: co.Fence}))
		e.drain(t)
		e.clock.Advance(2 * time.Second)
		m.Take()
		msgs, err := e.store.Inbox(c, agent)
		inbox = m.Take().Total().Read
		if err != nil || !slices.ContainsFunc(msgs, func(m lease.Message) bool { return m.TaskID == id }) {
			t.Fatalf("inbox of %s: %v, %v; want the message of its watch of %s", agent, msgs, err, id)
		}
		return watchAgain, inbox
	}
	beatWatch, beatInbox := reads("beating", true)
	silentWatch, silentInbox := reads("silent", false)
	t.Logf("watch again: %g RU with a heartbeat, %g without; inbox: %g RU with, %g without", beatWatch, silentWatch, beatInbox, silentInbox)
	if silentWatch > beatWatch || silentInbox > beatInbox {
		t.Errorf("an agent without a heartbeat item reads more: watching again %g read units (%g with one), its inbox %g (%g)",
			silentWatch, beatWatch, silentInbox, beatInbox)
	}
}
