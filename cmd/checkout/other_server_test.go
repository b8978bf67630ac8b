package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A URL that points at a plain web server (python3 -m http.server) answers
// a POST 501 Not Implemented, an HTML page. Read as a lost answer, a
// checkout or claim there said "it may have taken effect: run the same
// command again", which says the same for ever; a read said "not a
// checkout server". Every command now says the latter.
func TestAPlainWebServersPostAnswerIsNotACheckoutServer(t *testing.T) {
	t.Parallel()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		if r.Method == http.MethodGet {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, "<html><body><h1>Error response</h1><p>Error code: 404</p></body></html>")
			return
		}
		w.WriteHeader(http.StatusNotImplemented)
		io.WriteString(w, "<html><body><h1>Error response</h1><p>Error code: 501</p></body></html>")
	}))
	defer web.Close()
	want := "checkout: not a checkout server at " + web.URL + " (GET /healthz answered 404 Not Found)\n"
	for _, args := range [][]string{{"t1"}, {"claim"}, {"release", "t1", "--run-id", "run-1"}, {"release", "t1"}, {"status", "t1"}} {
		if r := runCLI(t, web.URL, "ck_x", args...); r.code != 1 || r.stderr != want {
			t.Errorf("checkout %v: exit %d, stderr %q, want exit 1 and %q", args, r.code, r.stderr, want)
		}
	}
}
