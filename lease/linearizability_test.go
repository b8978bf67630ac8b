package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/checkout-dev/checkout/lease"
)

// Linearizability: many agents run checkout, renew, release, complete and
// status against the real store on a DynamoDB-compatible server, and the
// recorded history is checked with porcupine against a sequential model of
// one lease per task.
//
// Time: the store's clock is injected and moves only between phases, while
// no operation is in flight, as an explicit "tick" operation in the history.
// Within a phase every decision is made at the same instant, so the model is
// deterministic: expiry is part of the sequential state, not a race with the
// wall clock. Ticks land exactly on lease boundaries (expires == now counts
// as expired) as well as inside and past them.
//
// The agents send no heartbeats, so leases end by time alone and each task is
// independent: the history is partitioned by task (ticks belong to every
// partition). CHECKOUT_CHAOS=1 runs a much longer history (make chaos).

type linIn struct {
	Op      string // tick, checkout, renew, release, complete, status
	Task    string
	Agent   string
	Run     string
	Fence   int64
	Timeout int64 // ms, checkout only
	Now     int64 // ms, tick only
}

type linOut struct {
	Kind    string // ok, conflict, not_holder, not_checked_out, status_mismatch
	Holder  string
	Run     string
	Fence   int64
	Expires int64
	Status  lease.Status
	Held    int64
}

// linState is one task as the model sees it. Zero holder: no lease record.
type linState struct {
	Now       int64
	Status    lease.Status
	Holder    string
	Run       string
	Fence     int64
	Locked    int64
	Expires   int64
	TimeoutMS int64
}

func (s linState) live() bool { return s.Holder != "" && s.Expires > s.Now }

// step is the sequential specification: the answer and the next state.
func (s linState) step(in linIn) (linOut, linState) {
	switch in.Op {
	case "tick":
		s.Now = in.Now
		return linOut{Kind: "ok"}, s
	case "status":
		out := linOut{Kind: "ok", Status: s.Status}
		if s.live() {
			out.Holder, out.Run, out.Fence, out.Expires = s.Holder, s.Run, s.Fence, s.Expires
		} else if s.Holder != "" && s.Status == lease.StatusInProgress {
			out.Status = lease.StatusTodo // ended by time, not swept: todo in all but name
		}
		return out, s
	case "checkout":
		if s.live() {
			if s.Holder == in.Agent && s.Run == in.Run {
				return linOut{Kind: "ok", Holder: s.Holder, Run: s.Run, Fence: s.Fence, Expires: s.Expires}, s
			}
			return linOut{Kind: "conflict", Holder: s.Holder, Fence: s.Fence}, s
		}
		if s.Status != lease.StatusTodo && s.Status != lease.StatusInProgress {
			return linOut{Kind: "status_mismatch", Status: s.Status}, s
		}
		s.Fence++
		s.Holder, s.Run, s.Locked, s.Expires, s.TimeoutMS = in.Agent, in.Run, s.Now, s.Now+in.Timeout, in.Timeout
		s.Status = lease.StatusInProgress
		return linOut{Kind: "ok", Holder: s.Holder, Run: s.Run, Fence: s.Fence, Expires: s.Expires}, s
	}
	// renew, release, complete: only the live lease's holder, with the
	// run id and fence when given.
	if !s.live() {
		return linOut{Kind: "not_checked_out"}, s
	}
	if s.Holder != in.Agent || in.Run != "" && in.Run != s.Run || in.Fence != 0 && in.Fence != s.Fence {
		return linOut{Kind: "not_holder", Holder: s.Holder, Fence: s.Fence}, s
	}
	switch in.Op {
	case "renew":
		s.Expires = s.Now + s.TimeoutMS
		return linOut{Kind: "ok", Holder: s.Holder, Run: s.Run, Fence: s.Fence, Expires: s.Expires}, s
	case "release":
		held := s.Now - s.Locked
		s.Holder, s.Run, s.Locked, s.Expires, s.TimeoutMS = "", "", 0, 0, 0
		s.Status = lease.StatusTodo
		return linOut{Kind: "ok", Held: held}, s
	case "complete":
		s.Holder, s.Run, s.Locked, s.Expires, s.TimeoutMS = "", "", 0, 0, 0
		s.Status = lease.StatusDone
		return linOut{Kind: "ok", Status: lease.StatusDone}, s
	}
	panic("unknown op " + in.Op)
}

