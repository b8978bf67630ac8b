package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/checkout-dev/checkout/lease"
)

// Linearizability: many agents run checkout, renew, release, complete and
// status, and a sweeper sweeps in about half the phases, against the real
// store on a DynamoDB-compatible server, and the
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
	Op      string // tick, heartbeat, checkout, renew, release, complete, status
	Task    string
	Agent   string
	AgentN  int // the agent's index, for its heartbeat state
	Run     string
	Fence   int64
	Timeout int64 // ms: checkout's lease timeout, heartbeat's ttl
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

// maxAgents bounds the agents of a history (their heartbeats are part of
// every task's state).
const maxAgents = 32

// hbState is an agent's heartbeat: none (the agent is not watched), or
// alive until Exp, back from the dead since Since.
type hbState struct {
	Has        bool
	Exp, Since int64
}

// linState is one task, and every agent's heartbeat, as the model sees them.
// Zero holder: no lease record.
type linState struct {
	Now       int64
	Status    lease.Status
	Holder    string
	HolderN   int
	Run       string
	Fence     int64
	Locked    int64
	Expires   int64
	TimeoutMS int64
	HB        [maxAgents]hbState
	// The last lease ended by release or completion, which the task item
	// keeps: a holder naming that lease (run id or fence) again is answered
	// as the first time (its answer may have been lost).
	EndOp, EndAgent, EndRun string
	EndFence, EndHeld       int64
}

// alive is the rule of lease/doc.go: an agent with no heartbeat is not
// watched; otherwise its heartbeat has not expired and the lease was taken
// since it last came back from the dead.
func (s linState) alive(agent int, locked int64) bool {
	hb := s.HB[agent]
	return !hb.Has || hb.Exp > s.Now && locked > hb.Since
}

func (s linState) timeValid() bool { return s.Holder != "" && s.Expires > s.Now }

func (s linState) live() bool { return s.timeValid() && s.alive(s.HolderN, s.Locked) }

func (s *linState) clear() {
	s.Holder, s.HolderN, s.Run, s.Locked, s.Expires, s.TimeoutMS = "", 0, "", 0, 0, 0
}

