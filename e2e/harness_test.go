package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/httpapi"
	"github.com/checkout-dev/checkout/httpapi/openapitest"
	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/internal/testenv/testserver"
	"github.com/checkout-dev/checkout/localserver"
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := testenv.Run(m)
	if code == 0 && flag.Lookup("test.run").Value.String() == "" {
		if err := coverage.check(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// errorCodes are the codes of the API (errcode.All) that the suite must
// provoke at least once: every one but those no request of a healthy
// server can provoke. unavailable is provoked by internal/faults, which
// cuts the database away; internal is a bug.
var errorCodes = func() []string {
	var out []string
	for _, c := range errcode.All {
		if c.Code != errcode.Unavailable && c.Code != errcode.Internal {
			out = append(out, c.Code)
		}
	}
	return out
}()

// coverage records, across every test, which routes answered with a success
// and which error codes were seen.
var coverage = struct {
	mu     sync.Mutex
	routes map[string]bool
	codes  map[string]bool
	check  func() error
}{routes: map[string]bool{}, codes: map[string]bool{}}

func init() {
	coverage.check = func() error {
		coverage.mu.Lock()
		defer coverage.mu.Unlock()
		var missing []string
		for _, r := range httpapi.Routes() {
			if !coverage.routes[r.Pattern()] {
				missing = append(missing, "route "+r.Pattern())
			}
		}
		for _, c := range errorCodes {
			if !coverage.codes[c] {
				missing = append(missing, "error code "+c)
			}
		}
		if len(missing) > 0 {
			sort.Strings(missing)
			return fmt.Errorf("never exercised with success / never seen:\n  %s", strings.Join(missing, "\n  "))
		}
		return nil
	}
}

// routeOf finds the pattern a request matched.
var routeMux = func() *http.ServeMux {
	m := http.NewServeMux()
	for _, r := range httpapi.Routes() {
		m.Handle(r.Pattern(), http.NotFoundHandler())
	}
	return m
}()

func routeOf(method, target string) string {
	req, err := http.NewRequest(method, "http://x"+target, nil)
	if err != nil {
		return ""
	}
	_, p := routeMux.Handler(req)
	return p
}

// env is one server on its own tables, with its own clock.
type env struct {
	t     *testing.T
	srv   *localserver.Server
	clock *testclock.Clock
	admin string
}

type option = testserver.Option

func autoCreate(c *localserver.Config) { c.AutoCreateTasks = true }

var t0 = time.Date(2026, 3, 20, 14, 0, 0, 0, time.UTC)

func newEnv(t *testing.T, opts ...option) *env {
	t.Helper()
	c := testclock.New(t0)
	srv := testserver.Start(t, append([]option{testserver.WithClock(c.Now), func(cfg *localserver.Config) {
		cfg.AdminKey = "" // generated, as on a first start
		// The tests apply the change stream when they read its
		// consequences.
		cfg.StreamPollInterval = -1
	}}, opts...)...)
	return &env{t: t, srv: srv, clock: c, admin: srv.AdminKey()}
}

// resp is one answer.
type resp struct {
	Status int
	Header http.Header
	Raw    []byte
	Body   map[string]any
}

// Code is the error code of an error answer.
func (r resp) Code() string { s, _ := r.Body["code"].(string); return s }

func (r resp) Str(k string) string { s, _ := r.Body[k].(string); return s }

func (r resp) Num(k string) float64 { n, _ := r.Body[k].(float64); return n }

func (r resp) Obj(k string) map[string]any { m, _ := r.Body[k].(map[string]any); return m }

func (r resp) List(k string) []map[string]any {
	var out []map[string]any
	l, _ := r.Body[k].([]any)
	for _, e := range l {
		m, _ := e.(map[string]any)
		out = append(out, m)
	}
	return out
}

var client = &http.Client{Timeout: 30 * time.Second}

// call sends a request with Authorization "Bearer key" (none when key is
// ""; sent as it is when it starts with "raw:"), checks the answer against
// the OpenAPI document, and records coverage. It never lets a 5xx pass.
func (e *env) call(t testing.TB, method, target, key string, body any) resp {
	t.Helper()
	return e.callWith(t, method, target, key, nil, body)
}

// callWith is call with extra request headers.
func (e *env) callWith(t testing.TB, method, target, key string, header http.Header, body any) resp {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.srv.URL()+target, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	switch {
	case strings.HasPrefix(key, "raw:"):
		req.Header.Set("Authorization", strings.TrimPrefix(key, "raw:"))
	case key != "":
		req.Header.Set("Authorization", "Bearer "+key)
	}
	hr, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer hr.Body.Close()
	raw, err := io.ReadAll(hr.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := resp{Status: hr.StatusCode, Header: hr.Header, Raw: raw}
	if hr.StatusCode >= 500 {
		t.Fatalf("%s %s: %d %s", method, target, hr.StatusCode, raw)
	}
	if err := json.Unmarshal(raw, &r.Body); err != nil {
		t.Fatalf("%s %s: %d, body is not a JSON object: %q", method, target, hr.StatusCode, raw)
	}
	if ct := hr.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("%s %s: content type %q", method, target, ct)
	}
	if err := openapitest.Validate(method, target, hr.StatusCode, hr.Header, raw); err != nil {
		t.Fatalf("the answer does not match the OpenAPI document: %v", err)
	}
	if hr.StatusCode >= 400 {
		if r.Str("error") == "" || r.Code() == "" {
			t.Fatalf("%s %s: error without error/code: %s", method, target, raw)
		}
		if c, ok := errcode.Lookup(r.Code()); !ok || c.Status != hr.StatusCode {
			t.Fatalf("%s %s: %d %s, which is not a code of errcode.All with that status", method, target, hr.StatusCode, r.Code())
		}
	}
	coverage.mu.Lock()
	if hr.StatusCode < 300 {
		coverage.routes[routeOf(method, target)] = true
	} else {
		coverage.codes[r.Code()] = true
	}
	coverage.mu.Unlock()
	return r
}

// must calls and requires the status.
func (e *env) must(t testing.TB, status int, method, target, key string, body any) resp {
	t.Helper()
	r := e.call(t, method, target, key, body)
	if r.Status != status {
		t.Fatalf("%s %s: %d, want %d: %s", method, target, r.Status, status, r.Raw)
	}
	return r
}

// fail calls and requires the status and error code.
func (e *env) fail(t testing.TB, status int, code, method, target, key string, body any) resp {
	t.Helper()
	r := e.must(t, status, method, target, key, body)
	if r.Code() != code {
		t.Fatalf("%s %s: code %q, want %q: %s", method, target, r.Code(), code, r.Raw)
	}
	return r
}

// agent registers an agent and returns its key.
func (e *env) agent(t testing.TB, id string) string {
	t.Helper()
	r := e.must(t, 201, "POST", "/api/agents", e.admin, map[string]any{"agent_id": id, "name": id + "-name"})
	return r.Str("api_key")
}

func (e *env) task(t testing.TB, key, id string) {
	t.Helper()
	e.must(t, 201, "POST", "/api/tasks", key, map[string]any{"task_id": id, "title": "task " + id})
}

func (e *env) sweep(t testing.TB) (timeouts, deaths int) {
	t.Helper()
	res, err := e.srv.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res.Timeouts, res.AgentDeaths
}

// drain applies the change stream's pending changes: every transition so
// far has its archived event, its messages and its notices.
func (e *env) drain(t testing.TB) {
	t.Helper()
	if err := e.srv.Drain(context.Background()); err != nil {
		t.Fatalf("drain the change stream: %v", err)
	}
}

func (e *env) events(t testing.TB, key, task string) []string {
	t.Helper()
	e.drain(t)
	var types []string
	for _, ev := range e.must(t, 200, "GET", "/api/tasks/"+task+"/events", key, nil).List("events") {
		types = append(types, ev["type"].(string))
	}
	return types
}

func (e *env) inbox(t testing.TB, key string) []map[string]any {
	t.Helper()
	e.drain(t)
	return e.must(t, 200, "GET", "/api/inbox", key, nil).List("messages")
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func equal(t testing.TB, what string, got, want any) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}
