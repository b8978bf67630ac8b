package lease_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
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
	// Ends: every release or completion so far, oldest first,
	// "op/agent/run/fence/held;": one repeated after a later transition
	// finds its own in the trail once the change stream has archived it
	// (repeatOf), or is refused before.
	Ends string
}

// repeatOf is the answer to a holder's release or completion (in) that
// names its lease (run, fence) and was refused by the item, when its
// trail holds that ending (lease/checkout.go, "A repeat after a later
// ending"): the newest ending by the agent of a lease its run and fence
// name, when it is in's op. The trail may not have it yet (the stream
// archives it), so the refusal stands as well.
func (s linState) repeatOf(in linIn) (linOut, bool) {
	if in.Run == "" && in.Fence == 0 || in.Op != "release" && in.Op != "fail" && in.Op != "complete" {
		return linOut{}, false
	}
	ends := strings.Split(strings.TrimSuffix(s.Ends, ";"), ";")
	for i := len(ends) - 1; i >= 0; i-- {
		f := strings.Split(ends[i], "/")
		if len(f) != 5 || f[1] != in.Agent || in.Run != "" && f[2] != in.Run || in.Fence != 0 && f[3] != strconv.FormatInt(in.Fence, 10) {
			continue
		}
		if f[0] != in.Op {
			return linOut{}, false
		}
		if in.Op == "complete" {
			return linOut{Kind: "ok", Status: lease.StatusDone}, true
		}
		held, _ := strconv.ParseInt(f[4], 10, 64)
		return linOut{Kind: "ok", Held: held}, true
	}
	return linOut{}, false
}

// next is the states in may leave s in with output out: the model's step,
// or, for a refused repeat of an archived ending answered as that ending
// was (repeatOf), s as it is.
func (s linState) next(in linIn, out linOut) []any {
	want, next := s.step(in)
	if want == out {
		return []any{next}
	}
	if want.Kind == "not_checked_out" || want.Kind == "not_holder" {
		if rep, ok := s.repeatOf(in); ok && rep == out {
			return []any{s}
		}
	}
	return nil
}

// alive is the rule of lease/doc.go: an agent with no heartbeat is not
// watched; otherwise its heartbeat has not expired and the lease was taken
// since it last came back from the dead.
func (s linState) alive(agent int, locked int64) bool {
	hb := s.HB[agent]
	return !hb.Has || hb.Exp > s.Now && locked > hb.Since
}