func leaseModel(start int64) porcupine.Model {
	return porcupine.Model{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			var ticks []porcupine.Operation
			byTask := map[string][]porcupine.Operation{}
			var order []string
			for _, op := range h {
				in := op.Input.(linIn)
				if in.Op == "tick" {
					ticks = append(ticks, op)
					continue
				}
				if _, ok := byTask[in.Task]; !ok {
					order = append(order, in.Task)
				}
				byTask[in.Task] = append(byTask[in.Task], op)
			}
			var out [][]porcupine.Operation
			for _, task := range order {
				out = append(out, append(append([]porcupine.Operation{}, ticks...), byTask[task]...))
			}
			return out
		},
		Init: func() any { return linState{Now: start, Status: lease.StatusTodo} },
		Step: func(state, input, output any) (bool, any) {
			want, next := state.(linState).step(input.(linIn))
			return want == output.(linOut), next
		},
		DescribeOperation: func(input, output any) string {
			return fmt.Sprintf("%+v -> %+v", input, output)
		},
		DescribeState: func(state any) string { return fmt.Sprintf("%+v", state) },
	}
}

// outcome turns a store answer into the model's terms. ok=false is an
// answer the model has no place for (an infrastructure error).
func outcome(op string, res any, err error) (linOut, bool) {
	var ce *lease.ConflictError
	var nh *lease.NotHolderError
	var sm *lease.StatusMismatchError
	switch {
	case errors.As(err, &ce):
		return linOut{Kind: "conflict", Holder: ce.Holder.AgentID, Fence: ce.Holder.Fence}, true
	case errors.As(err, &nh):
		return linOut{Kind: "not_holder", Holder: nh.Holder.AgentID, Fence: nh.Holder.Fence}, true
	case errors.As(err, &sm):
		return linOut{Kind: "status_mismatch", Status: sm.Status}, true
	case errors.Is(err, lease.ErrNotCheckedOut):
		return linOut{Kind: "not_checked_out"}, true
	case err != nil:
		return linOut{}, false
	}
	switch v := res.(type) {
	case lease.Checkout:
		return linOut{Kind: "ok", Holder: v.AgentID, Run: v.RunID, Fence: v.Fence, Expires: v.ExpiresAt.UnixMilli()}, true
	case lease.Released:
		return linOut{Kind: "ok", Held: v.Held.Milliseconds()}, true
	case lease.Task:
		out := linOut{Kind: "ok", Status: v.Status}
		if op == "complete" {
			return linOut{Kind: "ok", Status: v.Status}, true
		}
		if c := v.Checkout; c != nil {
			out.Holder, out.Run, out.Fence, out.Expires = c.AgentID, c.RunID, c.Fence, c.ExpiresAt.UnixMilli()
		}
		return out, true
	}
	return linOut{}, false
}

type linConfig struct {
	clients, tasks, phases, opsPerPhase int
}

func linSize() linConfig {
	if os.Getenv("CHECKOUT_CHAOS") != "" {
		return linConfig{clients: 32, tasks: 6, phases: 120, opsPerPhase: 5}
	}
	return linConfig{clients: 16, tasks: 4, phases: 24, opsPerPhase: 3}
}

