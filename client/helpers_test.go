package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// These tests script the server to check how WorkOn, ClaimLoop and
// FollowFeed ride out failures.

// drop is a status for flaky's handler: close the connection unanswered,
// as a server that stops does.
const drop = -1

// flaky is a scripted server that can also drop connections.
type flaky struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

func newFlaky(t *testing.T, handler func(r recorded) (int, string)) *flaky {
	t.Helper()
	f := &flaky{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec := recorded{Method: r.Method, Path: r.URL.RequestURI()}
		if len(b) > 0 {
			if err := json.Unmarshal(b, &rec.Body); err != nil {
				t.Errorf("request body is not JSON: %q", b)
			}
		}
		f.mu.Lock()
		f.reqs = append(f.reqs, rec)
		f.mu.Unlock()
		status, body := handler(rec)
		if status == drop {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *flaky) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

// blockLong is a sleeper that returns at once for waits shorter than an
// hour and otherwise waits for ctx: the renewals and loss checks a test
// gives an hour's interval never come.
func blockLong(ctx context.Context, d time.Duration) error {
	if d >= time.Hour {
		<-ctx.Done()
	}
	return ctx.Err()
}

const unavailableJSON = `{"error":"the database cannot be reached","code":"unavailable"}`

// holderClock is a clock inside holderJSON's lease.
func holderClock() time.Time { return time.Date(2026, 3, 20, 14, 35, 0, 0, time.UTC) }

// When the server restarts just as the work ends, the completion waits for
// it (dropped connections, then 503s) instead of giving up after the
// client's four tries and leaving the task in progress, to be done again.
// Every try names the lease, so a repeat of one that took effect is
// answered as the first.
func TestWorkOnCompletesThroughAServerRestart(t *testing.T) {
	t.Parallel()
	var completes atomic.Int32
	f := newFlaky(t, func(r recorded) (int, string) {
		switch {
		case strings.HasSuffix(r.Path, "/complete"):
			switch n := completes.Add(1); {
			case n <= 6:
				return drop, ""
			case n <= 12:
				return 503, unavailableJSON
			}
			return 200, `{"task_id":"task-1","status":"done"}`
		}
		return 200, holderJSON
	})
	c := New(f.URL, "k", WithSleeper(blockLong), WithClock(holderClock))
	err := c.WorkOn(context.Background(), "task-1", func(context.Context, *Lease) error { return nil },
		NoHeartbeats(), RenewEvery(time.Hour))
	if err != nil {
		t.Fatalf("WorkOn = %v, want the completion made once the server is back", err)
	}
	if n := completes.Load(); n != 13 {
		t.Fatalf("%d completions sent, want 13", n)
	}
	for _, r := range f.requests() {
		if strings.HasSuffix(r.Path, "/complete") && (r.Body["run_id"] != "run-w" || r.Body["fence"] != 3.0) {
			t.Fatalf("complete body %v does not name the lease", r.Body)
		}
	}

	// Once the lease has expired there is nothing left to finish: the
	// client's own tries, then the error.
	completes.Store(0)
	late := New(f.URL, "k", WithSleeper(blockLong), WithClock(func() time.Time { return holderClock().Add(time.Hour) }))
	err = late.WorkOn(context.Background(), "task-1", func(context.Context, *Lease) error { return nil },
		NoHeartbeats(), RenewEvery(time.Hour))
	var ue *UnreachableError
	if !errors.As(err, &ue) || completes.Load() != 4 {
		t.Fatalf("WorkOn past the lease's expiry = %v after %d completions, want unreachable after 4", err, completes.Load())
	}
}

// A work function that panics, when the caller recovers, leaves no lease
// renewed for ever: the renewals stop, the task is released as a failed
// attempt naming the panic, and the panic goes on.
func TestWorkOnReleasesTheLeaseOfAPanic(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(_ int, r recorded) (int, string) {
		if strings.HasSuffix(r.Path, "/release") {
			return 200, `{"task_id":"task-1","released_by":"agent-w","held_seconds":1}`
		}
		return 200, holderJSON
	})
	g := newGate()
	c := New(s.URL, "k", WithSleeper(g.sleep))
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		_ = c.WorkOn(context.Background(), "task-1", func(context.Context, *Lease) error {
			g.await(t, 5*time.Minute) // the renewal loop waits for its turn
			panic("boom")
		}, NoHeartbeats())
	}()
	if recovered != "boom" {
		t.Fatalf("recovered %v, want the panic to go on", recovered)
	}
	select {
	case g.ticks <- struct{}{}:
		t.Fatal("the lease is still being renewed after the work panicked")
	default:
	}
	var rel *recorded
	for _, r := range s.requests() {
		if strings.HasSuffix(r.Path, "/release") {
			rel = &r
		}
	}
	if rel == nil {
		t.Fatalf("no release after the panic; requests %+v", s.requests())
	}
	if e, _ := rel.Body["error"].(string); rel.Body["outcome"] != OutcomeFailed || !strings.Contains(e, "panicked: boom") || rel.Body["fence"] != 3.0 {
		t.Fatalf("release %v, want a failed attempt naming the panic", rel.Body)
	}
}

