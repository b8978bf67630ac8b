package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/checkout-dev/checkout/client"
)

// rawServe runs Serve against the API at url and returns functions to
// send it a line and to read its next answer (nil when none comes within
// wait), a closer of its input, and a channel closed when Serve returns
// nil.
func rawServe(t *testing.T, url string) (send func(string), next func(wait time.Duration) map[string]any, stdin io.Closer, done <-chan struct{}) {
	t.Helper()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		if err := Serve(ctx, client.New(url, "ck_test", client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1})), inR, outW); err != nil {
			t.Errorf("Serve: %v", err)
		}
		close(served)
	}()
	t.Cleanup(func() {
		cancel()
		inW.Close()
		outR.Close()
		select {
		case <-served:
		case <-time.After(5 * time.Second):
		}
	})
	lines := make(chan map[string]any, 100)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			var m map[string]any
			_ = json.Unmarshal(sc.Bytes(), &m)
			lines <- m
		}
		close(lines)
	}()
	queue := make(chan *string, 100) // the lines, in order; nil closes stdin
	go func() {
		for l := range queue {
			if l == nil {
				inW.Close()
				return
			}
			if _, err := io.WriteString(inW, *l); err != nil {
				return
			}
		}
	}()
	send = func(s string) { s += "\n"; queue <- &s }
	next = func(wait time.Duration) map[string]any {
		select {
		case m := <-lines:
			return m
		case <-time.After(wait):
			return nil
		}
	}
	return send, next, closerFunc(func() error { queue <- nil; return nil }), served
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

const initLine = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// waitingClaim is an API whose claims wait until their request is given
// up, and says on claimed when one has arrived.
func waitingClaim(t *testing.T) (url string, claimed chan struct{}) {
	claimed = make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // so that the server sees the client go
		select {
		case claimed <- struct{}{}:
		default:
		}
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
		w.WriteHeader(200)
		io.WriteString(w, `{"error":"no task","code":"no_task_available"}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, claimed
}

// A claim_task the client cancels gets no answer over stdio, as the MCP
// specification asks of a cancelled request's receiver: it was answered
// with code "error" and Go's "claim: context canceled".
func TestACancelledCallGetsNoAnswer(t *testing.T) {
	t.Parallel()
	url, claimed := waitingClaim(t)
	send, next, _, _ := rawServe(t, url)
	send(initLine)
	if m := next(5 * time.Second); m == nil || m["id"] != 1.0 {
		t.Fatalf("initialize: %v", m)
	}
	send(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	send(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"claim_task","arguments":{"wait":"20s"}}}`)
	select {
	case <-claimed:
	case <-time.After(5 * time.Second):
		t.Fatal("the claim did not reach the API")
	}
	send(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5,"reason":"user gave up"}}`)
	time.Sleep(300 * time.Millisecond) // for the handler to stop, and an answer to come if one does
	send(`{"jsonrpc":"2.0","id":9,"method":"ping"}`)
	for {
		m := next(5 * time.Second)
		if m == nil {
			t.Fatal("no answer to the ping after the cancellation")
		}
		if m["id"] == 9.0 {
			break
		}
		t.Errorf("an answer to the cancelled call: %v", m)
	}
}

// Where the answer of a cancelled call is sent (transports other than
// Serve's stdio), it has a documented code and words, not "error" and
// "claim: context canceled".
func TestACancelledCallsAnswerSaysCancelled(t *testing.T) {
	t.Parallel()
	url, claimed := waitingClaim(t)
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := New(client.New(url, "ck_test")).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	conn, err := ct.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	write := func(s string) {
		m, err := jsonrpc.DecodeMessage([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		if err := conn.Write(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	write(initLine)
	if _, err := conn.Read(ctx); err != nil {
		t.Fatal(err)
	}
	write(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	write(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"claim_task","arguments":{"wait":"20s"}}}`)
	<-claimed
	write(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`)
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := conn.Read(rctx)
	if err != nil {
		t.Fatal(err)
	}
	resp, ok := m.(*jsonrpc.Response)
	if !ok {
		t.Fatalf("%#v", m)
	}
	var res struct {
		IsError           bool           `json:"isError"`
		StructuredContent map[string]any `json:"structuredContent"`
	}
	_ = json.Unmarshal(resp.Result, &res)
	if !res.IsError || res.StructuredContent["code"] != "cancelled" {
		t.Fatalf("the cancelled call's answer: %s", resp.Result)
	}
	// The claim was sent: it may have taken a task, which the next
	// claim_task answers with. The answer said only that what the call
	// had not done yet was not done.
	if msg, _ := res.StructuredContent["message"].(string); !strings.Contains(msg, "may have taken") || !strings.Contains(msg, "claim_task again") || strings.Contains(msg, "context canceled") {
		t.Errorf("the cancelled claim's message: %q; want it to say the claim may have taken a task, and to call claim_task again", msg)
	}
}
