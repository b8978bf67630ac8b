package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// These tests script the server's answers to check what the client does
// with them; client_server_test.go runs the client against the real local
// server.

type recorded struct {
	Method, Path, Auth, UA string
	Body                   map[string]any
}

// scripted is an httptest server answering with handler, recording every
// request.
type scripted struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []recorded
}

func newScripted(t *testing.T, handler func(n int, r recorded) (int, string)) *scripted {
	t.Helper()
	s := &scripted{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec := recorded{Method: r.Method, Path: r.URL.RequestURI(), Auth: r.Header.Get("Authorization"), UA: r.Header.Get("User-Agent")}
		if len(b) > 0 {
			if err := json.Unmarshal(b, &rec.Body); err != nil {
				t.Errorf("request body is not JSON: %q", b)
			}
		}
		s.mu.Lock()
		s.reqs = append(s.reqs, rec)
		n := len(s.reqs)
		s.mu.Unlock()
		status, body := handler(n, rec)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *scripted) requests() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.reqs...)
}

// instant is a sleeper that records the waits and returns at once.
type instant struct {
	mu    sync.Mutex
	waits []time.Duration
}

func (s *instant) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.waits = append(s.waits, d)
	s.mu.Unlock()
	return ctx.Err()
}

const holderJSON = `{"task_id":"task-1","agent_id":"agent-w","agent_name":"writer","run_id":"run-w","fence":3,` +
	`"locked_at":"2026-03-20T14:30:00.000Z","timeout_seconds":900,"expires_at":"2026-03-20T14:45:00.000Z","remaining_seconds":600}`

func TestErrorsAreTyped(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		status int
		body   string
		is     []error
		check  func(t *testing.T, err error)
	}{
		{"conflict", 409, `{"error":"task task-1 is already checked out","code":"checked_out","holder":` + holderJSON + `}`,
			[]error{ErrCheckedOut}, func(t *testing.T, err error) {
				var ce *ConflictError
				if !errors.As(err, &ce) || ce.Holder.AgentName != "writer" || ce.Holder.Fence != 3 || ce.Holder.Timeout() != 15*time.Minute {
					t.Fatalf("conflict error %#v", err)
				}
				if !ce.Holder.ExpiresAt.Equal(time.Date(2026, 3, 20, 14, 45, 0, 0, time.UTC)) {
					t.Fatalf("expires_at %v", ce.Holder.ExpiresAt)
				}
			}},
		{"not holder", 403, `{"error":"held by another","code":"not_holder","holder":` + holderJSON + `}`,
			[]error{ErrNotHolder}, func(t *testing.T, err error) {
				var ne *NotHolderError
				if !errors.As(err, &ne) || ne.Holder.AgentID != "agent-w" {
					t.Fatalf("not holder error %#v", err)
				}
			}},
		{"status mismatch", 409, `{"error":"task is done","code":"status_mismatch","status":"done"}`,
			[]error{ErrStatusMismatch}, func(t *testing.T, err error) {
				var se *StatusMismatchError
				if !errors.As(err, &se) || se.Status != "done" {
					t.Fatalf("status mismatch error %#v", err)
				}
			}},
		{"not found", 404, `{"error":"no such task","code":"task_not_found"}`, []error{ErrTaskNotFound, ErrNotFound}, nil},
		{"not checked out", 404, `{"error":"not checked out","code":"not_checked_out"}`, []error{ErrNotCheckedOut, ErrNotFound}, nil},
		{"unauthorized", 401, `{"error":"bad key","code":"unauthorized"}`, []error{ErrUnauthorized}, nil},
		{"invalid", 400, `{"error":"bad timeout","code":"invalid_timeout"}`, []error{ErrInvalid}, nil},
		{"conflict with the same agent", 409, `{"error":"task task-1 is already checked out","code":"checked_out","same_agent":true,"holder":` + holderJSON + `}`,
			[]error{ErrCheckedOut}, func(t *testing.T, err error) {
				var ce *ConflictError
				if !errors.As(err, &ce) || !ce.SameAgent || ce.Holder.Fence != 3 {
					t.Fatalf("conflict error %#v", err)
				}
			}},
		// A checkout with watch: the server says whether the caller is
		// on the watch list; a full list leaves it off.
		{"conflict, watching", 409, `{"error":"task task-1 is already checked out","code":"checked_out","holder":` + holderJSON + `,"watching":true}`,
			[]error{ErrCheckedOut}, func(t *testing.T, err error) {
				var ce *ConflictError
				if !errors.As(err, &ce) || !ce.Watching {
					t.Fatalf("conflict error %#v, want Watching", err)
				}
			}},
		{"conflict, watch list full", 409, `{"error":"task task-1 is already checked out; its watch list is full (100 watchers), so the caller is not on it","code":"checked_out","holder":` + holderJSON + `,"watching":false}`,
			[]error{ErrCheckedOut}, func(t *testing.T, err error) {
				var ce *ConflictError
				if !errors.As(err, &ce) || ce.Watching {
					t.Fatalf("conflict error %#v, want not Watching", err)
				}
			}},
		{"blocked, watching", 409, `{"error":"task task-1 is blocked by b","code":"blocked","blocked_by":[{"task_id":"b","status":"todo"}],"watching":true}`,
			[]error{ErrBlocked}, func(t *testing.T, err error) {
				var be *BlockedError
				if !errors.As(err, &be) || !be.Watching || len(be.BlockedBy) != 1 {
					t.Fatalf("blocked error %#v, want Watching", err)
				}
			}},
		{"blocked, not watching", 409, `{"error":"task task-1 is blocked by b","code":"blocked","blocked_by":[{"task_id":"b","status":"todo"}]}`,
			[]error{ErrBlocked}, func(t *testing.T, err error) {
				var be *BlockedError
				if !errors.As(err, &be) || be.Watching {
					t.Fatalf("blocked error %#v, want not Watching", err)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newScripted(t, func(int, recorded) (int, string) { return tc.status, tc.body })
			_, err := New(s.URL, "ck_x").Checkout(context.Background(), "task-1", CheckoutRequest{})
			var ae *APIError
			if !errors.As(err, &ae) || ae.Status != tc.status || string(ae.Body) != tc.body {
				t.Fatalf("err = %v, want an *APIError with status %d", err, tc.status)
			}
			for _, want := range tc.is {
				if !errors.Is(err, want) {
					t.Errorf("errors.Is(%v, %v) = false", err, want)
				}
			}
			if errors.Is(err, ErrLeaseLost) || (tc.status != 404 && errors.Is(err, ErrNotFound)) {
				t.Errorf("%v matches a sentinel it should not", err)
			}
			if tc.check != nil {
				tc.check(t, err)
			}
			if n := len(s.requests()); n != 1 {
				t.Errorf("a %d was sent %d times, want once (4xx are never retried)", tc.status, n)
			}
		})
	}
}

