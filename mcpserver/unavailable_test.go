package mcpserver

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/checkout-dev/checkout/client"
)

// A 429 or 5xx that is not the server's own (a gateway throttling, a
// proxy while the server restarts) carries no code: the tool says it is
// the service being unavailable, code unavailable, and when to try again
// when the answer's Retry-After says so, rather than code error and a
// bare "429 Too Many Requests".
func TestUnavailableSaysWhenToTryAgain(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz":
			io.WriteString(w, `{"ok":true}`)
		case strings.HasSuffix(r.URL.Path, "/throttled/checkout"):
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"message":"Too Many Requests"}`)
		case strings.HasSuffix(r.URL.Path, "/busy/checkout"):
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusServiceUnavailable)
			io.WriteString(w, `{"error":"the service is busy","code":"unavailable"}`)
		default:
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "<html><body>502 Bad Gateway</body></html>")
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

	res, txt, out := callTool(t, cs, "checkout_task", map[string]any{"task_id": "throttled"})
	if !res.IsError || out["code"] != "unavailable" || !strings.Contains(txt, "60s") {
		t.Errorf("a throttled checkout: isError %v, %s %v, want code unavailable and the 60s to wait", res.IsError, txt, out)
	}
	res, txt, out = callTool(t, cs, "get_task", map[string]any{"task_id": "t1"})
	if !res.IsError || out["code"] != "unavailable" || !strings.Contains(txt, "502") || !strings.Contains(txt, "again") {
		t.Errorf("a 502 from a proxy: isError %v, %s %v, want code unavailable, the status and to try again", res.IsError, txt, out)
	}
	// A 5xx to a call that changes something may be an answer lost in
	// front of the server: undecided, saying when to call again. It said
	// undecided without the 60s the answer asked to wait.
	res, txt, out = callTool(t, cs, "checkout_task", map[string]any{"task_id": "busy"})
	if !res.IsError || out["code"] != "undecided" || !strings.Contains(txt, "60s") {
		t.Errorf("a checkout answered 503 with Retry-After: isError %v, %s %v, want code undecided and the 60s to wait", res.IsError, txt, out)
	}
}
