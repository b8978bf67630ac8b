package lease_test

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/checkout-dev/checkout/lease"
)

// The segment checker. The whole-service histories run in phases, and
// between two phases every operation called before has returned before any
// operation after is called: a quiescent cut. Every linearization orders
// all the operations before a cut ahead of all those after it (an
// operation that returned before another was called must come first), so
// a linearization of the history is a linearization of each segment
// between two cuts, one after the other, each starting in the state the
// one before ended in, and any such chain is one of the history. The
// history is therefore linearizable exactly when some chain of states
// s0, s1, ... runs from an initial state to the end, each s(k+1) reachable
// from s(k) by a linearization of segment k; equivalently, when the set of
// states reachable at each cut (by every linearization of the segment
// before it, from every state of the set at its start) is never empty.
//
// checkSegments searches for such a chain depth first, cut by cut. From a
// state at cut k it searches the orders of segment k (segSearch, every
// branch of a non-deterministic step kept), goes on from each state the
// segment can end in as soon as the search reaches it, and resumes the
// search for the next only if that one leads nowhere; a state met at a
// cut a second time is one that led nowhere, and is not searched again
// (tried). A history is illegal only once every state reachable at every
// cut the search got to has been met and led nowhere: the last such cut
// then holds exactly the states reachable there, and the segment after it
// has no linearization from any of them. That segment is the one
// reported, and porcupine, checking it alone from those states, must find
// it illegal too.
//
// A segment's search (segSearch) is a depth-first search over the
// segment's operations in call order: an operation may be linearized next
// once every operation that returned before its call is linearized
// (porcupine's rule: intervals are closed, so an operation returning at
// the instant another is called overlaps it), memoized on (the operations
// linearized, state), states told apart by the model's Hash and Equal and
// each stepped by each operation once. A cut lies only where every earlier
// operation's Return is below every later operation's Call: operations
// with equal times never fall on two sides of one.
//
// Why not porcupine over the whole history: its search keeps every state
// it visited until the history is decided, and a wrong order chosen in
// one phase may be found wrong only phases later, after which it tries
// the other orders of every phase in between; claim histories of 1,600
// operations sometimes ran past its 5 minutes or its 3 GiB and were
// reported Unknown. Here a wrong choice costs the segments up to where it
// is found wrong, each searched from that one state, once, and a
// segment's search is kept only while the search goes on from one of its
// end states. Why not the set of
// all states reachable at each cut, computed segment after segment: in the
// claim histories it grows (a removed agent's watch is kept with two
// times, orders of a phase leave different watch times and messages in
// the same millisecond, and little of that is read before many phases
// later), to 1,536 states at one cut of a 1,653-operation history, where
// one segment's search from all of them ran past 2 minutes without the
// race detector; searched one state at a time, the same history is
// checked in 0.9 s (porcupine: 9 s). Why go on from an end state as soon
// as it is met, rather than once the segment's search has found them all:
// from one state, finding every end state of a phase of sixteen agents'
// operations (TestLinearizabilityWatchForceRemove) once took 254,000 steps
// of the model and 21 s under the race detector, where the first path
// through it takes a few dozen.
//
// Figures (CHECKOUT_CHAOS=1, race detector, 2 cores, 2026-12-06). In a
// whole make chaos: the claim and work-graph histories (1,428 to 1,683
// operations, 190 to 469 segments of up to 82) in 0.17 to 5.0 s, the
// 7,000-operation ones of TestLinearizabilityWatchForceRemove (6
// partitions, about 3,750 segments) in 3.6 to 7.3 s; at most 15 states
// met at one cut, at most 408 dead ends in one history, the slowest
// search of one segment 2.7 s. Against porcupine on the same histories
// (CHECKOUT_LIN_PORCUPINE=1), porcupine took 6.7 s to 2 min 15 s on the
// claim test's at 0 s, 50 ms and 500 ms lag (3 min 13 s on the 500 ms
// round it once took 3 min 47 s to decide alone, run again from its
// seed), 3.4 to 17 s on the work graph's, and 29 s on one of 7,036
// operations. The first version of this checker, which found every end
// state of a segment before going on from any, took 1.5 to 6.0 s on
// those claim histories and 21 s on that one of 7,036, and in a whole
// make chaos 1.4 to 25 s and 22 to 48 s, one search of one segment 21 s
// (sixteen agents' phase, 253,792 steps of the model); without the race
// detector, on the same 18 kept histories, it took 0.2 to 3.7 s and this
// one takes 0.06 to 0.75 s (porcupine, on ten of them, 0.4 to 2.0 s).
// Its slowest history seen: 16 s (a slow-stream work graph of 1,430
// operations whose search met 57 states at one cut, 941 dead ends in all).

// linSegmentBudget bounds the search of one segment, within the whole
// check's linCheckBudget.
const linSegmentBudget = 2 * time.Minute

// linSegmentStates bounds the states met at one cut, and the states one
// search reaches at its segment's end: past it, the history is reported
// undecided, naming the segment.
const linSegmentStates = 50_000

// segBounds are a segment check's bounds.
type segBounds struct {
	heap     uint64        // the test binary's heap, as linMemoryBound
	minSteps int64         // steps of a segment's search before the heap bound may stop it (linHogSteps)
	states   int           // states met at one cut, or at the end of one search
	budget   time.Duration // the whole check
	segment  time.Duration // one segment's search
}

var linSegBounds = segBounds{heap: linMemoryBound, minSteps: linHogSteps, states: linSegmentStates, budget: linCheckBudget, segment: linSegmentBudget}