func TestCheckoutRetriesReuseTheRunID(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(n int, r recorded) (int, string) {
		if n < 3 {
			return 503, `{"error":"try later","code":"unavailable"}`
		}
		return 200, strings.Replace(holderJSON, `"run-w"`, `"`+r.Body["run_id"].(string)+`"`, 1)
	})
	sl := &instant{}
	c := New(s.URL, "ck_key", WithSleeper(sl.sleep), WithUserAgent("test-agent"),
		WithRetryPolicy(RetryPolicy{MaxAttempts: 5, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}))
	co, err := c.Checkout(context.Background(), "task-1", CheckoutRequest{Timeout: 30 * time.Minute, Reason: "fix"})
	if err != nil {
		t.Fatal(err)
	}
	reqs := s.requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	runID := reqs[0].Body["run_id"]
	if runID == nil || !strings.HasPrefix(runID.(string), "run-") || co.RunID != runID {
		t.Fatalf("run id %v, checkout %+v", runID, co)
	}
	for _, r := range reqs {
		if r.Body["run_id"] != runID {
			t.Errorf("retry used run id %v, want %v", r.Body["run_id"], runID)
		}
		if r.Method != "POST" || r.Path != "/api/tasks/task-1/checkout" || r.Auth != "Bearer ck_key" || r.UA != "test-agent" {
			t.Errorf("request %+v", r)
		}
		if r.Body["timeout"] != "30m0s" || r.Body["reason"] != "fix" {
			t.Errorf("body %v", r.Body)
		}
	}
	if len(sl.waits) != 2 || sl.waits[0] >= 100*time.Millisecond || sl.waits[1] >= 200*time.Millisecond {
		t.Errorf("waits %v, want two full-jitter waits under 100ms and 200ms", sl.waits)
	}
}

