package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/httpapi/openapitest"
)

type result struct {
	status int
	header http.Header
	body   []byte
	json   map[string]any
}

type harness struct {
	t       *testing.T
	svc     *fakeService
	h       http.Handler
	logs    *bytes.Buffer
	removed []string
}

func newHarness(t *testing.T, mutate ...func(*Options)) *harness {
	t.Helper()
	hs := &harness{t: t, svc: &fakeService{}, logs: &bytes.Buffer{}}
	opts := Options{
		Auth:           fakeAuth{},
		OnAgentRemoved: func(id string) { hs.removed = append(hs.removed, id) },
		Logger:         slog.New(slog.NewJSONHandler(hs.logs, nil)),
		Now:            func() time.Time { return t0.Add(10*time.Minute + 500*time.Millisecond) },
	}
	for _, m := range mutate {
		m(&opts)
	}
	hs.h = New(hs.svc, opts)
	return hs
}

// do sends a request with the key ("" for none) and checks the answer
// against the OpenAPI document.
func (hs *harness) do(method, path, key, body string) result {
	hs.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	return hs.send(req)
}

func (hs *harness) send(req *http.Request) result {
	hs.t.Helper()
	rec := httptest.NewRecorder()
	hs.h.ServeHTTP(rec, req)
	res := result{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
	if ct := res.header.Get("Content-Type"); ct != "application/json" {
		hs.t.Fatalf("%s %s: Content-Type %q", req.Method, req.URL, ct)
	}
	if v := res.header.Get("X-Content-Type-Options"); v != "nosniff" {
		hs.t.Fatalf("%s %s: X-Content-Type-Options %q, want nosniff (a browser must not take an answer for HTML)", req.Method, req.URL, v)
	}
	if err := json.Unmarshal(res.body, &res.json); err != nil {
		hs.t.Fatalf("%s %s: body is not a JSON object: %v: %s", req.Method, req.URL, err, res.body)
	}
	if err := openapitest.Validate(req.Method, req.URL.RequestURI(), res.status, res.header, res.body); err != nil {
		hs.t.Errorf("openapi: %v", err)
	}
	return res
}

// expect asserts the status and, for errors, the code.
func (r result) expect(t *testing.T, status int, code string) result {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	if code != "" {
		if r.json["code"] != code {
			t.Fatalf("code %v, want %s: %s", r.json["code"], code, r.body)
		}
		if msg, _ := r.json["error"].(string); msg == "" {
			t.Fatalf("error body without a sentence: %s", r.body)
		}
	}
	return r
}

type context_ = context.Context

func newTestLogger(w io.Writer) *slog.Logger { return slog.New(slog.NewJSONHandler(w, nil)) }