// segCheck is what checkSegments found.
type segCheck struct {
	Result                     porcupine.CheckResult
	Partitions, Segments, Ops  int
	Largest                    int           // operations of the largest segment
	MaxStates                  int           // the most states met at one cut
	MaxNodes                   int           // the largest search of one segment: (linearized, state) pairs
	MaxSteps                   int64         // the most steps of the model one segment took
	MaxEnds                    int           // the most end states one search met
	Searches, Backtracked      int           // searches of a segment from a state; states met at a cut that led nowhere
	Slowest                    time.Duration // the longest search of one segment
	SlowestOps, SlowestSegment int
	Took                       time.Duration
	Bad                        *badSegment // when Result is not Ok: the segment that decided it
}

func (c segCheck) String() string {
	s := fmt.Sprintf("%s in %v: %d operations, %d partitions, %d segments (the largest %d operations), %d searches of a segment from a state, at most %d states met at a cut, %d of them dead ends, at most %d end states met by one search, the largest search %d nodes and %d steps, the slowest %v (segment %d, %d operations)",
		c.Result, c.Took.Round(time.Millisecond), c.Ops, c.Partitions, c.Segments, c.Largest, c.Searches, c.MaxStates, c.Backtracked, c.MaxEnds, c.MaxNodes, c.MaxSteps, c.Slowest.Round(time.Millisecond), c.SlowestSegment, c.SlowestOps)
	if c.Bad != nil {
		s += "; " + c.Bad.String()
	}
	return s
}

// badSegment is the segment no state reaches the end of (Illegal), or
// whose search passed a bound (Unknown).
type badSegment struct {
	Partition, Index, Of int
	First, Last          int // its operations' places, in call order, in the partition
	Call, Return         int64
	Ops                  []porcupine.Operation
	From                 []any // the states it starts from (Unknown: those met so far)
	Nodes, States        int
	Why                  string // Unknown: the bound passed
	OverMemory           bool
}

func (b *badSegment) String() string {
	s := fmt.Sprintf("segment %d of %d of partition %d: operations %d to %d in call order (%d), spanning %v to %v of the run, from %d states, %d nodes searched",
		b.Index, b.Of, b.Partition, b.First, b.Last, len(b.Ops), time.Duration(b.Call), time.Duration(b.Return), len(b.From), b.Nodes)
	if b.Why != "" {
		s += ": " + b.Why
	}
	return s
}

// quiescentSegments splits h, in call order, at every quiescent cut: before
// an operation called after every earlier operation (in call order) has
// returned, strictly. Operations that overlap, or touch (a return at the
// instant of a call), stay in one segment.
func quiescentSegments(h []porcupine.Operation) [][]porcupine.Operation {
	ops := slices.Clone(h)
	slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	var out [][]porcupine.Operation
	from, last := 0, int64(math.MinInt64)
	for i, op := range ops {
		if i > from && last < op.Call {
			out = append(out, ops[from:i:i])
			from = i
		}
		last = max(last, op.Return)
	}
	if from < len(ops) {
		out = append(out, ops[from:])
	}
	return out
}

// stateSet is a set of model states, told apart by Hash and Equal; a
// state's id is its place in all.
type stateSet struct {
	hash  func(any) uint64
	equal func(a, b any) bool
	byKey map[uint64][]int32
	all   []any
}

func newStateSet(m porcupine.NondeterministicModel) *stateSet {
	s := &stateSet{hash: m.Hash, equal: m.Equal, byKey: map[uint64][]int32{}}
	if s.hash == nil {
		s.hash = func(any) uint64 { return 0 }
	}
	if s.equal == nil {
		s.equal = func(a, b any) bool { return a == b }
	}
	return s
}

// add adds x, unless an equal state is there, and returns its id.
func (s *stateSet) add(x any) (id int32, added bool) {
	k := s.hash(x)
	for _, id := range s.byKey[k] {
		if s.equal(x, s.all[id]) {
			return id, false
		}
	}
	id = int32(len(s.all))
	s.byKey[k] = append(s.byKey[k], id)
	s.all = append(s.all, x)
	return id, true
}

// segSearch is the search of one segment. Every state it meets is
// interned (known), so that a node is a set of operations and a state's
// id, and the model steps a state by an operation once, however many
// orders of the segment's other operations lead to it there.
type segSearch struct {
	step     func(state, input, output any) []any
	ops      []porcupine.Operation // in call order
	deadline time.Time             // the segment's
	budget   time.Time             // the whole check's
	b        segBounds
	known    *stateSet
	after    map[int64][]int32 // state id<<20 | operation: the ids of the states it steps to
	memo     map[uint64][]memoNode
	ends     map[int32]bool // the ids of the states at the segment's end
	nodes    int
	steps    int64
	total    *int64 // the steps of the whole check
	// onEnd, when set, is given each state the search reaches at the
	// segment's end, the first time, and says whether the search is
	// over (the rest of the history was found linearizable from it, or
	// a bound was passed): the search then stops, halted.
	onEnd  func(id int32) bool
	halted bool
	nested time.Duration // time spent in onEnd
	stop   string        // why the search stopped at a bound, when it did
	over   bool          // it stopped at the heap bound
}

type memoNode struct {
	done []uint64
	id   int32
}

func newSegSearch(m porcupine.NondeterministicModel, seg []porcupine.Operation, b segBounds, budget time.Time) *segSearch {
	step := m.Step
	if step == nil {
		stepContext := m.StepContext
		step = func(state, input, output any) []any { return stepContext(context.Background(), state, input, output) }
	}
	return &segSearch{step: step, ops: seg, b: b, deadline: time.Now().Add(b.segment), budget: budget, total: new(int64),
		known: newStateSet(m), after: map[int64][]int32{}, memo: map[uint64][]memoNode{}, ends: map[int32]bool{}}
}

