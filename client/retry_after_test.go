package client

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// waits is a sleeper that records the waits and returns at once.
type waits struct {
	mu sync.Mutex
	d  []time.Duration
}

func (s *waits) sleep(ctx context.Context, d time.Duration) error {
	s.mu.Lock()
	s.d = append(s.d, d)
	s.mu.Unlock()
	return ctx.Err()
}

func (s *waits) all() []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Duration(nil), s.d...)
}

// A 503 or 429 with Retry-After is tried again no sooner than it asks, and
// the error, once the tries are spent, carries it.
func TestRetryAfterIsWaitedAndExposed(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, body string
		retryAfter func() string
		status     int
		want       time.Duration
	}{
		{"unavailable", `{"error":"the database cannot be reached","code":"unavailable"}`, func() string { return "1" }, 503, time.Second},
		{"throttled", `{"message":"Too Many Requests"}`, func() string { return "2" }, 429, 2 * time.Second},
		{"http date", `{"message":"Too Many Requests"}`, func() string { return time.Now().Add(5 * time.Second).UTC().Format(http.TimeFormat) }, 429, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newGateway(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Retry-After", tc.retryAfter())
				reply(w, tc.status, "application/json", tc.body)
			})
			sl := &waits{}
			_, err := New(g.URL, "ck_x", WithSleeper(sl.sleep)).GetTask(context.Background(), "task-1")
			var ae *APIError
			if !errors.As(err, &ae) || ae.RetryAfter < tc.want || ae.RetryAfter > tc.want+3*time.Second || !errors.Is(err, ErrUnavailable) {
				t.Fatalf("get task: %v, want an *APIError with RetryAfter about %v", err, tc.want)
			}
			got := sl.all()
			if len(got) != DefaultRetryPolicy.MaxAttempts-1 {
				t.Fatalf("waits %v, want %d", got, DefaultRetryPolicy.MaxAttempts-1)
			}
			for _, d := range got {
				if d < tc.want {
					t.Fatalf("waits %v, want each at least %v", got, tc.want)
				}
			}
		})
	}
}

// A Retry-After longer than a call should block (MaxRetryAfter), or than
// the context's deadline leaves, is not waited in vain: the call returns
// at once. Past the deadline, the error matches context.DeadlineExceeded
// as well as the answer's.
func TestRetryAfterBeyondTheDeadlineReturnsAtOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, retryAfter string
		deadline         time.Duration // 0: none
		wantDeadline     bool
	}{
		{"longer than MaxRetryAfter", "120", 0, false},
		{"past a near deadline", "10", 5 * time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newGateway(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Retry-After", tc.retryAfter)
				reply(w, 503, "application/json", `{"error":"the database cannot be reached","code":"unavailable"}`)
			})
			sl := &waits{}
			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			_, err := New(g.URL, "ck_x", WithSleeper(sl.sleep)).GetTask(ctx, "task-1")
			if !errors.Is(err, ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) != tc.wantDeadline {
				t.Fatalf("get task: %v, want ErrUnavailable (and DeadlineExceeded: %v)", err, tc.wantDeadline)
			}
			if n := len(g.requests()); n != 1 || len(sl.all()) != 0 {
				t.Fatalf("%d requests, waits %v: want 1 and none", n, sl.all())
			}
		})
	}
}

// A deadline that passes while the client waits to try again is the
// error (errors.Is context.DeadlineExceeded), which still carries the last
// answer.
func TestDeadlineDuringBackoffIsTheError(t *testing.T) {
	t.Parallel()
	g := newGateway(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		reply(w, 503, "application/json", `{"error":"the database cannot be reached","code":"unavailable"}`)
	})
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	// The sleeper answers as a real one does when the deadline passes
	// during its wait.
	deadlinePasses := func(context.Context, time.Duration) error { return context.DeadlineExceeded }
	_, err := New(g.URL, "ck_x", WithSleeper(deadlinePasses)).GetTask(ctx, "task-1")
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "the database cannot be reached") {
		t.Fatalf("get task: %v, want DeadlineExceeded carrying the 503", err)
	}
	if n := len(g.requests()); n != 1 {
		t.Fatalf("%d requests", n)
	}
}