func TestRetriesAreBounded(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(int, recorded) (int, string) { return 500, `{"error":"bug","code":"internal"}` })
	c := New(s.URL, "k", WithSleeper((&instant{}).sleep), WithRetryPolicy(RetryPolicy{MaxAttempts: 3, BaseDelay: time.Millisecond}))
	_, err := c.GetTask(context.Background(), "t")
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 500 {
		t.Fatalf("err %v", err)
	}
	if n := len(s.requests()); n != 3 {
		t.Fatalf("%d attempts, want 3", n)
	}
}

func TestReleaseIsNotRetriedOn5xxButOn429(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(n int, r recorded) (int, string) {
		if r.Path == "/api/tasks/a/release" {
			return 502, `{"error":"gateway","code":"bad_gateway"}`
		}
		if n == 2 {
			return 429, `{"error":"slow down","code":"too_many_requests"}`
		}
		return 200, `{"task_id":"b","released_by":"me","held_seconds":5}`
	})
	c := New(s.URL, "k", WithSleeper((&instant{}).sleep))
	if _, err := c.Release(context.Background(), "a", ReleaseRequest{}); err == nil {
		t.Fatal("release a succeeded")
	}
	r, err := c.Release(context.Background(), "b", ReleaseRequest{Force: true, Reason: "stuck"})
	if err != nil || r.HeldSeconds != 5 {
		t.Fatalf("release b: %+v %v", r, err)
	}
	reqs := s.requests()
	if len(reqs) != 3 || reqs[2].Body["force"] != true || reqs[2].Body["reason"] != "stuck" {
		t.Fatalf("requests %+v", reqs)
	}
}

func TestReleaseNamingItsLeaseIsRetriedOn5xx(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(n int, r recorded) (int, string) {
		if n < 3 {
			return 502, `{"error":"gateway","code":"bad_gateway"}`
		}
		if strings.HasSuffix(r.Path, "/complete") {
			return 200, `{"task_id":"a","title":"","status":"done","created_at":"2026-03-20T14:35:00.000Z","started_at":null,"completed_at":null,"duration_seconds":null,"checkout":null}`
		}
		return 200, `{"task_id":"a","released_by":"me","held_seconds":5}`
	})
	c := New(s.URL, "k", WithSleeper((&instant{}).sleep))
	if r, err := c.Release(context.Background(), "a", ReleaseRequest{RunID: "run-1", Fence: 3}); err != nil || r.HeldSeconds != 5 {
		t.Fatalf("release: %+v %v", r, err)
	}
	reqs := s.requests()
	if len(reqs) != 3 || reqs[2].Body["run_id"] != "run-1" || reqs[2].Body["fence"] != float64(3) {
		t.Fatalf("requests %+v", reqs)
	}
	if _, err := c.Complete(context.Background(), "a", CompleteRequest{Fence: 3}); err != nil {
		t.Fatalf("complete: %v", err)
	}
}

func TestUnreachableServer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	sl := &instant{}
	_, err = New(url, "k", WithSleeper(sl.sleep)).Status(context.Background(), "t")
	var ue *UnreachableError
	if !errors.As(err, &ue) {
		t.Fatalf("err %v, want *UnreachableError", err)
	}
	if want := "cannot reach the server at " + url + ": connection refused"; ue.Error() != want {
		t.Fatalf("message %q, want %q", ue.Error(), want)
	}
	if len(sl.waits) != DefaultRetryPolicy.MaxAttempts-1 {
		t.Fatalf("waits %v", sl.waits)
	}
}

func TestRecordResponse(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(int, recorded) (int, string) { return 200, `{"checkouts":[]}` })
	var r Response
	cos, err := New(s.URL, "k").ListCheckouts(RecordResponse(context.Background(), &r), "agent 1")
	if err != nil || len(cos) != 0 {
		t.Fatal(cos, err)
	}
	if r.Status != 200 || string(r.Body) != `{"checkouts":[]}` {
		t.Fatalf("recorded %+v", r)
	}
	if p := s.requests()[0].Path; p != "/api/checkouts?agent_id=agent+1" {
		t.Fatalf("path %q", p)
	}
}