// ClaimLoop retries what can mend (a server down or unavailable at the
// first heartbeat) and returns what cannot (a URL that is not a checkout
// server's, a bad key, a forbidden heartbeat), with or without heartbeats.
func TestClaimLoopSortsItsErrors(t *testing.T) {
	t.Parallel()
	const beatJSON = `{"agent_id":"agent-w","expires_at":"2026-03-20T14:31:30.000Z"}`
	for _, tc := range []struct {
		name  string
		beats func(n int32) (int, string) // nil: NoHeartbeats
		other func(r recorded) (int, string)
		want  func(error) bool
	}{
		{"server down at the start", func(n int32) (int, string) {
			if n <= 9 {
				return drop, ""
			}
			return 200, beatJSON
		}, nil, func(err error) bool { return err == nil }},
		{"server unavailable at the start", func(n int32) (int, string) {
			if n <= 9 {
				return 503, unavailableJSON
			}
			return 200, beatJSON
		}, nil, func(err error) bool { return err == nil }},
		{"forbidden heartbeat", func(int32) (int, string) { return 403, `{"error":"no","code":"forbidden"}` },
			nil, func(err error) bool { return errors.Is(err, ErrForbidden) }},
		{"not a checkout server", nil, func(recorded) (int, string) { return 404, "404 page not found" },
			func(err error) bool { var nse *NotServerError; return errors.As(err, &nse) }},
		{"bad key", nil, func(recorded) (int, string) { return 401, `{"error":"bad key","code":"unauthorized"}` },
			func(err error) bool { return errors.Is(err, ErrUnauthorized) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var beats atomic.Int32
			f := newFlaky(t, func(r recorded) (int, string) {
				switch {
				case tc.other != nil:
					return tc.other(r)
				case r.Path == "/api/heartbeat":
					return tc.beats(beats.Add(1))
				case r.Path == "/api/claim":
					return 200, holderJSON
				}
				return 200, `{"task_id":"task-1","status":"done"}`
			})
			c := New(f.URL, "k", WithSleeper(blockLong))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			opts := []WorkOption{RenewEvery(time.Hour), HeartbeatTTL(3 * time.Hour)}
			if tc.beats == nil {
				opts = append(opts, NoHeartbeats())
			}
			done := make(chan error, 1)
			go func() {
				done <- c.ClaimLoop(ctx, func(context.Context, *Lease) error { cancel(); return nil }, opts...)
			}()
			select {
			case err := <-done:
				if !tc.want(err) {
					t.Fatalf("ClaimLoop = %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("ClaimLoop did not return; requests %d", len(f.requests()))
			}
		})
	}
}

// taskJSON is holderJSON for another task and fence.
func taskJSON(taskID string, fence int) string {
	s := strings.Replace(holderJSON, `"task_id":"task-1"`, `"task_id":"`+taskID+`"`, 1)
	return strings.Replace(s, `"fence":3`, fmt.Sprintf(`"fence":%d`, fence), 1)
}

// The loss check finds its lease's loss even when the inbox holds the
// 1,000 messages the server answers, which hide the new lease_lost one.
func TestLossCheckFindsItsLossInAFullInbox(t *testing.T) {
	t.Parallel()
	var inbox strings.Builder
	inbox.WriteString(`{"messages":[`)
	for i := range maxInbox {
		if i > 0 {
			inbox.WriteString(",")
		}
		fmt.Fprintf(&inbox, `{"message_id":"m%d","type":"task_available","task_id":"t%d","at":"2026-03-20T14:00:00Z"}`, i, i)
	}
	inbox.WriteString(`]}`)
	s := newScripted(t, func(_ int, r recorded) (int, string) {
		switch {
		case r.Path == "/api/inbox":
			return 200, inbox.String()
		case r.Method == http.MethodGet && strings.HasSuffix(r.Path, "/checkout"):
			return 200, `{"task_id":"task-1","locked":false,"checkout":null}`
		}
		return 200, holderJSON
	})
	c := New(s.URL, "k", WithSleeper(blockLong))
	done := make(chan error, 1)
	go func() {
		done <- c.WorkOn(context.Background(), "task-1", func(ctx context.Context, l *Lease) error {
			<-ctx.Done()
			return context.Cause(ctx)
		}, NoHeartbeats(), RenewEvery(time.Hour), CheckLossEvery(time.Second))
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "no longer held") {
			t.Fatalf("WorkOn = %v, want lease lost", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the loss check never found the loss behind 1,000 older messages")
	}
	for _, r := range s.requests() {
		if strings.HasSuffix(r.Path, "/complete") || strings.HasSuffix(r.Path, "/release") {
			t.Fatalf("%s after the lease was lost", r.Path)
		}
	}
}

// A loss that the renewal or the completion finds, under CheckLossEvery,
// leaves no lease_lost message behind to fill the inbox: it is deleted at
// once if it is there, or by the client's next loss check when it comes
// later.
func TestLossFoundElsewhereDeletesItsMessage(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	arrived := map[string]bool{}    // the lease_lost messages in the inbox
	deleted := make(chan string, 4) // the ones deleted
	msg := func(id, task string, fence int) string {
		return fmt.Sprintf(`{"message_id":%q,"type":"lease_lost","task_id":%q,"fence":%d,"reason":"timeout","at":"2026-03-20T14:40:00Z"}`, id, task, fence)
	}
	s := newScripted(t, func(_ int, r recorded) (int, string) {
		mu.Lock()
		defer mu.Unlock()
		switch {
		case r.Path == "/api/inbox":
			var ms []string
			if arrived["lost.1"] {
				ms = append(ms, msg("lost.1", "task-1", 3))
			}
			if arrived["lost.2"] {
				ms = append(ms, msg("lost.2", "task-2", 4))
			}
			if arrived["lost.4"] {
				ms = append(ms, msg("lost.4", "task-4", 6))
			}
			return 200, `{"messages":[` + strings.Join(ms, ",") + `]}`
		case r.Method == http.MethodDelete:
			id := strings.TrimPrefix(r.Path, "/api/inbox/")
			delete(arrived, id)
			deleted <- id
			return 200, `{}`
		case r.Path == "/api/tasks/task-4/complete":
			return 403, `{"error":"another lease holds task-4","code":"not_holder"}`
		case strings.HasPrefix(r.Path, "/api/tasks/task-4/"):
			return 200, taskJSON("task-4", 6)
		case strings.HasSuffix(r.Path, "/renew"):
			return 404, `{"error":"task is not checked out","code":"not_checked_out"}`
		case strings.HasPrefix(r.Path, "/api/tasks/task-2/"):
			return 200, taskJSON("task-2", 4)
		case strings.HasPrefix(r.Path, "/api/tasks/task-3/"):
			return 200, taskJSON("task-3", 5)
		}
		return 200, holderJSON
	})
	c := New(s.URL, "k", WithSleeper(blockLong))
	wait := func(ctx context.Context, _ *Lease) error { <-ctx.Done(); return context.Cause(ctx) }
	lossOpts := []WorkOption{NoHeartbeats(), RenewEvery(time.Minute), CheckLossEvery(time.Hour)}

	// Its message is there when the renewal finds the loss.
	mu.Lock()
	arrived["lost.1"] = true
	mu.Unlock()
	if err := c.WorkOn(context.Background(), "task-1", wait, lossOpts...); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("WorkOn = %v", err)
	}
	select {
	case id := <-deleted:
		if id != "lost.1" {
			t.Fatalf("deleted %s", id)
		}
	default:
		t.Fatal("the lease_lost message of a loss the renewal found was left in the inbox")
	}

	// It comes after: the next loss check deletes it.
	if err := c.WorkOn(context.Background(), "task-2", wait, lossOpts...); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("WorkOn = %v", err)
	}
	mu.Lock()
	arrived["lost.2"] = true
	mu.Unlock()
	err := c.WorkOn(context.Background(), "task-3", func(ctx context.Context, _ *Lease) error {
		select {
		case id := <-deleted:
			if id != "lost.2" {
				t.Errorf("deleted %s", id)
			}
		case <-time.After(10 * time.Second):
			t.Error("the late lease_lost message was never deleted")
		}
		return nil
	}, NoHeartbeats(), RenewEvery(time.Hour), CheckLossEvery(time.Second))
	if err != nil {
		t.Fatal(err)
	}

	// The completion finds the loss: the same.
	mu.Lock()
	arrived["lost.4"] = true
	mu.Unlock()
	err = c.WorkOn(context.Background(), "task-4", func(context.Context, *Lease) error { return nil },
		NoHeartbeats(), RenewEvery(time.Hour), CheckLossEvery(time.Hour))
	if !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("WorkOn = %v", err)
	}
	select {
	case id := <-deleted:
		if id != "lost.4" {
			t.Fatalf("deleted %s", id)
		}
	default:
		t.Fatal("the lease_lost message of a loss the completion found was left in the inbox")
	}
}