// reach returns every state reachable at the segment's end from a state
// of from (none when the search stopped: see stop).
func (s *segSearch) reach(from []any) []any {
	done := make([]uint64, (len(s.ops)+63)/64)
	for _, st := range from {
		id, _ := s.known.add(st)
		if s.visit(done, id) && !s.expand(done, len(s.ops), id) {
			return nil
		}
	}
	out := make([]any, 0, len(s.ends))
	for id, st := range s.known.all {
		if s.ends[int32(id)] {
			out = append(out, st)
		}
	}
	return out
}

func maskHash(done []uint64) uint64 {
	h := uint64(14695981039346656037)
	for _, w := range done {
		h = (h ^ w) * 1099511628211
		h ^= h >> 29
	}
	return h
}

// visit records (done, id) and says whether it is new.
func (s *segSearch) visit(done []uint64, id int32) bool {
	k := maskHash(done) ^ uint64(id)*0x9e3779b97f4a7c15
	for _, n := range s.memo[k] {
		if n.id == id && slices.Equal(n.done, done) {
			return false
		}
	}
	s.memo[k] = append(s.memo[k], memoNode{slices.Clone(done), id})
	s.nodes++
	return true
}

// expand follows every linearization of the operations not in done from
// state id; it returns false once the search has stopped.
func (s *segSearch) expand(done []uint64, left int, id int32) bool {
	if left == 0 {
		if s.ends[id] {
			return true
		}
		s.ends[id] = true
		if len(s.ends) > s.b.states {
			s.stop = fmt.Sprintf("more than %d states reachable at its end (linSegmentStates)", s.b.states)
			return false
		}
		if s.onEnd != nil {
			from := time.Now()
			s.halted = s.onEnd(id)
			s.nested += time.Since(from)
			return !s.halted
		}
		return true
	}
	// An operation may go next once every operation that returned before
	// its call has gone: its call is at or before every pending return.
	first := int64(math.MaxInt64)
	for i, op := range s.ops {
		if done[i/64]&(1<<(i%64)) == 0 {
			first = min(first, op.Return)
		}
	}
	for i, op := range s.ops {
		if op.Call > first {
			break
		}
		if done[i/64]&(1<<(i%64)) != 0 {
			continue
		}
		key := int64(id)<<20 | int64(i)
		next, ok := s.after[key]
		if !ok {
			if s.steps, *s.total = s.steps+1, *s.total+1; s.steps%256 == 0 && !s.within() {
				return false
			}
			next = []int32{}
			for _, st := range s.step(s.known.all[id], op.Input, op.Output) {
				n, _ := s.known.add(st)
				next = append(next, n)
			}
			s.after[key] = next
		}
		done[i/64] |= 1 << (i % 64)
		for _, n := range next {
			if s.visit(done, n) && !s.expand(done, left-1, n) {
				return false
			}
		}
		done[i/64] &^= 1 << (i % 64)
	}
	return true
}

// within says whether the search is still within its bounds, and sets
// stop when it is not.
func (s *segSearch) within() bool {
	now := time.Now()
	switch {
	case heapInUse.Load() > s.b.heap && *s.total > s.b.minSteps:
		s.stop, s.over = fmt.Sprintf("the test binary's heap passed %d MiB (linMemoryBound)", s.b.heap>>20), true
	case now.After(s.budget):
		s.stop = fmt.Sprintf("the check ran out of its %v (linCheckBudget) in its search", s.b.budget)
	case now.After(s.deadline):
		s.stop = fmt.Sprintf("its search ran out of its %v (linSegmentBudget)", s.b.segment)
	}
	return s.stop == ""
}

