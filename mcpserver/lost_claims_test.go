package mcpserver

import (
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

// A claim_task cancelled after the API granted its claim, while the tool
// read the task's lock (taken), kept the lease: the read failed with the
// cancellation, was taken for a live lease, and the tool answered
// "Claimed" to a call whose answer is dropped over stdio. The agent never
// learnt of the task, its next claim_task took a second one, and the first
// stayed held by nobody at work until its lease timed out. A claim
// cancelled on its way is seen through and its task given back (README);
// so is one cancelled once granted.
func TestAClaimCancelledAfterItsGrantGivesTheTaskBack(t *testing.T) {
	t.Parallel()
	reading := make(chan struct{}, 1)
	released := make(chan map[string]any, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in map[string]any
		_ = json.NewDecoder(r.Body).Decode(&in)
		switch {
		case r.URL.Path == "/api/claim":
			fmt.Fprintf(w, `{"task_id":"late","title":"Late","agent_id":"agent-a1b2","run_id":%q,"fence":1,"locked_at":"2026-03-20T14:30:00Z","timeout_seconds":1800,"expires_at":"2026-03-20T15:00:00Z","remaining_seconds":1800,"queue":"default","priority":0,"attempt":1}`, in["run_id"])
		case r.Method == http.MethodGet:
			// The read after the grant waits until the call is cancelled.
			select {
			case reading <- struct{}{}:
			default:
			}
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			w.WriteHeader(503)
			io.WriteString(w, `{"error":"busy","code":"unavailable"}`)
		case strings.HasSuffix(r.URL.Path, "/release"):
			released <- in
			io.WriteString(w, `{"task_id":"late","released_by":"agent-a1b2","held_seconds":0}`)
		default:
			w.WriteHeader(404)
			io.WriteString(w, `{"error":"no","code":"not_found"}`)
		}
	}))
	t.Cleanup(srv.Close)
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := New(client.New(srv.URL, "ck_test", client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))).Connect(ctx, st, nil)
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
	write(`{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"claim_task","arguments":{}}}`)
	select {
	case <-reading:
	case <-time.After(5 * time.Second):
		t.Fatal("the claim's grant was not read")
	}
	write(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}`)
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
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
	if !res.IsError || res.StructuredContent["code"] != "cancelled" || res.StructuredContent["acquired"] == true {
		t.Errorf("the answer of a claim cancelled once granted: %s; want code cancelled, nothing acquired", resp.Result)
	}
	select {
	case r := <-released:
		if r["fence"] != 1.0 || r["run_id"] == "" {
			t.Errorf("the give-back named %v; want the claim's run and fence 1", r)
		}
	case <-time.After(2 * time.Second):
		t.Error("the task of a claim cancelled once granted was not given back: it stays held by nobody at work")
	}
}

// Two claim_task calls in flight at once, one of whose answers is lost
// (a 5xx: it may have taken a task): the other's success cleared the
// session's note of the lost claim, so the next claim_task took a fresh
// run, and the task the lost claim may hold was never answered to the
// agent (held by nobody at work until its lease timed out). The next
// claim must go under the lost claim's run, as README promises
// ("claim_task after a lost claim claims under that claim's run again").
func TestALostClaimIsNotForgottenForAnotherClaimsSuccess(t *testing.T) {
	t.Parallel()
	first := make(chan struct{}, 1)
	unblock := make(chan struct{})
	runs := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var in map[string]any
		_ = json.NewDecoder(r.Body).Decode(&in)
		lease := func(task, run string) string {
			return fmt.Sprintf(`{"task_id":%q,"title":"T","agent_id":"agent-a1b2","run_id":%q,"fence":1,"locked_at":"2026-03-20T14:30:00Z","timeout_seconds":1800,"expires_at":"2026-03-20T15:00:00Z","remaining_seconds":1800,"queue":"default","priority":0,"attempt":1}`, task, run)
		}
		switch {
		case r.URL.Path == "/api/claim":
			run, _ := in["run_id"].(string)
			runs <- run
			switch {
			case strings.HasSuffix(run, ".c1"):
				first <- struct{}{}
				<-unblock
				io.WriteString(w, lease("one", run))
			case strings.HasSuffix(run, ".c2"):
				w.WriteHeader(502)
				io.WriteString(w, `{"error":"bad gateway"}`)
			default:
				io.WriteString(w, lease("two", run))
			}
		case r.URL.Path == "/healthz":
			io.WriteString(w, `{"ok":true}`)
		case r.Method == http.MethodGet:
			task := strings.Split(r.URL.Path, "/")[3]
			io.WriteString(w, `{"locked":true,"checkout":{"task_id":"`+task+`","agent_id":"agent-a1b2","run_id":"x","fence":1,"locked_at":"2026-03-20T14:30:00Z","timeout_seconds":1800,"expires_at":"2026-03-20T15:00:00Z","remaining_seconds":1800}}`)
		default:
			w.WriteHeader(404)
			io.WriteString(w, `{"error":"no","code":"not_found"}`)
		}
	}))
	t.Cleanup(srv.Close)
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := New(client.New(srv.URL, "ck_test", client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })

	done1 := make(chan map[string]any, 1)
	go func() {
		_, _, out := callTool(t, cs, "claim_task", nil)
		done1 <- out
	}()
	<-first
	run1 := <-runs
	_, txt, out := callTool(t, cs, "claim_task", nil) // lost: a 502
	run2 := <-runs
	if out["code"] != "undecided" {
		t.Fatalf("the second claim, answered 502: %v %s; want undecided", out, txt)
	}
	close(unblock)
	if out := <-done1; out["acquired"] != true {
		t.Fatalf("the first claim: %v", out)
	}
	callTool(t, cs, "claim_task", nil)
	run3 := <-runs
	if run3 != run2 {
		t.Errorf("claims under runs %s, %s (lost), then %s: the claim after a lost one must go under the lost one's run, %s, to learn of the task it may hold", run1, run2, run3, run2)
	}
}

// checkout_task adopt=true adopts by a renewal, a call that changes
// something; when its answer was lost (a 5xx), renew_task says undecided
// and what to call next, as README promises of every such call, but the
// adoption answered the client's raw error (code unavailable, or
// unreachable "the checkout server is down" for a connection lost after
// the request was sent).
func TestALostAdoptionIsUndecided(t *testing.T) {
	t.Parallel()
	const own = `{"task_id":"task-d4e5","agent_id":"agent-a1b2","agent_name":"me","run_id":"run-old","fence":7,` +
		`"locked_at":"2026-03-20T14:30:00.000Z","timeout_seconds":900,"expires_at":"2026-03-20T14:45:00.000Z","remaining_seconds":600}`
	cs := sessionWith(t, func(r *http.Request, body map[string]any) (int, string) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/checkout") && r.Method == http.MethodPost:
			return 409, `{"error":"task task-d4e5 is already checked out","code":"checked_out","same_agent":true,"holder":` + own + `}`
		case strings.HasSuffix(r.URL.Path, "/renew"):
			return 502, `{"message":"Internal server error"}`
		case r.URL.Path == "/healthz":
			return 200, `{"ok":true}`
		}
		return 200, `{"task_id":"task-d4e5","title":"T","status":"in_progress"}`
	})
	res, txt, out := callTool(t, cs, "checkout_task", map[string]any{"task_id": "task-d4e5", "adopt": true})
	if !res.IsError || out["code"] != "undecided" || !strings.Contains(txt, "adopt") {
		t.Errorf("an adoption whose answer was lost: isError %v, code %v, %q; want undecided, saying to adopt again", res.IsError, out["code"], txt)
	}
}

// sessionWith is session with a client that does not retry.
func sessionWith(t *testing.T, answer func(r *http.Request, body map[string]any) (int, string)) *mcp.ClientSession {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		status, out := answer(r, body)
		w.Header().Set("Date", scriptedNow.Format(http.TimeFormat))
		w.WriteHeader(status)
		io.WriteString(w, out)
	}))
	t.Cleanup(srv.Close)
	st, ct := mcp.NewInMemoryTransports()
	ctx := context.Background()
	ss, err := New(client.New(srv.URL, "ck_test", client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}
