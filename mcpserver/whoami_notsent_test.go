package mcpserver

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/client"
)

// release_task for CHECKOUT_AGENT (the key's own agent) whose Whoami,
// asked first, got no answer never sent the release: the tool's message
// must not tell the agent it was sent.
func TestAReleaseNotSentForAWhoamiWithoutAnswerIsNotToldSent(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/whoami" {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		t.Errorf("sent %s %s", r.Method, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	c := client.New(srv.URL, "ck_x", client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 2, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}))
	_, err := c.Release(context.Background(), "task-1", client.ReleaseRequest{RunID: "run-1", AgentID: "agent-1"})
	if err == nil {
		t.Fatal("release: no error")
	}
	o := toolError(undecided(err, "The release of task task-1", "call release_task again"))
	if strings.Contains(o.Message, "was sent") || o.Code == codeUndecided {
		t.Errorf("a release never sent is told as sent: %s: %s", o.Code, o.Message)
	}
}
