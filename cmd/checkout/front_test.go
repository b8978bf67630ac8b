package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/client"
)

// front is an HTTP proxy on 127.0.0.1 in front of the test server: it
// counts the requests that reach it, and loses the ones it is told to,
// one fault per request, in order, by method and path.
type front struct {
	URL    string
	target string

	mu     sync.Mutex
	seen   []string           // "METHOD /path" of every request, in order
	faults map[string][]fault // by "METHOD /path": the next requests' faults
}

// fault is what happens to one request.
type fault int

const (
	pass fault = iota
	// drop closes the connection before forwarding: the server never
	// sees the request.
	drop
	// lose forwards the request, then closes the connection without an
	// answer: the server acted, and the client never learns the outcome.
	lose
	// gateway forwards the request, then answers 502 with a page of its
	// own, as a gateway does whose server's answer timed out.
	gateway
	// slow forwards the request after a second, and its answer.
	slow
)

func newFront(t *testing.T, target string) *front {
	t.Helper()
	f := &front{target: target, faults: map[string][]fault{}}
	srv := httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(srv.Close)
	f.URL = srv.URL
	return f
}

// fail sets the faults of the next requests of key ("POST /api/claim").
func (f *front) fail(key string, faults ...fault) {
	f.mu.Lock()
	f.faults[key] = append(f.faults[key], faults...)
	f.mu.Unlock()
}

// requests are the requests seen since the last call, and forgets them.
func (f *front) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := f.seen
	f.seen = nil
	return seen
}

func (f *front) serve(w http.ResponseWriter, r *http.Request) {
	key := r.Method + " " + r.URL.Path
	f.mu.Lock()
	f.seen = append(f.seen, key)
	ft := pass
	if q := f.faults[key]; len(q) > 0 {
		ft, f.faults[key] = q[0], q[1:]
	}
	f.mu.Unlock()
	switch ft {
	case drop:
		hangUp(w)
		return
	case slow:
		time.Sleep(time.Second)
	}
	body, _ := io.ReadAll(r.Body)
	out, err := http.NewRequestWithContext(context.Background(), r.Method, f.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		panic(err)
	}
	out.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch ft {
	case lose:
		hangUp(w)
		return
	case gateway:
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		io.WriteString(w, "<html><body>502 Bad Gateway</body></html>")
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	w.Write(answer)
}

// hangUp closes the request's connection without an answer.
func hangUp(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.Close()
	}
}

// A grant is followed by one read of its task, which says both whether
// the lease is live (a grant to an agent dead by heartbeat is not) and,
// for a later attempt, the latest failed attempt's error. checkout and
// claim read the lock and then the task on a later attempt, and MCP's
// checkout_task read them both on every grant (the task for its title):
// three requests where two do.
func TestAGrantReadsItsTaskOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	f := newFront(t, e.srv.URL())
	ctx := context.Background()
	noDelay := time.Duration(0)
	for _, id := range []string{"cli-first", "cli-again", "cli-claimed", "mcp-first", "mcp-again", "mcp-claimed"} {
		if _, err := e.admin.CreateTask(ctx, client.CreateTaskRequest{TaskID: id, Title: "Title of " + id, Queue: "q-" + id, RetryDelay: &noDelay}); err != nil {
			t.Fatal(err)
		}
	}
	// The "again" tasks had an attempt that failed.
	other := client.New(e.srv.URL(), e.keys["agent-a1b2"])
	for _, id := range []string{"cli-again", "mcp-again"} {
		if _, err := other.Checkout(ctx, id, client.CheckoutRequest{}); err != nil {
			t.Fatal(err)
		}
		if _, err := other.Fail(ctx, id, "boom", client.ReleaseRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	key := e.keys["agent-c3d4"]
	two := func(what, task string) {
		t.Helper()
		path := "/api/tasks/" + task
		if what == "claim" {
			path = "/api/claim"
		} else {
			path += "/checkout"
		}
		if got := f.requests(); len(got) != 2 || got[0] != "POST "+path {
			t.Errorf("%s %s: requests %q, want the grant and one read", what, task, got)
		}
	}

	for _, tc := range []struct{ args []string }{{[]string{"cli-first"}}, {[]string{"cli-again"}}, {[]string{"claim", "--queue", "q-cli-claimed"}}} {
		f.requests()
		r := runCLI(t, f.URL, key, tc.args...)
		if r.code != 0 || !strings.Contains(r.stdout, "Checkout acquired") {
			t.Fatalf("checkout %v: exit %d\n%s%s", tc.args, r.code, r.stdout, r.stderr)
		}
		if tc.args[0] == "cli-again" && !strings.Contains(r.stdout, "Last error: boom") {
			t.Errorf("checkout of a task tried before: no last error\n%s", r.stdout)
		}
		task, what := tc.args[0], "checkout"
		if task == "claim" {
			task, what = "cli-claimed", "claim"
		}
		two(what, task)
	}

	ms := connectMCP(t, f.URL, key)
	for _, tc := range []struct {
		tool string
		args map[string]any
		task string
	}{
		{"checkout_task", map[string]any{"task_id": "mcp-first"}, "mcp-first"},
		{"checkout_task", map[string]any{"task_id": "mcp-again"}, "mcp-again"},
		{"claim_task", map[string]any{"queues": []string{"q-mcp-claimed"}}, "mcp-claimed"},
	} {
		f.requests()
		res, out := ms.call(tc.tool, tc.args)
		if out["acquired"] != true || out["title"] != "Title of "+tc.task {
			t.Fatalf("%s %v: %s %v", tc.tool, tc.args, textOf(res), out)
		}
		if tc.task == "mcp-again" && out["last_error"] != "boom" {
			t.Errorf("checkout_task of a task tried before: %v", out)
		}
		what := "checkout"
		if tc.tool == "claim_task" {
			what = "claim"
		}
		two(what, tc.task)
	}
}