// checkSegments checks h against m, partition by partition (m.Partition),
// segment by segment, within b. One search runs at a time in the test
// binary (searching), as checkLinearizable's do.
func checkSegments(m porcupine.NondeterministicModel, h []porcupine.Operation, b segBounds) segCheck {
	watchHeap()
	searching.Lock()
	defer searching.Unlock()
	start := time.Now()
	parts := [][]porcupine.Operation{h}
	if m.Partition != nil {
		parts = m.Partition(h)
	}
	c := segCheck{Result: porcupine.Ok, Partitions: len(parts), Ops: len(h)}
	var steps int64 // the model's, in this check (segSearch.total)
	for p, part := range parts {
		for _, op := range part {
			if op.Return < op.Call {
				panic(fmt.Sprintf("an operation returns before its call: %+v", op))
			}
		}
		segs := quiescentSegments(part)
		c.Segments += len(segs)
		firsts := make([]int, len(segs)) // each segment's first operation, in call order
		for k := 1; k < len(segs); k++ {
			firsts[k] = firsts[k-1] + len(segs[k-1])
		}
		// tried[k]: the states the search has met at cut k (before
		// segment k). Only the one on the search's path may still lead
		// to the end: the others are dead.
		tried := make([]*stateSet, len(segs)+1)
		for k := range tried {
			tried[k] = newStateSet(m)
		}
		var bad *badSegment
		// solve says whether the segments from k on have a linearization
		// starting in st; it stops at a bound, with bad set.
		var solve func(k int, st any) bool
		solve = func(k int, st any) bool {
			if k == len(segs) {
				return true
			}
			if _, added := tried[k].add(st); !added {
				return false // met before, and dead since
			}
			seg := segs[k]
			c.Largest = max(c.Largest, len(seg))
			c.MaxStates = max(c.MaxStates, len(tried[k].all))
			s := newSegSearch(m, seg, b, start.Add(b.budget))
			s.total = &steps
			if len(tried[k].all) > b.states {
				s.stop = fmt.Sprintf("more than %d states met at its start (linSegmentStates)", b.states)
			}
			// Each state the segment can end in is searched on from as
			// soon as the search reaches it, the search resumed only if
			// that leads nowhere.
			s.onEnd = func(id int32) bool { return solve(k+1, s.known.all[id]) || bad != nil }
			segStart := time.Now()
			if s.stop == "" && s.within() {
				s.reach([]any{st})
			}
			took := time.Since(segStart) - s.nested
			c.Searches++
			if took > c.Slowest {
				c.Slowest, c.SlowestOps, c.SlowestSegment = took, len(seg), k
			}
			c.MaxNodes = max(c.MaxNodes, s.nodes)
			c.MaxSteps = max(c.MaxSteps, s.steps)
			c.MaxEnds = max(c.MaxEnds, len(s.ends))
			if s.stop != "" && bad == nil {
				bad = newBadSegment(p, k, segs, firsts, tried[k].all)
				bad.Nodes, bad.States, bad.Why, bad.OverMemory = s.nodes, len(s.ends), s.stop, s.over
			}
			return s.halted && bad == nil
		}
		init := newStateSet(m)
		for _, st := range m.Init() {
			init.add(st)
		}
		legal := false
		for _, st := range init.all {
			if legal = solve(0, st); legal || bad != nil {
				break
			}
		}
		for k := range tried {
			c.Backtracked += max(0, len(tried[k].all)-1)
		}
		if !legal {
			c.Result = porcupine.Unknown
			if bad == nil {
				// Every state reachable at each cut was met, and each
				// led nowhere: the last cut met holds all the states
				// reachable there, and the segment after it has no
				// linearization from any of them.
				c.Result = porcupine.Illegal
				k := 0
				for k+1 < len(segs) && len(tried[k+1].all) > 0 {
					k++
				}
				bad = newBadSegment(p, k, segs, firsts, tried[k].all)
			}
			c.Bad = bad
			c.Took = time.Since(start)
			return c
		}
	}
	c.Took = time.Since(start)
	return c
}

func newBadSegment(p, k int, segs [][]porcupine.Operation, firsts []int, from []any) *badSegment {
	seg := segs[k]
	end := seg[0].Return
	for _, op := range seg {
		end = max(end, op.Return)
	}
	return &badSegment{Partition: p, Index: k, Of: len(segs), First: firsts[k], Last: firsts[k] + len(seg) - 1,
		Call: seg[0].Call, Return: end, Ops: seg, From: from}
}

// segmentModel is m for one segment alone, starting in the states from,
// for porcupine to draw and for the dump helpers.
func segmentModel(m porcupine.NondeterministicModel, from []any) porcupine.Model {
	m.Partition = func(h []porcupine.Operation) [][]porcupine.Operation { return [][]porcupine.Operation{h} }
	m.PartitionEvent = nil
	m.Init = func() []any { return from }
	return m.ToModel()
}

// listOperations is a history for reading, one operation a line.
func listOperations(h []porcupine.Operation) string {
	var b strings.Builder
	for _, op := range h {
		fmt.Fprintf(&b, "%12d %12d c%02d %+v -> %+v\n", op.Call/1000, op.Return/1000, op.ClientId, op.Input, op.Output)
	}
	return b.String()
}