// dead says the agent is dead by heartbeat now (not back from the dead).
func (s linState) dead(agent int) bool {
	hb := s.HB[agent]
	return hb.Has && hb.Exp <= s.Now
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
		if s.timeValid() && s.Holder == in.Agent && s.Run == in.Run && s.dead(in.AgentN) {
			// The same run retrying a checkout it made while dead: the
			// same lease, as a live one's retry gets.
			return linOut{Kind: "ok", Holder: s.Holder, Run: s.Run, Fence: s.Fence, Expires: s.Expires}, s
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
		// A repeat of the lease's ending, by the same op: a release marked
		// failed ("fail") repeats only a failed release.
		if (in.Op == "release" || in.Op == "fail" || in.Op == "complete") && (in.Run != "" || in.Fence != 0) &&
			s.EndOp == in.Op && s.EndAgent == in.Agent && (in.Run == "" || in.Run == s.EndRun) && (in.Fence == 0 || in.Fence == s.EndFence) {
			if in.Op != "complete" {
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
	case "release", "fail":
		held := s.Now - s.Locked
		s.EndOp, s.EndAgent, s.EndRun, s.EndFence, s.EndHeld = in.Op, s.Holder, s.Run, s.Fence, held
		s.Ends += fmt.Sprintf("%s/%s/%s/%d/%d;", in.Op, s.Holder, s.Run, s.Fence, held)
		s.clear()
		s.Status = lease.StatusTodo
		return linOut{Kind: "ok", Held: held}, s
	case "complete":
		s.EndOp, s.EndAgent, s.EndRun, s.EndFence, s.EndHeld = in.Op, s.Holder, s.Run, s.Fence, s.Now-s.Locked
		s.Ends += fmt.Sprintf("%s/%s/%s/%d/%d;", in.Op, s.Holder, s.Run, s.Fence, s.EndHeld)
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

// phaseEnd is a tick of one task's partition, with the heartbeats of its
// phase that cannot matter to the task there (partitionByTask): the
// heartbeats are applied at the phase's end, in their order, and the clock
// then moves.
type phaseEnd struct {
	Tick       linIn
	Heartbeats []porcupine.Operation
}

// partitionByTask splits a history task by task. Ticks and sweeps are in
// every partition, and so are heartbeats, since every agent's heartbeat is
// part of a task's state. But a task's state reads an agent's heartbeat
// only while that agent holds a lease on it whose time has not run out
// (linState.live), and within a phase the clock stands still, so a heartbeat
// reads nothing that changes there and is read by nothing of the task
// unless its agent may hold such a lease in that phase: one granted or
// renewed to it (an answer with its expiry) in that phase or before, expiring
// after the phase's time. Any other heartbeat commutes with the whole
// phase, and the partition applies it at the phase's end, in its phaseEnd,
// with its answer still checked, when it can fall in that phase only and
// overlaps none of its agent's other heartbeats (which then fall in the
// order of their calls). The search then never has to order it against
// the task's operations or the other agents' heartbeats: a phase's
// heartbeats of sixteen agents, each ordered freely, took the checker's
// search past 9 GB under the race detector (make chaos).
func partitionByTask(start int64, h []porcupine.Operation) [][]porcupine.Operation {
	var ticks, shared []porcupine.Operation // shared: sweeps and heartbeats
	byTask := map[string][]porcupine.Operation{}
	var order []string
	for _, op := range h {
		in := op.Input.(linIn)
		switch in.Op {
		case "tick":
			ticks = append(ticks, op)
		case "heartbeat", "sweep":
			shared = append(shared, op)
		default:
			if _, ok := byTask[in.Task]; !ok {
				order = append(order, in.Task)
			}
			byTask[in.Task] = append(byTask[in.Task], op)
		}
	}
	if len(order) == 0 {
		return [][]porcupine.Operation{append(ticks, shared...)}
	}
	// Phase p runs between tick p-1 and tick p, at the time tick p-1 set.
	// An operation falls in a phase from first to last: porcupine orders a
	// call before a return at the same instant, so an operation called when
	// a tick returns, or returning when one is called, may fall on either
	// side of it.
	byCall := func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) }
	slices.SortFunc(ticks, byCall)
	first := func(op porcupine.Operation) int {
		return sort.Search(len(ticks), func(i int) bool { return ticks[i].Return >= op.Call })
	}
	last := func(op porcupine.Operation) int {
		return sort.Search(len(ticks), func(i int) bool { return ticks[i].Call > op.Return })
	}
	// ordered[{agent, p}]: a heartbeat of the agent may fall in phase p and
	// another phase, or overlaps another of its heartbeats. The search then
	// orders every heartbeat of the agent in that phase: its heartbeats
	// change its state in the order they fall.
	ordered := map[[2]int]bool{}
	byAgent := map[int][]porcupine.Operation{}
	for _, op := range shared {
		if in := op.Input.(linIn); in.Op == "heartbeat" {
			byAgent[in.AgentN] = append(byAgent[in.AgentN], op)
		}
	}
	for agent, hbs := range byAgent {
		slices.SortFunc(hbs, byCall)
		var end int64 // the last return of the heartbeats called before
		for i, op := range hbs {
			if lo, hi := first(op), last(op); lo != hi || i > 0 && op.Call <= end {
				for p := lo; p <= hi; p++ {
					ordered[[2]int{agent, p}] = true
				}
			}
			end = max(end, op.Return)
		}
	}
	now := func(p int) int64 {
		if p == 0 {
			return start
		}
		return ticks[p-1].Input.(linIn).Now
	}
	out := make([][]porcupine.Operation, 0, len(order))
	for _, task := range order {
		// mayHold[agent]: the phases from which the agent may hold a live
		// lease on the task, and the expiry it was answered.
		type grant struct {
			phase   int
			expires int64
		}
		mayHold := map[int][]grant{}
		for _, op := range byTask[task] {
			in, res := op.Input.(linIn), op.Output.(linOut)
			if res.Kind == "ok" && res.Expires != 0 && (in.Op == "checkout" || in.Op == "renew") {
				mayHold[in.AgentN] = append(mayHold[in.AgentN], grant{first(op), res.Expires})
			}
		}
		read := func(agent, p int) bool {
			for _, g := range mayHold[agent] {
				if g.phase <= p && g.expires > now(p) {
					return true
				}
			}
			return false
		}
		part := slices.Clone(byTask[task])
		ends := make([]phaseEnd, len(ticks))
		for i, t := range ticks {
			ends[i].Tick = t.Input.(linIn)
		}
		for _, op := range shared {
			in := op.Input.(linIn)
			p := first(op)
			if in.Op == "heartbeat" && p < len(ticks) && !ordered[[2]int{in.AgentN, p}] && !read(in.AgentN, p) {
				ends[p].Heartbeats = append(ends[p].Heartbeats, op)
				continue
			}
			part = append(part, op)
		}
		for i, t := range ticks {
			e := ends[i]
			slices.SortFunc(e.Heartbeats, byCall)
			t.Input = e
			part = append(part, t)
		}
		out = append(out, part)
	}
	return out
}

func leaseModel(start int64) porcupine.Model {
	m := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation { return partitionByTask(start, h) },
		Init:      func() []any { return []any{linState{Now: start, Status: lease.StatusTodo}} },
		Step: func(state, input, output any) []any {
			s := state.(linState)
			if end, ok := input.(phaseEnd); ok {
				for _, hb := range end.Heartbeats {
					var res linOut
					if res, s = s.step(hb.Input.(linIn)); res != hb.Output.(linOut) {
						return nil
					}
				}
				input = end.Tick
			}
			in := input.(linIn)
			if in.Op == "sweep" {
				return s.sweep()
			}
			return s.next(in, output.(linOut))
		},
		DescribeOperation: func(input, output any) string {
			return fmt.Sprintf("%+v -> %+v", input, output)
		},
	}
	return m.ToModel()
}

// A task's partition applies at its phase's end a heartbeat that nothing of
// the task reads in that phase (c never holds the task), and keeps in place
// one that may be read (a holds the task, and its heartbeat decides whether
// its retry is the same lease): the history stays legal or illegal exactly
// as before, and a deferred heartbeat's answer is still checked.
func TestPartitionByTaskAppliesUnreadHeartbeatsAtThePhasesEnd(t *testing.T) {
	t.Parallel()
	start := epoch.UnixMilli()
	m := leaseModel(start)
	hb := func(agent string, n int, ttl, expires, call int64) porcupine.Operation {
		return porcupine.Operation{ClientId: n, Input: linIn{Op: "heartbeat", Agent: agent, AgentN: n, Timeout: ttl},
			Output: linOut{Kind: "ok", Expires: expires}, Call: call, Return: call + 1}
	}
	checkout := func(out linOut, call int64) porcupine.Operation {
		return porcupine.Operation{ClientId: 0, Input: linIn{Op: "checkout", Task: "t", Agent: "a", Run: "ra", Timeout: 60_000},
			Output: out, Call: call, Return: call + 1}
	}
	tick := func(now, call int64) porcupine.Operation {
		return porcupine.Operation{ClientId: 3, Input: linIn{Op: "tick", Now: now}, Output: linOut{Kind: "ok"}, Call: call, Return: call + 1}
	}
	history := func(retry linOut, cExpires int64) []porcupine.Operation {
		return []porcupine.Operation{
			hb("a", 0, 5_000, start+5_000, 0),
			checkout(linOut{Kind: "ok", Holder: "a", Run: "ra", Fence: 1, Expires: start + 60_000}, 2),
			hb("c", 2, 30_000, cExpires, 4),
			tick(start+5_000, 11),
			// a is dead now, and comes back: its lease stays ended, so its
			// retry is a new lease.
			hb("a", 0, 30_000, start+35_000, 13),
			checkout(retry, 15),
			hb("c", 2, 30_000, start+35_000, 17),
			tick(start+6_000, 19),
		}
	}
	newLease := linOut{Kind: "ok", Holder: "a", Run: "ra", Fence: 2, Expires: start + 65_000}
	sameLease := linOut{Kind: "ok", Holder: "a", Run: "ra", Fence: 1, Expires: start + 60_000}

	parts := partitionByTask(start, history(newLease, start+30_000))
	if len(parts) != 1 {
		t.Fatalf("%d partitions, want 1", len(parts))
	}
	var inPlace, deferred []string
	for _, op := range parts[0] {
		switch in := op.Input.(type) {
		case linIn:
			if in.Op == "heartbeat" {
				inPlace = append(inPlace, in.Agent)
			}
		case phaseEnd:
			for _, h := range in.Heartbeats {
				deferred = append(deferred, h.Input.(linIn).Agent)
			}
		}
	}
	if !slices.Equal(inPlace, []string{"a", "a"}) || !slices.Equal(deferred, []string{"c", "c"}) {
		t.Errorf("heartbeats in place %v, at the phase's end %v; want a's in place and c's at the end", inPlace, deferred)
	}

	if !porcupine.CheckOperations(m, history(newLease, start+30_000)) {
		t.Error("a correct history was rejected")
	}
	if porcupine.CheckOperations(m, history(sameLease, start+30_000)) {
		t.Error("a retry answered the lease its holder's death ended, after the holder came back, and was accepted")
	}
	if porcupine.CheckOperations(m, history(newLease, start+31_000)) {
		t.Error("a heartbeat applied at its phase's end was accepted with a wrong expiry")
	}
}

// A heartbeat is applied at its phase's end only when the search could not
// have placed it anywhere that matters; otherwise the partition keeps it in
// place, and each history gets the verdict it gets with every heartbeat in
// place. a's second heartbeat overlaps a tick, so it may fall before the
// tick, and so before a's first heartbeat were that one applied at the tick
// (a would live 30 s, not 5, and b's takeover be refused). a's checkout and
// retry are called the instant a tick returns, so they may fall before it,
// and so before a comes back from the dead were that heartbeat applied at
// the tick (the retry would be answered the lease a's death ended). And two
// of a's heartbeats that overlap may fall in either order.
func TestPartitionByTaskKeepsHeartbeatsTheSearchMustOrder(t *testing.T) {
	t.Parallel()
	start := epoch.UnixMilli()
	hb := func(agent string, n int, ttl, expires, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: n, Input: linIn{Op: "heartbeat", Agent: agent, AgentN: n, Timeout: ttl},
			Output: linOut{Kind: "ok", Expires: expires}, Call: call, Return: ret}
	}
	checkout := func(agent string, n int, out linOut, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: n, Input: linIn{Op: "checkout", Task: "t", Agent: agent, AgentN: n, Run: "r" + agent, Timeout: 60_000},
			Output: out, Call: call, Return: ret}
	}
	tick := func(now, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: 9, Input: linIn{Op: "tick", Now: now}, Output: linOut{Kind: "ok"}, Call: call, Return: ret}
	}
	overlapsTick := func(takeover linOut) []porcupine.Operation {
		return []porcupine.Operation{
			hb("a", 0, 30_000, start+30_000, 0, 1),
			hb("a", 0, 5_000, start+5_000, 2, 12),
			tick(start+1_000, 10, 11),
			checkout("a", 0, linOut{Kind: "ok", Holder: "a", Run: "ra", Fence: 1, Expires: start + 61_000}, 20, 21),
			tick(start+6_000, 30, 31),
			checkout("b", 1, takeover, 40, 41),
		}
	}
	atTicksReturn := func(retry linOut) []porcupine.Operation {
		return []porcupine.Operation{
			hb("a", 0, 5_000, start+5_000, 0, 1),
			tick(start+5_000, 10, 11),
			hb("a", 0, 30_000, start+35_000, 20, 21), // a comes back
			tick(start+10_000, 30, 31),
			checkout("a", 0, linOut{Kind: "ok", Holder: "a", Run: "ra", Fence: 1, Expires: start + 65_000}, 31, 40),
			checkout("a", 0, retry, 31, 40),
		}
	}
	refused := linOut{Kind: "conflict", Holder: "a", Fence: 1}
	overlapping := overlapsTick(refused)
	overlapping[1].Call, overlapping[1].Return = 0, 1 // a's heartbeats in either order
	m := leaseModel(start)
	inPlace := leaseModel(start) // one task: the history is its partition
	inPlace.Partition = func(h []porcupine.Operation) [][]porcupine.Operation { return [][]porcupine.Operation{h} }
	for _, c := range []struct {
		name  string
		h     []porcupine.Operation
		legal bool
	}{
		{"b takes over from a, dead at the second tick", overlapsTick(linOut{Kind: "ok", Holder: "b", Run: "rb", Fence: 2, Expires: start + 66_000}), true},
		{"b is refused a's lease, though a is dead", overlapsTick(refused), false},
		{"a's retry gets a new lease", atTicksReturn(linOut{Kind: "ok", Holder: "a", Run: "ra", Fence: 2, Expires: start + 65_000}), true},
		{"a's retry gets the lease its death ended", atTicksReturn(linOut{Kind: "ok", Holder: "a", Run: "ra", Fence: 1, Expires: start + 65_000}), false},
		{"b is refused a's lease, a's 5 s heartbeat first", overlapping, true},
	} {
		if got := porcupine.CheckOperations(inPlace, c.h); got != c.legal {
			t.Fatalf("%s: legal %v with every heartbeat in place, want %v", c.name, got, c.legal)
		}
		if got := porcupine.CheckOperations(m, c.h); got != c.legal {
			t.Errorf("%s: legal %v, and %v with every heartbeat in place", c.name, got, c.legal)
		}
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

// linSeed is a run's seed: CHECKOUT_LIN_SEED, to run one again (the
// store's own concurrency still varies), or the time. Each round of the
// run draws its operations from a seed of its own (linRoundSeed).
func linSeed() uint64 {
	if v, err := strconv.ParseUint(os.Getenv("CHECKOUT_LIN_SEED"), 10, 64); err == nil {
		return v
	}
	return uint64(time.Now().UnixNano())
}

// linRoundSeed is the seed of the history of round (from 0) in the run
// seeded with run: run itself for the first round, so that a one-round
// test's seed is its run's, and run with the bits of mix64(round) flipped
// for the others. mix64 is a bijection that keeps 0 alone at 0, so every
// round of a run has a seed of its own, and the same run seed gives the
// same seeds.
func linRoundSeed(run uint64, round int) uint64 {
	return run ^ mix64(uint64(round))
}

// mix64 is splitmix64's finalizer.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// linRound is one round of a linearizability test: its number (from 1),
// how many the test runs, the run's seed and its own.
type linRound struct {
	n, of     int
	run, seed uint64
}

// again is what runs the round again: the settings that shape its
// history (linSettings), the run's seed, and with more than one round,
// CHECKOUT_LIN_ROUND to run this one alone.
func (r linRound) again() string {
	if r.of > 1 {
		return fmt.Sprintf("%sCHECKOUT_LIN_SEED=%d CHECKOUT_LIN_ROUND=%d", linSettings(), r.run, r.n)
	}
	return fmt.Sprintf("%sCHECKOUT_LIN_SEED=%d", linSettings(), r.run)
}

// linSettings are the settings of this run that shape a history, as set,
// each followed by a space.
func linSettings() string {
	var s strings.Builder
	for _, k := range []string{"CHECKOUT_CHAOS", "CHECKOUT_TEST_INDEX_LAG", "CHECKOUT_LIN_JITTER", "CHECKOUT_LIN_LOSE"} {
		if v := os.Getenv(k); v != "" {
			fmt.Fprintf(&s, "%s=%s ", k, v)
		}
	}
	return s.String()
}

// linRounds runs a test's rounds (at least one), each with its seed from
// the run's (linSeed, linRoundSeed), logging each round's seed and how to
// run it again; CHECKOUT_LIN_ROUND=k runs the k-th round alone.
func linRounds(t *testing.T, rounds int, round func(linRound)) {
	rounds = max(rounds, 1)
	run := linSeed()
	only := 0
	if v := os.Getenv("CHECKOUT_LIN_ROUND"); v != "" {
		k, err := strconv.Atoi(v)
		if err != nil || k < 1 || k > rounds {
			t.Fatalf("CHECKOUT_LIN_ROUND=%s: %s runs rounds 1 to %d", v, t.Name(), rounds)
		}
		only = k
	}
	for i := range rounds {
		if only != 0 && i+1 != only {
			continue
		}
		r := linRound{n: i + 1, of: rounds, run: run, seed: linRoundSeed(run, i)}
		if rounds > 1 {
			t.Logf("round %d of %d: seed %d (%s runs it alone)", r.n, r.of, r.seed, r.again())
		}
		round(r)
	}
}

type linConfig struct {
	clients, tasks, phases, opsPerPhase int
	// rounds is how many histories of phases each are run, each on a
	// table of its own and checked on its own.
	rounds int
}

// linSize is the size of a linearizability run. With heartbeats, every
// tick and sweep is in every task's partition of the history, with the
// heartbeats it may read (partitionByTask), so the checker's search grows
// with more than one task's share: make chaos runs those as four histories
// of 30 phases instead of one of 120 (19,385 operations, which it could not
// decide within linCheckBudget under the race detector when every heartbeat
// was ordered in every partition).
func linSize(heartbeats bool) linConfig {
	if os.Getenv("CHECKOUT_CHAOS") != "" {
		if heartbeats {
			return linConfig{clients: 32, tasks: 6, phases: 30, opsPerPhase: 5, rounds: 4}
		}
		return linConfig{clients: 32, tasks: 6, phases: 120, opsPerPhase: 5, rounds: 1}
	}
	return linConfig{clients: 16, tasks: 4, phases: 24, opsPerPhase: 3, rounds: 1}
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

// Every round of a run draws its operations from a seed of its own, the
// first the run's own; the same run seed gives the same rounds, and
// CHECKOUT_LIN_ROUND runs one of them alone, with the seed it had in the
// whole run.
func TestLinRoundsSeeds(t *testing.T) {
	for _, run := range []uint64{0, 1, 7, 1796203399298106258, math.MaxUint64} {
		seen := map[uint64]int{}
		for round := range 64 {
			s := linRoundSeed(run, round)
			if prev, ok := seen[s]; ok {
				t.Fatalf("run %d: rounds %d and %d both have seed %d", run, prev, round, s)
			}
			seen[s] = round
			if again := linRoundSeed(run, round); again != s {
				t.Fatalf("run %d round %d: seed %d, then %d", run, round, s, again)
			}
		}
		if s := linRoundSeed(run, 0); s != run {
			t.Errorf("run %d: the first round's seed is %d, want the run's", run, s)
		}
	}

	seeds := func() []uint64 {
		var got []uint64
		linRounds(t, 4, func(r linRound) {
			if r.run != 7 || r.of != 4 || r.seed != linRoundSeed(7, r.n-1) {
				t.Errorf("round %+v, want of run 7 and seed linRoundSeed(7, %d)", r, r.n-1)
			}
			got = append(got, r.seed)
		})
		return got
	}
	t.Setenv("CHECKOUT_LIN_SEED", "7")
	t.Setenv("CHECKOUT_LIN_ROUND", "")
	whole := seeds()
	if len(whole) != 4 || whole[0] != 7 {
		t.Fatalf("a run of seed 7 ran rounds of seeds %v, want 4 from 7", whole)
	}
	if again := seeds(); !slices.Equal(again, whole) {
		t.Errorf("seed 7 ran rounds of seeds %v, then %v", whole, again)
	}
	t.Setenv("CHECKOUT_LIN_ROUND", "3")
	if alone := seeds(); !slices.Equal(alone, whole[2:3]) {
		t.Errorf("CHECKOUT_LIN_ROUND=3 ran rounds of seeds %v, want %v", alone, whole[2:3])
	}
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
	cfg := linSize(heartbeats)
	linRounds(t, cfg.rounds, func(r linRound) { linearizabilityRound(t, heartbeats, cfg, r) })
}

func linearizabilityRound(t *testing.T, heartbeats bool, cfg linConfig, round linRound) {
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
		e.retryingTask(t, tasks[i])
	}
	trails := watchTrails(c, e.store, tasks)
	// The change stream's consumer runs throughout, as it does beside the
	// service (the local server polls every 200 ms): a holder's release
	// or completion named again after later transitions of its task is
	// answered from the archived trail once the stream has archived it
	// (linState.repeatOf), as one the SDK sent again is.
	archiving := archiveEvery(c, t, e, 100*time.Millisecond)
	defer archiving()
	start := time.Now()
	stamp := func() int64 { return time.Since(start).Nanoseconds() }
	var mu sync.Mutex
	var history []porcupine.Operation
	record := func(client int, in linIn, call int64, out linOut, ret int64) {
		mu.Lock()
		history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
		mu.Unlock()
	}
	seed := round.seed
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
	store := lease.New(lease.Config{DB: linDB(t, e, round), Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
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
					res, err := apply(c, store, in)
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
				if _, err := store.Sweep(c); err != nil {
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
	archiving()
	trails.halt()

	model := leaseModel(epoch.UnixMilli())
	res, info, overMemory := checkLinearizable(model, history, linMemoryBound, linHogSteps)
	if res != porcupine.Ok {
		path := filepath.Join(t.TempDir(), "history.html")
		if os.Getenv("CHECKOUT_LIN_VIS") != "" {
			path = os.Getenv("CHECKOUT_LIN_VIS")
		}
		// Only an illegal history is drawn: an Unknown one (the search
		// ran out of linCheckBudget) can take more memory to draw than
		// the machine has, and would end every test of the run with it.
		if res == porcupine.Illegal {
			if err := porcupine.VisualizePath(model, info, path); err != nil {
				t.Logf("visualize: %v", err)
			}
		}
		if dump := os.Getenv("CHECKOUT_LIN_DUMP"); dump != "" {
			// Named as the whole-service tests' dumps are (linsegment_test.go).
			name := fmt.Sprintf("%s.%s.%d", dump, t.Name(), seed)
			dumpIllegal(model, history, name)
			dumpStuck(model, info, history, name+".stuck")
		}
		if res == porcupine.Illegal {
			t.Fatalf("history is %s (seed %d; %s runs it again); visualization at %s", res, seed, round.again(), path)
		}
		if overMemory {
			t.Fatalf("history is %s (seed %d): the search stopped when the test binary's heap passed %d GiB (linMemoryBound); run it again with %s", res, seed, linMemoryBound>>30, round.again())
		}
		t.Fatalf("history is %s (seed %d): the search ran out of its %v; run it again with %s", res, seed, linCheckBudget, round.again())
	}
	for _, task := range tasks {
		assertOneEndPerLease(t, e, task)
	}
	trails.check(t, e)
}

// archiveEvery polls e's change stream every d, as the service's stream
// consumer does, until the function it returns is called (which waits for
// the poll in flight; calling it again does nothing).
func archiveEvery(c context.Context, t *testing.T, e *env, d time.Duration) (stop func()) {
	done, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-done:
				return
			case <-time.After(d):
			}
			if _, err := e.poller.Poll(c); err != nil && c.Err() == nil {
				t.Errorf("archive the change stream: %v", err)
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-stopped
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
	// a's lease ends by a's release (or completion); b takes the task and
	// releases it. a's release named again is answered from the archived
	// trail as the first was, or refused before the archive: never with
	// another held time, nor as a release of a lease a completion ended.
	repeated := func(first string, again linIn, out linOut) []porcupine.Operation {
		end := rel
		if first == "complete" {
			end = linOut{Kind: "ok", Status: lease.StatusDone}
		}
		h := []porcupine.Operation{
			op(0, linIn{Op: "checkout", Agent: "a", Run: "ra", Timeout: 10_000}, okA, 0, 10),
			{ClientId: 2, Input: linIn{Op: "tick", Now: start + 1_000}, Output: linOut{Kind: "ok"}, Call: 11, Return: 12},
			op(0, linIn{Op: first, Agent: "a", Run: "ra", Fence: 1}, end, 13, 14),
		}
		if first == "release" {
			h = append(h,
				op(1, linIn{Op: "checkout", Agent: "b", Run: "rb", Timeout: 10_000}, linOut{Kind: "ok", Holder: "b", Run: "rb", Fence: 2, Expires: start + 11_000}, 15, 16),
				op(1, linIn{Op: "release", Agent: "b", Run: "rb"}, linOut{Kind: "ok"}, 17, 18))
		}
		return append(h, op(0, again, out, 19, 20))
	}
	againA := linIn{Op: "release", Agent: "a", Fence: 1}
	for _, c := range []struct {
		name, first string
		out         linOut
		legal       bool
	}{
		{"answered as the first", "release", rel, true},
		{"refused before the archive", "release", linOut{Kind: "not_checked_out"}, true},
		{"with another held time", "release", linOut{Kind: "ok", Held: 2_000}, false},
		{"as a release of a completed lease", "complete", rel, false},
	} {
		if got := porcupine.CheckOperations(m, repeated(c.first, againA, c.out)); got != c.legal {
			t.Errorf("a release repeated after later transitions, %s: legal %v, want %v", c.name, got, c.legal)
		}
	}

	wholeModelRejects(t, start)
}

// wStep is one operation of a sequential history for the whole model.
type wStep struct {
	in  wIn
	out wOut
}

// Under lost sendings (CHECKOUT_LIN_LOSE), and there alone, the whole
// model lets an ending answered 404 have applied, or have done nothing
// though the caller's lease was live (appliedEnding): a release whose
// lease another agent is granted next; a release after which the caller
// still holds its lease.
func TestLossyWholeModelLetsAnEndingAnswered404HaveAppliedOrNot(t *testing.T) {
	t.Parallel()
	start := epoch.UnixMilli()
	granted := wStep{wIn{Op: "checkout", Task: 0, Agent: 1, Run: "r", Timeout: 30_000}, wOut{Kind: "ok", Holder: wAgentID(1), Run: "r", Fence: 1, Expires: start + 30_000, Attempt: 1}}
	refused := wStep{wIn{Op: "release", Task: 0, Agent: 1}, wOut{Kind: "not_checked_out"}}
	for _, c := range []struct {
		what string
		h    []porcupine.Operation
	}{
		{"a release answered 404 whose lease is then granted to another", wSeq(granted, refused,
			wStep{wIn{Op: "checkout", Task: 0, Agent: 2, Run: "s", Timeout: 30_000}, wOut{Kind: "ok", Holder: wAgentID(2), Run: "s", Fence: 2, Expires: start + 30_000, Attempt: 2}})},
		{"a release answered 404 whose caller then renews its lease", wSeq(granted, refused,
			wStep{wIn{Op: "renew", Task: 0, Agent: 1, Run: "r", Fence: 1, Timeout: 30_000}, wOut{Kind: "ok", Holder: wAgentID(1), Run: "r", Fence: 1, Expires: start + 30_000, Attempt: 1}})},
	} {
		for _, lossy := range []bool{false, true} {
			m := withLossy(wholeNDModel(start, 3, 3, false, nil), lossy)
			if got := porcupine.CheckOperations(m.ToModel(), c.h); got != lossy {
				t.Errorf("lost sendings %v: %s is legal %v, want %v", lossy, c.what, got, lossy)
			}
		}
	}
}

// wSeq is steps one after another, each its own client's: a history with
// no two operations at once.
func wSeq(steps ...wStep) []porcupine.Operation {
	var h []porcupine.Operation
	for i, s := range steps {
		h = append(h, porcupine.Operation{ClientId: i, Input: s.in, Output: s.out, Call: int64(2 * i), Return: int64(2*i + 1)})
	}
	return h
}

// Under lost sendings, a force release answered 404 whose write was sent
// and its answer thrown away (LostWrite) may have ended the lease: that
// sending applied, and a grant and an ending came before the next, whose
// refusal found no ending of its own in a trail these tests archive
// between phases only. Without such a write it ended nothing; and it
// never leaves a live lease running (a renewal of it after the 404 is
// refused by the model either way).
func TestLossyWholeModelLetsAForceReleaseAnswered404HaveAppliedOnlyWithALostWrite(t *testing.T) {
	t.Parallel()
	start := epoch.UnixMilli()
	granted := wStep{wIn{Op: "checkout", Task: 0, Agent: 1, Run: "r", Timeout: 30_000}, wOut{Kind: "ok", Holder: wAgentID(1), Run: "r", Fence: 1, Expires: start + 30_000, Attempt: 1}}
	force := func(lost bool) wStep {
		return wStep{wIn{Op: "force", Task: 0, LostWrite: lost}, wOut{Kind: "not_checked_out"}}
	}
	taken := wStep{wIn{Op: "checkout", Task: 0, Agent: 2, Run: "s", Timeout: 30_000}, wOut{Kind: "ok", Holder: wAgentID(2), Run: "s", Fence: 2, Expires: start + 30_000, Attempt: 2}}
	renewed := wStep{wIn{Op: "renew", Task: 0, Agent: 1, Run: "r", Fence: 1, Timeout: 30_000}, wOut{Kind: "ok", Holder: wAgentID(1), Run: "r", Fence: 1, Expires: start + 30_000, Attempt: 1}}
	for _, c := range []struct {
		what       string
		h          []porcupine.Operation
		legalLossy bool
	}{
		{"a force release answered 404, its write's answer lost, then the task granted to another", wSeq(granted, force(true), taken), true},
		{"a force release answered 404, no write's answer lost, then the task granted to another", wSeq(granted, force(false), taken), false},
		{"a force release answered 404, its write's answer lost, left alone", wSeq(granted, force(true)), true},
		{"a force release answered 404, no write's answer lost, left alone", wSeq(granted, force(false)), false},
		{"a force release answered 404, its write's answer lost, then the holder renews", wSeq(granted, force(true), renewed), false},
	} {
		for _, lossy := range []bool{false, true} {
			m := withLossy(wholeNDModel(start, 3, 3, false, nil), lossy)
			if got, want := porcupine.CheckOperations(m.ToModel(), c.h), lossy && c.legalLossy; got != want {
				t.Errorf("lost sendings %v: %s is legal %v, want %v", lossy, c.what, got, want)
			}
		}
	}
}

// The whole model must reject a claim that skips an older free task when
// alone, a claim of a held task, a named claim retried into a second task,
// a lost, doubled or undue message, a removed agent's lease shown live or
// its heartbeat taken, and a force release that leaves the lease.
func wholeModelRejects(t *testing.T, start int64) {
	m := wholeModel(start, 3, 3, false, nil) // task-0 (oldest) .. task-2, agent-00 .. agent-02
	seq := func(steps ...wStep) []porcupine.Operation {
		var h []porcupine.Operation
		for i, s := range steps {
			h = append(h, porcupine.Operation{ClientId: i % 3, Input: s.in, Output: s.out, Call: int64(2 * i), Return: int64(2*i + 1)})
		}
		return h
	}
	granted := func(task, agent int, run string, fence int64) wOut {
		// No reopens here: the attempt is the fence.
		return wOut{Kind: "ok", Holder: wAgentID(agent), Run: run, Fence: fence, Expires: start + 30_000, Attempt: int(fence)}
	}
	claimed := func(task, agent int, run string, fence int64) wOut {
		o := granted(task, agent, run, fence)
		o.Task, o.Queue, o.Prio = wTaskID(task), wQueue(task), wPrio(task)
		return o
	}
	checkout := func(task, agent int, run string) wIn {
		return wIn{Op: "checkout", Task: task, Agent: agent, Run: run, Timeout: 30_000}
	}
	claim := func(agent int, run string, strict bool) wIn {
		return wIn{Op: "claim", Agent: agent, Run: run, Timeout: 30_000, Strict: strict, Queues: "default,q1"}
	}
	ok := wOut{Kind: "ok"}
	for _, c := range []struct {
		what  string
		legal bool
		h     []porcupine.Operation
	}{
		{"a lone claim of the oldest task", true, seq(wStep{claim(0, "c", true), claimed(0, 0, "c", 1)})},
		{"a lone claim that took a newer task while an older was free", false, seq(wStep{claim(0, "c", true), claimed(1, 0, "c", 1)})},
		{"a claim among others that took a newer task", true, seq(wStep{claim(0, "c", false), claimed(1, 0, "c", 1)})},
		{"a lone claim that found nothing while a task was free", false, seq(wStep{claim(0, "c", true), wOut{Kind: "no_task_available"}})},
		{"a lone claim that passed over an expired lease not swept yet", true, seq(
			wStep{checkout(0, 1, "r"), granted(0, 1, "r", 1)},
			wStep{wIn{Op: "tick", Now: start + 30_000}, ok},
			wStep{wIn{Op: "claim", Agent: 0, Run: "c", Timeout: 30_000, Strict: true, Queues: "default,q1"}, wOut{Kind: "ok", Task: wTaskID(1), Holder: wAgentID(0), Run: "c", Fence: 1, Expires: start + 60_000, Queue: wQueue(1), Prio: wPrio(1), Attempt: 1}},
		)},
		{"a claim of a task held live", false, seq(
			wStep{checkout(0, 1, "r"), granted(0, 1, "r", 1)},
			wStep{claim(0, "c", false), claimed(0, 0, "c", 2)},
		)},
		{"a named claim retried that got the same lease", true, seq(
			wStep{claim(0, "c", false), claimed(2, 0, "c", 1)},
			wStep{claim(0, "c", false), claimed(2, 0, "c", 1)},
		)},
		{"a named claim retried that got a second task", false, seq(
			wStep{claim(0, "c", false), claimed(2, 0, "c", 1)},
			wStep{claim(0, "c", false), claimed(0, 0, "c", 1)},
		)},
		{"an id registered again answered its removed self's claim of the run", false, seq(
			wStep{claim(0, "c", false), claimed(2, 0, "c", 1)},
			wStep{wIn{Op: "tick", Now: start + 1}, ok},
			wStep{wIn{Op: "remove", Agent: 0}, ok},
			wStep{wIn{Op: "register", Agent: 0}, ok},
			wStep{claim(0, "c", false), claimed(2, 0, "c", 1)},
		)},
		{"an id registered again granted a lease of its own under its removed self's run id", true, seq(
			wStep{claim(0, "c", false), claimed(2, 0, "c", 1)},
			wStep{wIn{Op: "tick", Now: start + 1}, ok},
			wStep{wIn{Op: "remove", Agent: 0}, ok},
			wStep{wIn{Op: "register", Agent: 0}, ok},
			wStep{claim(0, "c", false), func() wOut { o := claimed(0, 0, "c", 1); o.Expires++; return o }()},
		)},
	} {
		t.Run(c.what, func(t *testing.T) {
			if porcupine.CheckOperations(m, c.h) != c.legal {
				t.Errorf("legal=%v, the model says otherwise", c.legal)
			}
		})
	}

	// Watch and inbox: agent-01 watches task-0, which agent-00 holds and
	// then releases or completes.
	freed := func(end string, inbox string) []porcupine.Operation {
		return seq(
			wStep{wIn{Op: "watch", Task: 0, Agent: 1}, ok},
			wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			wStep{wIn{Op: end, Task: 0, Agent: 0, Run: "r"}, map[string]wOut{"release": {Kind: "ok"}, "complete": {Kind: "ok", Status: "done"}, "force": {Kind: "ok"}}[end]},
			wStep{wIn{Op: "inbox", Agent: 1}, wOut{Kind: "ok", Msgs: inbox}},
			wStep{wIn{Op: "inbox", Agent: 2}, ok},
		)
	}
	notWatching := func(inbox string) []porcupine.Operation {
		return seq(
			wStep{wIn{Op: "watch", Task: 0, Agent: 1}, wOut{Kind: "not_watching"}},
			wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			wStep{wIn{Op: "release", Task: 0, Agent: 0, Run: "r"}, ok},
			wStep{wIn{Op: "inbox", Agent: 1}, wOut{Kind: "ok", Msgs: inbox}},
		)
	}
	for _, c := range []struct {
		what  string
		legal bool
		h     []porcupine.Operation
	}{
		{"one message for a release", true, freed("release", "0:1")},
		{"one message for a force release", true, freed("force", "0:1")},
		{"two messages for one freeing", false, freed("release", "0:1,0:1")},
		{"no message for a release", false, freed("release", "")},
		{"a message for a completion", false, freed("complete", "0:1")},
		{"no message for a completion", true, freed("complete", "")},
		{"no message for a release after a watch that answered not watching", true, notWatching("")},
		{"a message for a release after a watch that answered not watching", false, notWatching("0:1")},
		{"a message for a freeing that never was", false, seq(
			wStep{wIn{Op: "watch", Task: 0, Agent: 1}, ok},
			wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			wStep{wIn{Op: "inbox", Agent: 1}, wOut{Kind: "ok", Msgs: "0:1"}},
		)},
		{"a sweep that freed two tasks at two moments", true, func() []porcupine.Operation {
			// Both leases expire; during the sweep agent-01 watches task-0,
			// then task-1, and is told of task-1's freeing only.
			h := seq(
				wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
				wStep{checkout(1, 0, "s"), granted(1, 0, "s", 1)},
				wStep{wIn{Op: "tick", Now: start + 30_000}, ok},
			)
			for t := range 2 {
				h = append(h, porcupine.Operation{ClientId: 2, Input: wIn{Op: "swept", Task: t, Fence: 1}, Output: ok, Call: 10, Return: 100})
			}
			h = append(h,
				porcupine.Operation{ClientId: 1, Input: wIn{Op: "watch", Task: 0, Agent: 1}, Output: ok, Call: 20, Return: 30},
				porcupine.Operation{ClientId: 1, Input: wIn{Op: "watch", Task: 1, Agent: 1}, Output: ok, Call: 40, Return: 50},
				porcupine.Operation{ClientId: 1, Input: wIn{Op: "inbox", Agent: 1}, Output: wOut{Kind: "ok", Msgs: "1:1"}, Call: 110, Return: 120},
			)
			return h
		}()},
	} {
		t.Run(c.what, func(t *testing.T) {
			if porcupine.CheckOperations(m, c.h) != c.legal {
				t.Errorf("legal=%v, the model says otherwise", c.legal)
			}
		})
	}

	// Removal: agent-00 holds task-0 (it sends no heartbeat, so only time
	// would end the lease) and is removed.
	removed := func(after ...wStep) []porcupine.Operation {
		return seq(append([]wStep{
			{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			{wIn{Op: "remove", Agent: 0}, ok},
		}, after...)...)
	}
	statusOf := func(holder bool) wOut { // task-0, version 2 after its checkout
		o := wOut{Kind: "ok", Status: lease.StatusTodo}
		if holder {
			o = granted(0, 0, "r", 1)
			o.Status = lease.StatusInProgress
		}
		o.Version, o.Queue, o.Prio, o.Attempt = 2, wQueue(0), wPrio(0), 1
		return o
	}
	for _, c := range []struct {
		what  string
		legal bool
		h     []porcupine.Operation
	}{
		{"a removed agent's lease shown ended", true, removed(wStep{wIn{Op: "status", Task: 0}, statusOf(false)})},
		{"a removed agent's lease reported live", false, removed(wStep{wIn{Op: "status", Task: 0}, statusOf(true)})},
		{"a removed agent's lease blocking a checkout", false, removed(wStep{checkout(0, 1, "s"), wOut{Kind: "conflict", Holder: wAgentID(0), Fence: 1}})},
		{"a removed agent's lease taken over", true, removed(wStep{checkout(0, 1, "s"), granted(0, 1, "s", 2)})},
		{"a removed agent's heartbeat taken", false, removed(wStep{wIn{Op: "heartbeat", Agent: 0, Timeout: 10_000}, wOut{Kind: "ok", Expires: start + 10_000}})},
		{"a removed agent registered again holding its old lease", false, removed(
			wStep{wIn{Op: "register", Agent: 0}, ok},
			wStep{wIn{Op: "renew", Task: 0, Agent: 0, Run: "r"}, granted(0, 0, "r", 1)},
		)},
		{"an id registered again told of a watch from before its removal", false, seq(
			wStep{wIn{Op: "watch", Task: 1, Agent: 2}, ok},
			wStep{wIn{Op: "tick", Now: start + 1_000}, ok},
			wStep{wIn{Op: "remove", Agent: 2}, ok},
			wStep{wIn{Op: "register", Agent: 2}, ok},
			wStep{checkout(1, 0, "r"), wOut{Kind: "ok", Holder: wAgentID(0), Run: "r", Fence: 1, Expires: start + 31_000}},
			wStep{wIn{Op: "release", Task: 1, Agent: 0, Run: "r"}, ok},
			wStep{wIn{Op: "inbox", Agent: 2}, wOut{Kind: "ok", Msgs: "1:1"}},
		)},
		{"a removed agent's inbox kept", false, seq(
			wStep{wIn{Op: "watch", Task: 0, Agent: 2}, ok},
			wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			wStep{wIn{Op: "release", Task: 0, Agent: 0, Run: "r"}, ok},
			wStep{wIn{Op: "remove", Agent: 2}, ok},
			wStep{wIn{Op: "inbox", Agent: 2}, wOut{Kind: "ok", Msgs: "0:1"}},
		)},
		{"a force release that left the lease", false, seq(
			wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			wStep{wIn{Op: "force", Task: 0}, ok},
			wStep{wIn{Op: "renew", Task: 0, Agent: 0, Run: "r"}, granted(0, 0, "r", 1)},
		)},
		{"a force release refused on a live lease", false, seq(
			wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			wStep{wIn{Op: "force", Task: 0}, wOut{Kind: "not_checked_out"}},
		)},
	} {
		t.Run(c.what, func(t *testing.T) {
			if porcupine.CheckOperations(m, c.h) != c.legal {
				t.Errorf("legal=%v, the model says otherwise", c.legal)
			}
		})
	}

	// Queues, priorities and PATCH. task-0 and task-1 are in the default
	// queue, task-2 in q1, all at priority 5, version 1.
	patch := func(task, agent int, edit wIn) wIn {
		edit.Op, edit.Task, edit.Agent = "patch", task, agent
		return edit
	}
	patched := func(task int, status lease.Status, version int64, prio int) wOut {
		return wOut{Kind: "ok", Status: status, Version: version, Queue: wQueue(task), Prio: prio}
	}
	attempt1 := func(o wOut) wOut {
		o.Attempt = 1
		return o
	}
	heldBy := func(o, held wOut) wOut {
		o.Holder, o.Run, o.Fence, o.Expires, o.Attempt = held.Holder, held.Run, held.Fence, held.Expires, held.Attempt
		return o
	}
	tried := func(o wOut) wOut { o.Attempt = 1; return o } // after one grant
	strictIn := func(queues string) wIn {
		return wIn{Op: "claim", Agent: 0, Run: "c", Timeout: 30_000, Strict: true, Queues: queues}
	}
	for _, c := range []struct {
		what  string
		legal bool
		h     []porcupine.Operation
	}{
		{"a claim of the default queue granted a task of q1", false, seq(
			wStep{wIn{Op: "claim", Agent: 0, Run: "c", Timeout: 30_000}, claimed(2, 0, "c", 1)},
		)},
		{"a claim of q1 granted its task", true, seq(
			wStep{wIn{Op: "claim", Agent: 0, Run: "c", Timeout: 30_000, Queues: "q1"}, claimed(2, 0, "c", 1)},
		)},
		{"a claim that reported the priority the task had before a PATCH", false, seq(
			wStep{patch(0, 1, wIn{Prio: 1 + 9}), patched(0, lease.StatusTodo, 2, 9)},
			wStep{wIn{Op: "claim", Agent: 0, Run: "c", Timeout: 30_000}, claimed(0, 0, "c", 1)},
		)},
		{"a lone claim of the higher priority", true, seq(
			wStep{patch(1, 1, wIn{Prio: 1 + 9}), patched(1, lease.StatusTodo, 2, 9)},
			wStep{strictIn(""), func() wOut { o := claimed(1, 0, "c", 1); o.Prio = 9; return o }()},
		)},
		{"a lone claim that took the older task over a higher priority", false, seq(
			wStep{patch(1, 1, wIn{Prio: 1 + 9}), patched(1, lease.StatusTodo, 2, 9)},
			wStep{strictIn(""), claimed(0, 0, "c", 1)},
		)},
		{"a lone claim that took a task moved out of its queues", false, seq(
			wStep{patch(0, 1, wIn{Queue: "q1"}), wOut{Kind: "ok", Status: lease.StatusTodo, Version: 2, Queue: "q1", Prio: 5}},
			wStep{strictIn(""), func() wOut { o := claimed(0, 0, "c", 1); o.Queue = "q1"; return o }()},
		)},
		{"a PATCH with a stale If-Match that applied", false, seq(
			wStep{patch(0, 1, wIn{Title: "a"}), patched(0, lease.StatusTodo, 2, 5)},
			wStep{patch(0, 1, wIn{Title: "b", IfVersion: 1}), patched(0, lease.StatusTodo, 3, 5)},
		)},
		{"a PATCH with a stale If-Match refused", true, seq(
			wStep{patch(0, 1, wIn{Title: "a"}), patched(0, lease.StatusTodo, 2, 5)},
			wStep{patch(0, 1, wIn{Title: "b", IfVersion: 1}), wOut{Kind: "version_mismatch"}},
			wStep{patch(0, 1, wIn{Title: "b", IfVersion: 2}), patched(0, lease.StatusTodo, 3, 5)},
		)},
		{"a cancel whose If-Match was read before the sweep ended the expired lease, which the PATCH ended first", true, seq(
			wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			wStep{wIn{Op: "tick", Now: start + 30_000}, ok},
			wStep{wIn{Op: "swept", Task: 0, Fence: 1}, ok},
			wStep{wIn{Op: "status", Task: 0, Agent: 1}, wOut{Kind: "ok", Status: lease.StatusTodo, Version: 3, Queue: wQueue(0), Prio: wPrio(0), Attempt: 1}},
			wStep{patch(0, 1, wIn{Status: lease.StatusCancelled, IfVersion: 2}), attempt1(patched(0, lease.StatusCancelled, 4, wPrio(0)))},
		)},
		{"a cancel whose If-Match was read before a title change, applied", false, seq(
			wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			wStep{wIn{Op: "tick", Now: start + 30_000}, ok},
			wStep{patch(0, 1, wIn{Title: "a"}), patched(0, lease.StatusTodo, 3, wPrio(0))},
			wStep{patch(0, 1, wIn{Status: lease.StatusCancelled, IfVersion: 2}), attempt1(patched(0, lease.StatusCancelled, 5, wPrio(0)))},
		)},
		{"a PATCH that changes nothing and still moved the version", false, seq(
			wStep{patch(0, 1, wIn{Title: "a"}), patched(0, lease.StatusTodo, 2, 5)},
			wStep{patch(0, 1, wIn{Title: "a"}), patched(0, lease.StatusTodo, 3, 5)},
		)},
		{"a priority change that ended the lease", false, seq(
			wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			wStep{patch(0, 1, wIn{Prio: 1 + 9}), patched(0, lease.StatusTodo, 3, 9)},
		)},
		{"a priority change that kept the lease", true, seq(
			wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			wStep{patch(0, 1, wIn{Prio: 1 + 9}), heldBy(patched(0, lease.StatusInProgress, 3, 9), granted(0, 0, "r", 1))},
			wStep{wIn{Op: "renew", Task: 0, Agent: 0, Run: "r"}, granted(0, 0, "r", 1)},
		)},
		{"a cancel of another's live lease", false, seq(
			wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			wStep{patch(0, 1, wIn{Status: lease.StatusCancelled}), patched(0, lease.StatusCancelled, 3, 5)},
		)},
		{"a cancel of another's live lease refused", true, seq(
			wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			wStep{patch(0, 1, wIn{Status: lease.StatusCancelled}), wOut{Kind: "not_holder", Holder: wAgentID(0), Fence: 1}},
		)},
		{"an admin's cancel that ends the lease and tells the watcher", true, seq(
			wStep{wIn{Op: "watch", Task: 0, Agent: 2}, ok},
			wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			wStep{patch(0, 1, wIn{Status: lease.StatusCancelled, Admin: true}), tried(patched(0, lease.StatusCancelled, 3, 5))},
			wStep{wIn{Op: "renew", Task: 0, Agent: 0, Run: "r"}, wOut{Kind: "not_checked_out"}},
			wStep{wIn{Op: "inbox", Agent: 2}, wOut{Kind: "ok", Msgs: "0:1"}},
		)},
		{"a holder's cancel whose lease lives on", false, seq(
			wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			wStep{patch(0, 0, wIn{Status: lease.StatusCancelled}), patched(0, lease.StatusCancelled, 3, 5)},
			wStep{wIn{Op: "renew", Task: 0, Agent: 0, Run: "r"}, granted(0, 0, "r", 1)},
		)},
		{"a claim of a cancelled task", false, seq(
			wStep{patch(0, 1, wIn{Status: lease.StatusCancelled}), patched(0, lease.StatusCancelled, 2, 5)},
			wStep{wIn{Op: "claim", Agent: 0, Run: "c", Timeout: 30_000}, claimed(0, 0, "c", 1)},
		)},
		{"a lone claim that passed over a reopened task", false, seq(
			wStep{patch(0, 1, wIn{Status: lease.StatusCancelled}), patched(0, lease.StatusCancelled, 2, 5)},
			wStep{patch(0, 1, wIn{Status: lease.StatusTodo}), patched(0, lease.StatusTodo, 3, 5)},
			wStep{strictIn(""), claimed(1, 0, "c", 1)},
		)},
		{"a cancel with If-Match of a task whose lease expired: its own ending, then the cancel", true, seq(
			wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			wStep{wIn{Op: "tick", Now: start + 30_000}, ok},
			wStep{patch(0, 1, wIn{Status: lease.StatusCancelled, IfVersion: 2}), tried(patched(0, lease.StatusCancelled, 4, 5))},
			wStep{wIn{Op: "swept", Task: 0, Fence: 1}, ok},
		)},
		{"a cancel with If-Match of a task whose lease a sweep ended before", true, seq(
			wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			wStep{wIn{Op: "tick", Now: start + 30_000}, ok},
			wStep{wIn{Op: "swept", Task: 0, Fence: 1}, ok},
			wStep{patch(0, 1, wIn{Status: lease.StatusCancelled, IfVersion: 2}), wOut{Kind: "version_mismatch"}},
		)},
		{"a cancel that ended an expired lease twice", false, seq(
			wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			wStep{wIn{Op: "tick", Now: start + 30_000}, ok},
			wStep{patch(0, 1, wIn{Status: lease.StatusCancelled}), patched(0, lease.StatusCancelled, 4, 5)},
			wStep{wIn{Op: "swept", Task: 0, Fence: 1}, ok},
			wStep{wIn{Op: "swept", Task: 0, Fence: 1}, ok},
		)},
		{"a reopen of a task in progress", false, seq(
			wStep{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
			wStep{patch(0, 0, wIn{Status: lease.StatusTodo}), patched(0, lease.StatusTodo, 3, 5)},
		)},
	} {
		t.Run(c.what, func(t *testing.T) {
			if porcupine.CheckOperations(m, c.h) != c.legal {
				t.Errorf("legal=%v, the model says otherwise", c.legal)
			}
		})
	}

	// With the known bugs allowed, a judgment at the removal's
	// instant may still see the agent alive; once MinHeartbeatTTL has
	// passed, none may.
	tolerant := wholeModel(start, 3, 3, true, nil)
	if !porcupine.CheckOperations(tolerant, removed(wStep{wIn{Op: "status", Task: 0}, statusOf(true)})) {
		t.Error("the tolerant model rejected a removed agent seen alive through the cache")
	}
	if porcupine.CheckOperations(tolerant, removed(
		wStep{wIn{Op: "tick", Now: start + lease.MinHeartbeatTTL.Milliseconds()}, ok},
		wStep{wIn{Op: "status", Task: 0}, statusOf(true)},
	)) {
		t.Error("the tolerant model accepted a removed agent's lease live once MinHeartbeatTTL had passed")
	}
	// A message of a freeing, before the removal or after it, never shows
	// in the removed agent's inbox: Inbox hides one that a freeing in
	// flight wrote after the removal emptied it.
	kept := func(freeing ...wStep) []porcupine.Operation {
		return seq(append(append([]wStep{
			{wIn{Op: "watch", Task: 0, Agent: 2}, ok},
			{checkout(0, 0, "r"), granted(0, 0, "r", 1)},
		}, freeing...),
			wStep{wIn{Op: "inbox", Agent: 2}, wOut{Kind: "ok", Msgs: "0:1"}},
		)...)
	}
	release := wStep{wIn{Op: "release", Task: 0, Agent: 0, Run: "r"}, ok}
	remove := wStep{wIn{Op: "remove", Agent: 2}, ok}
	if porcupine.CheckOperations(tolerant, kept(release, remove)) {
		t.Error("the tolerant model accepted a message in flight at the removal")
	}
	if porcupine.CheckOperations(tolerant, kept(remove, release)) {
		t.Error("the tolerant model accepted a message to an agent removed before the freeing")
	}

	workGraphModelRejects(t, start)
}

// The work graph: a blocked task is never granted, and becomes todo only
// once the stream has seen its blocker done; a grant's attempt is the
// task's count; a task waits for its not_before; a failed task is
// terminal until a reopen, which counts attempts anew.
func workGraphModelRejects(t *testing.T, start int64) {
	graph := wholeModel(start, 4, 3, false, wBlockers) // task-2 waits on task-0, task-3 on task-0 and task-1
	plain := wholeModel(start, 3, 3, false, nil)       // task-2: max_attempts 2
	seq := func(steps ...wStep) []porcupine.Operation {
		var h []porcupine.Operation
		for i, s := range steps {
			h = append(h, porcupine.Operation{ClientId: i % 3, Input: s.in, Output: s.out, Call: int64(2 * i), Return: int64(2*i + 1)})
		}
		return h
	}
	at := func(ms int64) int64 { return start + ms }
	checkout := func(task, agent int, run string) wIn {
		return wIn{Op: "checkout", Task: task, Agent: agent, Run: run, Timeout: 30_000}
	}
	grant := func(agent int, run string, fence int64, attempt int, now int64) wOut {
		return wOut{Kind: "ok", Holder: wAgentID(agent), Run: run, Fence: fence, Expires: now + 30_000, Attempt: attempt}
	}
	ok := wOut{Kind: "ok"}
	done := wOut{Kind: "ok", Status: lease.StatusDone}
	status := func(task int, st lease.Status, version int64, attempts int) wOut {
		return wOut{Kind: "ok", Status: st, Version: version, Queue: wQueue(task), Prio: wPrio(task), Attempt: attempts}
	}
	// task-0 is checked out and done.
	finished := []wStep{
		{checkout(0, 0, "r"), grant(0, "r", 1, 1, start)},
		{wIn{Op: "complete", Task: 0, Agent: 0, Run: "r"}, done},
	}
	// task-0 done, task-2 unblocked, checked out and done, then task-0
	// reopened (version 4: created, checked out, done, reopened).
	reopened := append(slices.Clone(finished),
		wStep{wIn{Op: "drain"}, ok},
		wStep{checkout(2, 1, "s"), grant(1, "s", 1, 1, start)},
		wStep{wIn{Op: "complete", Task: 2, Agent: 1, Run: "s"}, done},
		wStep{wIn{Op: "patch", Task: 0, Agent: 2, Status: lease.StatusTodo}, status(0, lease.StatusTodo, 4, 0)},
	)
	// task-0 done, task-2 unblocked, checked out and done (version 4).
	bothDone := append(slices.Clone(finished),
		wStep{wIn{Op: "drain"}, ok},
		wStep{checkout(2, 1, "s"), grant(1, "s", 1, 1, start)},
		wStep{wIn{Op: "complete", Task: 2, Agent: 1, Run: "s"}, done},
	)
	// task-0 done, task-2 unblocked (version 2), then task-0 reopened
	// (version 4) while task-2 is todo.
	reopenedFirst := append(slices.Clone(finished),
		wStep{wIn{Op: "drain"}, ok},
		wStep{wIn{Op: "patch", Task: 0, Agent: 2, Status: lease.StatusTodo}, status(0, lease.StatusTodo, 4, 0)},
	)
	// task-2 released by agent 0 (run r, held 2 s), then taken and
	// released by agent 1: the item's last ending is agent 1's.
	releasedTwice := []wStep{
		{checkout(2, 0, "r"), grant(0, "r", 1, 1, start)},
		{wIn{Op: "tick", Now: at(2_000)}, ok},
		{wIn{Op: "release", Task: 2, Agent: 0, Run: "r"}, wOut{Kind: "ok", Held: 2_000}},
		{checkout(2, 1, "s"), grant(1, "s", 2, 2, at(2_000))},
		{wIn{Op: "release", Task: 2, Agent: 1, Run: "s"}, wOut{Kind: "ok", Held: 0}},
	}
	// task-2 fails twice, the second time at its last attempt.
	failedTwice := []wStep{
		{checkout(2, 0, "r"), grant(0, "r", 1, 1, start)},
		{wIn{Op: "fail", Task: 2, Agent: 0, Run: "r"}, ok},
		{wIn{Op: "tick", Now: at(10_000)}, ok},
		{checkout(2, 1, "s"), grant(1, "s", 2, 2, at(10_000))},
		{wIn{Op: "fail", Task: 2, Agent: 1, Run: "s"}, ok},
	}
	for _, c := range []struct {
		what  string
		m     porcupine.Model
		legal bool
		h     []porcupine.Operation
	}{
		{"a checkout of a blocked task refused", graph, true, seq(wStep{checkout(2, 0, "r"), wOut{Kind: "blocked"}})},
		{"a checkout of a blocked task granted", graph, false, seq(wStep{checkout(2, 0, "r"), grant(0, "r", 1, 1, start)})},
		{"a claim of a blocked task", graph, false, seq(
			append(finished, wStep{wIn{Op: "claim", Agent: 1, Run: "c", Timeout: 30_000, Queues: "q1"},
				wOut{Kind: "ok", Task: wTaskID(2), Holder: wAgentID(1), Run: "c", Fence: 1, Expires: start + 30_000, Queue: "q1", Prio: 5, Attempt: 1}})...)},
		{"a dependent todo before the stream saw its blocker done", graph, false, seq(
			append(finished, wStep{wIn{Op: "status", Task: 2}, status(2, lease.StatusTodo, 2, 0)})...)},
		{"a dependent still blocked before the stream saw its blocker done", graph, true, seq(
			append(finished, wStep{wIn{Op: "status", Task: 2}, status(2, lease.StatusBlocked, 1, 0)})...)},
		{"a dependent todo once the stream saw its blocker done", graph, true, seq(
			append(finished, wStep{wIn{Op: "drain"}, ok}, wStep{wIn{Op: "status", Task: 2}, status(2, lease.StatusTodo, 2, 0)})...)},
		// A checkout after the blocker's completion, before the stream
		// has seen it, unblocks the task in its grant: one write, one
		// version (created, then unblocked and granted).
		{"a dependent checked out before the stream saw its blocker done", graph, true, seq(
			append(finished, wStep{checkout(2, 1, "s"), grant(1, "s", 1, 1, start)},
				wStep{wIn{Op: "status", Task: 2}, wOut{Kind: "ok", Status: lease.StatusInProgress, Holder: wAgentID(1), Run: "s", Fence: 1, Expires: start + 30_000,
					Version: 2, Queue: wQueue(2), Prio: wPrio(2), Attempt: 1}},
				wStep{wIn{Op: "drain"}, ok})...)},
		{"a dependent checked out before the stream saw its blocker done, with two versions", graph, false, seq(
			append(finished, wStep{checkout(2, 1, "s"), grant(1, "s", 1, 1, start)},
				wStep{wIn{Op: "status", Task: 2}, wOut{Kind: "ok", Status: lease.StatusInProgress, Holder: wAgentID(1), Run: "s", Fence: 1, Expires: start + 30_000,
					Version: 3, Queue: wQueue(2), Prio: wPrio(2), Attempt: 1}})...)},
		{"a dependent with a blocker not done checked out", graph, false, seq(
			append(finished, wStep{checkout(3, 1, "s"), grant(1, "s", 1, 1, start)})...)},
		{"a dependent with a blocker not done todo", graph, false, seq(
			append(finished, wStep{wIn{Op: "drain"}, ok}, wStep{wIn{Op: "status", Task: 3}, status(3, lease.StatusTodo, 2, 0)})...)},
		{"a dependent reopened after its blocker was reopened, blocked", graph, true, seq(
			append(reopened, wStep{wIn{Op: "patch", Task: 2, Agent: 2, Status: lease.StatusTodo}, status(2, lease.StatusBlocked, 5, 0)})...)},
		{"a dependent reopened after its blocker was reopened, todo", graph, false, seq(
			append(reopened, wStep{wIn{Op: "patch", Task: 2, Agent: 2, Status: lease.StatusTodo}, status(2, lease.StatusTodo, 5, 0)})...)},
		{"a dependent todo before the stream saw its blocker reopened", graph, true, seq(
			append(reopenedFirst, wStep{wIn{Op: "status", Task: 2}, status(2, lease.StatusTodo, 2, 0)})...)},
		{"a dependent blocked again once the stream saw its blocker reopened", graph, true, seq(
			append(reopenedFirst, wStep{wIn{Op: "drain"}, ok}, wStep{wIn{Op: "status", Task: 2}, status(2, lease.StatusBlocked, 3, 0)})...)},
		{"a dependent still todo once the stream saw its blocker reopened", graph, false, seq(
			append(reopenedFirst, wStep{wIn{Op: "drain"}, ok}, wStep{wIn{Op: "status", Task: 2}, status(2, lease.StatusTodo, 2, 0)})...)},
		// A reopen of task-2 that read task-0 done, raced by task-0's
		// reopen: it answers todo, then reads task-0 again and blocks
		// task-2 (lease/deps.go, recheck) before the stream has run.
		{"a dependent reopened beside its blocker's reopen, blocked again by its second read", graph, true, append(seq(bothDone...),
			porcupine.Operation{ClientId: 0, Input: wIn{Op: "patch", Task: 2, Agent: 2, Status: lease.StatusTodo}, Output: status(2, lease.StatusTodo, 5, 0), Call: 100, Return: 103},
			porcupine.Operation{ClientId: 1, Input: wIn{Op: "patch", Task: 0, Agent: 2, Status: lease.StatusTodo}, Output: status(0, lease.StatusTodo, 4, 0), Call: 101, Return: 102},
			porcupine.Operation{ClientId: 2, Input: wIn{Op: "status", Task: 2}, Output: status(2, lease.StatusBlocked, 6, 0), Call: 104, Return: 105})},
		{"a dependent reopened, blocked again before its blocker's reopen", graph, false, append(seq(bothDone...),
			porcupine.Operation{ClientId: 0, Input: wIn{Op: "patch", Task: 2, Agent: 2, Status: lease.StatusTodo}, Output: status(2, lease.StatusTodo, 5, 0), Call: 100, Return: 101},
			porcupine.Operation{ClientId: 2, Input: wIn{Op: "status", Task: 2}, Output: status(2, lease.StatusBlocked, 6, 0), Call: 102, Return: 103},
			porcupine.Operation{ClientId: 1, Input: wIn{Op: "patch", Task: 0, Agent: 2, Status: lease.StatusTodo}, Output: status(0, lease.StatusTodo, 4, 0), Call: 104, Return: 105})},
		{"a claim of a dependent blocked again", graph, false, seq(
			append(reopenedFirst, wStep{wIn{Op: "drain"}, ok}, wStep{wIn{Op: "claim", Agent: 1, Run: "c", Timeout: 30_000, Queues: "q1"},
				wOut{Kind: "ok", Task: wTaskID(2), Holder: wAgentID(1), Run: "c", Fence: 1, Expires: start + 30_000, Queue: "q1", Prio: 5, Attempt: 1}})...)},
		{"a dependent blocked again and released by its blocker's next completion", graph, true, seq(
			append(reopenedFirst, wStep{wIn{Op: "drain"}, ok},
				wStep{checkout(0, 1, "s"), grant(1, "s", 2, 1, start)},
				wStep{wIn{Op: "complete", Task: 0, Agent: 1, Run: "s"}, done},
				wStep{wIn{Op: "drain"}, ok},
				wStep{wIn{Op: "status", Task: 2}, status(2, lease.StatusTodo, 4, 0)})...)},
		{"a release repeated after a later one, answered as the first", plain, true, seq(append(releasedTwice,
			wStep{wIn{Op: "release", Task: 2, Agent: 0, Run: "r"}, wOut{Kind: "ok", Held: 2_000}})...)},
		{"a release repeated after a later one, not found yet", plain, true, seq(append(releasedTwice,
			wStep{wIn{Op: "release", Task: 2, Agent: 0, Run: "r"}, wOut{Kind: "not_checked_out"}})...)},
		{"a release repeated after a later one, answered with another time held", plain, false, seq(append(releasedTwice,
			wStep{wIn{Op: "release", Task: 2, Agent: 0, Run: "r"}, wOut{Kind: "ok", Held: 0}})...)},
		{"a release naming a run that never released, answered", plain, false, seq(append(releasedTwice,
			wStep{wIn{Op: "release", Task: 2, Agent: 0, Run: "x"}, wOut{Kind: "ok", Held: 2_000}})...)},
		{"a completion answered for a run that released", plain, false, seq(append(releasedTwice,
			wStep{wIn{Op: "complete", Task: 2, Agent: 0, Run: "r"}, done})...)},
		{"a second grant that is attempt 1 again", plain, false, seq(
			wStep{checkout(2, 0, "r"), grant(0, "r", 1, 1, start)},
			wStep{wIn{Op: "release", Task: 2, Agent: 0, Run: "r"}, ok},
			wStep{checkout(2, 1, "s"), grant(1, "s", 2, 1, start)},
		)},
		{"a checkout during the retry delay refused", plain, true, seq(
			wStep{checkout(2, 0, "r"), grant(0, "r", 1, 1, start)},
			wStep{wIn{Op: "fail", Task: 2, Agent: 0, Run: "r"}, ok},
			wStep{checkout(2, 1, "s"), wOut{Kind: "not_ready", NotBefore: at(10_000)}},
		)},
		{"a failed release repeated", plain, true, seq(
			wStep{checkout(2, 0, "r"), grant(0, "r", 1, 1, start)},
			wStep{wIn{Op: "fail", Task: 2, Agent: 0, Run: "r"}, ok},
			wStep{wIn{Op: "fail", Task: 2, Agent: 0, Run: "r"}, ok},
		)},
		{"a failed release after a plain one, refused", plain, true, seq(
			wStep{checkout(2, 0, "r"), grant(0, "r", 1, 1, start)},
			wStep{wIn{Op: "release", Task: 2, Agent: 0, Run: "r"}, ok},
			wStep{wIn{Op: "fail", Task: 2, Agent: 0, Run: "r"}, wOut{Kind: "not_checked_out"}},
		)},
		{"a failed release after a plain one, taken for a repeat", plain, false, seq(
			wStep{checkout(2, 0, "r"), grant(0, "r", 1, 1, start)},
			wStep{wIn{Op: "release", Task: 2, Agent: 0, Run: "r"}, ok},
			wStep{wIn{Op: "fail", Task: 2, Agent: 0, Run: "r"}, ok},
		)},
		{"a checkout during the retry delay granted", plain, false, seq(
			wStep{checkout(2, 0, "r"), grant(0, "r", 1, 1, start)},
			wStep{wIn{Op: "fail", Task: 2, Agent: 0, Run: "r"}, ok},
			wStep{wIn{Op: "tick", Now: at(9_999)}, ok},
			wStep{checkout(2, 1, "s"), grant(1, "s", 2, 2, at(9_999))},
		)},
		{"a failed task refused", plain, true, seq(append(failedTwice,
			wStep{checkout(2, 2, "t"), wOut{Kind: "status_mismatch", Status: lease.StatusFailed}})...)},
		{"a failed task granted", plain, false, seq(append(failedTwice,
			wStep{checkout(2, 2, "t"), grant(2, "t", 3, 3, at(10_000))})...)},
		{"a failed task reopened, its attempts anew", plain, true, seq(append(failedTwice,
			wStep{wIn{Op: "patch", Task: 2, Agent: 2, Status: lease.StatusTodo}, status(2, lease.StatusTodo, 6, 0)},
			wStep{checkout(2, 2, "t"), grant(2, "t", 3, 1, at(10_000))})...)},
		{"a failed task reopened, its attempts kept", plain, false, seq(append(failedTwice,
			wStep{wIn{Op: "patch", Task: 2, Agent: 2, Status: lease.StatusTodo}, status(2, lease.StatusTodo, 6, 0)},
			wStep{checkout(2, 2, "t"), grant(2, "t", 3, 3, at(10_000))})...)},
	} {
		t.Run(c.what, func(t *testing.T) {
			if porcupine.CheckOperations(c.m, c.h) != c.legal {
				t.Errorf("legal=%v, the model says otherwise", c.legal)
			}
		})
	}
}

// dumpIllegal writes the operations of each partition that fails the check,
// in call order, for reading: the first phase (up to a tick, when nothing
// is in flight) whose end makes the history illegal, and each operation of
// that phase without whose answer the history up to there would be legal.
// (A prefix cut elsewhere, in call order, may leave out an operation
// called later but linearized earlier, and fail for that alone.)
// dumpStuck writes where the checker got stuck, partition by partition:
// the end of its longest partial linearization, with the model's state
// after each operation, and the operations it could not place next,
// earliest return first. Of those, the first to return is the one no
// order of the rest explains.
func dumpStuck(m porcupine.Model, info porcupine.LinearizationInfo, history []porcupine.Operation, path string) {
	var b strings.Builder
	line := func(op porcupine.Operation) string {
		return fmt.Sprintf("%12d %12d c%02d %+v -> %+v", op.Call/1000, op.Return/1000, op.ClientId, op.Input, op.Output)
	}
	parts := [][]porcupine.Operation{history}
	if m.Partition != nil {
		parts = m.Partition(history) // in the order the checker took them
	}
	for p, lins := range info.PartialLinearizationsOperations() {
		var longest []porcupine.Operation
		for _, l := range lins {
			if len(l) > len(longest) {
				longest = l
			}
		}
		fmt.Fprintf(&b, "partition %d: %d partial linearizations, the longest places %d operations\n", p, len(lins), len(longest))
		placed := map[[2]int64]bool{}
		for _, op := range longest {
			placed[[2]int64{op.Call, op.Return}] = true
		}
		from := max(0, len(longest)-40)
		state := m.Init()
		for i, op := range longest {
			_, state = m.Step(state, op.Input, op.Output)
			if i >= from {
				fmt.Fprintf(&b, "placed %s\n", line(op))
				if m.DescribeState != nil {
					fmt.Fprintf(&b, "       state: %s\n", m.DescribeState(state))
				}
			}
		}
		var left []porcupine.Operation
		for _, op := range parts[p] {
			if !placed[[2]int64{op.Call, op.Return}] {
				left = append(left, op)
			}
		}
		sort.Slice(left, func(i, j int) bool { return left[i].Return < left[j].Return })
		for _, op := range left[:min(10, len(left))] {
			fmt.Fprintf(&b, "not placed %s\n", line(op))
		}
	}
	_ = os.WriteFile(path, []byte(b.String()), 0o644)
}

// dumpTrails writes every task's trail as the store keeps it (what each
// transition's write recorded, in order) to path, beside a refused
// history: what the service did, to set against what the clients were
// answered.
func dumpTrails(t *testing.T, e *env, tasks int, path string) {
	var b strings.Builder
	for i := range tasks {
		id := wTaskID(i)
		fmt.Fprintf(&b, "task %s\n", id)
		for _, ev := range e.events(t, id) {
			fmt.Fprintf(&b, "  %3d %-14s agent=%s run=%s fence=%d at=%d by=%s reason=%q\n",
				ev.Seq, ev.Type, ev.AgentID, ev.RunID, ev.Fence, ev.At.UnixMilli(), ev.By, ev.Reason)
		}
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Logf("write the trails: %v", err)
	}
}

func dumpIllegal(m porcupine.Model, history []porcupine.Operation, path string) {
	var b strings.Builder
	check := func(h []porcupine.Operation) bool {
		return porcupine.CheckOperations(porcupine.Model{Init: m.Init, Step: m.Step, Equal: m.Equal, Hash: m.Hash}, h)
	}
	isTick := func(op porcupine.Operation) bool {
		switch in := op.Input.(type) {
		case wIn:
			return in.Op == "tick"
		case linIn:
			return in.Op == "tick"
		case phaseEnd:
			return true
		}
		return false
	}
	for _, part := range m.Partition(history) {
		if check(part) {
			continue
		}
		sort.Slice(part, func(i, j int) bool { return part[i].Call < part[j].Call })
		k, from := len(part), 0
		for i, op := range part {
			if isTick(op) {
				if !check(part[:i+1]) {
					k = i + 1
					break
				}
				from = i + 1
			}
		}
		fmt.Fprintf(&b, "the first failing phase: operations %d to %d of %d\n", from, k, len(part))
		for j := from; j < k; j++ {
			if check(append(slices.Clone(part[:j]), part[j+1:k]...)) {
				fmt.Fprintf(&b, "legal without: %+v -> %+v\n", part[j].Input, part[j].Output)
			}
		}
		for i, op := range part {
			if i == from {
				b.WriteString("---- (the failing phase)\n")
			}
			if i == k {
				b.WriteString("---- (the rest of the partition)\n")
			}
			fmt.Fprintf(&b, "%12d %12d c%02d %+v -> %+v\n", op.Call/1000, op.Return/1000, op.ClientId, op.Input, op.Output)
		}
		b.WriteString("----\n")
	}
	_ = os.WriteFile(path, []byte(b.String()), 0o644)
}

// ---- Claim, force release, watch and inbox, agent removal ----
//
// A second model covers the whole store: every task, every agent's
// heartbeat, registration and inbox. Claim picks a task, so a history with
// claims is not partitionable by task: TestLinearizabilityClaim checks one
// such history over a few tasks and a few clients. Without claims the same
// model is checked task by task (TestLinearizabilityWatchForceRemove), with
// more clients.
//
// Watch and inbox. A freeing (release, force release, a sweep's ending,
// removal's ending) sends each watcher still the agent that asked (not
// removed since, and not an id registered again after the watch) one
// task_available message, identified by the ended lease (task, fence). The
// messages are written by the second request of the freeing, after its
// deciding write, so the inbox is not linearizable with the decision; it is
// read only between phases, when no operation is in flight and every
// freeing has returned, and must then hold exactly the messages of the
// freeings the linearization chose, each once. Completion tells nobody
// and keeps the watches for a reopened task's next freeing; a takeover
// keeps them (the task never became free). A failing attempt at the
// task's last frees it too (reason failed); an unblocking tells the
// watchers with the message "task:0" (its event has no lease).
// A lease that ends without its holder (a sweep's ending, a force release,
// a cancel by an admin, a takeover) also gives its holder one lease_lost
// message, "task:fence:lost" (lost), shown unless the holder was removed
// since or its id registered again at or after the lease was locked.
//
// Sweeps. A sweep ends each lease by a write of its own, at its own moment,
// and may miss some under index lag. So the sweep itself is not an
// operation of the history: each lease that a sweep, or removal's own pass
// over the agent's leases, ends is one, "swept" (task, fence), from the
// start of its phase (of the first phase since the stream last ran) to
// the moment the store tells the notifier that the task is available, which it does after the ending write and its
// messages. The model checks that the lease was there and had ended (a
// live one never is), and frees the task. As one atomic operation a sweep
// would make watchers' messages look impossible: a watch placed during a
// sweep can be told of one task's freeing and not of another's.
//
// Removal. RemoveAgent is "remove": the tombstone, from which the agent is
// dead for ever, its inbox emptied, its heartbeats refused; what its own
// pass ends is "swept". Registering the id again gives an agent that sends
// no heartbeat yet, alive since the registration: the removed agent's
// leases stay ended.
//
// Claim. A claim that names a run id whose earlier attempt was granted a
// lease answers with that lease exactly as it was granted (task, fence,
// expiry, queue, priority), from the run's receipt, whatever the task has
// done since: renewed, released, taken over, claimed again. Otherwise a
// claim grants only a task that is available (todo with no live lease, or
// a lease that has ended), in one of the queues it names, reporting the
// task's queue and priority as they are at the grant; never a held,
// cancelled or done task. That is all the store promises to concurrent
// claimers: they shuffle the best 3n candidates (n the claims in flight,
// lease/doc.go), which in these histories is every task, and their
// candidates come from indexes that lag, so one may take any available
// task or find none. Between phases a "strict" claim runs alone, on a
// store of its own (no claims in flight, no recent losses), after the
// indexes have caught up: it must take the best available task of its
// queues, by priority then creation, and may say no_task_available only
// when none is surely available there. Surely available: todo with no
// lease on the task. A lease that expired or whose holder died reaches the
// claim index when the sweep ends it; until then a claim may still take it
// through an index entry that lags its grant, so such a task may be taken
// before better sure ones, or not found.
//
// PATCH. One write pinned to the version (patchOp), or none when it
// changes nothing; every write of a task item adds one to its version, and
// status reads and PATCHes answer with it, so If-Match is checked as a
// compare-and-set (412) against the version the model counts. Fields
// never touch a lease; cancel ends a live lease for its holder or an
// admin only (not_holder otherwise) and tells the watchers; reopen makes
// a done or cancelled task todo again and claimable. A PATCH of the status
// of a task whose lease has ended but is still on the item first ends that
// lease as the sweep would, which the history records as a "swept".
//
// Attempts, failures and delays (lease/deps.go). Every grant counts an
// attempt, and the lease names it (Attempt); a reopen counts anew. Some
// tasks have a small max_attempts (wMaxAttempts): an attempt that fails
// (a release with outcome failed, "fail"; a lease that expired or whose
// holder died, ended by a sweep, a checkout or a PATCH) at the task's last
// makes it failed, terminal until a reopen. A failed release below the
// limit delays the task by wRetryDelay, doubled with each failure: until
// then a checkout answers not_ready and no claim takes it. A sweep may
// rank a delayed task as ready, a write that only the version shows
// (rankable).
//
// The work graph (TestLinearizabilityWorkGraph). Tasks are created blocked
// by others (wBlockers). A blocked task is never granted: a checkout
// answers blocked, no claim takes it. It becomes todo only when every task
// it waits on has been done and the change stream has seen it: the stream
// runs between phases, with no operation of the agents in flight, and the
// history has it as one operation, "drain", so that a dependent still
// blocked after its blocker's completion, or todo only after the drain,
// is what the model allows (and a PATCH that leaves a task blocked
// settles it: see patchOp). A done blocker reopened blocks its
// dependents that have not started again once the stream has run, and a
// dependent reopened after that waits for it.
//
// Known bugs. One reported bug of removal shows in these histories now
// and then: a judgment from a heartbeat read before the removal (another
// process's alive cache) may still take the removed agent for alive
// (cachedHB). The model allows it, narrowly; CHECKOUT_KNOWN_BUGS=1 makes
// it strict, as lease/doc.go states the rules, and runs the TestKnownBug
// test that reproduces it. A freeing in flight that writes a message into
// the inbox a removal emptied, and a watch placed by an id's removed self,
// are held strictly: Inbox hides such messages
// (TestMessageOutlivingRemovalIsHidden,
// TestWatchOfAnIDRegisteredAgainStartsAfresh). The work graph's histories
// found four more, fixed since, which the model holds strictly: TestFailedReleaseOfALeaseEndedByDeathIsNotCheckedOut,
// TestCancelledDelayedTaskIsNotGranted,
// TestPatchThatChangesNothingWritesNothing and
// TestPatchOfABlockedTaskAnswersItsOwnWrite reproduce them.

const (
	wTasks  = 8  // tasks a history may create, at most (ids sort in creation order)
	wAgents = 16 // agents of a history (the state is copied at every step: kept small)
	adminID = "admin"
)

type wIn struct {
	Op      string // tick, create, heartbeat, checkout, claim, renew, release, fail, complete, status, force, watch, inbox, remove, register, swept, drain
	Task    int
	Agent   int
	Run     string
	Fence   int64  // swept: the lease's
	Timeout int64  // ms
	Now     int64  // ms, tick only
	Strict  bool   // claim: alone, on its own store, indexes caught up
	Queues  string // claim: the queues it names, comma-separated ("": the default)
	// patch: the caller is an admin; the new title, queue, priority plus
	// one and status (zero: unchanged); If-Match (0: none).
	Admin     bool
	Title     string
	Queue     string
	Prio      int
	Status    lease.Status
	IfVersion int64
	// force: under lost sendings, a write of it was sent and its answer
	// thrown away (it may have applied), as the run recorded it.
	LostWrite bool
}

type wOut struct {
	Kind    string // ok, conflict, not_holder, not_checked_out, status_mismatch, blocked, not_ready, no_task_available, unauthorized, agent_exists, agent_not_found, task_not_found
	Task    string // claim only
	Holder  string
	Run     string
	Fence   int64
	Expires int64
	Status  lease.Status
	Held    int64
	Msgs    string // inbox: "task:fence" (task_available) or "task:fence:lost" (lease_lost), sorted, comma-separated, duplicates kept
	// status and patch: the task's version; claim, status and patch: its
	// queue and priority.
	Version int64
	Queue   string
	Prio    int
	// A grant's (and a renewal's) attempt; status and patch: the task's
	// attempts, and its not_before (ms, 0: none), which not_ready names too.
	Attempt   int
	NotBefore int64
}

// wTask is one task as the whole model sees it: the lease fields of
// linState, the last ending (for every kind of ending, as the task item's
// end_* attributes), and the watch list.
type wTask struct {
	Exists                            bool
	Status                            lease.Status
	Holder                            string
	HolderN                           int
	Run                               string
	Fence, Locked, Expires, TimeoutMS int64
	EndOp, EndAgent, EndRun           string
	EndFence, EndHeld, EndExpires     int64
	// Ends: every ending so far, oldest first, "op/agent/run/fence/held;":
	// a release or completion repeated after a later ending finds its own
	// in the trail (repeatOf).
	Ends string
	// The lease the latest checkout took over (the store's prev_*): a
	// takeover does not replace the last ending (end_*).
	PrevAgent, PrevRun     string
	PrevFence, PrevExpires int64
	Watch                  [wAgents]int64 // when each agent asked, plus one; 0: not watching
	// The task's fields that PATCH changes ("" title: the one it was
	// created with), and its version: one more for every write of the item.
	Queue   string
	Prio    int
	Title   string
	Version int64
	// PatchEnded: the fence of the lease a PATCH (or a checkout, at the
	// task's last attempt) ended as the sweep would, whose "swept" is still
	// to come.
	PatchEnded int64
	// Attempts: grants since creation or the last reopen; Failures: the
	// attempts that failed since (timeout, death, release with outcome
	// failed); at MaxAttempts a failed attempt makes the task failed.
	// NotBefore (ms, 0: none): a failed release delays the next grant by
	// wRetryDelay x 2^(failures-1). Rank: the delayed task is still in the
	// expiry index, where a sweep at or after NotBefore ranks it as ready
	// again, a write the history does not show (see rankable).
	Attempts, Failures, MaxAttempts int
	NotBefore                       int64
	Rank                            bool
	// Settle: a PATCH left the task blocked since the stream last ran, and
	// its settling may see a blocker done later (settled).
	Settle bool
	// Ended: the version an ending of an ended lease left when a checkout
	// (at the task's last attempt) or a sweep wrote it (see patchOp); it
	// is the latest write while the version is still that.
	Ended int64
	// The work graph: the blockers (task bits) the task was created
	// with, those it still waits on, its dependents, and Completed: it
	// completed since the change stream last ran, which unblocks its
	// dependents (drain).
	Blockers, WaitingOn, Dependents uint16
	Completed                       bool
}

type wAgent struct {
	Registered, Removed bool
	RegisteredAt        int64 // when an id removed before was registered again
	Msgs                string
	// Tie holds the messages of freeings the removed agent's watches,
	// placed in the millisecond TieAt, earned while it was removed: the
	// stream judges a watcher when it delivers (at the drain), so an id
	// registered again in that same millisecond may be told, its watch's
	// time being no earlier than its registration (see tell, drain).
	Tie   string
	TieAt int64
	// The heartbeat from before the removal, which the alive cache may
	// still give until StaleUntil (see cachedHB).
	Stale      hbState
	StaleUntil int64
}

type wState struct {
	// KnownBugs: allow the reported bug (cachedHB).
	KnownBugs bool
	// Lossy: the store's first sendings are lost (CHECKOUT_LIN_LOSE), so an
	// ending answered 404 may have applied or not (appliedEnding).
	Lossy bool
	Now   int64
	T     [wTasks]wTask
	HB    [maxAgents]hbState
	A     [wAgents]wAgent
	// Receipts: the grant of every named claim, "agent/run=task:fence:locked:expires:attempt:queue/priority", sorted, ';'-separated.
	Receipts string
	// Steps: the completions ("c3") and reopens from done ("r3") of tasks
	// with dependents since the change stream last ran, in order: what it
	// passes on to their dependents (drain).
	Steps string
}

func wAgentID(i int) string { return fmt.Sprintf("agent-%02d", i) }

// wQueue and wPrio are the queue and priority task i is created with: the
// first three (those TestLinearizabilityModelRejects uses) at the default
// priority, the queue "q1" for one of three, later ones at their own
// priorities.
func wQueue(i int) string {
	if i%3 == 2 {
		return "q1"
	}
	return lease.DefaultQueue
}

func wPrio(i int) int { return []int{5, 5, 5, 7, 5, 2, 9, 5}[i] }

// wMaxAttempts is task i's attempt limit: small for some, so that tasks
// fail in the histories (not for task-0, which the model's own checks
// grant again and again).
func wMaxAttempts(i int) int { return []int{100, 3, 2, 2, 100, 3, 2, 100}[i] }

// wRetryDelay is every task's retry delay: the ticks land on it (10 s)
// and on its doubling, before and past them.
const wRetryDelay = 10 * time.Second

// wGraph is a history's dependencies: blockedBy[i] is the set of tasks
// (bits) task i is created blocked by; nil, none.
type wGraph []uint16

// wBlockers is the graph TestLinearizabilityWorkGraph creates: task-2
// waits on task-0, task-3 on task-0 and task-1.
var wBlockers = wGraph{0, 0, 1 << 0, 1<<0 | 1<<1}

func (g wGraph) of(i int) uint16 {
	if i < len(g) {
		return g[i]
	}
	return 0
}

// dependents is the set of tasks (bits) blocked by task i.
func (g wGraph) dependents(i int) uint16 {
	var d uint16
	for j := range g {
		if g[j]&(1<<i) != 0 {
			d |= 1 << j
		}
	}
	return d
}

// newWTask is task i as created, in graph g: blocked while it has
// blockers (none done yet). Linking a dependent to a blocker leaves the
// blocker's version (has_dependents is no change a client sees).
func newWTask(i int, g wGraph) wTask {
	x := wTask{Exists: true, Status: lease.StatusTodo, Queue: wQueue(i), Prio: wPrio(i), Version: 1, MaxAttempts: wMaxAttempts(i),
		Blockers: g.of(i), WaitingOn: g.of(i), Dependents: g.dependents(i)}
	if x.WaitingOn != 0 {
		x.Status = lease.StatusBlocked
	}
	return x
}

// wCreate is the CreateTaskParams of task i in graph g.
func wCreate(i int, g wGraph) lease.CreateTaskParams {
	prio, maxAttempts, delay := wPrio(i), wMaxAttempts(i), wRetryDelay
	p := lease.CreateTaskParams{TaskID: wTaskID(i), Title: "title of " + wTaskID(i), Queue: wQueue(i), Priority: &prio, MaxAttempts: &maxAttempts, RetryDelay: &delay}
	for b := range wTasks {
		if g.of(i)&(1<<b) != 0 {
			p.BlockedBy = append(p.BlockedBy, wTaskID(b))
		}
	}
	return p
}

// wRetryWait is the delay after the n-th failure: wRetryDelay x 2^(n-1),
// at most lease.MaxRetryWait.
func wRetryWait(n int) int64 {
	w := wRetryDelay
	for i := 1; i < n && w < lease.MaxRetryWait; i++ {
		w *= 2
	}
	return min(w, lease.MaxRetryWait).Milliseconds()
}

// wQueues is a claim's queues.
func wQueues(qs string) []string {
	if qs == "" {
		return []string{lease.DefaultQueue}
	}
	return strings.Split(qs, ",")
}
func wTaskID(i int) string { return fmt.Sprintf("task-%d", i) }

func wTaskN(id string) int {
	var n int
	if _, err := fmt.Sscanf(id, "task-%d", &n); err != nil || n < 0 || n >= wTasks || wTaskID(n) != id {
		return -1
	}
	return n
}

// lin is task t in the terms of the per-task model, whose rules for
// checkout, renew, release, complete, status and heartbeat it reuses.
func (w *wState) lin(t int) linState {
	x := w.T[t]
	return linState{
		Now: w.Now, Status: x.Status, Holder: x.Holder, HolderN: x.HolderN, Run: x.Run, Fence: x.Fence,
		Locked: x.Locked, Expires: x.Expires, TimeoutMS: x.TimeoutMS, HB: w.HB,
		EndOp: x.EndOp, EndAgent: x.EndAgent, EndRun: x.EndRun, EndFence: x.EndFence, EndHeld: x.EndHeld,
	}
}

// setLease takes the lease and status of s; the ending fields are the whole
// model's own (see end), and none of these operations moves a heartbeat.
func (w *wState) setLease(t int, s linState) {
	x := &w.T[t]
	x.Status, x.Holder, x.HolderN, x.Run, x.Fence = s.Status, s.Holder, s.HolderN, s.Run, s.Fence
	x.Locked, x.Expires, x.TimeoutMS = s.Locked, s.Expires, s.TimeoutMS
}

// takeover records the lease on t as the one the latest checkout took over;
// its holder has lost it (lost), and its attempt failed.
func (w *wState) takeover(t int) {
	w.lost(t)
	x := &w.T[t]
	x.PrevAgent, x.PrevRun, x.PrevFence, x.PrevExpires = x.Holder, x.Run, x.Fence, x.Expires
	x.Failures++
}

// end records the lease on t as the task's last ending.
func (w *wState) end(t int, op string, held int64) {
	x := &w.T[t]
	x.EndOp, x.EndAgent, x.EndRun, x.EndFence, x.EndHeld, x.EndExpires = op, x.Holder, x.Run, x.Fence, held, x.Expires
	x.Ends += fmt.Sprintf("%s/%s/%s/%d/%d;", op, x.Holder, x.Run, x.Fence, held)
}

// repeatOf is the answer to a holder's release or completion (op) that
// names its lease (run, fence) and was refused by the item, when its
// trail holds that ending (lease/checkout.go, "A repeat after a later
// ending"): the newest ending by agent of a lease run and fence name,
// when it is op's. The trail may not have it yet (the stream archives
// it), so the refusal stands as well.
func (x *wTask) repeatOf(op, agent, run string, fence int64) (wOut, bool) {
	if run == "" && fence == 0 {
		return wOut{}, false
	}
	ends := strings.Split(strings.TrimSuffix(x.Ends, ";"), ";")
	for i := len(ends) - 1; i >= 0; i-- {
		f := strings.Split(ends[i], "/")
		if len(f) != 5 || f[1] != agent || run != "" && f[2] != run || fence != 0 && f[3] != strconv.FormatInt(fence, 10) {
			continue
		}
		if f[0] != op {
			return wOut{}, false
		}
		if op == "complete" {
			return wOut{Kind: "ok", Status: lease.StatusDone}, true
		}
		held, _ := strconv.ParseInt(f[4], 10, 64)
		return wOut{Kind: "ok", Held: held}, true
	}
	return wOut{}, false
}

func (w *wState) clearLease(t int, status lease.Status) {
	x := &w.T[t]
	x.Holder, x.HolderN, x.Run, x.Locked, x.Expires, x.TimeoutMS = "", 0, "", 0, 0, 0
	x.Status = status
}

// lost tells the holder of the lease on t that it lost it (a timeout, a
// death, a force release, a cancel by someone else, a takeover): one
// lease_lost message, "task:fence:lost", which its inbox shows unless the
// holder was removed since, or its id registered again at or after the
// lease was locked (the lease, and the message, are the removed agent's).
func (w *wState) lost(t int) {
	x := &w.T[t]
	if x.Holder == "" {
		return
	}
	a := &w.A[x.HolderN]
	if !a.Removed && a.RegisteredAt < x.Locked {
		a.Msgs = addMsg(a.Msgs, fmt.Sprintf("%d:%d:lost", t, x.Fence))
	}
}

// free ends the lease on t by op and frees the task: each watcher that is
// still the agent who asked gets one message for this lease. A task
// marked as waiting on a reopened blocker (WaitingOn, see drain) is
// blocked instead, unless the ending cancels it or fails it (exhausted):
// nobody is told until it is unblocked.
func (w *wState) free(t int, op string, held int64, exhausted bool) {
	w.end(t, op, held)
	if op != "cancel" && !exhausted && w.T[t].WaitingOn != 0 {
		w.clearLease(t, lease.StatusBlocked)
		return
	}
	w.tell(t, w.T[t].Fence)
	w.clearLease(t, lease.StatusTodo)
}

// tell gives each watcher of t that is still the agent who asked one
// message, "t:fence" (an unblocking's: fence 0), and drops the watches.
func (w *wState) tell(t int, fence int64) {
	x := &w.T[t]
	for a, at := range x.Watch {
		switch msg := fmt.Sprintf("%d:%d", t, fence); {
		case at != 0 && w.A[a].Removed && at-1 == w.Now:
			w.A[a].Tie, w.A[a].TieAt = addMsg(w.A[a].Tie, msg), w.Now
		case at == 0 || w.A[a].Removed:
		case !(w.A[a].RegisteredAt > at-1):
			w.A[a].Msgs = addMsg(w.A[a].Msgs, msg)
		}
		// A watch placed by an id's removed self tells nobody, not the
		// agent registered again under the id
		// (TestWatchOfAnIDRegisteredAgainStartsAfresh).
	}
	x.Watch = [wAgents]int64{}
}

// endFailed ends the lease on t, which has ended by time or by its
// holder's death, as the sweep does: a failed attempt, which fails the
// task when it was its last (the watchers are told either way). The
// holder loses the lease.
func (w *wState) endFailed(t int) {
	w.lost(t)
	w.free(t, "sweep", 0, w.T[t].Attempts >= w.T[t].MaxAttempts)
	x := &w.T[t]
	x.Failures++
	if x.Attempts >= x.MaxAttempts {
		x.Status = lease.StatusFailed
	}
	x.Version++
}

// rankable: a sweep may rank the delayed task t as ready (lease/sweep.go,
// rankReady): one write, which moves nothing the history shows but the
// version. The history does not show when, or whether, a sweep did (its
// index lags), so every operation on t may find it done or not.
func (w *wState) rankable(t int) bool {
	x := w.T[t]
	return x.Rank && x.Holder == "" && x.NotBefore <= w.Now
}

// ranked is w, and w with t ranked if it may be.
func (w wState) ranked(t int) []wState {
	if t < 0 || t >= wTasks || !w.rankable(t) {
		return []wState{w}
	}
	r := w
	r.T[t].Rank = false
	r.T[t].Version++
	return []wState{w, r}
}

// silent is every state the silent writes may have left before an
// operation on t: a sweep's ranking of t (ranked), the settling of any
// task a PATCH left to settle (settled), and the blocking again of any
// dependent of a reopened blocker by a writer's second read (rechecked),
// which may come before an operation on another task (its blocker's
// reopen, say) as well as on its own.
func (w wState) silent(t int) []wState {
	var out []wState
	for _, r := range w.ranked(t) {
		states := []wState{r}
		for u := range wTasks {
			for _, st := range states {
				if s, ok := st.settled(u); ok {
					states = append(states, s)
				}
			}
		}
		for u := range wTasks {
			for _, st := range states {
				if s, ok := st.rechecked(u); ok {
					states = append(states, s)
				}
			}
		}
		out = append(out, states...)
	}
	return out
}

// rechecked is t blocked again on each blocker reopened since the stream
// last ran (a step "r" in Steps) that is not done now, as the stream will
// block it (drain), done early: a writer that read such a blocker done
// and then wrote t not waiting on it (an unblocking checkout, a reopen of
// t, a settle) reads it again after its write and blocks t on it
// (lease/deps.go, recheck). The history shows that read nowhere, so it
// may come before any later operation on t.
func (w wState) rechecked(t int) (wState, bool) {
	if t < 0 || t >= wTasks || w.Steps == "" {
		return w, false
	}
	x := &w.T[t]
	moved := false
	for _, b := range reopenedSteps(w.Steps) {
		if w.T[b].Dependents&(1<<t) == 0 || w.T[b].Status == lease.StatusDone || x.WaitingOn&(1<<b) != 0 {
			continue
		}
		switch x.Status {
		case lease.StatusTodo, lease.StatusBlocked:
			x.Status = lease.StatusBlocked
			x.WaitingOn |= 1 << b
			x.Version++
			moved = true
		case lease.StatusInProgress:
			x.WaitingOn |= 1 << b // marked, no version: its lease stays
			moved = true
		}
	}
	return w, moved
}

// reopenedSteps is the blockers of the reopens ("r3") among steps.
func reopenedSteps(steps string) []int {
	var out []int
	for steps != "" {
		op := steps[0]
		i := 1
		for i < len(steps) && steps[i] >= '0' && steps[i] <= '9' {
			i++
		}
		b, _ := strconv.Atoi(steps[1:i])
		steps = steps[i:]
		if op == 'r' {
			out = append(out, b)
		}
	}
	return out
}

// settled is t unblocked from every blocker it waits on that is done, as a
// PATCH that left t blocked settles it (lease/deps.go, settle): after its
// own write and its answer's deciding moment, so that a blocker's
// completion in between is seen by it (Settle), until the stream has run.
func (w wState) settled(t int) (wState, bool) {
	if t < 0 || t >= wTasks || !w.T[t].Settle {
		return w, false
	}
	x := &w.T[t]
	moved := false
	for b := range wTasks {
		if x.WaitingOn&(1<<b) != 0 && w.T[b].Status == lease.StatusDone {
			moved = true
			x.WaitingOn &^= 1 << b
			x.Version++
			if x.WaitingOn == 0 && x.Status == lease.StatusBlocked {
				x.Status = lease.StatusTodo
				w.tell(t, 0)
			}
		}
	}
	return w, moved
}

// unblockable reports whether blocked task t may be unblocked by a checkout
// (lease/checkout.go): it is ready, and every blocker it waits on has
// completed since the change stream last ran (its completion, which the
// drain would unblock it by, is there to read), or is done while a PATCH
// that left t blocked has yet to settle it (settled).
func (w wState) unblockable(t int) bool {
	x := w.T[t]
	if x.WaitingOn == 0 || x.NotBefore > w.Now {
		return false
	}
	for b := range wTasks {
		if x.WaitingOn&(1<<b) != 0 && !w.T[b].Completed && !(x.Settle && w.T[b].Status == lease.StatusDone) {
			return false
		}
	}
	return true
}

// drain is the change stream's part in the graph (lease/deps.go): the
// completions and reopens of blockers since it last ran (Steps), in
// order, each judged by the blocker as it is now. A completion of a
// blocker still done takes it out of its dependents' waiting lists, one
// write each, and a blocked dependent whose list is then empty becomes
// todo with an unblocked event, whose watchers are told (fence 0). A
// reopen of a blocker still not done blocks again each dependent that is
// todo (one write: blocked, waiting on it) or blocked without waiting on
// it (one write: it waits on it too), and marks one in progress as
// waiting on it, which blocks it once its lease ends without completion.
func (w wState) drain() wState {
	for t := range wTasks {
		w.T[t].Settle = false
		w.T[t].Completed = false
	}
	steps := w.Steps
	w.Steps = ""
	for steps != "" {
		op := steps[0]
		i := 1
		for i < len(steps) && steps[i] >= '0' && steps[i] <= '9' {
			i++
		}
		b, _ := strconv.Atoi(steps[1:i])
		steps = steps[i:]
		done := w.T[b].Status == lease.StatusDone
		for d := range wTasks {
			x := &w.T[d]
			if w.T[b].Dependents&(1<<d) == 0 {
				continue
			}
			switch {
			case op == 'c' && done && x.WaitingOn&(1<<b) != 0:
				x.WaitingOn &^= 1 << b
				x.Version++
				if x.WaitingOn == 0 && x.Status == lease.StatusBlocked {
					x.Status = lease.StatusTodo
					w.tell(d, 0)
				}
			case op == 'r' && !done && (x.Status == lease.StatusTodo || x.Status == lease.StatusBlocked && x.WaitingOn&(1<<b) == 0):
				x.Status = lease.StatusBlocked
				x.WaitingOn |= 1 << b
				x.Version++
			case op == 'r' && !done && x.Status == lease.StatusInProgress:
				x.WaitingOn |= 1 << b // marked, no version: its lease stays
			}
		}
	}
	return w
}

// addMsg adds m to a message list, kept sorted (a multiset).
func addMsg(msgs, m string) string {
	var all []string
	if msgs != "" {
		all = strings.Split(msgs, ",")
	}
	all = append(all, m)
	sort.Strings(all)
	return strings.Join(all, ",")
}

// available: a claim may take t (todo, or a lease that has ended).
func (w *wState) available(t int) bool {
	x := w.T[t]
	// Never blocked; never before not_before; an ended lease that was the
	// task's last attempt is not taken over (a checkout fails the task).
	return x.Exists && !w.lin(t).live() && (x.Status == lease.StatusTodo || x.Status == lease.StatusInProgress) &&
		x.NotBefore <= w.Now && (x.Holder == "" || x.Attempts < x.MaxAttempts)
}

// sure: a lone claim with caught-up indexes finds t: todo with no lease
// on it. A lease that expired or whose holder died is found once a sweep
// has ended it (or by an index entry that lags its grant, which is not
// sure).
func (w *wState) sure(t int) bool {
	return w.available(t) && w.T[t].Holder == ""
}

// before: a is claimed before b, by priority, then age (ids sort in
// creation order).
func (w *wState) before(a, b int) bool {
	if pa, pb := w.T[a].Prio, w.T[b].Prio; pa != pb {
		return pa > pb
	}
	return a < b
}

// bestSure is the best task of queues that is surely available, or -1.
func (w *wState) bestSure(queues []string) int {
	best := -1
	for t := range wTasks {
		if w.sure(t) && slices.Contains(queues, w.T[t].Queue) && (best < 0 || w.before(t, best)) {
			best = t
		}
	}
	return best
}

func wOutOf(o linOut) wOut {
	return wOut{Kind: o.Kind, Holder: o.Holder, Run: o.Run, Fence: o.Fence, Expires: o.Expires, Status: o.Status, Held: o.Held}
}

// next is the whole model's specification: every state the operation may
// leave, given its answer (none: the answer is wrong).
func (w wState) next(in wIn, out wOut) []wState {
	ok := wOut{Kind: "ok"}
	one := func(want wOut) []wState {
		if out != want {
			return nil
		}
		return []wState{w}
	}
	switch in.Op {
	case "tick":
		if out != ok {
			return nil
		}
		w.Now = in.Now
		return []wState{w}
	case "create":
		if out != ok || w.T[in.Task].Exists {
			return nil
		}
		w.T[in.Task] = newWTask(in.Task, nil)
		return []wState{w}
	case "drain":
		if out != ok {
			return nil
		}
		d := w.drain()
		told := d
		tie := false
		for a := range d.A {
			x, y := &d.A[a], &told.A[a]
			if x.Tie == "" {
				continue
			}
			tie = true
			if y.Registered && y.RegisteredAt == y.TieAt {
				for _, m := range strings.Split(y.Tie, ",") {
					y.Msgs = addMsg(y.Msgs, m)
				}
			}
			x.Tie, x.TieAt, y.Tie, y.TieAt = "", 0, "", 0
		}
		if tie {
			return []wState{d, told}
		}
		return []wState{d}
	case "heartbeat":
		if w.A[in.Agent].Removed {
			return one(wOut{Kind: "unauthorized"})
		}
		want, nx := linState{Now: w.Now, HB: w.HB}.step(linIn{Op: "heartbeat", AgentN: in.Agent, Timeout: in.Timeout})
		if out != wOutOf(want) {
			return nil
		}
		w.HB = nx.HB
		return []wState{w}
	case "inbox":
		// A freeing that read the watchers' heartbeats before a removal
		// may write its message after the removal emptied the inbox;
		// Inbox hides it (TestMessageOutlivingRemovalIsHidden), as it
		// hides one of a watch placed by an id's removed self.
		return one(wOut{Kind: "ok", Msgs: w.A[in.Agent].Msgs})
	case "remove":
		a := &w.A[in.Agent]
		if !a.Registered {
			return one(wOut{Kind: "agent_not_found"})
		}
		if out != ok {
			return nil
		}
		a.Registered, a.Removed, a.Msgs = false, true, ""
		if old := w.HB[in.Agent]; w.KnownBugs && (!old.Has || old.Exp > w.Now) {
			a.Stale, a.StaleUntil = old, w.Now+lease.MinHeartbeatTTL.Milliseconds()
			if old.Has {
				a.StaleUntil = min(a.StaleUntil, old.Exp)
			}
		}
		w.HB[in.Agent] = hbState{Has: true, Exp: w.Now, Since: w.Now} // dead for ever
		return []wState{w}
	case "register":
		a := &w.A[in.Agent]
		if a.Registered {
			return one(wOut{Kind: "agent_exists"})
		}
		if out != ok {
			return nil
		}
		a.Registered, a.Removed, a.RegisteredAt = true, false, w.Now
		w.dropReceipts(in.Agent, w.Now)
		if w.HB[in.Agent].Has {
			// The tombstone becomes an agent not watched yet, alive since now.
			w.HB[in.Agent] = hbState{Has: true, Exp: math.MaxInt64, Since: w.Now}
		}
		return []wState{w}
	case "swept":
		// A sweep, or removal's own pass, ended this lease: it was there,
		// and had ended (expired, or its holder dead by a consistent read).
		t, x := in.Task, w.T[in.Task]
		if out == ok && in.Fence != 0 && x.PatchEnded == in.Fence {
			w.T[t].PatchEnded = 0 // a PATCH ended it (patchOp)
			return []wState{w}
		}
		if out != ok || x.Holder == "" || x.Fence != in.Fence || w.lin(t).live() {
			return nil
		}
		var states []wState
		for _, r := range w.silent(t) {
			r.endFailed(t)
			r.T[t].Ended = r.T[t].Version
			states = append(states, r)
		}
		return states
	case "claim":
		var states []wState
		for _, r := range w.silent(wTaskN(out.Task)) {
			states = append(states, r.claim(in, out)...)
		}
		return states
	}
	t := in.Task
	if !w.T[t].Exists {
		return one(wOut{Kind: "task_not_found"})
	}
	switch in.Op {
	case "watch":
		if out.Kind == "not_watching" {
			return []wState{w} // nothing written: the agent is told of nothing
		}
		if out != ok {
			return nil
		}
		// A watch is an item of its own: the task item, and so its
		// version, is not written.
		if w.A[in.Agent].Removed {
			// A removed agent's watch is its removed self's, whom no
			// freeing tells once the id is registered again: one it
			// watched with before keeps that watch's time (lease/watch.go).
			// Without one, its time is now, and an id registered again in
			// the same millisecond is told as the store's times say.
			// The checker may not know which the store found: both.
			void := w
			if void.T[t].Watch[in.Agent] == 0 {
				void.T[t].Watch[in.Agent] = 1
			}
			w.T[t].Watch[in.Agent] = w.Now + 1
			return []wState{w, void}
		}
		w.T[t].Watch[in.Agent] = w.Now + 1
		return []wState{w}
	}
	op := wState.taskOp
	if in.Op == "patch" {
		op = wState.patchOp
	}
	// force, checkout, renew, release, complete, status judge the holder
	// by the alive cache: see cachedHB.
	hbs := w.cachedHB()
	if hbs == nil {
		hbs = [][maxAgents]hbState{w.HB}
	}
	// Under lost sendings, an ending answered 404 may have applied, or
	// done nothing though the caller's lease was live (appliedEnding).
	// A force release answered 404 whose write was sent and its answer
	// thrown away may have applied too (that sending ended the lease, and
	// a grant and an ending of the task came before the next), but not
	// done nothing while a lease was live: it ends whoever's lease it read.
	ending := w.Lossy && out == wOut{Kind: "not_checked_out"} && (in.Op == "release" || in.Op == "fail" || in.Op == "complete")
	forced := w.Lossy && out == wOut{Kind: "not_checked_out"} && in.Op == "force" && in.LostWrite
	var states []wState
	for _, r := range w.silent(t) {
		if ending {
			states = append(states, r)
		}
		for _, hb := range hbs {
			if s, ok := op(r, in, out, hb); ok {
				states = append(states, s)
			}
			if !ending && !forced {
				continue
			}
			if want, ok := r.appliedEnding(in, hb); ok {
				if s, ok := op(r, in, want, hb); ok {
					states = append(states, s)
				}
			}
		}
	}
	return states
}

// appliedEnding is the answer of in, a release, fail, complete or force
// release, had it applied at w (heartbeats judged by hb); false when it
// ends nothing.
//
// Under lost sendings (Lossy) an ending answered 404 not_checked_out may
// have applied, or done nothing though the caller's lease was live, as
// README's known limits say of an ending whose answer was lost while the
// change stream was held up past the wait for the trail (these tests run
// the stream between phases only). Applied: its first sending applied and
// before its second another lease of the task was granted and ended, so
// its ending is no longer on the task, and not yet in the trail. Nothing
// done: one naming no lease, refused in the millisecond of another ending
// (its second sending's term), cannot tell its own from a later lease's
// and leaves the lease running. The model allows both at any time, not
// only in those races: lossy runs check less there. A force release
// naming no lease, its first sending applied and its task granted and
// freed again before its second, looks for its ending in the trail,
// which these tests archive between phases only: applied.
func (w wState) appliedEnding(in wIn, hb [maxAgents]hbState) (wOut, bool) {
	s := w.lin(in.Task)
	s.HB = hb
	if in.Op == "force" {
		return wOut{Kind: "ok", Held: w.Now - s.Locked}, s.live() // as taskOp ends it
	}
	lo, _ := s.step(linIn{Op: in.Op, Task: wTaskID(in.Task), Agent: wAgentID(in.Agent), AgentN: in.Agent, Run: in.Run, Fence: in.Fence, Timeout: in.Timeout})
	want := wOutOf(lo)
	return want, want.Kind == "ok"
}

// taskOp is force, checkout, renew, release, complete or status on one
// task, judging heartbeats by hb.
func (w wState) taskOp(in wIn, out wOut, hb [maxAgents]hbState) (wState, bool) {
	t := in.Task
	s := w.lin(t)
	s.HB = hb
	if in.Op == "force" {
		// An admin ends whoever's live lease it is.
		if !s.live() {
			return w, out == wOut{Kind: "not_checked_out"}
		}
		held := w.Now - s.Locked
		if out != (wOut{Kind: "ok", Held: held}) {
			return w, false
		}
		w.lost(t) // by the admin, never a holder here
		w.free(t, "force", held, false)
		w.T[t].Version++
		return w, true
	}
	x := &w.T[t]
	// The same run retrying a checkout it made while dead gets the same
	// lease (step), even at the task's last attempt.
	sameDeadRun := s.timeValid() && s.Holder == wAgentID(in.Agent) && s.Run == in.Run && s.dead(in.Agent)
	if in.Op == "checkout" && !s.live() && !sameDeadRun {
		switch {
		case x.Status == lease.StatusBlocked && (out == wOut{Kind: "blocked"} || !w.unblockable(t)):
			return w, out == wOut{Kind: "blocked"} // never granted while a blocker is not done
		case x.Status == lease.StatusBlocked:
			// Every blocker it waits on has completed since the stream last
			// ran: the checkout's own write unblocks it, as the stream
			// would, and grants it (lease/checkout.go). One write: one
			// version, and nobody is told (the task was never free).
			x.WaitingOn, x.Status, x.Settle = 0, lease.StatusTodo, false
			s = w.lin(t)
			s.HB = hb
		case x.Holder != "" && x.Attempts >= x.MaxAttempts && (x.Status == lease.StatusTodo || x.Status == lease.StatusInProgress):
			// An ended lease that was the task's last attempt: the checkout
			// ends it as the sweep would, failing the task, and answers
			// that the task is failed. That ending's "swept" comes after.
			if out != (wOut{Kind: "status_mismatch", Status: lease.StatusFailed}) {
				return w, false
			}
			x.PatchEnded = x.Fence
			w.endFailed(t)
			x.Ended = x.Version
			return w, true
		case x.Holder != "" && x.WaitingOn != 0 && (x.Status == lease.StatusTodo || x.Status == lease.StatusInProgress):
			// An ended lease of a task marked as waiting on a reopened
			// blocker: the checkout ends it as the sweep would, which
			// blocks the task, and judges the task then. That ending's
			// "swept" comes after.
			x.PatchEnded = x.Fence
			w.endFailed(t)
			x.Ended = x.Version
			return w.taskOp(in, out, hb)
		case x.Holder == "" && x.Status == lease.StatusTodo && x.NotBefore > w.Now:
			return w, out == wOut{Kind: "not_ready", NotBefore: x.NotBefore}
		}
	}
	op := in.Op
	lo, nx := s.step(linIn{Op: op, Task: wTaskID(t), Agent: wAgentID(in.Agent), AgentN: in.Agent, Run: in.Run, Fence: in.Fence, Timeout: in.Timeout})
	want := wOutOf(lo)
	granted := in.Op == "checkout" && nx.Fence != s.Fence
	if want.Kind == "ok" && want.Holder != "" {
		// A grant's or a renewal's lease names its attempt.
		want.Attempt = x.Attempts
		if granted {
			want.Attempt++
		}
	}
	if in.Op == "status" {
		want.Version, want.Queue, want.Prio, want.Attempt, want.NotBefore = x.Version, x.Queue, x.Prio, x.Attempts, x.NotBefore
		if s.Holder != "" && !s.live() && s.Status == lease.StatusInProgress && x.Attempts >= x.MaxAttempts {
			want.Status = lease.StatusFailed // ended at the last attempt, not swept: failed next
		} else if s.Holder != "" && !s.live() && s.Status == lease.StatusInProgress && x.WaitingOn != 0 {
			want.Status = lease.StatusBlocked // ended, marked: blocked next
		}
	}
	if out != want && (want.Kind == "not_checked_out" || want.Kind == "not_holder") && (op == "release" || op == "fail" || op == "complete") {
		// Refused by the item, answered from the trail: nothing written.
		alt, ok := x.repeatOf(op, wAgentID(in.Agent), in.Run, in.Fence)
		return w, ok && out == alt
	}
	if out != want {
		return w, false
	}
	if granted {
		x.Attempts++
		x.NotBefore, x.Rank = 0, false // passed; the grant ranks the task itself
	}
	// Every write of the item adds one to its version: a grant, a renewal
	// and an ending; a retry answered from the item, a conflict, a refusal
	// and a read write nothing.
	if nx.Fence != s.Fence || in.Op == "renew" && want.Kind == "ok" || s.Holder != "" && nx.Holder == "" {
		w.T[t].Version++
	}
	if s.Holder != "" && (nx.Holder == "" || nx.Fence != s.Fence) {
		switch in.Op { // the lease on the task ended here
		case "release":
			w.free(t, "release", nx.EndHeld, false)
		case "fail":
			// A failed attempt: the task fails at its last; otherwise it
			// waits for the retry delay, doubled with each failure (or,
			// marked, for its reopened blocker: blocked, no delay).
			w.free(t, "fail", nx.EndHeld, x.Attempts >= x.MaxAttempts)
			x.Failures++
			switch {
			case x.Attempts >= x.MaxAttempts:
				nx.Status = lease.StatusFailed
			case x.Status == lease.StatusBlocked: // marked: it waits for its blocker
			default:
				if x.NotBefore = w.Now + wRetryWait(x.Failures); x.NotBefore > w.Now {
					x.Rank = true
				}
			}
		case "complete":
			// Nobody is told: a completion is not a freeing. The watches
			// stay (they are items of their own, lease/watch.go): a
			// reopened task's next freeing tells them.
			w.end(t, "complete", nx.EndHeld)
			x.Completed = x.Completed || x.Dependents != 0
			if x.Dependents != 0 {
				w.Steps += fmt.Sprintf("c%d", t)
			}
		case "checkout":
			w.takeover(t) // the watch list stays: the task never became free
		}
		if nx.Holder == "" && nx.Status == lease.StatusTodo && x.Status == lease.StatusBlocked {
			nx.Status = lease.StatusBlocked // marked: free blocked it
		}
	}
	w.setLease(t, nx)
	return w, true
}

// patchOp is a PATCH of task in.Task, judging heartbeats by hb. It is one
// write pinned to the version (or none, when it changes nothing). Status
// cancelled ends a live lease (its holder's or an admin's call) and frees
// the task of it: watchers are told; todo reopens a done or cancelled task.
// Fields never touch a lease.
func (w wState) patchOp(in wIn, out wOut, hb [maxAgents]hbState) (wState, bool) {
	t := in.Task
	x := &w.T[t]
	if in.IfVersion != 0 && in.IfVersion != x.Version {
		// The write before was the ending of an ended lease, by a checkout
		// at the task's last attempt or by a sweep (Ended): a PATCH that
		// read the task before it ends that lease too, and whichever
		// writes first is the one that applies. When the PATCH's did, the
		// other found the lease ended (the checkout the task failed, the
		// sweep nothing to do), and the PATCH goes on from its own
		// ending's version; a status read between them saw that ending.
		// Had the other's applied, the PATCH would answer
		// version_mismatch.
		if !(x.Ended == x.Version && in.IfVersion == x.Version-1 && out.Kind != "version_mismatch") {
			return w, out == wOut{Kind: "version_mismatch"}
		}
	}
	s := w.lin(t)
	s.HB = hb
	live := s.live()
	if x.Holder != "" && !live && in.Status != "" {
		// A lease that has ended and is still on the item: the PATCH ends
		// it first, as the sweep would, in a write of its own (the version
		// it was given is the one before). That ending's "swept" comes
		// after, and finds it done (see swept); or a sweep ended it before
		// the PATCH read the task, and the "swept" came first.
		x.PatchEnded = x.Fence
		w.endFailed(t)
	}
	status := x.Status
	if x.Holder != "" && !live && status == lease.StatusInProgress {
		status = lease.StatusTodo
		if x.WaitingOn != 0 {
			status = lease.StatusBlocked // marked: its ending blocks it
		}
	}
	changed := false
	if in.Status != "" && in.Status != status {
		switch {
		case in.Status == lease.StatusCancelled && (status == lease.StatusDone || status == lease.StatusFailed),
			in.Status == lease.StatusTodo && (status == lease.StatusInProgress || status == lease.StatusBlocked):
			return w, out == wOut{Kind: "invalid_transition"}
		case in.Status == lease.StatusCancelled && live:
			if x.Holder != wAgentID(in.Agent) && !in.Admin {
				return w, out == wOut{Kind: "not_holder", Holder: x.Holder, Fence: x.Fence}
			}
			if x.Holder != wAgentID(in.Agent) {
				w.lost(t) // cancelled by someone else: an admin
			}
			w.free(t, "cancel", w.Now-x.Locked, false)
		case in.Status == lease.StatusTodo:
			// A reopen: attempts anew, no delay; blocked while a blocker
			// is not done now (one done when the task was unblocked may
			// have been reopened since). A done task reopened blocks its
			// dependents again once the stream has run (drain).
			if status == lease.StatusDone && x.Dependents != 0 {
				w.Steps += fmt.Sprintf("r%d", t)
			}
			x.Attempts, x.Failures, x.NotBefore, x.Rank = 0, 0, 0, false
			x.WaitingOn = 0
			for b := range wTasks {
				if x.Blockers&(1<<b) != 0 && w.T[b].Status != lease.StatusDone {
					x.WaitingOn |= 1 << b
				}
			}
		}
		x.Status = in.Status
		if x.Status == lease.StatusTodo && x.WaitingOn != 0 {
			x.Status = lease.StatusBlocked
		}
		changed = true
	}
	if in.Title != "" && in.Title != x.Title {
		x.Title, changed = in.Title, true
	}
	if in.Queue != "" && in.Queue != x.Queue {
		x.Queue, changed = in.Queue, true
	}
	if in.Prio != 0 && in.Prio-1 != x.Prio {
		x.Prio, changed = in.Prio-1, true
	}
	if changed {
		x.Version++
	}
	if changed && x.Status == lease.StatusBlocked {
		// A PATCH that leaves the task blocked then settles it (lease/deps.go,
		// settle): each blocker it waits on that is done by then unblocks
		// it, a write each, the last making it todo. Those writes come after
		// the PATCH's own, and its answer is its own write's: the model
		// settles the task silently before any later operation on it until
		// the stream has run (Settle, settled).
		x.Settle = true
	}
	want := wOut{Kind: "ok", Status: x.Status, Version: x.Version, Queue: x.Queue, Prio: x.Prio, Attempt: x.Attempts, NotBefore: x.NotBefore}
	switch {
	case x.Holder != "" && live:
		want.Holder, want.Run, want.Fence, want.Expires = x.Holder, x.Run, x.Fence, x.Expires
	case x.Holder != "" && x.Status == lease.StatusInProgress:
		// Ended, not swept: the task's next state, failed at the limit
		// (blocked, marked as waiting on a reopened blocker).
		want.Status = lease.StatusTodo
		if x.Attempts >= x.MaxAttempts {
			want.Status = lease.StatusFailed
		} else if x.WaitingOn != 0 {
			want.Status = lease.StatusBlocked
		}
	}
	return w, out == want
}

// cachedHB is every view of the heartbeats that a judgment may use.
// Known bug (TestKnownBugRemovedAgentCachedAlive): a read of an agent's
// heartbeat that races its removal can leave the agent cached as alive
// after RemoveAgent has answered, for MinHeartbeatTTL at most and never
// past the heartbeat's expiry. Likewise a judgment whose read came before
// the tombstone and whose write comes after it: renew, release and
// complete condition their write on the holder and locked_at, not on the
// tombstone, and a force release pins the lease it judged live, so one
// racing the removal can still take effect after the removal answered.
// With KnownBugs the model allows both: until MinHeartbeatTTL after the
// removal, a judgment may still see the heartbeat from before it.
// Checkouts, renewals, releases, completions, status reads and force
// releases judge so; sweeps, claims and watchers' messages read heartbeats
// consistently when they decide, and see only the tombstone.
func (w *wState) cachedHB() [][maxAgents]hbState {
	var out [][maxAgents]hbState // nil: only w.HB
	for a := range w.A {
		if w.Now >= w.A[a].StaleUntil {
			continue
		}
		if out == nil {
			out = [][maxAgents]hbState{w.HB}
		}
		for _, hb := range out {
			hb[a] = w.A[a].Stale
			out = append(out, hb)
		}
	}
	return out
}

func (w wState) claim(in wIn, out wOut) []wState {
	agent := wAgentID(in.Agent)
	if in.Run != "" {
		// A named claim whose run got a lease answers with that lease, the
		// one its receipt names, whatever the task has done since
		// (renewed, released, taken over, claimed again), and grants
		// nothing. Its expiry is the lease's now: renewed, or when it
		// ended, which the model does not follow
		// (TestClaimRetryAnswersTheLeaseAsItIsNow holds it).
		if r, ok := w.receipt(in.Agent, in.Run); ok {
			if got := out; func() bool { got.Expires = r.Expires; return got != r }() {
				return nil
			}
			return []wState{w}
		}
	}
	queues := wQueues(in.Queues)
	best := w.bestSure(queues)
	if out.Kind == "no_task_available" && out == (wOut{Kind: out.Kind}) {
		if in.Strict && best >= 0 {
			return nil
		}
		return []wState{w}
	}
	t := wTaskN(out.Task)
	if out.Kind != "ok" || t < 0 || !w.available(t) || !slices.Contains(queues, w.T[t].Queue) {
		return nil // never a held task, nor one outside the claim's queues
	}
	x := &w.T[t]
	if out.Holder != agent || out.Run == "" || in.Run != "" && out.Run != in.Run ||
		out.Fence != x.Fence+1 || out.Expires != w.Now+in.Timeout || out.Queue != x.Queue || out.Prio != x.Prio ||
		out.Attempt != x.Attempts+1 || out.NotBefore != 0 ||
		out.Status != "" || out.Held != 0 || out.Msgs != "" || out.Version != 0 {
		return nil
	}
	if in.Strict && t != best && (w.sure(t) || best >= 0 && !w.before(t, best)) {
		return nil // a lone claim takes the best
	}
	if x.Holder != "" && x.WaitingOn != 0 {
		return nil // marked: its ending blocks it, never taken over
	}
	if x.Holder != "" {
		w.takeover(t)
	}
	x.Status, x.Holder, x.HolderN, x.Run = lease.StatusInProgress, agent, in.Agent, out.Run
	x.Fence, x.Locked, x.Expires, x.TimeoutMS = x.Fence+1, w.Now, w.Now+in.Timeout, in.Timeout
	x.Attempts++
	x.NotBefore, x.Rank = 0, false
	x.Version++
	if in.Run != "" {
		w.keepReceipt(in.Agent, in.Run, w.Now, out)
	}
	return []wState{w}
}

// receipt is the grant a named claim's receipt keeps.
func (w *wState) receipt(agent int, run string) (wOut, bool) {
	prefix := fmt.Sprintf("%d/%s=", agent, run)
	for _, r := range strings.Split(w.Receipts, ";") {
		if rest, ok := strings.CutPrefix(r, prefix); ok {
			var o wOut
			var q string
			var t int
			var locked int64
			if _, err := fmt.Sscanf(rest, "%d:%d:%d:%d:%d:%s", &t, &o.Fence, &locked, &o.Expires, &o.Attempt, &q); err != nil {
				panic(err)
			}
			o.Kind, o.Task, o.Holder, o.Run = "ok", wTaskID(t), wAgentID(agent), run
			qp := strings.Split(q, "/")
			o.Queue = qp[0]
			o.Prio, _ = strconv.Atoi(qp[1])
			return o, true
		}
	}
	return wOut{}, false
}

// dropReceipts forgets the receipts of agent's grants locked before
// registeredAt, its registration again: they are its removed self's, and
// the agent the id names now claims those run ids afresh.
func (w *wState) dropReceipts(agent int, registeredAt int64) {
	prefix := fmt.Sprintf("%d/", agent)
	all := slices.DeleteFunc(strings.Split(w.Receipts, ";"), func(r string) bool {
		rest, ok := strings.CutPrefix(r, prefix)
		if !ok {
			return r == ""
		}
		var t int
		var fence, locked int64
		_, grant, _ := strings.Cut(rest, "=")
		if _, err := fmt.Sscanf(grant, "%d:%d:%d:", &t, &fence, &locked); err != nil {
			panic(err)
		}
		return locked < registeredAt
	})
	w.Receipts = strings.Join(all, ";")
}

func (w *wState) keepReceipt(agent int, run string, locked int64, o wOut) {
	r := fmt.Sprintf("%d/%s=%d:%d:%d:%d:%d:%s/%d", agent, run, wTaskN(o.Task), o.Fence, locked, o.Expires, o.Attempt, o.Queue, o.Prio)
	all := append(strings.Split(w.Receipts, ";"), r)
	all = slices.DeleteFunc(all, func(s string) bool { return s == "" })
	sort.Strings(all)
	w.Receipts = strings.Join(all, ";")
}

// wholeModel checks histories of the whole store, starting at start with
// tasks 0..tasks-1 (created in graph g) and agents 0..agents-1 registered.
// Histories without claims or dependencies are partitioned by task.
// knownBugs allows the reported bugs of the alive cache and of messages in
// flight at a removal.
func wholeModel(start int64, tasks, agents int, knownBugs bool, g wGraph) porcupine.Model {
	m := wholeNDModel(start, tasks, agents, knownBugs, g)
	return m.ToModel()
}

// withLossy is m, the whole-service model, starting from states with
// Lossy set to lossy: for histories of stores that lose sendings.
func withLossy(m porcupine.NondeterministicModel, lossy bool) porcupine.NondeterministicModel {
	init := m.Init
	m.Init = func() []any {
		states := init()
		for _, s := range states {
			s.(*wState).Lossy = lossy
		}
		return states
	}
	return m
}

// wholeNDModel is wholeModel before porcupine's power-set construction:
// each step gives every state the store may be in next, which the
// segment checker (linsegment_test.go) follows one by one.
func wholeNDModel(start int64, tasks, agents int, knownBugs bool, g wGraph) porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Partition: wholePartition,
		Init: func() []any {
			s := wState{Now: start, KnownBugs: knownBugs}
			for t := range tasks {
				s.T[t] = newWTask(t, g)
			}
			for a := range agents {
				s.A[a].Registered = true
			}
			return []any{&s}
		},
		// States are pointers: a state is a few kilobytes, and is copied
		// once per step, not once per interface conversion.
		Step: func(state, input, output any) []any {
			next := state.(*wState).next(input.(wIn), output.(wOut))
			out := make([]any, len(next))
			for i := range next {
				out[i] = &next[i]
			}
			return out
		},
		Equal: func(a, b any) bool { return *a.(*wState) == *b.(*wState) },
		Hash:  func(state any) uint64 { return state.(*wState).hash() },
		DescribeOperation: func(input, output any) string {
			return fmt.Sprintf("%+v -> %+v", input, output)
		},
	}
}

// hash is a cheap hash of what most often tells states apart.
func (w *wState) hash() uint64 {
	h := uint64(14695981039346656037)
	mix := func(v int64) { h = (h ^ uint64(v)) * 1099511628211 }
	mix(w.Now)
	for _, x := range w.T {
		mix(x.Fence)
		mix(x.Expires)
		mix(x.Locked)
		mix(int64(x.HolderN))
		mix(int64(len(x.Holder) + len(x.Status) + len(x.EndOp) + len(x.PrevRun) + len(x.Ends)<<16))
		mix(x.EndFence)
		mix(x.PrevFence)
		mix(x.Version)
		mix(x.PatchEnded)
		mix(int64(x.Attempts + x.Failures<<8 + int(x.WaitingOn)<<16))
		mix(x.NotBefore)
		mix(int64(x.Prio + len(x.Queue)<<8 + len(x.Title)<<16))
		for _, at := range x.Watch {
			mix(at)
		}
	}
	for a, x := range w.A {
		mix(w.HB[a].Exp)
		mix(w.HB[a].Since)
		mix(int64(len(x.Msgs) + len(x.Tie)<<16))
		mix(x.StaleUntil)
	}
	mix(int64(len(w.Receipts) + len(w.Steps)<<16))
	return h
}

// wholePartition splits a history without claims by task: agent-wide
// operations go to every partition, and each inbox read to every partition
// with only that task's messages.
func wholePartition(h []porcupine.Operation) [][]porcupine.Operation {
	var shared, inboxes []porcupine.Operation
	byTask := map[int][]porcupine.Operation{}
	for _, op := range h {
		switch in := op.Input.(wIn); in.Op {
		case "claim", "drain":
			// A claim picks among tasks, a dependency joins two.
			return [][]porcupine.Operation{h}
		case "tick", "heartbeat", "remove", "register":
			shared = append(shared, op)
		case "inbox":
			inboxes = append(inboxes, op)
		default:
			byTask[in.Task] = append(byTask[in.Task], op)
		}
	}
	var out [][]porcupine.Operation
	for _, t := range slices.Sorted(maps.Keys(byTask)) {
		part := append(append([]porcupine.Operation{}, shared...), byTask[t]...)
		prefix := fmt.Sprintf("%d:", t)
		for _, op := range inboxes {
			o := op.Output.(wOut)
			var mine []string
			for _, m := range strings.Split(o.Msgs, ",") {
				if strings.HasPrefix(m, prefix) {
					mine = append(mine, m)
				}
			}
			o.Msgs = strings.Join(mine, ",")
			op.Output = o
			part = append(part, op)
		}
		out = append(out, part)
	}
	if len(out) == 0 {
		out = append(out, h)
	}
	return out
}

// wOutcome turns a store answer into the whole model's terms.
func wOutcome(in wIn, res any, err error) (wOut, bool) {
	switch {
	case errors.Is(err, lease.ErrNoTaskAvailable):
		return wOut{Kind: "no_task_available"}, true
	case errors.Is(err, lease.ErrUnauthorized):
		return wOut{Kind: "unauthorized"}, true
	case errors.Is(err, lease.ErrAgentExists):
		return wOut{Kind: "agent_exists"}, true
	case errors.Is(err, lease.ErrAgentNotFound):
		return wOut{Kind: "agent_not_found"}, true
	case errors.Is(err, lease.ErrTaskNotFound):
		return wOut{Kind: "task_not_found"}, true
	case errors.Is(err, lease.ErrVersionMismatch):
		return wOut{Kind: "version_mismatch"}, true
	case errors.Is(err, lease.ErrInvalidTransition):
		return wOut{Kind: "invalid_transition"}, true
	case errors.Is(err, lease.ErrBlocked):
		return wOut{Kind: "blocked"}, true
	case in.Op == "watch" && lease.IsUnwatched(err):
		// A task's first watch that could not learn of a freeing hidden
		// from it (the change stream had not archived it) answers that it
		// is not watching, and leaves no watch.
		return wOut{Kind: "not_watching"}, true
	case errors.Is(err, lease.ErrNotReady):
		var nr *lease.NotReadyError
		if !errors.As(err, &nr) {
			return wOut{}, false
		}
		return wOut{Kind: "not_ready", NotBefore: nr.NotBefore.UnixMilli()}, true
	case err != nil:
		o, ok := outcome(in.Op, res, err)
		return wOutOf(o), ok
	}
	switch v := res.(type) {
	case nil:
		return wOut{Kind: "ok"}, true
	case []lease.Message:
		var msgs []string
		for _, m := range v {
			// "<ms>.<fence>.<task>", with "~<seq>" for a freeing that
			// ends no lease (fence 0), and "lost." before a lease_lost.
			id, _, _ := strings.Cut(m.MessageID, "~")
			parts := strings.Split(id, ".")
			t := wTaskN(m.TaskID)
			lost := m.Type == lease.MessageLeaseLost
			if lost && len(parts) == 4 && parts[0] == "lost" {
				parts = parts[1:]
			}
			if len(parts) != 3 || parts[2] != m.TaskID || t < 0 || m.Type != lease.MessageTaskAvailable && !lost ||
				strconv.FormatInt(m.Fence, 10) != parts[1] {
				return wOut{}, false
			}
			msg := fmt.Sprintf("%d:%s", t, parts[1])
			if lost {
				msg += ":lost"
			}
			msgs = append(msgs, msg)
		}
		sort.Strings(msgs)
		return wOut{Kind: "ok", Msgs: strings.Join(msgs, ",")}, true
	case lease.Checkout:
		o := wOut{Kind: "ok", Holder: v.AgentID, Run: v.RunID, Fence: v.Fence, Expires: v.ExpiresAt.UnixMilli(), Attempt: v.Attempt}
		if in.Op == "claim" {
			o.Task, o.Queue, o.Prio = v.TaskID, v.Queue, v.Priority
		}
		return o, true
	case lease.Task:
		lo, ok := outcome(in.Op, res, err)
		o := wOutOf(lo)
		if in.Op == "status" || in.Op == "patch" {
			o.Version, o.Queue, o.Prio, o.Attempt = v.Version, v.Queue, v.Priority, v.Attempts
			if v.NotBefore != nil {
				o.NotBefore = v.NotBefore.UnixMilli()
			}
		}
		return o, ok
	}
	o, ok := outcome(in.Op, res, err)
	return wOutOf(o), ok
}

// wApply runs one operation against the store.
func wApply(c context.Context, s *lease.Store, in wIn) (any, error) {
	agent, task := wAgentID(in.Agent), wTaskID(in.Task)
	timeout := time.Duration(in.Timeout) * time.Millisecond
	switch in.Op {
	case "claim":
		var qs []string
		if in.Queues != "" {
			qs = strings.Split(in.Queues, ",")
		}
		return s.Claim(c, lease.ClaimParams{AgentID: agent, RunID: in.Run, Timeout: timeout, Queues: qs})
	case "patch":
		p := lease.UpdateTaskParams{TaskID: task, AgentID: agent, Admin: in.Admin, IfVersion: in.IfVersion}
		if in.Title != "" {
			p.Title = &in.Title
		}
		if in.Queue != "" {
			p.Queue = &in.Queue
		}
		if in.Prio != 0 {
			prio := in.Prio - 1
			p.Priority = &prio
		}
		if in.Status != "" {
			p.Status = &in.Status
		}
		return s.UpdateTask(c, p)
	case "force":
		return s.Release(c, lease.ReleaseParams{TaskID: task, AgentID: adminID, Force: true})
	case "fail":
		return s.Release(c, lease.ReleaseParams{TaskID: task, AgentID: agent, RunID: in.Run, Fence: in.Fence, Outcome: lease.OutcomeFailed, Error: "it broke"})
	case "watch":
		return nil, s.Watch(c, task, agent)
	case "inbox":
		return s.Inbox(c, agent)
	case "remove":
		return nil, s.RemoveAgent(c, agent)
	case "register":
		_, err := s.RegisterAgent(c, lease.RegisterParams{AgentID: agent, Name: "name-" + agent})
		return nil, err
	case "create":
		_, err := s.CreateTask(c, wCreate(in.Task, nil))
		return nil, err
	case "sweep":
		_, err := s.Sweep(c)
		return nil, err
	}
	return apply(c, s, linIn{Op: in.Op, Task: task, Agent: agent, Run: in.Run, Fence: in.Fence, Timeout: in.Timeout})
}

// answers counts a history's operations by operation and answer, for the
// log: what the run exercised.
func answers(h []porcupine.Operation) string {
	n := map[string]int{}
	for _, op := range h {
		in, out := op.Input.(wIn), op.Output.(wOut)
		k := in.Op + ":" + out.Kind
		switch {
		case in.Strict:
			k += ":strict"
		case in.Op == "inbox" && out.Msgs != "":
			k += ":" + strconv.Itoa(strings.Count(out.Msgs, ",")+1) + "msgs"
		}
		n[k]++
	}
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(n)) {
		fmt.Fprintf(&b, " %s=%d", k, n[k])
	}
	return b.String()
}

// sweptNotifier keeps the tasks the service freed by itself (a sweep, or
// removal's own pass: by "system"), with when the store told it, which is
// after the ending write and its messages.
type sweptNotifier struct {
	mu    sync.Mutex
	stamp func() int64
	freed []sweptOp
}

// sweptOp is an ending the stream handed over: its operation (Call is
// left to the caller) and the ending's time, which is never after the
// store's clock when it was written (a timeout's is its expiry, a death's
// its heartbeat's).
type sweptOp struct {
	op porcupine.Operation
	at int64
}

func (n *sweptNotifier) Notify(_ context.Context, nt lease.Notice) error {
	// Every ending has its LeaseEnded notice, whether it frees the task,
	// fails it (at its last attempt) or leaves it blocked (a task marked
	// as waiting on a reopened blocker); a takeover's ending is the
	// checkout's own.
	swept := nt.Kind == lease.NoticeLeaseEnded && !nt.Takeover
	if swept && nt.Event.By == lease.BySystem {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.freed = append(n.freed, sweptOp{op: porcupine.Operation{
			Input: wIn{Op: "swept", Task: wTaskN(nt.Event.TaskID), Fence: nt.Event.Fence}, Output: wOut{Kind: "ok"}, Return: n.stamp(),
		}, at: nt.Event.At.UnixMilli()})
	}
	return nil
}

func (n *sweptNotifier) take() []sweptOp {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := n.freed
	n.freed = nil
	return out
}

// wMemory is what one agent remembers: its leases by task, and its last
// named claim.
type wMemory struct {
	agentMemory
	claim   string
	version map[int]int64 // each task's version, as last read
	last    string        // the task of its latest grant, until it acts on it
	// follow: after completing a blocker, check out one of its dependents
	// next (wConfig.followDependents); dependent is that one, -1 for none.
	follow    bool
	dependent int
}

// claimQueues are the queue lists claims name.
var claimQueues = []string{"", "q1", "default,q1", "q1,default"}

// nextWholeOp picks an agent's next operation: nextOp's mix, with claims
// (new named runs, retries of the last one, unnamed) when claims is set,
// and watches.
func nextWholeOp(r *rand.Rand, agentN int, heartbeat bool, mem *wMemory, tasks int, claims, patches, graph bool) wIn {
	if patches && r.IntN(100) < 12 {
		return nextPatch(r, agentN, mem, tasks)
	}
	if d := mem.dependent; d >= 0 {
		mem.dependent = -1
		mem.n++
		return wIn{Op: "checkout", Task: d, Agent: agentN, Run: fmt.Sprintf("%s-u%d", wAgentID(agentN), mem.n), Timeout: 30_000}
	}
	if last := mem.last; graph && last != "" && r.IntN(3) > 0 {
		// Finish what the agent was just granted: blockers get done, or
		// the attempt fails.
		mem.last = ""
		op := []string{"complete", "complete", "fail", "release"}[r.IntN(4)]
		if deps := wBlockers.dependents(wTaskN(last)); mem.follow && op == "complete" && deps != 0 {
			for d := range wTasks {
				if deps&(1<<d) != 0 && (mem.dependent < 0 || r.IntN(2) == 0) {
					mem.dependent = d
				}
			}
		}
		return wIn{Op: op, Task: wTaskN(last), Agent: agentN, Run: mem.run[last], Fence: mem.fence[last]}
	}
	if claims && r.IntN(100) < 20 {
		in := wIn{Op: "claim", Agent: agentN, Timeout: []int64{10_000, 30_000, 60_000}[r.IntN(3)], Queues: claimQueues[r.IntN(len(claimQueues))]}
		switch q := r.IntN(4); {
		case q == 0 && mem.claim != "":
			in.Run = mem.claim // a retry of the same run
		case q == 1: // unnamed: the store names the run
		default:
			mem.n++
			in.Run = fmt.Sprintf("%s-c%d", wAgentID(agentN), mem.n)
			mem.claim = in.Run
		}
		return in
	}
	if r.IntN(100) < 10 {
		return wIn{Op: "watch", Agent: agentN, Task: r.IntN(tasks)}
	}
	ids := make([]string, tasks)
	for i := range ids {
		ids[i] = wTaskID(i)
	}
	op := nextOp(r, wAgentID(agentN), agentN, heartbeat, &mem.agentMemory, ids)
	if op.Op == "complete" && claims && !graph && r.IntN(3) > 0 {
		op.Op = "release" // a claim history has few tasks: keep most of them open
	}
	if op.Op == "release" && r.IntN(3) == 0 {
		op.Op = "fail" // a failed attempt: tasks wait, and some fail
	}
	return wIn{Op: op.Op, Task: wTaskN(op.Task), Agent: agentN, Run: op.Run, Fence: op.Fence, Timeout: op.Timeout}
}

// nextPatch picks a PATCH: a priority, queue or title change, a cancel
// (now and then as an admin) or a reopen, with If-Match a third of the
// time: the version the agent last read, or now and then one before it.
func nextPatch(r *rand.Rand, agentN int, mem *wMemory, tasks int) wIn {
	in := wIn{Op: "patch", Agent: agentN, Task: r.IntN(tasks)}
	switch q := r.IntN(10); {
	case q < 3:
		in.Prio = 1 + []int{0, 5, 9}[r.IntN(3)]
	case q < 4:
		in.Queue = []string{lease.DefaultQueue, "q1"}[r.IntN(2)]
	case q < 5:
		in.Title = []string{"a", "b"}[r.IntN(2)]
	case q < 6:
		in.Status = lease.StatusCancelled
		in.Admin = r.IntN(3) == 0
	default:
		in.Status = lease.StatusTodo
	}
	if v := mem.version[in.Task]; v != 0 {
		switch r.IntN(6) {
		case 0, 1:
			in.IfVersion = v
		case 2:
			in.IfVersion = v - 1
		}
	}
	return in
}

type wConfig struct {
	clients, tasks, phases, opsPerPhase int
	claims, patches                     bool
	graph                               wGraph // the tasks' dependencies (nil: none)
	createEvery                         int    // a new task between phases, this often (0: never)
	strictEvery                         int    // a lone claim between phases, this often
	inboxEvery                          int    // inbox reads between phases, this often (and after the last)
	// followDependents: an agent that completes a blocker checks out one
	// of its dependents next.
	followDependents bool
	// drainEvery: the change stream runs after every drainEvery-th phase
	// (and after the last) instead of after each one (0 or 1), as a stream
	// function held up would, so that freeings, watches and registrations
	// pile up before it handles them. Inboxes are read only after it ran.
	drainEvery int
	// rounds: how many histories of phases each are run, each on a table
	// of its own and checked on its own (0 or 1: one). porcupine keeps
	// every state it has visited until a history is decided, so two
	// histories of 50 phases take about half the memory of one of 100.
	rounds int
}

func wholeSize(claims bool) wConfig {
	chaos := os.Getenv("CHECKOUT_CHAOS") != ""
	switch {
	case claims && chaos:
		return wConfig{clients: 6, tasks: 3, phases: 50, opsPerPhase: 4, rounds: 2, claims: true, patches: true, createEvery: 12, strictEvery: 3, inboxEvery: 1}
	case claims:
		return wConfig{clients: 4, tasks: 3, phases: 8, opsPerPhase: 3, claims: true, patches: true, createEvery: 3, strictEvery: 2, inboxEvery: 1}
	}
	// Fewer clients than TestLinearizability: the state is larger, and
	// porcupine's search grows with the operations that overlap.
	if chaos {
		return wConfig{clients: 16, tasks: 6, phases: 80, opsPerPhase: 5, patches: true, inboxEvery: 3}
	}
	return wConfig{clients: 12, tasks: 4, phases: 12, opsPerPhase: 3, patches: true, inboxEvery: 3}
}

// Claims over all tasks, in their queues and by priority, with checkouts,
// renewals, releases, rare completions, watches, PATCHes (priority, queue
// and title changes, cancels, reopens, with and without If-Match), force
// releases, agent removals and registrations again, heartbeats from half of
// the agents, sweeps in about half the phases, new tasks now and then,
// inbox reads and lone claims between phases. One model over every task.
//
// It once failed about one run in ten, around a named claim retried after
// its task had moved on: the model answered a retry from what the task
// item remembers, while the store answers from the run's receipt
// (TestLinearizabilityClaimRetrySequential).
func TestLinearizabilityClaim(t *testing.T) {
	t.Parallel()
	wholeLinearizability(t, wholeSize(true))
}

// Force releases, watches and inboxes, agent removals and registrations
// again, with heartbeats from half of the agents and no claims: checked
// task by task, with as many clients as TestLinearizability.
func TestLinearizabilityWatchForceRemove(t *testing.T) {
	t.Parallel()
	wholeLinearizability(t, wholeSize(false))
}

// The work graph: task-2 is blocked by task-0, task-3 by task-0 and
// task-1 (wBlockers), with claims, checkouts, completions (blockers get
// done), failed releases, reopens and cancels, as in
// TestLinearizabilityClaim. Tasks fail at their last attempt (wMaxAttempts)
// and wait after a failed release (wRetryDelay), with the ticks landing on
// and past the waits. The model checks that a blocked task is never
// granted (a checkout answers blocked, a claim never takes it), nor a
// task before its not_before (not_ready); that a dependent becomes todo
// only once the change stream has seen every blocker done (drain); that
// attempts count every grant and start again only at a reopen; and that a
// failed task stays failed until reopened.
func TestLinearizabilityWorkGraph(t *testing.T) {
	t.Parallel()
	cfg := wholeSize(true)
	cfg.tasks, cfg.graph, cfg.createEvery = len(wBlockers), wBlockers, 0
	// An agent that completes a blocker checks out a dependent next, often
	// before the change stream has run: that checkout unblocks it in its
	// own write (lease/checkout.go), which the model allows only when
	// every blocker the task waits on has completed since the stream last
	// ran, as one step of one version.
	cfg.followDependents = true
	if os.Getenv("CHECKOUT_CHAOS") == "" {
		cfg.phases, cfg.opsPerPhase = 16, 6
	}
	wholeLinearizability(t, cfg)
}

// TestLinearizabilityWorkGraph with the change stream run after every
// third phase only, as a stream function held up would run: several
// freeings of a task, and watches, removals and registrations between
// them, wait for one pass of the stream. It found two watch bugs: an
// agent that watched again between two such freeings was told of the
// first only (TestWatchAgainAfterEachOfTwoUnhandledFreeingsIsToldOfBoth),
// and a removed agent's watch again, in the millisecond its id was
// registered again, passed its removed self's place to the new agent
// (TestRemovedAgentsWatchAgainAtItsRegistrationStaysItsOwn).
func TestLinearizabilityWorkGraphSlowStream(t *testing.T) {
	t.Parallel()
	cfg := wholeSize(true)
	cfg.tasks, cfg.graph, cfg.createEvery = len(wBlockers), wBlockers, 0
	cfg.followDependents = true
	cfg.drainEvery = 3
	if os.Getenv("CHECKOUT_CHAOS") == "" {
		cfg.phases, cfg.opsPerPhase = 16, 6
	}
	wholeLinearizability(t, cfg)
}

func wholeLinearizability(t *testing.T, cfg wConfig) {
	linRounds(t, cfg.rounds, func(r linRound) { wholeLinearizabilityRound(t, cfg, r) })
}

func wholeLinearizabilityRound(t *testing.T, cfg wConfig, round linRound) {
	// CHECKOUT_KNOWN_BUGS=1: the model as lease/doc.go states it, which
	// the store fails now and then (see cachedHB and
	// TestKnownBugRemovedAgentCachedAlive).
	knownBugs := os.Getenv("CHECKOUT_KNOWN_BUGS") == ""
	e := newEnv(t)
	e.lag(t, "", raceLag)
	c := ctx(t)
	if os.Getenv("CHECKOUT_CHAOS") != "" {
		var cancel context.CancelFunc
		c, cancel = context.WithTimeout(context.Background(), 20*time.Minute)
		defer cancel()
	}
	if cfg.clients > wAgents {
		t.Fatalf("%d clients, the model holds %d agents", cfg.clients, wAgents)
	}
	for i := range cfg.clients {
		must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: wAgentID(i), Name: "name-" + wAgentID(i)}))
	}
	tasks := cfg.tasks
	for i := range tasks {
		must[lease.Task](t)(e.store.CreateTask(c, wCreate(i, cfg.graph)))
		e.clock.Advance(time.Millisecond) // created in id order
	}
	ids := make([]string, tasks)
	for i := range ids {
		ids[i] = wTaskID(i)
	}
	trails := watchTrails(c, e.store, ids)
	startMS := e.clock.Now().UnixMilli()
	start := time.Now()
	stamp := func() int64 { return time.Since(start).Nanoseconds() }
	swept := &sweptNotifier{stamp: stamp}
	db := linDB(t, e, round)
	store := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: swept})
	// The change stream runs between phases only, so a task's first watch
	// that finds a freeing hidden from it (released and taken again since
	// the watcher's read) waits for an archive no one writes in its phase:
	// it answers not watching at once instead of after 10 s.
	lease.WaitForArchive(store, 50*time.Millisecond)
	// The stream function, with the notifier that records what the service
	// freed by itself: run at the end of every phase (every drainEvery-th),
	// before the inboxes are read.
	drainer := *e.poller
	drainer.Handle = stream.Handler(store)
	var mu sync.Mutex
	var history []porcupine.Operation
	var failed error
	record := func(client int, in wIn, call int64, out wOut, ret int64) {
		mu.Lock()
		history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
		mu.Unlock()
	}
	// run applies in on s and records it; false on an answer the model has
	// no place for.
	run := func(client int, s *lease.Store, in wIn) (wOut, bool) {
		call := stamp()
		oc, lost := withLostWrite(c)
		res, err := wApply(oc, s, in)
		ret := stamp()
		in.LostWrite = in.Op == "force" && lost.Load()
		out, ok := wOutcome(in, res, err)
		if !ok {
			mu.Lock()
			failed = fmt.Errorf("%+v: %w", in, err)
			mu.Unlock()
			return out, false
		}
		if in.Op != "sweep" { // what a sweep ends is "swept": see sweptNotifier
			record(client, in, call, out, ret)
		}
		return out, true
	}
	seed := round.seed
	t.Logf("seed %d: %d clients, %d tasks, %d phases of %d operations each, claims %v", seed, cfg.clients, cfg.tasks, cfg.phases, cfg.opsPerPhase, cfg.claims)
	mems := make([]*wMemory, cfg.clients)
	rngs := make([]*rand.Rand, cfg.clients)
	for i := range mems {
		mems[i] = &wMemory{agentMemory: agentMemory{run: map[string]string{}, fence: map[string]int64{}}, version: map[int]int64{},
			follow: cfg.followDependents, dependent: -1}
		rngs[i] = rand.New(rand.NewPCG(seed, uint64(i)))
	}
	tickRand := rand.New(rand.NewPCG(seed, 1<<32))
	adminRand := rand.New(rand.NewPCG(seed, 1<<33))
	removed := map[int]bool{} // the admin's own knowledge: it alone removes and registers
	admin, sweeper, between := cfg.clients, cfg.clients+1, cfg.clients+2
	// The phases the stream has not run after: when each started, and
	// the store's clock in it (the clock moves only between phases).
	type phaseClock struct{ start, clock int64 }
	var undrained []phaseClock
	for phase := range cfg.phases {
		phaseStart := stamp()
		undrained = append(undrained, phaseClock{phaseStart, e.clock.Now().UnixMilli()})
		var wg sync.WaitGroup
		for i := range cfg.clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range cfg.opsPerPhase {
					in := nextWholeOp(rngs[i], i, i%2 == 0, mems[i], tasks, cfg.claims, cfg.patches, cfg.graph != nil)
					out, ok := run(i, store, in)
					if !ok {
						return
					}
					switch {
					case in.Op == "checkout" && out.Kind == "ok":
						mems[i].run[wTaskID(in.Task)], mems[i].fence[wTaskID(in.Task)] = out.Run, out.Fence
						mems[i].last = wTaskID(in.Task)
					case in.Op == "claim" && out.Kind == "ok":
						mems[i].run[out.Task], mems[i].fence[out.Task] = out.Run, out.Fence
						mems[i].last = out.Task
					case (in.Op == "status" || in.Op == "patch") && out.Kind == "ok":
						mems[i].version[in.Task] = out.Version
					}
				}
			}()
		}
		// The admin: a force release, a removal, or a registration again.
		var adminOp wIn
		switch q := adminRand.IntN(100); {
		case q < 35:
			adminOp = wIn{Op: "force", Task: adminRand.IntN(tasks)}
		case q < 60 && len(removed) < 2:
			adminOp = wIn{Op: "remove", Agent: adminRand.IntN(cfg.clients)}
			if removed[adminOp.Agent] {
				adminOp.Op = "register"
			}
		case q < 85 && len(removed) > 0:
			adminOp = wIn{Op: "register", Agent: slices.Sorted(maps.Keys(removed))[0]}
		}
		if adminOp.Op != "" {
			switch adminOp.Op {
			case "remove":
				removed[adminOp.Agent] = true
			case "register":
				delete(removed, adminOp.Agent)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				run(admin, store, adminOp)
			}()
		}
		if tickRand.IntN(2) == 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				run(sweeper, store, wIn{Op: "sweep"})
			}()
		}
		wg.Wait()
		if failed != nil {
			t.Fatalf("phase %d: unexpected error: %v", phase, failed)
		}
		// The stream's unblockings are written while it hands over the
		// completions, and their own changes (the unblocked events, the
		// watchers' messages) wait for the next poll: two polls, between
		// phases, with no operation of the agents in flight. The history
		// holds them as one operation, "drain", in the stream's place:
		// only the lease endings the sweep notified run alongside it,
		// and a blocked task holds no lease, so nothing the agents could
		// see tells the unblockings apart from one atomic step.
		drained := cfg.drainEvery <= 1 || (phase+1)%cfg.drainEvery == 0 || phase == cfg.phases-1
		if drained {
			drainCall := stamp()
			for range 2 {
				if _, err := drainer.Poll(c); err != nil {
					t.Fatalf("phase %d: drain the change stream: %v", phase, err)
				}
			}
			if cfg.graph != nil {
				record(sweeper, wIn{Op: "drain"}, drainCall, wOut{Kind: "ok"}, stamp())
			}
			// What a sweep (or a removal) ended since the stream last ran
			// was written in one of those phases.
			// An ending was written in the first of those phases whose
			// clock had reached its time, or later: its operation starts
			// there, so that the checker need not try it before what
			// came earlier.
			for _, s := range swept.take() {
				op := s.op
				op.ClientId, op.Call = sweeper, undrained[0].start
				for _, ph := range undrained {
					if ph.clock >= s.at {
						op.Call = ph.start
						break
					}
				}
				history = append(history, op)
			}
			undrained = undrained[:0]
		}
		// Between phases, nothing in flight: once the stream has run, every
		// freeing has written its messages, so each inbox must hold
		// exactly the model's.
		if drained && ((phase+1)%cfg.inboxEvery == 0 || phase == cfg.phases-1) {
			for i := range cfg.clients {
				run(between, store, wIn{Op: "inbox", Agent: i})
			}
		}
		if cfg.createEvery > 0 && (phase+1)%cfg.createEvery == 0 && tasks < wTasks {
			run(between, store, wIn{Op: "create", Task: tasks})
			tasks++
		}
		d := []time.Duration{0, 5 * time.Second, 10 * time.Second, 30 * time.Second, 61 * time.Second}[tickRand.IntN(5)]
		call := stamp()
		e.clock.Advance(d)
		record(between, wIn{Op: "tick", Now: e.clock.Now().UnixMilli()}, call, wOut{Kind: "ok"}, stamp())
		if cfg.claims && phase%cfg.strictEvery == cfg.strictEvery-1 {
			// A lone claim, once the indexes have caught up, on a store of
			// its own (as another process would be): it takes the oldest.
			// One per wait: a second would run within the index lag of the
			// first one's grant, which, if its holder is dead, leaves the
			// task available and not yet in any index.
			// The local DynamoDB says when nothing is left in its index
			// lag (a fixed sleep of the lag and 200 ms fell short on a
			// busy machine), rather than a settling write: the model
			// knows every task of the history, and a task written to
			// wait for the indexes would be one it does not.
			testenv.CaughtUp(t, e.names.Prefix)
			lone := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
			i := tickRand.IntN(cfg.clients)
			in := wIn{Op: "claim", Agent: i, Timeout: 30_000, Strict: true, Queues: claimQueues[tickRand.IntN(len(claimQueues))]}
			if tickRand.IntN(2) == 0 {
				mems[i].n++
				in.Run = fmt.Sprintf("%s-c%d", wAgentID(i), mems[i].n)
			}
			if out, ok := run(between, lone, in); ok && out.Kind == "ok" {
				mems[i].run[out.Task], mems[i].fence[out.Task] = out.Run, out.Fence
			}
		}
		if failed != nil {
			t.Fatalf("phase %d: unexpected error: %v", phase, failed)
		}
	}
	t.Logf("%d operations recorded in %v", len(history), time.Since(start).Round(time.Millisecond))
	t.Logf("answers: %s", answers(history))

	trails.halt()
	nd := withLossy(wholeNDModel(startMS, cfg.tasks, cfg.clients, knownBugs, cfg.graph), linLose(t) > 0)
	checkWholeHistory(t, nd, history, e, tasks, round)
	if os.Getenv("CHECKOUT_CHAOS") == "" {
		agreeOnCorrupted(t, nd, history, rand.New(rand.NewPCG(seed, 1<<35)))
	}
	for i := range tasks {
		assertOneEndPerLease(t, e, wTaskID(i))
	}
	trails.check(t, e)
}

