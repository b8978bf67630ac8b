package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
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

// waitingClaim is an API whose claims wait, as behind a gateway that
// passes no disconnect on, until answer is closed (or 10 s) and then
// answer with *status and *body ("" for a grant of task late to the
// claim's run, fence 1); claimed says when a claim has arrived, and
// released receives the body of each release.
func waitingClaim(t *testing.T) (url string, claimed chan struct{}, answer chan struct{}, status *int, body *string, released chan map[string]any) {
	claimed, answer, released = make(chan struct{}, 1), make(chan struct{}), make(chan map[string]any, 10)
	status, body = new(int), new(string)
	*status = 200
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in map[string]any
		_ = json.NewDecoder(r.Body).Decode(&in)
		if r.URL.Path != "/api/claim" {
			if in == nil {
				in = map[string]any{}
			}
			in["path"] = r.Method + " " + r.URL.Path
			released <- in
			io.WriteString(w, `{"task_id":"late","released":true}`)
			return
		}
		select {
		case claimed <- struct{}{}:
		default:
		}
		select {
		case <-answer:
		case <-time.After(10 * time.Second):
		}
		w.WriteHeader(*status)
		if *body != "" {
			io.WriteString(w, *body)
			return
		}
		fmt.Fprintf(w, `{"task_id":"late","agent_id":"agent-a1b2","run_id":%q,"fence":1,"locked_at":"2026-03-20T14:30:00Z","timeout_seconds":1800,"expires_at":"2026-03-20T15:00:00Z","remaining_seconds":1800,"queue":"default","priority":0,"attempt":1}`, in["run_id"])
	}))
	t.Cleanup(srv.Close)
	return srv.URL, claimed, answer, status, body, released
}

// A claim_task the client cancels gets no answer over stdio, as the MCP
// specification asks of a cancelled request's receiver: it was answered
// with code "error" and Go's "claim: context canceled".
func TestACancelledCallGetsNoAnswer(t *testing.T) {
	t.Parallel()
	url, claimed, _, _, _, _ := waitingClaim(t)
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
// "claim: context canceled", and says what became of the claim, which is
// seen through: a task it took is given back.
func TestACancelledCallsAnswerSaysCancelled(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, body string
		status     int
		code       string
		says       []string
		released   bool
	}{
		{name: "granted", status: 200, code: "cancelled", says: []string{"task late (fence 1)", "given back"}, released: true},
		{name: "none", status: 404, body: `{"error":"no task","code":"no_task_available"}`, code: "cancelled", says: []string{"took no task"}},
		{name: "undecided", status: 503, body: `{"error":"busy","code":"unavailable"}`, code: "cancelled", says: []string{"may have taken", "claim_task again"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			url, claimed, answer, status, body, released := waitingClaim(t)
			*status, *body = c.status, c.body
			st, ct := mcp.NewInMemoryTransports()
			ctx := context.Background()
			ss, err := New(client.New(url, "ck_test", client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))).Connect(ctx, st, nil)
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
			time.Sleep(100 * time.Millisecond) // for the cancellation to reach the handler before the claim's answer
			close(answer)
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
			if !res.IsError || res.StructuredContent["code"] != c.code {
				t.Fatalf("the cancelled call's answer: %s; want code %s", resp.Result, c.code)
			}
			msg, _ := res.StructuredContent["message"].(string)
			for _, w := range c.says {
				if !strings.Contains(msg, w) || strings.Contains(msg, "context canceled") {
					t.Errorf("the cancelled claim's message: %q; want it to say %q", msg, w)
				}
			}
			select {
			case r := <-released:
				if !c.released {
					t.Errorf("a release was sent: %v", r)
				} else if r["fence"] != 1.0 || r["run_id"] == "" {
					t.Errorf("the give-back named %v; want the claim's run and fence 1", r)
				}
			default:
				if c.released {
					t.Error("the task the cancelled claim took was not given back")
				}
			}
		})
	}
}

// A server stopped (its ctx done, as by a SIGTERM) while a claim_task
// waited on the API returned at once, and the process with it: the claim,
// which behind API Gateway goes on waiting on the server, then took a task
// held by nobody at work until its lease timed out. Serve now waits (for
// up to DrainTimeout) for that claim's answer and the give-back of the
// task it took.
func TestAStoppedServerGivesBackItsClaimsTask(t *testing.T) {
	t.Parallel()
	url, claimed, answer, _, _, released := waitingClaim(t)
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	t.Cleanup(func() { inW.Close(); outR.Close() })
	go func() { _, _ = io.Copy(io.Discard, outR) }()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		if err := Serve(ctx, client.New(url, "ck_test", client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1})), inR, outW); err != nil {
			t.Errorf("Serve: %v", err)
		}
		close(served)
	}()
	for _, l := range []string{initLine, `{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"claim_task","arguments":{"wait":"20s"}}}`} {
		if _, err := io.WriteString(inW, l+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-claimed:
	case <-time.After(5 * time.Second):
		t.Fatal("the claim did not reach the API")
	}
	cancel()
	select {
	case <-served:
		t.Fatal("Serve returned while its stopped claim was on its way")
	case <-time.After(300 * time.Millisecond):
	}
	close(answer) // the API grants the claim a task
	select {
	case r := <-released:
		if r["fence"] != 1.0 {
			t.Errorf("the give-back named %v; want fence 1", r)
		}
	case <-served:
		t.Fatal("Serve returned before the stopped claim's task was given back")
	case <-time.After(5 * time.Second):
		t.Fatal("the stopped claim's task was not given back")
	}
	select {
	case <-served:
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return once the task was given back")
	}
}
