package testenv

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"
)

// Front is an HTTP proxy on 127.0.0.1 in front of a server: it records
// the requests that reach it, and loses the ones it is told to, one Fault
// per request, in order, by method and path. Tests of the agent tools put
// it between a tool and the local server to see what the tool does when
// an answer is lost, and count the requests an operation makes.
type Front struct {
	URL    string // the proxy's base URL, for the tool under test
	target string
	srv    *httptest.Server

	// Lost, when set, is called with the key of each request whose
	// answer Lose or Gateway keeps from the client, once the server has
	// answered it: a test moves its clock there, as if the answer had
	// taken long to be lost.
	Lost func(key string)

	mu     sync.Mutex
	seen   []string           // "METHOD /path" of every request, in order
	faults map[string][]Fault // by "METHOD /path": the next requests' faults
}

// Fault is what happens to one request.
type Fault int

const (
	// Pass forwards the request and its answer.
	Pass Fault = iota
	// Drop closes the connection before forwarding: the server never
	// sees the request, though the client has sent it.
	Drop
	// Lose forwards the request, then closes the connection without an
	// answer: the server acted, and the client never learns the outcome.
	Lose
	// Gateway forwards the request, then answers 502 with a page of its
	// own, as a gateway does whose server's answer did not come in time.
	Gateway
	// Slow forwards the request after a second, and its answer.
	Slow
	// Down forwards the request, then closes the connection without an
	// answer and stops listening, as a server does that goes down right
	// after it acted: every later request is refused a connection.
	Down
	// Throttle answers 429 itself, as a gateway throttling does, without
	// forwarding the request.
	Throttle
)

func (f Fault) String() string {
	return [...]string{"pass", "drop", "lose", "gateway", "slow", "down", "throttle"}[f]
}

// NewFront starts a Front before target (a base URL), closed at the
// test's end.
func NewFront(t testing.TB, target string) *Front {
	t.Helper()
	f := &Front{target: target, faults: map[string][]Fault{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	f.URL = f.srv.URL
	return f
}

// Fail sets the faults of the next requests of key ("POST /api/claim"),
// after those already set.
func (f *Front) Fail(key string, faults ...Fault) {
	f.mu.Lock()
	f.faults[key] = append(f.faults[key], faults...)
	f.mu.Unlock()
}

// Requests are the requests ("METHOD /path") seen since the last call.
func (f *Front) Requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	seen := f.seen
	f.seen = nil
	return seen
}

// WaitFor waits until a request of key ("POST /api/claim") has reached
// the front since the last Requests or WaitFor, for at most d, and fails
// the test if none has.
func (f *Front) WaitFor(t testing.TB, key string, d time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(d); !slices.Contains(f.Requests(), key); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no %s reached the server within %v", key, d)
		}
	}
}

func (f *Front) serve(w http.ResponseWriter, r *http.Request) {
	key := r.Method + " " + r.URL.Path
	f.mu.Lock()
	f.seen = append(f.seen, key)
	ft := Pass
	if q := f.faults[key]; len(q) > 0 {
		ft, f.faults[key] = q[0], q[1:]
	}
	f.mu.Unlock()
	switch ft {
	case Drop:
		hangUp(w)
		return
	case Throttle:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, `{"message":"Too Many Requests"}`)
		return
	case Slow:
		time.Sleep(time.Second)
	}
	body, _ := io.ReadAll(r.Body)
	out, err := http.NewRequestWithContext(context.Background(), r.Method, f.target+r.URL.RequestURI(), bytes.NewReader(body))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	out.Header = r.Header.Clone()
	resp, err := http.DefaultTransport.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if lost := f.Lost; lost != nil && (ft == Lose || ft == Gateway || ft == Down) {
		lost(key)
	}
	switch ft {
	case Down:
		_ = f.srv.Listener.Close()
		hangUp(w)
		return
	case Lose:
		hangUp(w)
		return
	case Gateway:
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusBadGateway)
		_, _ = io.WriteString(w, "<html><body>502 Bad Gateway</body></html>")
		return
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

// hangUp closes the request's connection without an answer.
func hangUp(w http.ResponseWriter) {
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = conn.Close()
	}
}