// pausingDB holds, once armed, the answer to one GetItem of key in table
// until released: a read served before a write and acted on after it.
type pausingDB struct {
	*dynamodb.Client
	table, key      string
	armed           atomic.Bool
	served, release chan struct{}
}

func (p *pausingDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	out, err := p.Client.GetItem(ctx, in, optFns...)
	if k, ok := in.Key["agent_id"].(*types.AttributeValueMemberS); ok && *in.TableName == p.table && k.Value == p.key && p.armed.CompareAndSwap(true, false) {
		close(p.served)
		<-p.release
	}
	return out, err
}

// Known bug (lease/agents.go, Removed agents: "from the answer on none of its
// leases is live for anyone"): the alive cache can hold a removed agent as
// alive after RemoveAgent has answered, for up to MinHeartbeatTTL, so its
// lease blocks others (409 naming it) and shows live. In one process, a
// read of its heartbeat served before the tombstone and cached after
// removal's forget; in another process (another Lambda container), any read
// in the second before the removal. Run with CHECKOUT_KNOWN_BUGS=1.
func TestKnownBugRemovedAgentCachedAlive(t *testing.T) {
	t.Parallel()
	setup := func(t *testing.T) (*env, *pausingDB, *lease.Store) {
		e := newEnv(t)
		c := ctx(t)
		p := &pausingDB{Client: e.db, table: e.names.Table(schema.HeartbeatsTable), key: "x", served: make(chan struct{}), release: make(chan struct{})}
		s := lease.New(lease.Config{DB: p, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
		must[lease.Registration](t)(s.RegisterAgent(c, lease.RegisterParams{AgentID: "x", Name: "x"}))
		must[lease.Heartbeat](t)(s.Heartbeat(c, "x", time.Hour))
		e.retryingTask(t, "t")
		// Removal's own pass over x's leases reads by_holder, which lags:
		// it misses the lease, which stays for the sweep (lease/doc.go).
		e.lag(t, schema.TasksTable, indexLag)
		must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "x", Timeout: time.Hour}))
		return e, p, s
	}
	blocked := func(t *testing.T, s *lease.Store) {
		t.Helper()
		c := ctx(t)
		if task := must[lease.Task](t)(s.GetTask(c, "t")); task.Checkout != nil {
			t.Errorf("after the removal answered, the removed agent's lease shows live: %+v", *task.Checkout)
		}
		if _, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "y", Timeout: time.Hour}); err != nil {
			t.Errorf("after the removal answered, a checkout of the removed agent's task: %v", err)
		}
	}
	t.Run("one process, a read racing the removal", func(t *testing.T) {
		e, p, s := setup(t)
		c := ctx(t)
		// Past what the alive cache holds from x's own heartbeat: the next
		// judgment reads x's heartbeat.
		e.clock.Advance(2 * lease.MinHeartbeatTTL)
		p.armed.Store(true)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = s.GetTask(c, "t") // reads x alive, caches it after the removal
		}()
		<-p.served
		if err := s.RemoveAgent(c, "x"); err != nil {
			t.Fatal(err)
		}
		close(p.release)
		<-done
		blocked(t, s)
	})
	t.Run("another process", func(t *testing.T) {
		// Still open: another process's alive cache may hold the agent for
		// up to MinHeartbeatTTL after the removal answered (lease/doc.go).
		if os.Getenv("CHECKOUT_KNOWN_BUGS") == "" {
			t.Skip("known gap, documented: another process's alive cache; CHECKOUT_KNOWN_BUGS=1 runs it")
		}
		e, _, s := setup(t)
		c := ctx(t)
		other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
		must[lease.Task](t)(other.GetTask(c, "t")) // reads x alive
		if err := s.RemoveAgent(c, "x"); err != nil {
			t.Fatal(err)
		}
		blocked(t, other)
	})
}

