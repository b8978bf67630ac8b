package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A lease request whose Whoami, asked first, was sent but got no answer
// (the connection closed) was itself never sent: its error must not say
// it was, neither in its text nor through the *UnreachableError a caller
// finds in it (Sent false), which the CLI and the MCP server print alone.
func TestAReleaseNotSentForAWhoamiWithoutAnswerDoesNotSayItWasSent(t *testing.T) {
	t.Parallel()
	var others atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/whoami" {
			// Read the request whole, then close without an answer.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		others.Add(1)
		w.WriteHeader(200)
		_, _ = w.Write([]byte(`{"task_id":"task-1","released_by":"agent-1","held_seconds":1}`))
	}))
	t.Cleanup(srv.Close)
	c := New(srv.URL, "ck_x", WithRetryPolicy(RetryPolicy{MaxAttempts: 2, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}))
	_, err := c.Release(context.Background(), "task-1", ReleaseRequest{RunID: "run-1", AgentID: "agent-1"})
	if err == nil {
		t.Fatal("release: no error, want whoami's")
	}
	if n := others.Load(); n != 0 {
		t.Fatalf("the release was sent (%d requests besides whoami)", n)
	}
	if errors.Is(err, ErrUndecided) {
		t.Errorf("release: %v matches ErrUndecided, but was not sent", err)
	}
	var ue *UnreachableError
	if errors.As(err, &ue) && ue.Sent {
		t.Errorf("release not sent: errors.As finds an *UnreachableError with Sent true (%q), which says the release was sent and may have taken effect", ue.Error())
	}
	if strings.Contains(err.Error(), "(the request was sent)") {
		t.Errorf("release not sent: its error says %q", err.Error())
	}
}
