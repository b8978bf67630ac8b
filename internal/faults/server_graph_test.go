package faults_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// killPoint is when, in a round, the server is killed.
type killPoint struct {
	name string
	// midway: as soon as the first completion is answered, the others in
	// flight; otherwise after every completion was answered, and after.
	midway bool
	// unblocking: as soon as the first dependent of the round is todo,
	// while the stream consumer is unblocking the others.
	unblocking bool
	after      time.Duration
}

// The local server is killed (SIGKILL) just after blockers complete, at
// several points (completions still in flight, right after their answers
// before the stream consumer has run, and a little later, while it may be
// unblocking), and started again on the same data. Every dependent whose
// blockers are all done becomes todo within a bounded wait, with exactly
// one unblocked event and one task_available (reason unblocked) for its
// watcher, across every later kill; a dependent with an open blocker
// stays blocked.
func TestServerKillUnblocks(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t, "github.com/checkout-dev/checkout/cmd/checkout-server")
	addr := testenv.FreeAddr(t)
	adminKey := lease.NewAPIKey()
	prefix := testenv.Prefix()
	p := &serverProc{bin: bin, addr: addr, env: []string{
		"CHECKOUT_ADDR=" + addr, "DYNAMODB_ENDPOINT=" + testenv.Endpoint(),
		"CHECKOUT_TABLE_PREFIX=" + prefix, "CHECKOUT_ADMIN_KEY=" + adminKey,
		"CHECKOUT_SWEEP_INTERVAL=1h", "LOG_LEVEL=ERROR",
	}}
	p.start(t)
	t.Cleanup(func() { p.kill() })
	// Reads the data directly while the server is down.
	direct := lease.New(lease.Config{DB: lease.NewLocalClient(testenv.Endpoint()), Tables: schema.Names{Prefix: prefix}})

	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	admin := &apiClient{base: "http://" + addr, key: adminKey, hc: hc}
	register := func(id string) *apiClient {
		var reg struct {
			APIKey string `json:"api_key"`
		}
		if code, err := admin.call("POST", "/api/agents", map[string]any{"name": id, "agent_id": id}, &reg); err != nil || code != 201 {
			t.Fatalf("register %s: %d %v", id, code, err)
		}
		return &apiClient{base: admin.base, key: reg.APIKey, hc: hc}
	}
	worker, watcher := register("worker"), register("watcher")

	points := []killPoint{
		{name: "right after the completions were answered"},
		{name: "with completions in flight", midway: true},
		{name: "50ms after the completions", after: 50 * time.Millisecond},
		{name: "as the first dependent was unblocked", unblocking: true},
		{name: "150ms after the completions", after: 150 * time.Millisecond},
		{name: "300ms after the completions", after: 300 * time.Millisecond},
	}
	if testing.Short() {
		points = points[:4]
	}
	type dep struct {
		id       string
		blockers []string
		free     bool // every blocker completes
	}
	var deps []dep
	pendingAtKills := 0
	for r, kp := range points {
		bs := []string{fmt.Sprintf("r%d-b0", r), fmt.Sprintf("r%d-b1", r), fmt.Sprintf("r%d-b2", r)}
		open := fmt.Sprintf("r%d-open", r)
		for _, id := range append(slices.Clone(bs), open) {
			if code, err := admin.call("POST", "/api/tasks", map[string]any{"task_id": id}, nil); err != nil || code != 201 {
				t.Fatalf("create %s: %d %v", id, code, err)
			}
		}
		round := []dep{
			{id: fmt.Sprintf("r%d-d0", r), blockers: []string{bs[0]}, free: true},
			{id: fmt.Sprintf("r%d-d1", r), blockers: []string{bs[0], bs[1]}, free: true},
			{id: fmt.Sprintf("r%d-d2", r), blockers: []string{bs[1], bs[2]}, free: true},
			{id: fmt.Sprintf("r%d-d3", r), blockers: bs, free: true},
			{id: fmt.Sprintf("r%d-d4", r), blockers: []string{bs[2], open}},
		}
		for _, d := range round {
			var tk struct {
				Status string `json:"status"`
			}
			if code, err := admin.call("POST", "/api/tasks", map[string]any{"task_id": d.id, "blocked_by": d.blockers}, &tk); err != nil || code != 201 || tk.Status != "blocked" {
				t.Fatalf("create %s blocked by %v: %d %s %v", d.id, d.blockers, code, tk.Status, err)
			}
			if code, err := watcher.call("POST", "/api/tasks/"+d.id+"/watch", nil, nil); err != nil || code != 200 {
				t.Fatalf("watch %s: %d %v", d.id, code, err)
			}
		}
		deps = append(deps, round...)

		// Complete the blockers at once; kill the server at the round's
		// point; the completions in flight ride the restart out, retried
		// with the same run ids.
		var answered atomic.Int64
		firstAnswer := make(chan struct{})
		var wg sync.WaitGroup
		for _, b := range bs {
			wg.Go(func() {
				run := "run-" + b
				var co struct {
					Fence int64 `json:"fence"`
				}
				if code, err := worker.call("POST", "/api/tasks/"+b+"/checkout", map[string]any{"run_id": run, "timeout": "10m"}, &co); err != nil || code != 200 {
					t.Errorf("checkout %s: %d %v", b, code, err)
					return
				}
				var res struct {
					Code string `json:"code"`
				}
				code, err := worker.call("POST", "/api/tasks/"+b+"/complete", map[string]any{"run_id": run, "fence": co.Fence}, &res)
				// 404 not_checked_out: a try sent before the kill completed
				// it and its answer was lost (the status is checked below).
				if err != nil || code != 200 && !(code == 404 && res.Code == "not_checked_out") {
					t.Errorf("complete %s: %d %s %v", b, code, res.Code, err)
				}
				if answered.Add(1) == 1 {
					close(firstAnswer)
				}
			})
		}
		switch {
		case kp.midway:
			<-firstAnswer
		case kp.unblocking:
			wg.Wait()
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
				if anyTodo(t, direct, round[0].id, round[1].id, round[2].id, round[3].id) {
					break
				}
			}
		default:
			wg.Wait()
			time.Sleep(kp.after)
		}
		p.kill()
		// While the server is down: which free dependents it left blocked
		// (the stream consumer had not unblocked them yet).
		pending := 0
		for _, d := range round {
			tk, err := direct.GetTask(context.Background(), d.id)
			if err != nil {
				t.Fatal(err)
			}
			if d.free && tk.Status == lease.StatusBlocked {
				pending++
			}
		}
		pendingAtKills += pending
		killedAt := time.Now()
		p.start(t)
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
		for _, b := range bs {
			var tk struct {
				Status string `json:"status"`
			}
			if code, err := admin.call("GET", "/api/tasks/"+b, nil, &tk); err != nil || code != 200 || tk.Status != "done" {
				t.Fatalf("blocker %s after its completion: %d %s %v", b, code, tk.Status, err)
			}
		}
		settled := waitUnblocked(t, admin, watcher, func(yield func(string, bool) bool) {
			for _, d := range deps {
				if !yield(d.id, d.free) {
					return
				}
			}
		})
		t.Logf("round %d: killed %s, %d of 4 dependents still blocked at the kill; all settled %v after it",
			r, kp.name, pending, settled.Sub(killedAt).Round(time.Millisecond))
	}
	if pendingAtKills == 0 {
		t.Errorf("no kill came before the stream consumer unblocked anything: the restart's part was never tested")
	}
}