// checkWholeHistory checks a whole-service history segment by segment
// (checkSegments; each partition wholePartition gives is segmented
// alone), logs what the check took, and fails t with what a failure
// needs: the segment, porcupine's drawing of it from the states it starts
// in, and under CHECKOUT_LIN_DUMP the dumps of it and of the trails.
// CHECKOUT_LIN_PORCUPINE=1 checks the history with porcupine as well, as
// before (a second opinion, and its time, for the figures).
func checkWholeHistory(t *testing.T, nd porcupine.NondeterministicModel, history []porcupine.Operation, e *env, tasks int, round linRound) {
	t.Helper()
	c := checkSegments(nd, history, linSegBounds)
	t.Logf("checked (seed %d): %s", round.seed, c)
	if os.Getenv("CHECKOUT_LIN_PORCUPINE") != "" {
		pStart := time.Now()
		res, _, over := checkLinearizable(nd.ToModel(), history, linMemoryBound, linHogSteps)
		t.Logf("porcupine on the same history (seed %d): %s in %v (over memory %v; the segment checker: %s in %v)",
			round.seed, res, time.Since(pStart).Round(time.Millisecond), over, c.Result, c.Took.Round(time.Millisecond))
		if res != porcupine.Unknown && c.Result != porcupine.Unknown && res != c.Result {
			t.Errorf("porcupine says the history is %s, the segment checker %s: one of the checkers has a bug", res, c.Result)
		}
	}
	if c.Result == porcupine.Ok {
		return
	}
	bad, seed := c.Bad, round.seed
	dump := os.Getenv("CHECKOUT_LIN_DUMP")
	name := fmt.Sprintf("%s.%s.%d", dump, t.Name(), seed)
	if c.Result == porcupine.Unknown {
		// Not drawn: the segment's search passed a bound, and porcupine's
		// drawing of it could take more memory than the machine has.
		if dump != "" {
			_ = os.WriteFile(name+".segment", []byte(listOperations(bad.Ops)), 0o644)
			dumpTrails(t, e, tasks, name+".trails")
		}
		if bad.OverMemory {
			t.Fatalf("history is %s (seed %d): %s; the search stopped when the test binary's heap passed %d GiB (linMemoryBound); run it again with %s", c.Result, seed, bad, linMemoryBound>>30, round.again())
		}
		t.Fatalf("history is %s (seed %d): %s; run it again with %s", c.Result, seed, bad, round.again())
	}
	// Illegal: porcupine checks the segment alone from the states it
	// starts in, and must find it illegal too; its search is what the
	// drawing and the dumps show.
	model := segmentModel(nd, bad.From)
	res, info, _ := checkLinearizable(model, bad.Ops, linMemoryBound, linHogSteps)
	path := filepath.Join(t.TempDir(), "history.html")
	if v := os.Getenv("CHECKOUT_LIN_VIS"); v != "" {
		path = v
	}
	if res == porcupine.Illegal {
		if err := porcupine.VisualizePath(model, info, path); err != nil {
			t.Logf("visualize: %v", err)
		}
	}
	if dump != "" {
		dumpIllegal(model, bad.Ops, name)
		dumpStuck(model, info, bad.Ops, name+".stuck")
		dumpTrails(t, e, tasks, name+".trails")
		// The whole history and the states the segment starts from: what
		// led there, for a history no run with the seed repeats.
		_ = os.WriteFile(name+".history", []byte(listOperations(history)), 0o644)
		var from strings.Builder
		for i, st := range bad.From {
			fmt.Fprintf(&from, "state %d: %+v\n", i, st)
		}
		_ = os.WriteFile(name+".from", []byte(from.String()), 0o644)
	}
	switch res {
	case porcupine.Ok:
		t.Errorf("the segment checker finds %s illegal, porcupine finds it linearizable from the same %d states: one of the checkers has a bug", bad, len(bad.From))
	case porcupine.Unknown:
		t.Logf("porcupine could not decide the segment within its budget or memory bound: no drawing")
	}
	t.Fatalf("history is %s (seed %d; %s runs it again): %s; visualization of the segment at %s", c.Result, seed, round.again(), bad, path)
}

// ---- Tests of the segment checker itself ----

// span is an operation of no meaning, for the tests of the cuts.
func span(call, ret int64) porcupine.Operation {
	return porcupine.Operation{Input: [2]int64{call, ret}, Call: call, Return: ret}
}

func spans(seg []porcupine.Operation) [][2]int64 {
	out := make([][2]int64, len(seg))
	for i, op := range seg {
		out[i] = [2]int64{op.Call, op.Return}
	}
	return out
}

// A cut is only where every operation before it has returned, strictly,
// before any after it is called: operations that overlap, touch, or are
// bridged by a longer one stay in one segment, and a history with no cut
// is one segment.
func TestQuiescentSegmentsCutOnlyWhereNothingOverlaps(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		what string
		h    []porcupine.Operation
		want [][][2]int64
	}{
		{"none", nil, nil},
		{"one", []porcupine.Operation{span(0, 1)}, [][][2]int64{{{0, 1}}}},
		{"a chain of overlaps, the first and last apart", []porcupine.Operation{span(0, 10), span(5, 20), span(15, 30)},
			[][][2]int64{{{0, 10}, {5, 20}, {15, 30}}}},
		{"a return at the instant of the next call", []porcupine.Operation{span(0, 10), span(10, 20)},
			[][][2]int64{{{0, 10}, {10, 20}}}},
		{"equal calls", []porcupine.Operation{span(5, 5), span(5, 6), span(7, 8)},
			[][][2]int64{{{5, 5}, {5, 6}}, {{7, 8}}}},
		{"a gap of one", []porcupine.Operation{span(0, 10), span(11, 20)},
			[][][2]int64{{{0, 10}}, {{11, 20}}}},
		{"a long operation bridging short ones, given out of order", []porcupine.Operation{span(101, 110), span(30, 40), span(0, 100), span(10, 20)},
			[][][2]int64{{{0, 100}, {10, 20}, {30, 40}}, {{101, 110}}}},
	} {
		var got [][][2]int64
		for _, seg := range quiescentSegments(c.h) {
			got = append(got, spans(seg))
		}
		if fmt.Sprint(got) != fmt.Sprint(c.want) {
			t.Errorf("%s: segments %v, want %v", c.what, got, c.want)
		}
	}
	// Random histories: the segments hold every operation once, in call
	// order; everything of a segment returns before anything later is
	// called; and no segment holds a cut of its own.
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		var h []porcupine.Operation
		for range 1 + r.IntN(60) {
			call := r.Int64N(400)
			h = append(h, span(call, call+r.Int64N(1+r.Int64N(40))))
		}
		segs := quiescentSegments(h)
		var all []porcupine.Operation
		for k, seg := range segs {
			all = append(all, seg...)
			last := int64(math.MinInt64)
			for i, op := range seg {
				if i > 0 && last < op.Call {
					t.Fatalf("segment %v holds a cut before %v", spans(seg), op.Input)
				}
				last = max(last, op.Return)
			}
			if k+1 < len(segs) {
				for _, later := range segs[k+1:] {
					for _, op := range later {
						if op.Call <= last {
							t.Fatalf("segment %v ends at %d, a later one has %v", spans(seg), last, op.Input)
						}
					}
				}
			}
		}
		if !slices.IsSortedFunc(all, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) }) || len(all) != len(h) {
			t.Fatalf("segments %d operations, not in call order, of %d", len(all), len(h))
		}
	}
}

