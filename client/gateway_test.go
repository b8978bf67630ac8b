package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// These tests script a gateway (API Gateway, a proxy) in front of the
// server: answers that are not the API's, with headers.

// gateway is an httptest server answering every path with answer, which
// may set headers; it records the requests' paths.
type gateway struct {
	*httptest.Server
	mu    sync.Mutex
	paths []string
}

func newGateway(t *testing.T, answer func(n int, w http.ResponseWriter, r *http.Request)) *gateway {
	t.Helper()
	g := &gateway{}
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		g.mu.Lock()
		g.paths = append(g.paths, r.URL.Path)
		n := len(g.paths)
		g.mu.Unlock()
		answer(n, w, r)
	}))
	t.Cleanup(g.Close)
	return g
}

func (g *gateway) requests() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.paths...)
}

func reply(w http.ResponseWriter, status int, contentType, body string) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// A gateway's 429 or 5xx, without the API's code (API Gateway throttling,
// a Lambda concurrency limit, a proxy's HTML 502 while the server
// restarts), is the service being unavailable, not a URL that is not a
// checkout server's: an idempotent call is retried, then matches
// ErrUnavailable; /healthz is not asked.
func TestGatewayOverloadIsUnavailableNotAnotherServer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, contentType, body string
		status                  int
	}{
		{"throttled", "application/json", `{"message":"Too Many Requests"}`, 429},
		{"lambda concurrency", "application/json", `{"message":"Service Unavailable"}`, 503},
		{"lambda error", "application/json", `{"message":"Internal server error"}`, 500},
		{"html 502", "text/html", "<html><body><h1>502 Bad Gateway</h1></body></html>", 502},
		{"html 504", "text/html", "<html><body><h1>504 Gateway Time-out</h1></body></html>", 504},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g := newGateway(t, func(_ int, w http.ResponseWriter, _ *http.Request) { reply(w, tc.status, tc.contentType, tc.body) })
			sl := &instant{}
			c := New(g.URL, "ck_x", WithSleeper(sl.sleep))
			ctx := context.Background()
			check := func(what string, err error, wantRequests int) {
				t.Helper()
				var nse *NotServerError
				var ae *APIError
				if errors.As(err, &nse) || !errors.Is(err, ErrUnavailable) || !errors.As(err, &ae) || ae.Status != tc.status {
					t.Errorf("%s: %v (%T), want an *APIError %d matching ErrUnavailable", what, err, err, tc.status)
				}
				reqs := g.requests()
				if len(reqs) != wantRequests || strings.Contains(strings.Join(reqs, " "), "/healthz") && what != "health" {
					t.Errorf("%s: requests %v, want %d without /healthz", what, reqs, wantRequests)
				}
				g.mu.Lock()
				g.paths = nil
				g.mu.Unlock()
			}
			_, err := c.GetTask(ctx, "task-1")
			check("get task", err, DefaultRetryPolicy.MaxAttempts)
			_, err = c.Claim(ctx, ClaimRequest{})
			check("claim", err, DefaultRetryPolicy.MaxAttempts)
			check("health", c.Health(ctx), DefaultRetryPolicy.MaxAttempts)
			// Sent once: a 5xx is not retried (the server may have acted),
			// a 429 is (it cannot have).
			once := 1
			if tc.status == http.StatusTooManyRequests {
				once = DefaultRetryPolicy.MaxAttempts
			}
			_, err = c.CreateTask(ctx, CreateTaskRequest{Title: "t"})
			check("create task", err, once)
		})
	}
}

// A /healthz that answers a 429 or 5xx has not said whether the URL is a
// checkout server's: the request's own answer stands.
func TestHealthzOverloadIsNoAnswer(t *testing.T) {
	t.Parallel()
	g := newGateway(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			reply(w, 503, "application/json", `{"message":"Service Unavailable"}`)
			return
		}
		reply(w, 404, "text/plain", "404 page not found")
	})
	_, err := New(g.URL, "ck_x").GetTask(context.Background(), "task-1")
	var nse *NotServerError
	var ae *APIError
	if errors.As(err, &nse) || !errors.As(err, &ae) || ae.Status != 404 {
		t.Fatalf("get task: %v (%T), want the 404", err, err)
	}
}

// Health against a server without its database (503 {"ok": false})
// matches ErrUnavailable.
func TestHealthOfAServerWithoutItsDatabase(t *testing.T) {
	t.Parallel()
	g := newGateway(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "1")
		reply(w, 503, "application/json", `{"ok":false}`)
	})
	err := New(g.URL, "", WithRetryPolicy(RetryPolicy{MaxAttempts: 1})).Health(context.Background())
	var ae *APIError
	if !errors.Is(err, ErrUnavailable) || !errors.As(err, &ae) || ae.Status != 503 {
		t.Fatalf("health: %v", err)
	}
}
