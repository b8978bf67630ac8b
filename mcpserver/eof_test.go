package mcpserver

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// Calls in flight when the client's input ends are finished and answered
// before Serve returns, so that a client piping a script gets its answers:
// the checkout_task of `printf '<initialize>\n<initialized>\n<tools/call>\n'
// | checkout mcp` was never answered (nor made: its handler was cancelled).
func TestServeAnswersCallsInFlightWhenInputEnds(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		time.Sleep(200 * time.Millisecond) // the input ends meanwhile
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/checkout") {
			io.WriteString(w, locked(strings.ReplaceAll(holder, "task-d4e5", "m1")))
			return
		}
		if r.Method == http.MethodGet {
			io.WriteString(w, `{"task_id":"m1","title":"t","status":"in_progress","checkout":`+strings.ReplaceAll(holder, "task-d4e5", "m1")+`}`)
			return
		}
		io.WriteString(w, strings.ReplaceAll(holder, "task-d4e5", "m1"))
	}))
	t.Cleanup(srv.Close)
	send, next, stdin, done := rawServe(t, srv.URL)
	send(initLine)
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"checkout_task","arguments":{"task_id":"m1"}}}`)
	stdin.Close()
	var got map[string]any
	for m := next(10 * time.Second); m != nil; m = next(10 * time.Second) {
		if m["id"] == 2.0 {
			got = m
			break
		}
	}
	res, _ := got["result"].(map[string]any)
	sc, _ := res["structuredContent"].(map[string]any)
	if sc["acquired"] != true {
		t.Fatalf("the checkout_task in flight when the input ended: %v", got)
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not end after answering")
	}
}

// A line longer than MaxLineLength is answered with an invalid request
// (id null) and skipped, and the session goes on: a line of 17 MB ended
// it ("inbound JSON-RPC frame exceeded the configured maximum line
// length"), and each line was read whole into memory first.
func TestServeSkipsALineTooLong(t *testing.T) {
	t.Parallel()
	send, next, _, _ := rawServe(t, "http://127.0.0.1:1")
	send(initLine)
	if m := next(5 * time.Second); m == nil || m["id"] != 1.0 {
		t.Fatalf("initialize: %v", m)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":3,"method":"ping","params":{"_meta":{"x":"` + strings.Repeat("a", MaxLineLength) + `"}}}`)
	m := next(10 * time.Second)
	if m == nil || m["id"] != nil || m["error"] == nil || m["error"].(map[string]any)["code"] != -32600.0 ||
		!strings.Contains(m["error"].(map[string]any)["message"].(string), "4 MiB") {
		t.Fatalf("answer to a line too long: %v", m)
	}
	// A line just within the limit is taken.
	pad := MaxLineLength - len(`{"jsonrpc":"2.0","id":4,"method":"ping","params":{"_meta":{"x":""}}}`)
	send(`{"jsonrpc":"2.0","id":4,"method":"ping","params":{"_meta":{"x":"` + strings.Repeat("b", pad) + `"}}}`)
	if m := next(10 * time.Second); m == nil || m["id"] != 4.0 || m["result"] == nil {
		t.Fatalf("ping of exactly MaxLineLength: %v", m)
	}
	send(`{"jsonrpc":"2.0","id":9,"method":"ping"}`)
	if m := next(5 * time.Second); m == nil || m["id"] != 9.0 || m["result"] == nil {
		t.Fatalf("ping after the line too long: %v", m)
	}
}
