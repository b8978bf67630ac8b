package main

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// With --json, stdout holds a checkout server's JSON answer or nothing:
// another server's 404 page (HTML, or another API's JSON) was printed
// there as if it were the answer.
func TestJSONPrintsNothingFromAnotherServer(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte("<html><body>Not here</body></html>"))
	}))
	defer html.Close()
	for name, url := range map[string]string{"an HTML server": html.URL, "a wrong path": e.srv.URL() + "/api"} {
		r := runCLI(t, url, e.keys["agent-a1b2"], "list", "--json")
		if r.code != 1 || r.stdout != "" {
			t.Errorf("%s: exit %d, stdout %q (stderr %q), want exit 1 and nothing on stdout", name, r.code, r.stdout, r.stderr)
		}
	}
	// The server's own errors are still its JSON.
	if r := runCLI(t, e.srv.URL(), e.keys["agent-a1b2"], "status", "task-nope", "--json"); r.code != 4 || r.stdout == "" || r.stdout[0] != '{' {
		t.Errorf("a missing task with --json: exit %d, stdout %q", r.code, r.stdout)
	}
}