// apply runs one operation against the store.
func apply(c context.Context, s *lease.Store, in linIn) (any, error) {
	switch in.Op {
	case "checkout":
		return s.Checkout(c, lease.CheckoutParams{TaskID: in.Task, AgentID: in.Agent, RunID: in.Run, Timeout: time.Duration(in.Timeout) * time.Millisecond})
	case "renew":
		return s.Renew(c, lease.RenewParams{TaskID: in.Task, AgentID: in.Agent, RunID: in.Run, Fence: in.Fence})
	case "release":
		return s.Release(c, lease.ReleaseParams{TaskID: in.Task, AgentID: in.Agent, RunID: in.Run, Fence: in.Fence})
	case "complete":
		return s.Complete(c, lease.CompleteParams{TaskID: in.Task, AgentID: in.Agent, RunID: in.Run, Fence: in.Fence})
	case "status":
		return s.GetTask(c, in.Task)
	}
	return nil, fmt.Errorf("unknown op %s", in.Op)
}

// agentMemory is what one agent remembers of its own leases.
type agentMemory struct {
	run   map[string]string
	fence map[string]int64
	n     int
}

// nextOp picks an agent's next operation: mostly checkouts and status reads,
// with renewals, releases, rare completions, same-run retries and stale or
// missing run ids and fences.
func nextOp(r *rand.Rand, agent string, mem *agentMemory, tasks []string) linIn {
	in := linIn{Task: tasks[r.IntN(len(tasks))], Agent: agent}
	run, fence := mem.run[in.Task], mem.fence[in.Task]
	p := r.IntN(100)
	switch {
	case p < 35:
		in.Op = "checkout"
		in.Timeout = []int64{10_000, 30_000, 60_000}[r.IntN(3)]
		if run != "" && r.IntN(4) == 0 {
			in.Run = run // a retry of the same run
		} else {
			mem.n++
			in.Run = fmt.Sprintf("%s-r%d", agent, mem.n)
		}
		return in
	case p < 50:
		in.Op = "renew"
	case p < 70:
		in.Op = "release"
	case p < 73:
		in.Op = "complete"
	default:
		in.Op = "status"
		return in
	}
	switch q := r.IntN(10); {
	case q < 6:
		in.Run, in.Fence = run, fence
	case q < 8: // neither: the agent alone must match
	case q < 9:
		in.Fence = fence - 1 // stale
	default:
		in.Run = agent + "-stale"
	}
	return in
}

func TestLinearizability(t *testing.T) {
	t.Parallel()
	cfg := linSize()
	e := newEnv(t)
	c := ctx(t)
	if os.Getenv("CHECKOUT_CHAOS") != "" {
		var cancel context.CancelFunc
		c, cancel = context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
	}
	tasks := make([]string, cfg.tasks)
	for i := range tasks {
		tasks[i] = fmt.Sprintf("task-%d", i)
		e.task(t, tasks[i])
	}
	start := time.Now()
	stamp := func() int64 { return time.Since(start).Nanoseconds() }
	var mu sync.Mutex
	var history []porcupine.Operation
	record := func(client int, in linIn, call int64, out linOut, ret int64) {
		mu.Lock()
		history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
		mu.Unlock()
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d: %d clients, %d tasks, %d phases of %d operations each", seed, cfg.clients, cfg.tasks, cfg.phases, cfg.opsPerPhase)
	mems := make([]*agentMemory, cfg.clients)
	rngs := make([]*rand.Rand, cfg.clients)
	for i := range mems {
		mems[i] = &agentMemory{run: map[string]string{}, fence: map[string]int64{}}
		rngs[i] = rand.New(rand.NewPCG(seed, uint64(i)))
	}
	tickRand := rand.New(rand.NewPCG(seed, 1<<32))
	var failed error
	for phase := range cfg.phases {
		var wg sync.WaitGroup
		for i := range cfg.clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				agent := fmt.Sprintf("agent-%02d", i)
				for range cfg.opsPerPhase {
					in := nextOp(rngs[i], agent, mems[i], tasks)
					call := stamp()
					res, err := apply(c, e.store, in)
					ret := stamp()
					out, ok := outcome(in.Op, res, err)
					if !ok {
						mu.Lock()
						failed = fmt.Errorf("%+v: %v", in, err)
						mu.Unlock()
						return
					}
					if in.Op == "checkout" && out.Kind == "ok" {
						mems[i].run[in.Task], mems[i].fence[in.Task] = out.Run, out.Fence
					}
					record(i, in, call, out, ret)
				}
			}()
		}
		wg.Wait()
		if failed != nil {
			t.Fatalf("phase %d: unexpected error: %v", phase, failed)
		}
		// Between phases, nothing in flight: move the clock by 0, 5s, 10s
		// (exactly onto the shortest leases' expiry), 30s or 61s.
		d := []time.Duration{0, 5 * time.Second, 10 * time.Second, 30 * time.Second, 61 * time.Second}[tickRand.IntN(5)]
		call := stamp()
		e.clock.Advance(d)
		record(cfg.clients, linIn{Op: "tick", Now: e.clock.Now().UnixMilli()}, call, linOut{Kind: "ok"}, stamp())
	}
	t.Logf("%d operations recorded in %v", len(history), time.Since(start).Round(time.Millisecond))

	model := leaseModel(newClock().Now().UnixMilli())
	res, info := porcupine.CheckOperationsVerbose(model, history, 2*time.Minute)
	if res != porcupine.Ok {
		path := filepath.Join(t.TempDir(), "history.html")
		if os.Getenv("CHECKOUT_LIN_VIS") != "" {
			path = os.Getenv("CHECKOUT_LIN_VIS")
		}
		if err := porcupine.VisualizePath(model, info, path); err != nil {
			t.Logf("visualize: %v", err)
		}
		t.Fatalf("history is %s (seed %d); visualization at %s", res, seed, path)
	}
	for _, task := range tasks {
		assertOneEndPerLease(t, e, task)
	}
}