// pausingPuts holds, once armed, one PutItem that writes to table until
// resume is closed.
type pausingPuts struct {
	*dynamodb.Client
	table           string
	armed           atomic.Bool
	arrived, resume chan struct{}
}

func (p *pausingPuts) PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if in.TableName != nil && *in.TableName == p.table && p.armed.CompareAndSwap(true, false) {
		close(p.arrived)
		<-p.resume
	}
	return p.Client.PutItem(ctx, in, optFns...)
}

// A regression test (lease/agents.go, Removed agents: "Its inbox is
// emptied", and an id registered again starts clean): the change stream's
// handler reads a freed task's watchers' heartbeats, then writes their
// messages; a removal that lands in between has emptied the inbox before
// the message arrives. The message is written, and Inbox hides it (it
// was watched before the removal), from the removed agent and from an
// agent registered again under its id. The handler's message write is
// held until the removal has answered; the test never waits for ever.
func TestMessageOutlivingRemovalIsHidden(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	p := &pausingPuts{Client: e.db, table: e.names.Table(schema.InboxTable), arrived: make(chan struct{}), resume: make(chan struct{})}
	arn, err := localstack.StreamARN(c, e.db, e.names.Table(schema.TasksTable))
	if err != nil {
		t.Fatal(err)
	}
	handler := lease.New(lease.Config{DB: p, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	poller := &stream.Poller{Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Handle: stream.Handler(handler), Saved: stream.MemoryCheckpoints{}}
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "w", Name: "w"}))
	e.retryingTask(t, "t")
	e.checkout(t, "t", "h", time.Hour)
	if err := e.store.Watch(c, "t", "w"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "h"}))
	p.armed.Store(true)
	done := make(chan error, 1)
	go func() {
		_, err := poller.Poll(c)
		done <- err
	}()
	select {
	case <-p.arrived: // the handler has read w's heartbeat: w is not removed
	case err := <-done:
		t.Fatalf("the change stream was applied without a message for w: %v", err)
	case <-time.After(10 * time.Second):
		close(p.resume)
		t.Fatal("the change stream's handler wrote no message for w within 10 s")
	}
	if err := e.store.RemoveAgent(c, "w"); err != nil {
		t.Fatal(err)
	}
	close(p.resume)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if msgs := must[[]lease.Message](t)(e.store.Inbox(c, "w")); len(msgs) != 0 {
		t.Errorf("after w's removal answered, its inbox holds %+v", msgs)
	}
	e.clock.Advance(time.Second)
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "w", Name: "w again"}))
	if msgs := must[[]lease.Message](t)(e.store.Inbox(c, "w")); len(msgs) != 0 {
		t.Errorf("w registered again does not start clean: its inbox holds %+v", msgs)
	}
}

