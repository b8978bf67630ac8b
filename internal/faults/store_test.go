package faults_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/faults"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// grant is a checkout the client saw acknowledged, and when it stopped
// relying on it (the moment it asked to release).
type grant struct {
	task, agent, run string
	fence            int64
	acked, released  time.Time
}

// retrying runs op until it returns an answer the lease domain defines, up to
// attempts times; the last error is returned when none came. attempted
// reports whether more than one try was made (an earlier one may have
// been applied with its answer lost).
func retrying(attempts int, op func() error) (err error, retried bool) {
	for i := range attempts {
		err = op()
		if err == nil || domainErr(err) {
			return err, i > 0
		}
		time.Sleep(time.Duration(10*(i+1)) * time.Millisecond)
	}
	return err, true
}

func domainErr(err error) bool {
	for _, e := range []error{lease.ErrCheckedOut, lease.ErrNotHolder, lease.ErrNotCheckedOut, lease.ErrStatusMismatch, lease.ErrTaskNotFound, lease.ErrInvalid} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

type workload struct {
	agents, tasks, rounds int
}

// runWorkload has agents race to check out tasks (watching them when held),
// hold them briefly and release them, retrying under the same run id
// whenever the network fails. It returns the acknowledged grants.
//
// A release the SDK retried after its answer was lost may find the lease
// gone or someone else's: such answers are returned as anomalies, for the
// caller to judge against the answers it knows were lost. Double grants are
// caught by the audit's interval check, which does not rely on release
// answers.
func runWorkload(t *testing.T, s *lease.Store, w workload, tasks []string) (grants []grant, anomalies []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	var wg sync.WaitGroup
	for a := range w.agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(a), 7))
			agent := fmt.Sprintf("agent-%02d", a)
			for round := range w.rounds {
				task := tasks[r.IntN(len(tasks))]
				run := fmt.Sprintf("%s-run-%d", agent, round)
				var c lease.Checkout
				err, _ := retrying(12, func() error {
					var err error
					c, err = s.Checkout(ctx, lease.CheckoutParams{TaskID: task, AgentID: agent, RunID: run, Timeout: 5 * time.Minute, Watch: true})
					return err
				})
				if err != nil {
					if !domainErr(err) {
						t.Logf("%s: checkout %s gave up: %v", agent, task, err)
					}
					continue
				}
				g := grant{task: task, agent: agent, run: run, fence: c.Fence, acked: time.Now()}
				time.Sleep(time.Duration(r.IntN(5)) * time.Millisecond)
				g.released = time.Now()
				err, retried := retrying(12, func() error {
					_, err := s.Release(ctx, lease.ReleaseParams{TaskID: task, AgentID: agent, RunID: run, Fence: c.Fence})
					return err
				})
				switch {
				case err == nil:
				case (errors.Is(err, lease.ErrNotCheckedOut) || errors.Is(err, lease.ErrNotHolder)) && retried:
					// An earlier try of ours was applied and its answer lost.
				case errors.Is(err, lease.ErrNotCheckedOut) || errors.Is(err, lease.ErrNotHolder):
					mu.Lock()
					anomalies = append(anomalies, fmt.Sprintf("%s: release of %s fence %d: %v", agent, task, c.Fence, err))
					mu.Unlock()
				case domainErr(err):
					fail("%s: release of %s fence %d: %v", agent, task, c.Fence, err)
				default:
					t.Logf("%s: release %s gave up: %v", agent, task, err)
				}
				mu.Lock()
				grants = append(grants, g)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for _, f := range failures {
		t.Error(f)
	}
	return grants, anomalies
}