// step is the sequential specification: the answer and the next state.
func (s linState) step(in linIn) (linOut, linState) {
	ok := linOut{Kind: "ok"}
	switch in.Op {
	case "tick":
		s.Now = in.Now
		return ok, s
	case "heartbeat":
		hb := s.HB[in.AgentN]
		if hb.Has && hb.Exp <= s.Now {
			hb.Since = s.Now // back from the dead: the leases it held stay ended
		}
		hb.Has, hb.Exp = true, s.Now+in.Timeout
		s.HB[in.AgentN] = hb
		return linOut{Kind: "ok", Expires: hb.Exp}, s
	case "status":
		out := linOut{Kind: "ok", Status: s.Status}
		if s.live() {
			out.Holder, out.Run, out.Fence, out.Expires = s.Holder, s.Run, s.Fence, s.Expires
		} else if s.Holder != "" && s.Status == lease.StatusInProgress {
			out.Status = lease.StatusTodo // ended, not swept: todo in all but name
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
		// A takeover ends the old lease in the checkout's own write; the
		// task's last ending (release, completion or sweep) stays what it was.
		s.Fence++
		s.Holder, s.HolderN, s.Run, s.Locked, s.Expires, s.TimeoutMS = in.Agent, in.AgentN, in.Run, s.Now, s.Now+in.Timeout, in.Timeout
		s.Status = lease.StatusInProgress
		return linOut{Kind: "ok", Holder: s.Holder, Run: s.Run, Fence: s.Fence, Expires: s.Expires}, s
	}
	// renew, release, complete: the holder of the live lease, with the run
	// id and fence when given. A lease whose holder is dead by heartbeat has
	// ended, so its holder can no longer renew, release or complete it.
	mine := s.live() && s.Holder == in.Agent && (in.Run == "" || in.Run == s.Run) && (in.Fence == 0 || in.Fence == s.Fence)
	if !mine {
		if (in.Op == "release" || in.Op == "complete") && (in.Run != "" || in.Fence != 0) &&
			s.EndOp == in.Op && s.EndAgent == in.Agent && (in.Run == "" || in.Run == s.EndRun) && (in.Fence == 0 || in.Fence == s.EndFence) {
			if in.Op == "release" {
				return linOut{Kind: "ok", Held: s.EndHeld}, s
			}
			return linOut{Kind: "ok", Status: lease.StatusDone}, s
		}
		if !s.live() {
			return linOut{Kind: "not_checked_out"}, s
		}
		if s.Holder == in.Agent && (in.Run == "" || in.Run == s.Run) && (in.Fence == 0 || in.Fence == s.Fence) {
			return linOut{Kind: "not_checked_out"}, s
		}
		return linOut{Kind: "not_holder", Holder: s.Holder, Fence: s.Fence}, s
	}
	switch in.Op {
	case "renew":
		s.Expires = s.Now + s.TimeoutMS
		return linOut{Kind: "ok", Holder: s.Holder, Run: s.Run, Fence: s.Fence, Expires: s.Expires}, s
	case "release":
		held := s.Now - s.Locked
		s.EndOp, s.EndAgent, s.EndRun, s.EndFence, s.EndHeld = in.Op, s.Holder, s.Run, s.Fence, held
		s.clear()
		s.Status = lease.StatusTodo
		return linOut{Kind: "ok", Held: held}, s
	case "complete":
		s.EndOp, s.EndAgent, s.EndRun, s.EndFence, s.EndHeld = in.Op, s.Holder, s.Run, s.Fence, s.Now-s.Locked
		s.clear()
		s.Status = lease.StatusDone
		return linOut{Kind: "ok", Status: lease.StatusDone}, s
	}
	panic("unknown op " + in.Op)
}

// sweep is the sweep's effect on one task: it ends a lease that has
// expired or whose holder is dead, or it may not, since the indexes it reads
// lag the table (the tests run with index lag): a lease granted a moment
// ago may not be in them yet. Either way it never ends a live lease.
func (s linState) sweep() []any {
	if s.Holder == "" || s.live() {
		return []any{s}
	}
	ended := s
	ended.EndOp = "sweep"
	ended.clear()
	ended.Status = lease.StatusTodo
	return []any{ended, s}
}

func leaseModel(start int64) porcupine.Model {
	m := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			var ticks []porcupine.Operation
			byTask := map[string][]porcupine.Operation{}
			var order []string
			for _, op := range h {
				in := op.Input.(linIn)
				if in.Op == "tick" || in.Op == "heartbeat" || in.Op == "sweep" {
					ticks = append(ticks, op) // agent-wide: in every partition
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
			if len(out) == 0 {
				out = append(out, ticks)
			}
			return out
		},
		Init: func() []any { return []any{linState{Now: start, Status: lease.StatusTodo}} },
		Step: func(state, input, output any) []any {
			s, in := state.(linState), input.(linIn)
			if in.Op == "sweep" {
				return s.sweep()
			}
			if want, next := s.step(in); want == output.(linOut) {
				return []any{next}
			}
			return nil
		},
		DescribeOperation: func(input, output any) string {
			return fmt.Sprintf("%+v -> %+v", input, output)
		},
	}
	return m.ToModel()
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
	case lease.Heartbeat:
		return linOut{Kind: "ok", Expires: v.ExpiresAt.UnixMilli()}, true
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
	case "heartbeat":
		return s.Heartbeat(c, in.Agent, time.Duration(in.Timeout)*time.Millisecond)
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
//
// heartbeat says whether this agent sends heartbeats (it is watched).
func nextOp(r *rand.Rand, agent string, agentN int, heartbeat bool, mem *agentMemory, tasks []string) linIn {
	in := linIn{Task: tasks[r.IntN(len(tasks))], Agent: agent, AgentN: agentN}
	run, fence := mem.run[in.Task], mem.fence[in.Task]
	if heartbeat && r.IntN(100) < 30 {
		// Heartbeats with ttls the ticks land on, before and after:
		// agents die, and come back, between phases.
		return linIn{Op: "heartbeat", Agent: agent, AgentN: agentN, Timeout: []int64{5_000, 10_000, 30_000}[r.IntN(3)]}
	}
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

// Without heartbeats, leases end by time, release and completion alone.
func TestLinearizability(t *testing.T) {
	t.Parallel()
	linearizability(t, false)
}

// With heartbeats from half of the agents, which die when a tick passes
// their ttl and come back with their next heartbeat: takeovers of dead
// holders' leases, renewals refused to the dead, releases by the dead.
//
// Heartbeats fall anywhere in a phase, and some ticks do not move the
// clock, so a dead agent can check a task out and come back in the same
// millisecond while another checkout, which read it as dead, takes that
// lease over. That race once made two agents hold one task; a lease locked
// at or before the holder's alive_since now stays ended (lease/doc.go), and
// the takeover pins the expiry it read.
func TestLinearizabilityWithHeartbeats(t *testing.T) {
	t.Parallel()
	linearizability(t, true)
}

func linearizability(t *testing.T, heartbeats bool) {
	cfg := linSize()
	e := newEnv(t)
	e.lag(t, "", raceLag)
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
	if cfg.clients > maxAgents {
		t.Fatalf("%d clients, the model holds %d agents", cfg.clients, maxAgents)
	}
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
					in := nextOp(rngs[i], agent, i, heartbeats && i%2 == 0, mems[i], tasks)
					call := stamp()
					res, err := apply(c, e.store, in)
					ret := stamp()
					out, ok := outcome(in.Op, res, err)
					if !ok {
						mu.Lock()
						failed = fmt.Errorf("%+v: %w", in, err)
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
		if tickRand.IntN(2) == 0 {
			// A sweep, concurrent with the agents.
			wg.Add(1)
			go func() {
				defer wg.Done()
				call := stamp()
				if _, err := e.store.Sweep(c); err != nil {
					mu.Lock()
					failed = fmt.Errorf("sweep: %w", err)
					mu.Unlock()
					return
				}
				record(cfg.clients+1, linIn{Op: "sweep"}, call, linOut{Kind: "ok"}, stamp())
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

	model := leaseModel(epoch.UnixMilli())
	res, info := porcupine.CheckOperationsVerbose(model, history, 2*time.Minute)
	if res != porcupine.Ok {
		path := filepath.Join(t.TempDir(), "history.html")
		if os.Getenv("CHECKOUT_LIN_VIS") != "" {
			path = os.Getenv("CHECKOUT_LIN_VIS")
		}
		if err := porcupine.VisualizePath(model, info, path); err != nil {
			t.Logf("visualize: %v", err)
		}
		if dump := os.Getenv("CHECKOUT_LIN_DUMP"); dump != "" {
			dumpIllegal(model, history, dump)
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
	start := epoch.UnixMilli()
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
	sweptLive := []porcupine.Operation{
		op(0, linIn{Op: "checkout", Agent: "a", Run: "ra", Timeout: 10_000}, okA, 0, 10),
		{ClientId: 2, Input: linIn{Op: "sweep"}, Output: linOut{Kind: "ok"}, Call: 11, Return: 12},
		op(1, linIn{Op: "status"}, linOut{Kind: "ok", Status: lease.StatusTodo}, 13, 14),
	}
	if porcupine.CheckOperations(m, sweptLive) {
		t.Error("a sweep that ended a live lease was accepted")
	}
	// a releases; b's lease then expires and is swept, which replaces the
	// task's last ending: a's release repeated is no longer a retry.
	rel := linOut{Kind: "ok", Held: 1_000}
	sweptExpired := func(replay linOut) []porcupine.Operation {
		return []porcupine.Operation{
			op(0, linIn{Op: "checkout", Agent: "a", Run: "ra", Timeout: 10_000}, okA, 0, 10),
			{ClientId: 2, Input: linIn{Op: "tick", Now: start + 1_000}, Output: linOut{Kind: "ok"}, Call: 11, Return: 12},
			op(0, linIn{Op: "release", Agent: "a", Run: "ra"}, rel, 13, 14),
			op(1, linIn{Op: "checkout", Agent: "b", Run: "rb", Timeout: 10_000}, linOut{Kind: "ok", Holder: "b", Run: "rb", Fence: 2, Expires: start + 11_000}, 15, 16),
			{ClientId: 2, Input: linIn{Op: "tick", Now: start + 11_000}, Output: linOut{Kind: "ok"}, Call: 17, Return: 18},
			{ClientId: 2, Input: linIn{Op: "sweep"}, Output: linOut{Kind: "ok"}, Call: 19, Return: 20},
			op(0, linIn{Op: "release", Agent: "a", Run: "ra"}, replay, 21, 22),
		}
	}
	// A sweep may leave an expired lease in place (its index may not show it
	// yet), so a's release is still a retry then; both answers are legal.
	if !porcupine.CheckOperations(m, sweptExpired(rel)) {
		t.Error("a sweep whose index lagged behind an expired lease was rejected")
	}
	if !porcupine.CheckOperations(m, sweptExpired(linOut{Kind: "not_checked_out"})) {
		t.Error("a correct history with a sweep was rejected")
	}
	good := []porcupine.Operation{
		op(0, linIn{Op: "checkout", Agent: "a", Run: "ra", Timeout: 10_000}, okA, 0, 10),
		op(1, linIn{Op: "checkout", Agent: "b", Run: "rb", Timeout: 10_000}, linOut{Kind: "conflict", Holder: "a", Fence: 1}, 5, 15),
	}
	if !porcupine.CheckOperations(m, good) {
		t.Error("a correct history was rejected")
	}
}

// dumpIllegal writes the operations of each partition that fails the check,
// in call order, for reading.
func dumpIllegal(m porcupine.Model, history []porcupine.Operation, path string) {
	var b strings.Builder
	for _, part := range m.Partition(history) {
		if porcupine.CheckOperations(porcupine.Model{Init: m.Init, Step: m.Step}, part) {
			continue
		}
		sort.Slice(part, func(i, j int) bool { return part[i].Call < part[j].Call })
		k := len(part)
		for k > 1 && !porcupine.CheckOperations(porcupine.Model{Init: m.Init, Step: m.Step}, part[:k-1]) {
			k--
		}
		fmt.Fprintf(&b, "shortest failing prefix: %d of %d operations\n", k, len(part))
		for i, op := range part {
			if i == k {
				b.WriteString("---- (the rest of the partition)\n")
			}
			fmt.Fprintf(&b, "%12d %12d c%02d %+v -> %+v\n", op.Call/1000, op.Return/1000, op.ClientId, op.Input, op.Output)
		}
		b.WriteString("----\n")
	}
	_ = os.WriteFile(path, []byte(b.String()), 0o644)
}