// The checker must be able to fail: a history where two agents both hold
// the task at once, or a renewal past its expiry, is rejected.
func TestLinearizabilityModelRejects(t *testing.T) {
	t.Parallel()
	start := newClock().Now().UnixMilli()
	m := leaseModel(start)
	op := func(client int, in linIn, out linOut, call, ret int64) porcupine.Operation {
		in.Task = "t"
		return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret}
	}
	okA := linOut{Kind: "ok", Holder: "a", Run: "ra", Fence: 1, Expires: start + 10_000}
	okB := linOut{Kind: "ok", Holder: "b", Run: "rb", Fence: 1, Expires: start + 10_000}
	double := []porcupine.Operation{
		op(0, linIn{Op: "checkout", Agent: "a", Run: "ra", Timeout: 10_000}, okA, 0, 10),
		op(1, linIn{Op: "checkout", Agent: "b", Run: "rb", Timeout: 10_000}, okB, 5, 15),
	}
	if porcupine.CheckOperations(m, double) {
		t.Error("a double grant was accepted")
	}
	late := []porcupine.Operation{
		op(0, linIn{Op: "checkout", Agent: "a", Run: "ra", Timeout: 10_000}, okA, 0, 10),
		{ClientId: 1, Input: linIn{Op: "tick", Now: start + 10_000}, Output: linOut{Kind: "ok"}, Call: 11, Return: 12},
		op(0, linIn{Op: "renew", Agent: "a", Run: "ra", Fence: 1}, linOut{Kind: "ok", Holder: "a", Run: "ra", Fence: 1, Expires: start + 20_000}, 13, 14),
	}
	if porcupine.CheckOperations(m, late) {
		t.Error("a renewal at the expiry instant was accepted")
	}
	good := []porcupine.Operation{
		op(0, linIn{Op: "checkout", Agent: "a", Run: "ra", Timeout: 10_000}, okA, 0, 10),
		op(1, linIn{Op: "checkout", Agent: "b", Run: "rb", Timeout: 10_000}, linOut{Kind: "conflict", Holder: "a", Fence: 1}, 5, 15),
	}
	if !porcupine.CheckOperations(m, good) {
		t.Error("a correct history was rejected")
	}
}
