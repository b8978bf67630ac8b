package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// WithHTTPClient(nil) is the default HTTP client, not a nil dereference on
// the first call.
func TestNilHTTPClientIsTheDefault(t *testing.T) {
	t.Parallel()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	}))
	defer s.Close()
	if err := New(s.URL, "", WithHTTPClient(nil)).Health(context.Background()); err != nil {
		t.Fatal(err)
	}
}