// Zero options mean their defaults: HeartbeatTTL(0) heartbeats every 30 s,
// not in a tight loop, and IdleBackoff(0, 0) waits about a second between
// claims of an empty pool.
func TestZeroOptionsMeanDefaults(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(_ int, r recorded) (int, string) {
		switch r.Path {
		case "/api/heartbeat":
			return 200, `{"agent_id":"agent-w","expires_at":"2026-03-20T14:31:30.000Z"}`
		case "/api/claim":
			return 404, `{"error":"no task available","code":"no_task_available"}`
		}
		return 200, holderJSON
	})
	g := newGate()
	c := New(s.URL, "k", WithSleeper(g.sleep))
	done := make(chan error, 1)
	// The work ends only once the heartbeat loop's first wait is seen:
	// WorkOn's end stops the loop, which could otherwise stop before it
	// waits. The renewal loop waits on the same gate, in either order.
	seen := make(chan struct{})
	go func() {
		done <- c.WorkOn(context.Background(), "task-1", func(ctx context.Context, _ *Lease) error {
			select {
			case <-seen:
			case <-ctx.Done():
			}
			return nil
		}, HeartbeatTTL(0), RenewEvery(time.Hour))
	}()
	for heartbeat := false; !heartbeat; {
		select {
		case d := <-g.waits:
			switch d {
			case 30 * time.Second: // the heartbeat loop's
				heartbeat = true
			case time.Hour: // the renewal loop's
			default:
				t.Fatalf("wait %v, want the heartbeat loop's 30s (or the renewal loop's hour)", d)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the heartbeat loop never waited (want a 30s wait)")
		}
	}
	close(seen)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		done <- c.ClaimLoop(ctx, func(context.Context, *Lease) error { return nil }, NoHeartbeats(), IdleBackoff(0, 0))
	}()
	for i := range 3 {
		select {
		case d := <-g.waits:
			if idle := time.Second << i; d < idle/2 || d > idle {
				t.Fatalf("idle wait %v, want between %v and %v", d, idle/2, idle)
			}
			g.ticks <- struct{}{}
		case <-time.After(10 * time.Second):
			t.Fatal("ClaimLoop never waited")
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// After a failed heartbeat the next is sent sooner than ttl/3 (from half a
// second, doubling), so that a short outage does not let the agent die.
func TestFailedHeartbeatIsRetriedSooner(t *testing.T) {
	t.Parallel()
	var beats atomic.Int32
	s := newScripted(t, func(_ int, r recorded) (int, string) {
		if r.Path == "/api/heartbeat" {
			if n := beats.Add(1); n >= 2 && n <= 4 {
				return 503, unavailableJSON
			}
			return 200, `{"agent_id":"agent-w","expires_at":"2026-03-20T14:31:30.000Z"}`
		}
		return 200, holderJSON
	})
	var mu sync.Mutex
	var waits []time.Duration
	enough := make(chan struct{})
	sleep := func(ctx context.Context, d time.Duration) error {
		if d < time.Hour {
			mu.Lock()
			waits = append(waits, d)
			n := len(waits)
			mu.Unlock()
			if n == 6 {
				close(enough)
			}
			if n < 6 {
				return ctx.Err()
			}
		}
		<-ctx.Done()
		return ctx.Err()
	}
	c := New(s.URL, "k", WithSleeper(sleep), WithRetryPolicy(RetryPolicy{MaxAttempts: 1}))
	err := c.WorkOn(context.Background(), "task-1", func(context.Context, *Lease) error {
		select {
		case <-enough:
		case <-time.After(10 * time.Second):
			t.Error("the heartbeat loop stalled")
		}
		return nil
	}, HeartbeatTTL(6*time.Second), RenewEvery(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []time.Duration{2 * time.Second, 500 * time.Millisecond, time.Second, 2 * time.Second, 2 * time.Second, 2 * time.Second}
	if fmt.Sprint(waits) != fmt.Sprint(want) {
		t.Fatalf("heartbeat waits %v, want %v", waits, want)
	}
}

// Concurrent WorkOn calls on one Client share one heartbeat loop: ten of
// them send one first heartbeat, not ten, and one last heartbeat.
func TestConcurrentWorkOnShareTheirHeartbeats(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(_ int, r recorded) (int, string) {
		switch {
		case r.Path == "/api/heartbeat":
			return 200, `{"agent_id":"agent-w","expires_at":"2026-03-20T14:31:30.000Z"}`
		case strings.HasSuffix(r.Path, "/complete"):
			return 200, `{"task_id":"task-1","status":"done"}`
		}
		return 200, holderJSON
	})
	c := New(s.URL, "k", WithSleeper(blockLong))
	beats := func() int {
		n := 0
		for _, r := range s.requests() {
			if r.Path == "/api/heartbeat" {
				n++
			}
		}
		return n
	}
	started := make(chan struct{}, 10)
	finish := make(chan struct{})
	errs := make(chan error, 10)
	work := func() {
		errs <- c.WorkOn(context.Background(), "task-1", func(context.Context, *Lease) error {
			started <- struct{}{}
			<-finish
			return nil
		}, HeartbeatTTL(3*time.Hour), RenewEvery(time.Hour))
	}
	go work()
	<-started
	for range 9 {
		go work()
	}
	for range 9 {
		<-started
	}
	if n := beats(); n != 1 {
		t.Errorf("%d heartbeats for 10 concurrent WorkOn, want 1", n)
	}
	close(finish)
	for range 10 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := beats(); n != 2 {
		t.Errorf("%d heartbeats in all, want 2 (the first and the last)", n)
	}
}
