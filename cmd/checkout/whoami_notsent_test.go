package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// checkout release --agent (the key's own agent) whose Whoami, asked
// first, got no answer (the connection closed after the request was
// written) never sent the release: the line printed must not say that
// the request was sent (describe prints the *UnreachableError found
// through notSentError.As, whose Sent is Whoami's).
func TestReleaseNotSentForAWhoamiWithoutAnswerIsNotReportedSent(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, ".config"))
	for _, k := range []string{"CHECKOUT_URL", "CHECKOUT_API_KEY", "CHECKOUT_PROFILE", "CHECKOUT_AGENT", "CHECKOUT_RUN_ID"} {
		t.Setenv(k, "")
	}
	var others atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/whoami" {
			if conn, _, err := w.(http.Hijacker).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		others.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"task_id":"task-1","released_by":"agent-1","held_seconds":1}`))
	}))
	t.Cleanup(srv.Close)
	var out, errb strings.Builder
	code := run(context.Background(), []string{"--url", srv.URL, "--api-key", "ck_test", "release", "task-1", "--agent", "agent-1", "--run-id", "run-1"},
		strings.NewReader(""), &out, &errb)
	if code == 0 {
		t.Fatalf("exit 0: %s", out.String())
	}
	if n := others.Load(); n != 0 {
		t.Fatalf("the release was sent (%d requests besides whoami)", n)
	}
	if strings.Contains(errb.String(), "was sent") || strings.Contains(errb.String(), "may have taken effect") {
		t.Errorf("a release never sent (whoami got no answer) is reported as sent:\n%s", errb.String())
	}
}
