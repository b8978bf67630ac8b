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
// ErrUnavailable. /healthz is not asked after a 429; after a 5xx it is,
// once a call, and its own 5xx (the gateway's again) leaves the answer
// standing.
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
				asked := 0
				if tc.status != http.StatusTooManyRequests && what != "health" {
					asked = 1
				}
				if len(reqs) != wantRequests+asked || strings.Count(strings.Join(reqs, " "), "/healthz") != asked && what != "health" {
					t.Errorf("%s: requests %v, want %d and /healthz %d times", what, reqs, wantRequests+asked, asked)
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

// A URL that points at another web server (python3 -m http.server), which
// answers a POST 501 Not Implemented with an HTML page: the 5xx without
// the API's code was taken for the service being unavailable, the
// request's answer lost (ErrUndecided), and a checkout was retried; a
// caller told to send it again met the same for ever. /healthz, asked
// once, says it is not a checkout server. A checkout server's own 5xx,
// with its code, is not asked about and stays undecided; nor is a 5xx
// without a code when /healthz answers as a checkout server.
func TestAnotherWebServersServerErrorIsNotACheckoutServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	web := newGateway(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			reply(w, 404, "text/html", "<html><body>Error code: 404</body></html>")
			return
		}
		reply(w, 501, "text/html", "<html><body>Error code: 501</body></html>")
	})
	c := New(web.URL, "ck_x", WithSleeper((&instant{}).sleep))
	for name, call := range map[string]func() error{
		"checkout": func() error { _, err := c.Checkout(ctx, "t1", CheckoutRequest{}); return err },
		"claim":    func() error { _, err := c.Claim(ctx, ClaimRequest{}); return err },
		"release":  func() error { _, err := c.Release(ctx, "t1", ReleaseRequest{}); return err },
	} {
		err := call()
		var nse *NotServerError
		if !errors.As(err, &nse) || errors.Is(err, ErrUndecided) || !strings.Contains(err.Error(), "404 Not Found") {
			t.Errorf("%s: %v (%T), want not a checkout server", name, err, err)
		}
	}
	if reqs := web.requests(); len(reqs) != 6 {
		t.Errorf("requests %v, want each call and one /healthz each", reqs)
	}
	for _, tc := range []struct {
		name, body, health string
		status             int
		asked              bool
	}{
		{"the server without its database", `{"error":"the database cannot be reached","code":"unavailable"}`, `{"ok":false}`, 503, false},
		{"the server's bug", `{"error":"internal error","code":"internal"}`, `{"ok":true}`, 500, false},
		{"a gateway in front of a live server", `{"message":"Internal server error"}`, `{"ok":true}`, 502, true},
	} {
		g := newGateway(t, func(_ int, w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/healthz" {
				reply(w, 200, "application/json", tc.health)
				return
			}
			reply(w, tc.status, "application/json", tc.body)
		})
		_, err := New(g.URL, "ck_x", WithRetryPolicy(RetryPolicy{MaxAttempts: 1})).Checkout(ctx, "t1", CheckoutRequest{})
		var nse *NotServerError
		if errors.As(err, &nse) || !errors.Is(err, ErrUndecided) {
			t.Errorf("%s: %v (%T), want undecided", tc.name, err, err)
		}
		if asked := strings.Contains(strings.Join(g.requests(), " "), "/healthz"); asked != tc.asked {
			t.Errorf("%s: /healthz asked %v, want %v", tc.name, asked, tc.asked)
		}
	}
}