// A regression test (lease/claim.go, Queues, priorities and claim: "the same run id always gets the
// same lease"): a named claim retried after its lease has ended and
// another lease has ended on the same task since used to find nothing of
// its run on the task item (end_* then describe the other lease) and be
// granted a second lease under the same run id. The receipt keeps the
// grant.
func TestClaimRetryAfterTheTaskMovedOnKeepsItsReceipt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.retryingTask(t, "t1")
	e.clock.Advance(time.Millisecond)
	e.retryingTask(t, "t2")
	e.caughtUp(t) // the claim finds the tasks through an index
	first := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Hour}))
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: first.TaskID, AgentID: "a", RunID: "run-1"}))
	e.checkout(t, first.TaskID, "b", time.Hour)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: first.TaskID, AgentID: "b"}))
	again, err := e.store.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Hour})
	if err != nil || again.TaskID != first.TaskID || again.Fence != first.Fence {
		t.Errorf("claim run-1 retried = %+v, %v; want the lease it got: %s fence %d", again, err, first.TaskID, first.Fence)
	}
}

// A release with outcome failed of a lease that has ended by its holder's
// death (here: locked in the millisecond the holder came back from the
// dead, which lease/doc.go counts as ended) answers not_checked_out, as a
// plain release does. It used to be retried as "the counts moved under a
// live lease" (only the lease's expiry was judged), eight times, and
// answered "too much contention" (a 500).
func TestFailedReleaseOfALeaseEndedByDeathIsNotCheckedOut(t *testing.T) {
	t.Parallel()
	for _, outcome := range []lease.ReleaseOutcome{lease.OutcomeNone, lease.OutcomeFailed} {
		e := newEnv(t)
		c := ctx(t)
		e.retryingTask(t, "t")
		must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "a", Name: "a"}))
		must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", 10*time.Second))
		e.clock.Advance(time.Minute)
		must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", 10*time.Second)) // back from the dead, in this millisecond
		co := e.checkout(t, "t", "a", time.Minute)                          // locked at alive_since: ended already
		_, err := e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID, Fence: co.Fence, Outcome: outcome})
		if !errors.Is(err, lease.ErrNotCheckedOut) {
			t.Errorf("release (outcome %q) of a lease ended by its holder's death = %v; want not_checked_out", outcome, err)
		}
	}
}