// gate is a sleeper that lets each wait end only when the test says so.
type gate struct {
	waits chan time.Duration
	ticks chan struct{}
}

func newGate() *gate { return &gate{waits: make(chan time.Duration), ticks: make(chan struct{})} }

func (g *gate) sleep(ctx context.Context, d time.Duration) error {
	select {
	case g.waits <- d:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-g.ticks:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// next waits for the client to start a wait, checks its length and ends it.
func (g *gate) next(t *testing.T, want time.Duration) {
	t.Helper()
	g.await(t, want)
	g.ticks <- struct{}{}
}

// await waits for the client to start a wait and checks its length.
func (g *gate) await(t *testing.T, want time.Duration) {
	t.Helper()
	select {
	case d := <-g.waits:
		if want > 0 && d != want {
			t.Errorf("wait %v, want %v", d, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the client never waited (want a %v wait)", want)
	}
}

func TestWorkOnLosesItsLease(t *testing.T) {
	t.Parallel()
	var lost sync.Mutex
	lostNow := false
	s := newScripted(t, func(n int, r recorded) (int, string) {
		switch {
		case strings.HasSuffix(r.Path, "/checkout"):
			return 200, holderJSON
		case strings.HasSuffix(r.Path, "/renew"):
			lost.Lock()
			defer lost.Unlock()
			if lostNow {
				return 404, `{"error":"task task-1 is not checked out","code":"not_checked_out"}`
			}
			return 200, strings.Replace(holderJSON, `"remaining_seconds":600`, `"remaining_seconds":900`, 1)
		}
		return 500, `{"error":"unexpected","code":"x"}`
	})
	g := newGate()
	c := New(s.URL, "k", WithSleeper(g.sleep))
	done := make(chan error, 1)
	fnCause := make(chan error, 1)
	go func() {
		done <- c.WorkOn(context.Background(), "task-1", func(ctx context.Context, l *Lease) error {
			<-ctx.Done()
			fnCause <- context.Cause(ctx)
			return ctx.Err()
		}, NoHeartbeats())
	}()
	g.next(t, 5*time.Minute) // a third of the 15m lease: the first renewal succeeds
	g.await(t, 5*time.Minute)
	lost.Lock()
	lostNow = true
	lost.Unlock()
	g.ticks <- struct{}{} // the second fails: the lease is gone
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("WorkOn did not return; requests %+v", s.requests())
	}
	if !errors.Is(err, ErrLeaseLost) || !errors.Is(err, ErrNotCheckedOut) {
		t.Fatalf("WorkOn = %v, want lease lost", err)
	}
	if cause := <-fnCause; !errors.Is(cause, ErrLeaseLost) {
		t.Fatalf("fn's context cause = %v", cause)
	}
	for _, r := range s.requests() {
		if strings.HasSuffix(r.Path, "/complete") || strings.HasSuffix(r.Path, "/release") {
			t.Errorf("%s after the lease was lost", r.Path)
		}
		if strings.HasSuffix(r.Path, "/renew") && (r.Body["run_id"] != "run-w" || r.Body["fence"] != 3.0) {
			t.Errorf("renew body %v", r.Body)
		}
	}
}

func TestClaimLoopBacksOffWhenEmptyAndMovesOnAtOnceOnConflict(t *testing.T) {
	t.Parallel()
	claims := 0 // the handler runs one request at a time here
	s := newScripted(t, func(_ int, r recorded) (int, string) {
		switch r.Path {
		case "/api/heartbeat":
			return 200, `{"agent_id":"agent-w","expires_at":"2026-03-20T14:31:30.000Z"}`
		case "/api/claim":
			claims++
			switch claims {
			case 1, 2:
				return 404, `{"error":"no task available","code":"no_task_available"}`
			case 3:
				return 409, `{"error":"taken","code":"checked_out","holder":` + holderJSON + `}`
			case 4:
				return 200, holderJSON
			}
			return 404, `{"error":"no task available","code":"no_task_available"}`
		case "/api/tasks/task-1/complete":
			return 200, `{"task_id":"task-1","status":"done"}`
		}
		return 500, `{"error":"unexpected","code":"x"}`
	})
	g := newGate()
	c := New(s.URL, "k", WithSleeper(g.sleep))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- c.ClaimLoop(ctx, func(ctx context.Context, l *Lease) error {
			got <- l.TaskID()
			return nil
		}, IdleBackoff(time.Second, 4*time.Second), HeartbeatTTL(90*time.Second))
	}()
	// The heartbeat loop and the idle backoff both wait on the gate; tell
	// them apart by length.
	var idle []time.Duration
	for len(idle) < 2 {
		d := <-g.waits
		if d != 30*time.Second {
			idle = append(idle, d)
		}
		g.ticks <- struct{}{}
	}
	if idle[0] < 500*time.Millisecond || idle[0] > time.Second || idle[1] < time.Second || idle[1] > 2*time.Second {
		t.Errorf("idle waits %v, want jittered 1s then 2s", idle)
	}
	if id := <-got; id != "task-1" {
		t.Fatalf("worked on %q", id)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("ClaimLoop = %v", err)
	}
	var paths []string
	for _, r := range s.requests() {
		if r.Path != "/api/heartbeat" || len(paths) == 0 {
			paths = append(paths, r.Path)
		}
	}
	want := "/api/heartbeat /api/claim /api/claim /api/claim /api/claim /api/tasks/task-1/complete"
	if got := strings.Join(paths, " "); !strings.HasPrefix(got, want) {
		t.Fatalf("requests %s\nwant prefix %s", got, want)
	}
}

// A URL that answers HTTP but not as a checkout server (a wrong
// CHECKOUT_URL) is named as such, instead of "404 Not Found".
func TestNotACheckoutServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, healthz string
		status        int
	}{
		{"plain 404", "404 page not found", 404},
		{"other JSON", `{"status":"green"}`, 200},
		{"html", "<html>hello</html>", 200},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newScripted(t, func(_ int, r recorded) (int, string) {
				if r.Path == "/healthz" {
					return tc.status, tc.healthz
				}
				return 404, "404 page not found"
			})
			c := New(s.URL, "ck_x")
			_, err := c.Checkout(context.Background(), "task-1", CheckoutRequest{})
			var nse *NotServerError
			if !errors.As(err, &nse) || nse.URL != s.URL || !strings.Contains(err.Error(), "not a checkout server at "+s.URL) {
				t.Fatalf("checkout: %v, want a *NotServerError", err)
			}
			if errors.Is(err, ErrNotFound) {
				t.Fatalf("%v reads as a 404 of the API", err)
			}
			if err := c.Health(context.Background()); !errors.As(err, &nse) {
				t.Fatalf("health: %v", err)
			}
		})
	}
	// The API's own answers are not doubted: one request, no probe.
	s := newScripted(t, func(int, recorded) (int, string) { return 404, `{"error":"no","code":"task_not_found"}` })
	if _, err := New(s.URL, "ck_x").Checkout(context.Background(), "task-1", CheckoutRequest{}); !errors.Is(err, ErrTaskNotFound) || len(s.requests()) != 1 {
		t.Fatalf("%v after %d requests", err, len(s.requests()))
	}
	// A real server's health is nil; while it is down, the 503 is the error.
	up := newScripted(t, func(int, recorded) (int, string) { return 200, `{"ok":true}` })
	if err := New(up.URL, "").Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	down := newScripted(t, func(int, recorded) (int, string) { return 503, `{"ok":false}` })
	var ae *APIError
	if err := New(down.URL, "", WithRetryPolicy(RetryPolicy{MaxAttempts: 1})).Health(context.Background()); !errors.As(err, &ae) || ae.Status != 503 {
		t.Fatalf("health of a server without its database: %v", err)
	}
}