// audit holds the invariants that no network fault may break, and returns
// how many ended leases have no ending event and how many grants have no
// checkout event.
func audit(t *testing.T, s *lease.Store, tasks []string, grants []grant, ns *testenv.Recorder, names schema.Names) (missingEnds, missingCheckouts int) {
	t.Helper()
	ctx := context.Background()
	// The stream function's part: every change, through a bus that is down
	// for its first notices.
	ns.Refuse = 5
	retried := drain(t, testenv.Endpoint(), names, ns)
	t.Logf("change stream drained; %d handler calls failed while the bus was down and were retried", retried)
	// 1. No double grant: one (agent, run) per fence, and the intervals in
	// which clients relied on their leases never overlap.
	byFence := map[string]grant{}
	byTask := map[string][]grant{}
	for _, g := range grants {
		k := fmt.Sprintf("%s/%d", g.task, g.fence)
		if o, ok := byFence[k]; ok && (o.agent != g.agent || o.run != g.run) {
			t.Errorf("fence %s granted to %s/%s and %s/%s", k, o.agent, o.run, g.agent, g.run)
		}
		byFence[k] = g
		byTask[g.task] = append(byTask[g.task], g)
	}
	for task, gs := range byTask {
		sort.Slice(gs, func(i, j int) bool { return gs[i].acked.Before(gs[j].acked) })
		for i := 1; i < len(gs); i++ {
			if gs[i].acked.Before(gs[i-1].released) && gs[i].fence != gs[i-1].fence {
				t.Errorf("%s: fence %d (%s) acknowledged at %v while fence %d (%s) was held until %v",
					task, gs[i].fence, gs[i].agent, gs[i].acked, gs[i-1].fence, gs[i-1].agent, gs[i-1].released)
			}
		}
	}
	// 2. The audit trail: at most one checkout and one ending per fence;
	// count what is missing.
	for _, task := range tasks {
		tk, err := s.GetTask(ctx, task)
		if err != nil {
			t.Fatal(err)
		}
		evs, err := s.Events(ctx, task)
		if err != nil {
			t.Fatal(err)
		}
		checkTimeForward(t, task, evs)
		co, end := map[int64]int{}, map[int64]int{}
		var top int64
		for _, e := range evs {
			switch {
			case e.Type == lease.EventCheckout:
				co[e.Fence]++
			case e.EndsLease():
				end[e.Fence]++
			}
			top = max(top, e.Fence)
		}
		for _, g := range byTask[task] {
			top = max(top, g.fence)
		}
		for f := int64(1); f <= top; f++ {
			if co[f] > 1 || end[f] > 1 {
				t.Errorf("%s fence %d: %d checkout events, %d ending events", task, f, co[f], end[f])
			}
			if co[f] == 0 {
				missingCheckouts++
			}
			live := tk.Checkout != nil && tk.Checkout.Fence == f
			if end[f] == 0 && !live {
				missingEnds++
			}
		}
	}
	// 3. Watchers are told at most once per ended lease, in the inbox and
	// by the notifier.
	for a := range 64 {
		msgs, err := s.Inbox(ctx, fmt.Sprintf("agent-%02d", a))
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]int{}
		for _, m := range msgs {
			var at, fence int64
			var task string
			if _, err := fmt.Sscanf(m.MessageID, "%d.%d.%s", &at, &fence, &task); err != nil {
				t.Fatalf("message id %q: %v", m.MessageID, err)
			}
			k := fmt.Sprintf("%s/%d", m.TaskID, fence)
			if seen[k]++; seen[k] > 1 {
				t.Errorf("agent-%02d told twice that %s ended", a, k)
			}
		}
	}
	// 4. Every notice at least once, and a repeat only with the same id.
	byID := map[string]lease.Notice{}
	for _, n := range ns.Notices() {
		if prev, ok := byID[n.ID]; ok && (prev.Kind != n.Kind || prev.Event.Fence != n.Event.Fence || prev.Event.TaskID != n.Event.TaskID) {
			t.Errorf("notice id %s names two notices: %+v and %+v", n.ID, prev, n)
		}
		byID[n.ID] = n
	}
	for _, task := range tasks {
		evs, err := s.Events(ctx, task)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if !e.EndsLease() {
				continue
			}
			if _, ok := byID[fmt.Sprintf("%s:%d:%s", task, e.Seq, lease.NoticeLeaseEnded)]; !ok {
				t.Errorf("%s fence %d ended (%s) without a LeaseEnded notice", task, e.Fence, e.Type)
			}
		}
	}
	t.Logf("%d notices delivered (%d distinct), %d refused while the bus was down", len(ns.Notices()), len(byID), ns.Refused())
	return missingEnds, missingCheckouts
}

