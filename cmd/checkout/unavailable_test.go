package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// A 429 or 5xx from in front of the server (a gateway throttling, a proxy
// while the server restarts) has no message of the API's: the error says
// the service cannot answer now and when to try again (the answer's
// Retry-After), not a bare "429 Too Many Requests".
func TestUnavailableSaysWhenToTryAgain(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/healthz":
			io.WriteString(w, `{"ok":true}`)
		case strings.HasSuffix(r.URL.Path, "/throttled/checkout"):
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"message":"Too Many Requests"}`)
		default:
			w.WriteHeader(http.StatusBadGateway)
			io.WriteString(w, "<html><body>502 Bad Gateway</body></html>")
		}
	}))
	defer srv.Close()
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", "")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"throttled"}, "checkout: the service cannot answer now: 429 Too Many Requests (try again in 1m)\n"},
		{[]string{"status", "t1"}, "checkout: the service cannot answer now: 502 Bad Gateway: try again shortly\n"},
	} {
		var out, errb strings.Builder
		code := run(context.Background(), append([]string{"--url", srv.URL, "--api-key", "ck_test"}, tc.args...), strings.NewReader(""), &out, &errb)
		if code != exitError || errb.String() != tc.want {
			t.Errorf("checkout %v: exit %d, stderr %q, want exit 1 and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}

// A 5xx that asks the caller to wait (Retry-After) may also be an answer
// lost in front of the server, so a command that changes something says
// it may have taken effect. It said so without the wait the answer asked
// for, where it had said "(try again in 1m)": it now says both.
func TestAnUndecidedAnswerSaysWhenToTryAgain(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			io.WriteString(w, `{"ok":true}`)
			return
		}
		w.Header().Set("Retry-After", "60")
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, `{"error":"the service is busy","code":"unavailable"}`)
	}))
	defer srv.Close()
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", "")
	for _, args := range [][]string{{"t1"}, {"release", "t1"}} {
		var out, errb strings.Builder
		code := run(context.Background(), append([]string{"--url", srv.URL, "--api-key", "ck_test"}, args...), strings.NewReader(""), &out, &errb)
		if code != exitError || !strings.Contains(errb.String(), "no answer says whether it took effect") || !strings.Contains(errb.String(), "try again in 1m") {
			t.Errorf("checkout %v: exit %d, stderr %q, want exit 1, undecided, and when to try again (1m)", args, code, errb.String())
		}
	}
}