// Renew, release and complete carry agent_id when the caller names the
// holder it acts as.
func TestHolderRequestsNameTheAgent(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(_ int, r recorded) (int, string) {
		if r.Path == "/api/whoami" {
			return 200, `{"agent_id":"admin","name":"admin","admin":true}`
		}
		if strings.HasSuffix(r.Path, "/release") {
			return 200, `{"task_id":"task-1","released_by":"agent-7","held_seconds":1}`
		}
		if strings.HasSuffix(r.Path, "/complete") {
			return 200, `{"task_id":"task-1","status":"done"}`
		}
		return 200, holderJSON
	})
	c := New(s.URL, "ck_x")
	ctx := context.Background()
	if _, err := c.Renew(ctx, "task-1", RenewRequest{Fence: 3, AgentID: "agent-7"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Release(ctx, "task-1", ReleaseRequest{AgentID: "agent-7"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Complete(ctx, "task-1", CompleteRequest{AgentID: "agent-7"}); err != nil {
		t.Fatal(err)
	}
	reqs := s.requests()
	if len(reqs) != 4 || reqs[0].Path != "/api/whoami" {
		t.Fatalf("requests %v, want a whoami, then renew, release and complete", reqs)
	}
	for _, r := range reqs[1:] {
		if r.Body["agent_id"] != "agent-7" {
			t.Errorf("%s %s: body %v", r.Method, r.Path, r.Body)
		}
	}
}

// agent_id is admin-only, even naming the caller itself (403 forbidden),
// so a request naming the key's own agent leaves it out: the client asks
// whose key it holds once (GET /api/whoami) and keeps the answer. Naming
// another agent sends it (the server refuses it to a non-admin). A server
// without the route (404) gets agent_id as given; any other failure of
// Whoami is the request's, which is not sent.
func TestRequestsNamingTheKeysOwnAgentLeaveAgentIDOut(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(_ int, r recorded) (int, string) {
		switch {
		case r.Path == "/api/whoami":
			return 200, `{"agent_id":"agent-1","name":"researcher","admin":false}`
		case strings.HasSuffix(r.Path, "/release"):
			return 200, `{"task_id":"task-1","released_by":"agent-1","held_seconds":1}`
		case strings.HasSuffix(r.Path, "/complete"):
			return 200, `{"task_id":"task-1","status":"done"}`
		}
		return 200, holderJSON
	})
	c := New(s.URL, "ck_x")
	ctx := context.Background()
	calls := []func() error{
		func() error { _, err := c.Checkout(ctx, "task-1", CheckoutRequest{AgentID: "agent-1"}); return err },
		func() error { _, err := c.Claim(ctx, ClaimRequest{AgentID: "agent-1"}); return err },
		func() error { _, err := c.Renew(ctx, "task-1", RenewRequest{AgentID: "agent-1"}); return err },
		func() error { _, err := c.Release(ctx, "task-1", ReleaseRequest{AgentID: "agent-1"}); return err },
		func() error { _, err := c.Fail(ctx, "task-1", "boom", ReleaseRequest{AgentID: "agent-1"}); return err },
		func() error { _, err := c.Complete(ctx, "task-1", CompleteRequest{AgentID: "agent-1"}); return err },
		func() error { _, err := c.Renew(ctx, "task-1", RenewRequest{AgentID: "agent-2"}); return err },
	}
	for i, call := range calls {
		if err := call(); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	reqs := s.requests()
	if len(reqs) != len(calls)+1 || reqs[0].Path != "/api/whoami" {
		t.Fatalf("requests %v, want one whoami first, then one request a call", reqs)
	}
	for _, r := range reqs[1 : len(reqs)-1] {
		if _, ok := r.Body["agent_id"]; ok {
			t.Errorf("%s %s naming the key's own agent sent agent_id: %v", r.Method, r.Path, r.Body)
		}
	}
	if last := reqs[len(reqs)-1]; last.Body["agent_id"] != "agent-2" {
		t.Errorf("a renewal naming another agent: body %v, want agent_id agent-2", last.Body)
	}

	// Whoami failing for a while (503: in AWS another function serves it)
	// fails the request unsent, unavailable, and never as undecided or as
	// the 403 that agent_id sent all the same would have earned; once
	// Whoami answers, the same request is sent without agent_id.
	var down atomic.Bool
	down.Store(true)
	flaky := newScripted(t, func(_ int, r recorded) (int, string) {
		if r.Path == "/api/whoami" {
			if down.Load() {
				return 503, `{"error":"the agents function is unavailable","code":"unavailable"}`
			}
			return 200, `{"agent_id":"agent-1","name":"researcher","admin":false}`
		}
		if _, ok := r.Body["agent_id"]; ok {
			return 403, `{"error":"agent_id is for an admin","code":"forbidden"}`
		}
		return 200, holderJSON
	})
	fc := New(flaky.URL, "ck_x", WithRetryPolicy(RetryPolicy{MaxAttempts: 2, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}))
	_, err := fc.Checkout(ctx, "task-1", CheckoutRequest{AgentID: "agent-1"})
	if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrUndecided) || errors.Is(err, ErrForbidden) {
		t.Errorf("a checkout while whoami fails: %v, want unavailable, neither undecided nor forbidden", err)
	}
	var ae *APIError
	if !errors.As(err, &ae) || ae.Status != 503 {
		t.Errorf("a checkout while whoami fails: %v, want whoami's *APIError", err)
	}
	for _, r := range flaky.requests() {
		if r.Path != "/api/whoami" {
			t.Errorf("a checkout while whoami fails sent %s %s", r.Method, r.Path)
		}
	}
	down.Store(false)
	if _, err := fc.Checkout(ctx, "task-1", CheckoutRequest{AgentID: "agent-1"}); err != nil {
		t.Errorf("a checkout once whoami answers: %v", err)
	}

	for _, whoami := range []int{404, 0} {
		old := newScripted(t, func(_ int, r recorded) (int, string) {
			switch r.Path {
			case "/api/whoami":
				return 404, `{"error":"no route","code":"not_found"}`
			case "/healthz":
				return 200, `{"ok":true}`
			}
			return 200, holderJSON
		})
		url := old.URL
		if whoami == 0 {
			url = "http://127.0.0.1:1" // nothing listens: Whoami cannot reach it
		}
		c := New(url, "ck_x", WithRetryPolicy(RetryPolicy{MaxAttempts: 1}))
		_, err := c.Renew(ctx, "task-1", RenewRequest{AgentID: "agent-1"})
		if whoami == 0 {
			var ue *UnreachableError
			if !errors.As(err, &ue) || errors.Is(err, ErrUndecided) {
				t.Errorf("a renewal to an unreachable server: %v, want whoami's *UnreachableError, not undecided", err)
			}
			continue
		}
		reqs := old.requests()
		if last := reqs[len(reqs)-1]; err != nil || last.Path != "/api/tasks/task-1/renew" || last.Body["agent_id"] != "agent-1" {
			t.Errorf("a server without whoami: %v, requests %v, want the renewal with agent_id as given", err, reqs)
		}
	}
}

// One Client shared by goroutines whose first lease requests name the
// key's own agent at once: each leaves agent_id out (the server here
// refuses it), they ask whoami once between them (the first answer is
// held back until another whoami arrives, or a while), a request whose
// context ends while it waits for that answer fails unsent, and under
// -race the kept identity races with nothing.
func TestASharedClientLeavesItsOwnAgentOutFromEveryGoroutine(t *testing.T) {
	t.Parallel()
	var whoamis atomic.Int32
	second := make(chan struct{})
	waiting := make(chan struct{})
	s := newScripted(t, func(_ int, r recorded) (int, string) {
		if r.Path == "/api/whoami" {
			switch whoamis.Add(1) {
			case 1:
				close(waiting)
				select {
				case <-second:
				case <-time.After(200 * time.Millisecond):
				}
			case 2:
				close(second)
			}
			return 200, `{"agent_id":"agent-1","name":"researcher","admin":false}`
		}
		if _, ok := r.Body["agent_id"]; ok {
			return 403, `{"error":"agent_id is for an admin","code":"forbidden"}`
		}
		return 200, holderJSON
	})
	c := New(s.URL, "ck_x")
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	start := make(chan struct{})
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := c.Renew(context.Background(), "task-1", RenewRequest{AgentID: "agent-1"})
			errs <- err
		}()
	}
	close(start)
	// A request that gives up while another asks is not sent.
	<-waiting
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Renew(gone, "task-1", RenewRequest{AgentID: "agent-1"}); !errors.Is(err, context.Canceled) || errors.Is(err, ErrUndecided) {
		t.Errorf("a renewal cancelled while whoami is asked: %v, want canceled, not undecided", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if n := whoamis.Load(); n != 1 {
		t.Errorf("16 first requests at once asked whoami %d times, want once", n)
	}
	for _, r := range s.requests() {
		if r.Path != "/api/whoami" && r.Path != "/api/tasks/task-1/renew" {
			t.Errorf("unexpected request %s %s", r.Method, r.Path)
		}
	}
}