func faultEnv(t *testing.T, pol faults.Policy) (*lease.Store, *faults.Proxy, *testenv.Recorder, *lost, []string, schema.Names) {
	t.Helper()
	names := testenv.Tables(t)
	u, err := url.Parse(testenv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	p, err := faults.Listen(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ns, ls := &testenv.Recorder{}, &lost{}
	s := lease.New(lease.Config{DB: faultyClient(p.URL(), ls), Tables: names, Notifier: ns, Logger: slog.New(slog.DiscardHandler)})
	w := faultWorkload()
	tasks := make([]string, w.tasks)
	for i := range tasks {
		tasks[i] = fmt.Sprintf("task-%d", i)
		if err, _ := retrying(10, func() error {
			_, err := s.CreateTask(context.Background(), lease.CreateTaskParams{TaskID: tasks[i]})
			if errors.Is(err, lease.ErrTaskExists) {
				return nil
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	p.SetPolicy(pol)
	return s, p, ns, ls, tasks, names
}

func faultWorkload() workload {
	if chaos() {
		return workload{agents: 16, tasks: 4, rounds: 60}
	}
	return workload{agents: 8, tasks: 3, rounds: 10}
}

func logCounts(t *testing.T, p *faults.Proxy) {
	t.Logf("connections %d: pass %d, refuse %d, cut-request %d, cut-response %d, blackhole %d",
		p.Connections(), p.Count(faults.Pass), p.Count(faults.Refuse), p.Count(faults.CutRequest), p.Count(faults.CutResponse), p.Count(faults.Blackhole))
}

// Faults that keep a request from reaching the server (refused, truncated,
// blackholed, delayed connections): every guarantee holds, including a
// complete audit trail.
func TestFaultsBeforeTheServer(t *testing.T) {
	t.Parallel()
	blackhole := 0.005
	if chaos() {
		blackhole = 0.01
	}
	random := faults.Random(11, []faults.Kind{faults.Refuse, faults.CutRequest, faults.Blackhole}, []float64{0.12, 0.12, blackhole}, 100*time.Millisecond, 200)
	pol := func(n int64) faults.Fault {
		if n == 40 { // at least one request that times out
			return faults.Fault{Kind: faults.Blackhole}
		}
		return random(n)
	}
	s, p, ns, ls, tasks, names := faultEnv(t, pol)
	grants, anomalies := runWorkload(t, s, faultWorkload(), tasks)
	p.SetPolicy(faults.None)
	logCounts(t, p)
	if len(grants) == 0 {
		t.Fatal("no checkout succeeded")
	}
	if p.Count(faults.Refuse) == 0 || p.Count(faults.CutRequest) == 0 || p.Count(faults.Blackhole) == 0 {
		t.Fatal("a kind of fault was never injected")
	}
	ends, checkouts := audit(t, s, tasks, grants, ns, names)
	// Every write that was applied recorded its events in itself, and the
	// stream carried them: no gap. Only a timed-out request can have been
	// applied without its answer (a blackholed one never reaches the
	// server), which explains at most one odd release answer.
	ambiguous := int(ls.timeouts.Load())
	if ends+checkouts > 0 || len(anomalies) > ambiguous {
		t.Errorf("%d ended leases and %d grants have no event, %d odd release answers %v, with %d timeouts",
			ends, checkouts, len(anomalies), anomalies, ambiguous)
	}
	t.Logf("%d grants; %d timeouts; %d gaps", len(grants), ambiguous, ends+checkouts)
}

// Faults after the server has acted (the answer is cut): still no double
// grant, no duplicate event, no watcher told twice, and no gap in the audit
// trail: a transition whose answer was lost recorded its events in its own
// write, and the change stream archives them whether or not the writer
// heard back.
func TestFaultsAfterTheServer(t *testing.T) {
	t.Parallel()
	pol := faults.Random(23, []faults.Kind{faults.CutResponse, faults.Refuse}, []float64{0.15, 0.05}, 50*time.Millisecond, 300)
	s, p, ns, ls, tasks, names := faultEnv(t, pol)
	grants, anomalies := runWorkload(t, s, faultWorkload(), tasks)
	p.SetPolicy(faults.None)
	logCounts(t, p)
	if len(grants) == 0 {
		t.Fatal("no checkout succeeded")
	}
	if p.Count(faults.CutResponse) == 0 {
		t.Fatal("no answer was cut")
	}
	ends, checkouts := audit(t, s, tasks, grants, ns, names)
	lostAnswers := p.Count(faults.CutResponse) + ls.timeouts.Load()
	if ends+checkouts > 0 || int64(len(anomalies)) > lostAnswers {
		t.Errorf("%d missing ending events, %d missing checkout events, %d odd release answers, after %d lost answers",
			ends, checkouts, len(anomalies), lostAnswers)
	}
	t.Logf("%d grants; no ended lease or grant without its event; %d releases answered as if not made, after %d lost answers",
		len(grants), len(anomalies), lostAnswers)
}