// A task cancelled while it waits for its retry delay is not granted once
// the delay has passed: the waiting task's expiry with no holder is not a
// lease to take over (the grant's condition wants a holder), and the
// cancel takes the task out of the expiry index. Before, the grant took
// any lease_expires at or before now for an expired lease, whatever the
// status, and granted the cancelled task.
func TestCancelledDelayedTaskIsNotGranted(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	three, delay := 3, 10*time.Second
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "t", Title: "t", MaxAttempts: &three, RetryDelay: &delay}))
	co := e.checkout(t, "t", "a", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	cancelled := lease.StatusCancelled
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "a", Status: &cancelled}))
	e.clock.Advance(delay)
	got, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", Timeout: time.Minute})
	var sm *lease.StatusMismatchError
	if !errors.As(err, &sm) || sm.Status != lease.StatusCancelled {
		t.Errorf("checkout of a task cancelled during its retry delay = %+v, %v; want status_mismatch (cancelled)", got, err)
	}
}

// A PATCH that changes nothing the task shows (here: its priority, to the
// priority it has) writes nothing, even when the task's claim_key is still
// the delayed one a failed release gave it and its not_before has passed.
// Before, patch recomputed the key and took the difference for a change: a
// write that moved the version, so a client's If-Match failed for nothing.
func TestPatchThatChangesNothingWritesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.retryingTask(t, "t")
	co := e.checkout(t, "t", "a", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	e.clock.Advance(lease.DefaultRetryDelay)
	before := must[lease.Task](t)(e.store.GetTask(c, "t"))
	prio := before.Priority
	after := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "a", Priority: &prio}))
	if after.Version != before.Version {
		t.Errorf("a PATCH of the priority to the one the task has moved its version from %d to %d", before.Version, after.Version)
	}
}