// anyTodo reports whether one of ids is todo, read from the store.
func anyTodo(t *testing.T, s *lease.Store, ids ...string) bool {
	t.Helper()
	for _, id := range ids {
		tk, err := s.GetTask(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Status == lease.StatusTodo {
			return true
		}
	}
	return false
}

// waitUnblocked polls the server (for up to 15 s) until every dependent
// deps yields as free is todo with exactly one unblocked event and the
// watcher has exactly one task_available, reason unblocked, about it,
// and every other is blocked with neither. It fails the test with what is
// still wrong at the deadline, and returns when it was all right.
func waitUnblocked(t *testing.T, admin, watcher *apiClient, deps func(yield func(string, bool) bool)) time.Time {
	t.Helper()
	var problems []string
	for deadline := time.Now().Add(15 * time.Second); ; {
		problems = nil
		var inbox struct {
			Messages []struct {
				Type   string `json:"type"`
				TaskID string `json:"task_id"`
				Reason string `json:"reason"`
			} `json:"messages"`
		}
		if code, err := watcher.call("GET", "/api/inbox", nil, &inbox); err != nil || code != 200 {
			t.Fatalf("inbox: %d %v", code, err)
		}
		told := map[string]int{}
		for _, m := range inbox.Messages {
			if m.Type == "task_available" && m.Reason == "unblocked" {
				told[m.TaskID]++
			} else {
				problems = append(problems, fmt.Sprintf("the watcher got %s about %s, reason %s", m.Type, m.TaskID, m.Reason))
			}
		}
		for id, free := range deps {
			var tk struct {
				Status string `json:"status"`
			}
			var tr struct {
				Events []struct {
					Type string `json:"type"`
				} `json:"events"`
			}
			if code, err := admin.call("GET", "/api/tasks/"+id, nil, &tk); err != nil || code != 200 {
				t.Fatalf("task %s: %d %v", id, code, err)
			}
			if code, err := admin.call("GET", "/api/tasks/"+id+"/events", nil, &tr); err != nil || code != 200 {
				t.Fatalf("events of %s: %d %v", id, code, err)
			}
			unblocked := 0
			for _, e := range tr.Events {
				if e.Type == "unblocked" {
					unblocked++
				}
			}
			want, wantStatus := 0, "blocked"
			if free {
				want, wantStatus = 1, "todo"
			}
			if tk.Status != wantStatus || unblocked != want || told[id] != want {
				problems = append(problems, fmt.Sprintf("%s: %s with %d unblocked events, the watcher told %d times; want %s, %d, %d",
					id, tk.Status, unblocked, told[id], wantStatus, want, want))
			}
		}
		if len(problems) == 0 {
			return time.Now()
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, p := range problems {
		t.Error(p)
	}
	t.FailNow()
	return time.Time{}
}