// linNDModel is the lease model of one task (linState), without its
// partition: for histories of task "t" whose outputs the model gives.
func linNDModel(start int64) porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Init: func() []any { return []any{linState{Now: start, Status: lease.StatusTodo}} },
		Step: func(state, input, output any) []any {
			s, in := state.(linState), input.(linIn)
			if in.Op == "sweep" {
				return s.sweep()
			}
			return s.next(in, output.(linOut))
		},
		Hash: func(state any) uint64 {
			s := state.(linState)
			h := uint64(14695981039346656037)
			for _, v := range []int64{s.Now, s.Fence, s.Expires, s.Locked, int64(len(s.Holder) + len(s.EndOp)<<8 + len(s.Status)<<16 + len(s.Ends)<<24), s.EndFence, s.EndHeld} {
				h = (h ^ uint64(v)) * 1099511628211
			}
			return h
		},
		DescribeOperation: func(input, output any) string { return fmt.Sprintf("%+v -> %+v", input, output) },
	}
}

// randomLeaseHistory runs n random operations of three agents on task "t"
// through the model, one branch of each step taken at random, and lays
// them out as a concurrent history of which that order is a
// linearization: each is called at most w before its place and returns at
// most w after it, so some overlap and some are apart.
func randomLeaseHistory(r *rand.Rand, start int64, n int, w int64) []porcupine.Operation {
	s := linState{Now: start, Status: lease.StatusTodo}
	agents := []string{"a", "b", "c"}
	runs := map[string]string{}
	fences := map[string]int64{}
	var h []porcupine.Operation
	for i := range n {
		ag := r.IntN(len(agents))
		in := linIn{Task: "t", Agent: agents[ag], AgentN: ag, Run: runs[agents[ag]], Fence: fences[agents[ag]]}
		switch q := r.IntN(100); {
		case q < 12:
			in = linIn{Op: "tick", Now: s.Now + []int64{0, 5_000, 10_000, 30_000}[r.IntN(4)]}
		case q < 22:
			in = linIn{Op: "sweep"}
		case q < 30:
			in.Op, in.Timeout = "heartbeat", []int64{5_000, 10_000}[r.IntN(2)]
		case q < 50:
			in.Op, in.Timeout = "checkout", []int64{10_000, 30_000}[r.IntN(2)]
			if in.Run == "" || r.IntN(2) == 0 {
				in.Run = fmt.Sprintf("%s-%d", in.Agent, i)
			}
		case q < 62:
			in.Op = "renew"
		case q < 75:
			in.Op = "release"
		case q < 78:
			in.Op = "complete"
		default:
			in.Op = "status"
		}
		var out linOut
		if in.Op == "sweep" {
			next := s.sweep()
			s, out = next[r.IntN(len(next))].(linState), linOut{Kind: "ok"}
		} else {
			out, s = s.step(in)
		}
		if in.Op == "checkout" && out.Kind == "ok" {
			runs[in.Agent], fences[in.Agent] = out.Run, out.Fence
		}
		at := int64(i) * 100
		h = append(h, porcupine.Operation{ClientId: i % 4, Input: in, Output: out, Call: at - r.Int64N(w+1), Return: at + r.Int64N(w+1)})
	}
	return h
}

// corrupt changes one answer of h: a fence, a holder, a kind, an expiry,
// a held time or a status. The history may stay legal (another order of
// overlapping operations may give the new answer) or not.
func corrupt(r *rand.Rand, h []porcupine.Operation) []porcupine.Operation {
	h = slices.Clone(h)
	i := r.IntN(len(h))
	switch out := h[i].Output.(type) {
	case linOut:
		switch r.IntN(6) {
		case 0:
			out.Fence += []int64{-1, 1}[r.IntN(2)]
		case 1:
			out.Holder = []string{"a", "b", "c", ""}[r.IntN(4)]
		case 2:
			out.Kind = []string{"ok", "conflict", "not_holder", "not_checked_out"}[r.IntN(4)]
		case 3:
			out.Expires += 5_000
		case 4:
			out.Held++
		default:
			out.Status = lease.Statuses[r.IntN(len(lease.Statuses))]
		}
		h[i].Output = out
	case wOut:
		switch r.IntN(6) {
		case 0:
			out.Fence += []int64{-1, 1}[r.IntN(2)]
		case 1:
			out.Holder = wAgentID(r.IntN(3))
		case 2:
			out.Kind = []string{"ok", "conflict", "not_holder", "not_checked_out", "no_task_available"}[r.IntN(5)]
		case 3:
			out.Task = wTaskID(r.IntN(3))
		case 4:
			out.Version++
		default:
			if out.Msgs == "" {
				out.Msgs = "0:1"
			} else {
				out.Msgs = ""
			}
		}
		h[i].Output = out
	}
	return h
}

// agree checks h with both checkers, fails t if they differ, and returns
// the verdict.
func agree(t *testing.T, m porcupine.NondeterministicModel, h []porcupine.Operation) bool {
	t.Helper()
	c := checkSegments(m, h, linSegBounds)
	want := porcupine.CheckOperations(m.ToModel(), h)
	if c.Result == porcupine.Unknown || (c.Result == porcupine.Ok) != want {
		t.Errorf("porcupine says legal=%v, the segment checker %s; the history:\n%s", want, c, listOperations(h))
	}
	return want
}