// A PATCH that leaves its task blocked answers with what its own write
// left, not with a later read: before, it settled the task (lease/deps.go,
// settle) and read it again, so another PATCH landing in between showed in
// the answer (its title, and a version past the first PATCH's own), and a
// client that PATCHed again with that version as If-Match overwrote a
// change it never saw.
func TestPatchOfABlockedTaskAnswersItsOwnWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "b")
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "d", Title: "d", BlockedBy: []string{"b"}}))
	other := "theirs"
	a := &afterWrite{Client: e.db, table: e.names.Table(schema.TasksTable), hooks: map[string]func(){"UpdateItem": func() {
		must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "y", Title: &other}))
	}}}
	s := lease.New(lease.Config{DB: a, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	a.armed.Store(true)
	mine := "mine"
	got := must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "x", Title: &mine}))
	if got.Title != mine || got.Version != 2 {
		t.Errorf("PATCH of the blocked task's title answered title %q, version %d; want its own write: %q, version 2", got.Title, got.Version, mine)
	}
}

// A PATCH whose settling unblocks its task (a blocker it waits on is done
// by then) still answers with what its own write left: before, it read the
// task again after settling, and another PATCH landing between its write
// and that read showed in its answer (a title it never wrote, a version
// past its own), which no order of the two PATCHes explains.
func TestPatchThatSettlesAnswersItsOwnWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "b", "c")
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "d", Title: "d", BlockedBy: []string{"b", "c"}}))
	e.complete(t, "b", "x") // done, and the change stream has not run: d still waits on b
	// The other PATCH lands right after this one's write, before its
	// settling.
	other := "theirs"
	a := &afterWrite{Client: e.db, table: e.names.Table(schema.TasksTable), hooks: map[string]func(){"UpdateItem": func() {
		must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "y", Title: &other}))
	}}}
	s := lease.New(lease.Config{DB: a, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	a.armed.Store(true)
	mine := "mine"
	got := must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "x", Title: &mine}))
	if got.Title != mine || got.Version != 2 {
		t.Errorf("PATCH of the blocked task's title, settled after another PATCH, answered title %q, version %d; want its own write: %q, version 2", got.Title, got.Version, mine)
	}
	if d := e.get(t, "d"); d.Title != other || d.Version != 4 {
		t.Fatalf("d after both PATCHes and the settling: title %q, version %d; want %q, 4", d.Title, d.Version, other)
	}
}

// afterWrite runs each of its hooks once, right after the first write on
// table that the hook names, once armed: another request's write that
// lands between a request's own write and whatever it does next (settle,
// read back). A hook is named by the write ("PutItem" or "UpdateItem") and,
// optionally, the task it writes ("UpdateItem d").
type afterWrite struct {
	*dynamodb.Client
	table string
	armed atomic.Bool
	mu    sync.Mutex
	hooks map[string]func()
}

func (a *afterWrite) after(op string, key map[string]types.AttributeValue) {
	if !a.armed.Load() {
		return
	}
	names := []string{op}
	if id, ok := key["task_id"].(*types.AttributeValueMemberS); ok {
		names = append(names, op+" "+id.Value)
	}
	for _, n := range names {
		a.mu.Lock()
		hook := a.hooks[n]
		delete(a.hooks, n)
		a.mu.Unlock()
		if hook != nil {
			hook()
		}
	}
}

func (a *afterWrite) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := a.Client.UpdateItem(ctx, in, optFns...)
	if *in.TableName == a.table {
		a.after("UpdateItem", in.Key)
	}
	return out, err
}

func (a *afterWrite) PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := a.Client.PutItem(ctx, in, optFns...)
	if *in.TableName == a.table {
		a.after("PutItem", in.Item)
	}
	return out, err
}

// A create whose settling unblocks the new task at once (its blocker
// completed between the create's read of it and its write) answers with
// what its own write left, as a PATCH does: before, it read the task again
// after settling, and a PATCH landing between the settling and that read
// showed in the create's answer (a title it never wrote, a version past
// its own), though the PATCH named that version.
func TestCreateThatSettlesAnswersItsOwnWrite(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "b")
	other := "theirs"
	a := &afterWrite{Client: e.db, table: e.names.Table(schema.TasksTable), hooks: map[string]func(){
		// b completes right after d's write, before d is settled.
		"PutItem d": func() { e.complete(t, "b", "x") },
		// A PATCH lands right after the settling unblocked d.
		"UpdateItem d": func() {
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "y", Title: &other}))
		},
	}}
	s := lease.New(lease.Config{DB: a, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	a.armed.Store(true)
	got := must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "d", Title: "d", BlockedBy: []string{"b"}}))
	if got.Title != "d" || got.Version != 1 || got.Status != lease.StatusBlocked {
		t.Errorf("create settled after a PATCH answered title %q, version %d, status %s; want its own write: %q, version 1, blocked", got.Title, got.Version, got.Status, "d")
	}
	if d := e.get(t, "d"); d.Title != other || d.Version != 3 || d.Status != lease.StatusTodo {
		t.Fatalf("d after the create, its settling and the PATCH: title %q, version %d, status %s; want %q, 3, todo", d.Title, d.Version, d.Status, other)
	}
	if len(a.hooks) != 0 {
		t.Fatalf("writes never made: %v", a.hooks)
	}
}

// linCheckBudget bounds porcupine's search of one history, and the
// segment checker's check of one (checkSegments). A legal
// history is usually checked in well under a second, but the search has a
// long tail: on a loaded machine with the race detector, histories of the
// work-graph runs took up to 33 s, where the budget was 2 minutes. An
// illegal one is reported as Unknown when its search runs out. The
// package's test binary needs a timeout above the default 10 minutes to
// hold a search this long beside its other tests (Makefile,
// GO_TEST_FLAGS).
const linCheckBudget = 5 * time.Minute

// linMemoryBound bounds the heap of the test binary while porcupine
// searches a history. A search that meets a history it cannot decide
// quickly can grow by 100 MB a second; past the bound, every search under
// way stops and reports its history undecided, instead of the kernel
// ending the whole binary, and every test with it, when the machine runs
// out of memory (make chaos, on a 24 GB machine with the race detector).
const linMemoryBound = 3 << 30

var (
	heapInUse atomic.Uint64 // the test binary's heap objects, sampled
	heapWatch sync.Once
	// searching lets one search run at a time: the memory bound is then
	// one search's, whatever tests run in parallel.
	searching sync.Mutex
)

// watchHeap starts sampling the heap into heapInUse, once per binary.
func watchHeap() {
	heapWatch.Do(func() {
		sampleHeap()
		go func() {
			for range time.Tick(250 * time.Millisecond) {
				sampleHeap()
			}
		}()
	})
}

func sampleHeap() {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		heapInUse.Store(s[0].Value.Uint64())
	}
}

// checkLinearizable checks a history as porcupine.CheckOperationsVerbose
// does, within linCheckBudget, one history at a time in the test binary,
// and stops the search once the heap passes bound, if the search has by
// then taken more than minSteps steps of the model: it then answers
// Unknown, with overMemory set. minSteps spares a search too small to be
// what fills the heap, which the rest of the binary shares (linHogSteps).
func checkLinearizable(model porcupine.Model, history []porcupine.Operation, bound uint64, minSteps int64) (res porcupine.CheckResult, info porcupine.LinearizationInfo, overMemory bool) {
	watchHeap()
	var stopped atomic.Bool
	var steps atomic.Int64
	step := model.StepContext
	if step == nil {
		plain := model.Step
		step = func(_ context.Context, state, input, output any) (bool, any) { return plain(state, input, output) }
	}
	model.Step = nil
	model.StepContext = func(c context.Context, state, input, output any) (bool, any) {
		if n := steps.Add(1); stopped.Load() || heapInUse.Load() > bound && n > minSteps {
			stopped.Store(true)
			return false, state // no step: the search unwinds and ends
		}
		return step(c, state, input, output)
	}
	searching.Lock()
	res, info = porcupine.CheckOperationsVerbose(model, history, linCheckBudget)
	searching.Unlock()
	if stopped.Load() {
		return porcupine.Unknown, info, true
	}
	return res, info, false
}

// linHogSteps is how many steps of the model a search takes before the
// memory bound may stop it: at most a few kilobytes of state each (a
// whole-service state is 6 KB), well under the bound, so the search that
// stops is one that could be filling the heap, not a small one checked
// beside it.
const linHogSteps = 100_000

// The memory bound stops a search: a legal history checked under a bound
// the heap is already past is undecided, not legal and not illegal, unless
// the search is too small to be what fills the heap.
func TestLinearizabilityCheckStopsAtItsMemoryBound(t *testing.T) {
	t.Parallel()
	start := epoch.UnixMilli()
	okA := linOut{Kind: "ok", Holder: "a", Run: "ra", Fence: 1, Expires: start + 10_000}
	h := []porcupine.Operation{
		{ClientId: 0, Input: linIn{Op: "checkout", Task: "t", Agent: "a", Run: "ra", Timeout: 10_000}, Output: okA, Call: 0, Return: 10},
		{ClientId: 1, Input: linIn{Op: "checkout", Task: "t", Agent: "b", Run: "rb", Timeout: 10_000}, Output: linOut{Kind: "conflict", Holder: "a", Fence: 1}, Call: 5, Return: 15},
	}
	if res, _, over := checkLinearizable(leaseModel(start), h, linMemoryBound, 0); res != porcupine.Ok || over {
		t.Fatalf("a legal history under the bound = %v (over memory %v); want ok", res, over)
	}
	if res, _, over := checkLinearizable(leaseModel(start), h, 1, 0); res != porcupine.Unknown || !over {
		t.Errorf("a legal history past a bound of 1 byte = %v (over memory %v); want unknown, over memory", res, over)
	}
	// A search too small to fill the heap finishes past the bound: what
	// fills it is another search.
	if res, _, over := checkLinearizable(leaseModel(start), h, 1, linHogSteps); res != porcupine.Ok || over {
		t.Errorf("a small search past a bound of 1 byte = %v (over memory %v); want ok", res, over)
	}
}

// jitterDB delays each request by a random 0 to max, before it is sent and
// after it is answered (CHECKOUT_LIN_JITTER=20ms): the operations of a
// phase then overlap in more of their possible orders.
type jitterDB struct {
	lease.DB
	max time.Duration
}

func (j jitterDB) pause() {
	time.Sleep(rand.N(j.max))
}

// jittered makes the request call(ctx, in) between two pauses.
func jittered[In, Out any](j jitterDB, call func(context.Context, In, ...func(*dynamodb.Options)) (Out, error), ctx context.Context, in In, optFns []func(*dynamodb.Options)) (Out, error) {
	j.pause()
	defer j.pause()
	return call(ctx, in, optFns...)
}

func (j jitterDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return jittered(j, j.DB.GetItem, ctx, in, optFns)
}

func (j jitterDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return jittered(j, j.DB.PutItem, ctx, in, optFns)
}

func (j jitterDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return jittered(j, j.DB.UpdateItem, ctx, in, optFns)
}

func (j jitterDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return jittered(j, j.DB.DeleteItem, ctx, in, optFns)
}

func (j jitterDB) Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return jittered(j, j.DB.Query, ctx, in, optFns)
}

func (j jitterDB) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	return jittered(j, j.DB.BatchGetItem, ctx, in, optFns)
}

func (j jitterDB) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	return jittered(j, j.DB.BatchWriteItem, ctx, in, optFns)
}

// linDB is the DB the linearizability tests' stores use: e's client, or
// under CHECKOUT_LIN_LOSE one that loses first sendings, drawn from the
// round's seed (loseDoer); with CHECKOUT_LIN_JITTER's delays when set.
func linDB(t testing.TB, e *env, round linRound) lease.DB {
	var db lease.DB = e.db
	if p := linLose(t); p > 0 {
		d := newLoseDoer(p, round.seed, losableOps)
		db = lossyClient(e, d)
		t.Logf("CHECKOUT_LIN_LOSE=%v: the first sending of a fraction %v of the requests is dropped or its answer thrown away; %s runs the round again", p, p, round.again())
		t.Cleanup(func() { t.Logf("CHECKOUT_LIN_LOSE=%v, seed %d: %s", p, round.seed, d) })
	}
	v := os.Getenv("CHECKOUT_LIN_JITTER")
	if v == "" {
		return db
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("CHECKOUT_LIN_JITTER=%q: want a positive duration", v)
	}
	return jitterDB{DB: db, max: d}
}