// The segment checker agrees with porcupine on random histories of the
// lease model, laid out with more or less overlap, as given and with one
// answer changed, legal and illegal.
func TestSegmentCheckerAgreesWithPorcupine(t *testing.T) {
	t.Parallel()
	start := epoch.UnixMilli()
	m := linNDModel(start)
	r := rand.New(rand.NewPCG(3, 4))
	legal, illegal, cut := 0, 0, 0
	for i := range 600 {
		h := randomLeaseHistory(r, start, 4+r.IntN(14), []int64{0, 60, 150, 400}[i%4])
		if !agree(t, m, h) {
			t.Fatalf("a history laid out from the model's own order was refused:\n%s", listOperations(h))
		}
		if len(quiescentSegments(h)) > 1 {
			cut++
		}
		if agree(t, m, corrupt(r, h)) {
			legal++
		} else {
			illegal++
		}
	}
	t.Logf("600 histories, %d with cuts; corrupted: %d legal, %d illegal", cut, legal, illegal)
	if legal < 50 || illegal < 50 || cut < 100 {
		t.Errorf("the corrupted histories: %d legal, %d illegal, %d histories with cuts; want both verdicts and cuts, often", legal, illegal, cut)
	}
}

// A state carried across a cut decides the next segment: a's checkout, and
// after a cut b's checkout granted too, is illegal, though each segment
// alone is legal from the initial state; the checker names the second
// segment, and porcupine, run on it alone from the states the first left,
// finds it illegal too.
func TestSegmentCheckerCarriesStatesAcrossCuts(t *testing.T) {
	t.Parallel()
	start := epoch.UnixMilli()
	m := linNDModel(start)
	co := func(agent string, n int, call int64, out linOut) porcupine.Operation {
		return porcupine.Operation{ClientId: n, Input: linIn{Op: "checkout", Task: "t", Agent: agent, AgentN: n, Run: "r" + agent, Timeout: 10_000},
			Output: out, Call: call, Return: call + 10}
	}
	a := co("a", 0, 0, linOut{Kind: "ok", Holder: "a", Run: "ra", Fence: 1, Expires: start + 10_000})
	b := co("b", 1, 20, linOut{Kind: "ok", Holder: "b", Run: "rb", Fence: 1, Expires: start + 10_000})
	for _, seg := range [][]porcupine.Operation{{a}, {b}} {
		if !porcupine.CheckOperations(m.ToModel(), seg) {
			t.Fatalf("%v alone is refused", seg[0].Input)
		}
	}
	c := checkSegments(m, []porcupine.Operation{b, a}, linSegBounds)
	if c.Result != porcupine.Illegal || c.Segments != 2 || c.Bad == nil || c.Bad.Index != 1 || len(c.Bad.From) != 1 {
		t.Fatalf("two grants across a cut: %s; want illegal at segment 1, from one state", c)
	}
	// What a refused history shows: porcupine's search of the segment
	// from those states, its drawing, and the dumps.
	model := segmentModel(m, c.Bad.From)
	res, info, _ := checkLinearizable(model, c.Bad.Ops, linMemoryBound, linHogSteps)
	if res != porcupine.Illegal {
		t.Fatalf("porcupine finds the failing segment %s from the states before it", res)
	}
	dir := t.TempDir()
	if err := porcupine.VisualizePath(model, info, filepath.Join(dir, "segment.html")); err != nil {
		t.Error(err)
	}
	dumpIllegal(model, c.Bad.Ops, filepath.Join(dir, "dump"))
	dumpStuck(model, info, c.Bad.Ops, filepath.Join(dir, "dump.stuck"))
	for _, f := range []string{"segment.html", "dump", "dump.stuck"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || !strings.Contains(string(b), "rb") {
			t.Errorf("%s: %v, %d bytes, want b's checkout in it", f, err, len(b))
		}
	}
	// Overlapping, either may have been first: b's grant is still refused.
	b.Call = 5
	if c := checkSegments(m, []porcupine.Operation{a, b}, linSegBounds); c.Result != porcupine.Illegal || c.Segments != 1 {
		t.Errorf("two grants overlapping: %s; want illegal, one segment", c)
	}
}

// coinModel is a counter whose "add" adds 1 or 2, either: a step with two
// next states.
func coinModel() porcupine.NondeterministicModel {
	return porcupine.NondeterministicModel{
		Init: func() []any { return []any{0} },
		Step: func(state, input, output any) []any {
			n := state.(int)
			switch input.(string) {
			case "add":
				return []any{n + 1, n + 2}
			case "read":
				if output.(int) == n {
					return []any{n}
				}
			}
			return nil
		},
		Hash: func(state any) uint64 { return uint64(state.(int)) },
	}
}

// Every branch of a non-deterministic step is followed to the segment's
// end, and every end state is carried to the next: two adds, overlapping,
// end in 2, 3 or 4, and a read after the cut may see any of them, and
// nothing else; an expired lease that a sweep may or may not end leaves
// both states.
func TestSegmentCheckerKeepsEveryBranch(t *testing.T) {
	t.Parallel()
	m := coinModel()
	op := func(in string, out any, call, ret int64) porcupine.Operation {
		return porcupine.Operation{Input: in, Output: out, Call: call, Return: ret}
	}
	adds := []porcupine.Operation{op("add", nil, 0, 10), op("add", nil, 5, 15)}
	got := newSegSearch(m, adds, linSegBounds, time.Now().Add(time.Minute)).reach([]any{0})
	slices.SortFunc(got, func(a, b any) int { return cmp.Compare(a.(int), b.(int)) })
	if fmt.Sprint(got) != "[2 3 4]" {
		t.Errorf("two adds end in %v, want [2 3 4]", got)
	}
	for read := range 6 {
		h := append(slices.Clone(adds), op("read", read, 20, 30))
		if legal := agree(t, m, h); legal != (read >= 2 && read <= 4) {
			t.Errorf("a read of %d after two adds: legal %v", read, legal)
		}
	}
	// Three adds one after another, then a read: the search meets a state
	// at a cut that leads nowhere (1, on the way to a read of 6), and goes
	// back to the next.
	for read := range 8 {
		var h []porcupine.Operation
		for i := range int64(3) {
			h = append(h, op("add", nil, 2*i, 2*i+1))
		}
		h = append(h, op("read", read, 6, 7))
		if legal := agree(t, m, h); legal != (read >= 3 && read <= 6) {
			t.Errorf("a read of %d after three adds: legal %v", read, legal)
		}
		if c := checkSegments(m, h, linSegBounds); read == 6 && (c.Backtracked == 0 || c.Segments != 4) {
			t.Errorf("a read of 6 after three adds: %s; want 4 segments, and dead ends met", c)
		}
	}
	// The lease model: a's lease has expired; a sweep may end it or not.
	start := epoch.UnixMilli()
	lm := linNDModel(start)
	h := []porcupine.Operation{
		{Input: linIn{Op: "checkout", Task: "t", Agent: "a", Run: "ra", Timeout: 10_000}, Output: linOut{Kind: "ok", Holder: "a", Run: "ra", Fence: 1, Expires: start + 10_000}, Call: 0, Return: 1},
		{Input: linIn{Op: "tick", Now: start + 10_000}, Output: linOut{Kind: "ok"}, Call: 2, Return: 3},
		{Input: linIn{Op: "sweep"}, Output: linOut{Kind: "ok"}, Call: 4, Return: 5},
	}
	if ends := newSegSearch(lm, h, linSegBounds, time.Now().Add(time.Minute)).reach(lm.Init()); len(ends) != 2 {
		t.Errorf("a sweep of an expired lease ends in %d states, want 2", len(ends))
	}
}

// A segment whose reachable states pass the bound, or whose search passes
// the heap bound, is undecided, and the check names it.
func TestSegmentCheckerStopsAtItsBounds(t *testing.T) {
	t.Parallel()
	m := coinModel()
	// n adds at once, then a read of a sum they cannot make: every order
	// of the adds is searched.
	adds := func(n int) []porcupine.Operation {
		var h []porcupine.Operation
		for i := range n {
			h = append(h, porcupine.Operation{Input: "add", Call: int64(i), Return: 100})
		}
		return append(h, porcupine.Operation{Input: "read", Output: -1, Call: 101, Return: 102})
	}
	b := linSegBounds
	b.states = 5
	if c := checkSegments(m, adds(8), b); c.Result != porcupine.Unknown || c.Bad == nil || c.Bad.Index != 0 || !strings.Contains(c.Bad.Why, "more than 5 states") {
		t.Errorf("eight adds, at most 5 states: %s; want unknown, naming the states", c)
	}
	b = linSegBounds
	b.heap, b.minSteps = 1, 0
	// Enough steps for the bound to be looked at (every 256th).
	if c := checkSegments(m, adds(20), b); c.Result != porcupine.Unknown || c.Bad == nil || !c.Bad.OverMemory {
		t.Errorf("a search past a heap bound of 1 byte: %s; want unknown, over memory", c)
	}
	// The whole check's budget is looked at before each search, however
	// small: twenty adds one after another, with no time for the check.
	var apart []porcupine.Operation
	for i := range int64(20) {
		apart = append(apart, porcupine.Operation{Input: "add", Call: 2 * i, Return: 2*i + 1})
	}
	b = linSegBounds
	b.budget = 0
	if c := checkSegments(m, apart, b); c.Result != porcupine.Unknown || c.Bad == nil || !strings.Contains(c.Bad.Why, "linCheckBudget") {
		t.Errorf("twenty adds apart, with no time: %s; want unknown, naming linCheckBudget", c)
	}
	if c := checkSegments(m, adds(8), linSegBounds); c.Result != porcupine.Illegal || c.MaxEnds != 9 || c.Bad == nil || c.Bad.Index != 1 || len(c.Bad.From) != 9 {
		t.Errorf("eight adds, then a read of -1: %s; want illegal at the read, from 9 states (8 to 16)", c)
	}
}

// agreeOnCorrupted checks that the segment checker agrees with porcupine
// on the store's own history h: on prefixes of it ending at a cut, of at
// most 100 operations, as they are and with one answer changed (corrupt),
// legal and illegal. Each prefix is a history of its own, from the
// model's initial states.
func agreeOnCorrupted(t *testing.T, m porcupine.NondeterministicModel, h []porcupine.Operation, r *rand.Rand) {
	t.Helper()
	segs := quiescentSegments(h)
	var ends []int // the prefixes' lengths
	n := 0
	for _, seg := range segs {
		if n += len(seg); n > 100 {
			break
		}
		ends = append(ends, n)
	}
	if len(ends) == 0 {
		t.Fatalf("no cut in the first 100 operations of %d, in %d segments", len(h), len(segs))
	}
	ordered := slices.Concat(segs...)
	legal, illegal := 0, 0
	for range 12 {
		prefix := ordered[:ends[r.IntN(len(ends))]]
		if !agree(t, m, prefix) {
			t.Fatalf("a prefix of a legal history at a cut is refused")
		}
		if agree(t, m, corrupt(r, prefix)) {
			legal++
		} else {
			illegal++
		}
	}
	t.Logf("12 prefixes at cuts, one answer changed: %d legal, %d illegal, both checkers agree", legal, illegal)
	if illegal == 0 {
		t.Error("no changed answer made a prefix illegal: the comparison decides nothing")
	}
}
