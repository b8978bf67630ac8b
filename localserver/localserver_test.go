package localserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease/schema"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// call sends a request with the key as a bearer token (none when empty)
// and returns the status and the JSON body.
func call(t *testing.T, method, url, key, body string) (int, map[string]any) {
	t.Helper()
	st, _, m := get(t, method, url, key, body)
	return st, m
}

// get is call that also returns the Retry-After header.
func get(t *testing.T, method, url, key, body string) (int, string, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s %s: %d %q: %v", method, url, resp.StatusCode, b, err)
	}
	return resp.StatusCode, resp.Header.Get("Retry-After"), m
}

func TestGeneratedAdminKeyIsLoggedOnceAndWorks(t *testing.T) {
	t.Parallel()
	var logs testenv.Buffer
	ctx := context.Background()
	srv, err := Start(ctx, Config{
		Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: testenv.Prefix(),
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	key := srv.AdminKey()
	if !strings.HasPrefix(key, "ck_") {
		t.Fatalf("admin key %q", key)
	}
	if n := strings.Count(logs.String(), key); n != 1 {
		t.Fatalf("generated key appears %d times in the logs:\n%s", n, logs.String())
	}
	if !strings.HasPrefix(srv.URL(), "http://127.0.0.1:") || strings.HasSuffix(srv.URL(), ":0") {
		t.Fatalf("url %q", srv.URL())
	}

	if st, body := call(t, "GET", srv.URL()+"/healthz", "", ""); st != 200 || body["ok"] != true {
		t.Fatalf("healthz %d %v", st, body)
	}
	st, body := call(t, "POST", srv.URL()+"/api/agents", key, `{"name":"worker"}`)
	if st != 201 {
		t.Fatalf("register %d %v", st, body)
	}
	agentKey := body["api_key"].(string)
	if st, body := call(t, "POST", srv.URL()+"/api/agents", agentKey, `{"name":"x"}`); st != 403 || body["code"] != "forbidden" {
		t.Fatalf("non-admin register %d %v", st, body)
	}
	// The request log carries the route, status and agent.
	if !strings.Contains(logs.String(), `"route":"POST /api/agents"`) || !strings.Contains(logs.String(), `"status":201`) {
		t.Fatalf("no request log line:\n%s", logs.String())
	}
}

// Close stops the server answering, and a second Close is no error.
func TestCloseStopsServingAndMayBeRepeated(t *testing.T) {
	t.Parallel()
	srv, err := Start(context.Background(), Config{Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: testenv.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	if st, body := call(t, "GET", srv.URL()+"/healthz", "", ""); st != 200 || body["ok"] != true {
		t.Fatalf("healthz %d %v", st, body)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(srv.URL() + "/healthz"); err == nil {
		t.Fatal("server still answers after Close")
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// A restart with another CHECKOUT_ADMIN_KEY on the same tables replaces the
// admin's key: the old one stops working.
func TestAdminKeyFromConfigReplacesTheOldOne(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := testenv.Prefix()
	first, err := Start(ctx, Config{Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: p, AdminKey: "ck_first-admin-key"})
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := call(t, "GET", first.URL()+"/api/agents", "ck_first-admin-key", ""); st != 200 {
		t.Fatalf("configured key: %d", st)
	}
	first.Close()

	second, err := Start(ctx, Config{Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: p, AdminKey: "ck_second-admin-key"})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if second.AdminKey() != "ck_second-admin-key" {
		t.Fatalf("AdminKey %q", second.AdminKey())
	}
	if st, _ := call(t, "GET", second.URL()+"/api/agents", "ck_second-admin-key", ""); st != 200 {
		t.Fatalf("new key: %d", st)
	}
	if st, body := call(t, "GET", second.URL()+"/api/agents", "ck_first-admin-key", ""); st != 401 || body["code"] != "unauthorized" {
		t.Fatalf("old key: %d %v", st, body)
	}
}

// The ticker sweeps on its own: an expired lease ends without anyone
// calling Sweep.
func TestTickerSweeps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	srv, err := Start(ctx, Config{
		Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: testenv.Prefix(),
		SweepInterval: 20 * time.Millisecond, Now: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	key := srv.AdminKey()
	if st, b := call(t, "POST", srv.URL()+"/api/tasks", key, `{"task_id":"t1"}`); st != 201 {
		t.Fatalf("create %d %v", st, b)
	}
	if st, b := call(t, "POST", srv.URL()+"/api/tasks/t1/checkout", key, `{"timeout":"1s"}`); st != 200 {
		t.Fatalf("checkout %d %v", st, b)
	}
	mu.Lock()
	now = now.Add(2 * time.Second)
	mu.Unlock()
	// Wait for the ticker (real time) to notice; bounded.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, b := call(t, "GET", srv.URL()+"/api/tasks/t1/events", key, "")
		evs, _ := b["events"].([]any)
		if len(evs) == 2 && evs[1].(map[string]any)["type"] == "timeout" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no timeout event from the ticker: %v", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, b := call(t, "GET", srv.URL()+"/api/tasks/t1", key, ""); b["status"] != "todo" {
		t.Fatalf("task after sweep: %v", b)
	}
}

func TestStartFailsCleanly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// An address in use.
	srv, err := Start(ctx, Config{Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: testenv.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL(), "http://")
	if _, err := Start(ctx, Config{Addr: addr, DynamoEndpoint: testenv.Endpoint(), TablePrefix: testenv.Prefix()}); err == nil {
		t.Fatal("second server on the same address started")
	}
	// No DynamoDB there.
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := Start(ctx, Config{Addr: "127.0.0.1:0", DynamoEndpoint: "http://127.0.0.1:1", TablePrefix: testenv.Prefix()}); err == nil {
		t.Fatal("started without a database")
	}
}

// The built-in admin cannot remove itself (nor be removed by another admin):
// DELETE answers 409 cannot_remove_admin, and the admin key keeps working.
func TestBuiltinAdminCannotBeRemoved(t *testing.T) {
	t.Parallel()
	srv, err := Start(context.Background(), Config{Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: testenv.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	key := srv.AdminKey()
	if st, body := call(t, "DELETE", srv.URL()+"/api/agents/"+AdminID, key, ""); st != 409 || body["code"] != "cannot_remove_admin" {
		t.Fatalf("DELETE the built-in admin: %d %v", st, body)
	}
	// Another admin cannot remove it either.
	st, body := call(t, "POST", srv.URL()+"/api/agents", key, `{"name":"deputy","admin":true,"agent_id":"deputy"}`)
	if st != 201 {
		t.Fatalf("register deputy: %d %v", st, body)
	}
	deputy := body["api_key"].(string)
	if st, body := call(t, "DELETE", srv.URL()+"/api/agents/"+AdminID, deputy, ""); st != 409 || body["code"] != "cannot_remove_admin" {
		t.Fatalf("deputy deletes the built-in admin: %d %v", st, body)
	}
	if st, body := call(t, "GET", srv.URL()+"/api/agents", key, ""); st != 200 {
		t.Fatalf("the admin key stopped working: %d %v", st, body)
	}
	// Other admins are ordinary agents: they can be removed.
	if st, body := call(t, "DELETE", srv.URL()+"/api/agents/deputy", key, ""); st != 200 {
		t.Fatalf("DELETE deputy: %d %v", st, body)
	}
}

// Strict input on the real server: a field name in another case is 400, and
// a declared body over 64 KiB is 413 at once, before the client has sent it
// (not after the server's 30 s read timeout).
func TestStrictInput(t *testing.T) {
	t.Parallel()
	srv, err := Start(context.Background(), Config{Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: testenv.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	key := srv.AdminKey()
	for _, c := range []struct{ name, path, body string }{
		{"a task id in other case is refused", "/api/tasks", `{"Task_ID":"t1"}`},
		{"a title in other case is refused", "/api/tasks", `{"task_id":"t1","TITLE":"x"}`},
		{"a checkout's timeout in other case is refused", "/api/tasks/t1/checkout", `{"TIMEOUT":"1s"}`},
		{"a claim's timeout in other case is refused", "/api/claim", `{"Timeout":"1s"}`},
		{"a heartbeat's ttl in other case is refused", "/api/heartbeat", `{"TTL":"1s"}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			if st, body := call(t, "POST", srv.URL()+c.path, key, c.body); st != 400 || body["code"] != "invalid_json" {
				t.Errorf("POST %s %s: %d %v", c.path, c.body, st, body)
			}
		})
	}
	if st, body := call(t, "GET", srv.URL()+"/api/tasks/t1", key, ""); st != 404 {
		t.Fatalf("a refused body created the task: %d %v", st, body)
	}

	for _, path := range []string{"/api/tasks", "/api/tasks/t1/checkout", "/api/claim"} {
		c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL(), "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: %d\r\n\r\n", path, key, 64<<10+1)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		start := time.Now()
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("POST %s with a declared 64 KiB + 1 body: no answer: %v", path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		c.Close()
		if resp.StatusCode != 413 || !strings.Contains(string(b), `"code":"payload_too_large"`) {
			t.Fatalf("POST %s: %d %s", path, resp.StatusCode, b)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("POST %s: 413 after %v", path, d)
		}
	}
}

// countingProxy forwards to the DynamoDB endpoint and counts requests by
// operation (X-Amz-Target). The operations it is told to refuse are
// answered with a ValidationException instead, which the SDK does not retry;
// those it is told to hold wait, unforwarded, until released.
type countingProxy struct {
	mu      sync.Mutex
	ops     map[string]int
	refused map[string]bool
	gates   map[string]chan struct{}
	waiting map[string]int
	url     string
}

func newCountingProxy(t *testing.T, target string) *countingProxy {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{ops: map[string]int{}, refused: map[string]bool{}, gates: map[string]chan struct{}{}, waiting: map[string]int{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
		p.mu.Lock()
		p.ops[op]++
		refused, gate := p.refused[op], p.gates[op]
		if gate != nil {
			p.waiting[op]++
		}
		p.mu.Unlock()
		if gate != nil {
			select {
			case <-gate:
			case <-r.Context().Done():
			}
			p.mu.Lock()
			p.waiting[op]--
			p.mu.Unlock()
		}
		if refused {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprintf(w, `{"__type":"com.amazonaws.dynamodb.v20120810#ValidationException","message":"%s refused by the test"}`, op)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.url = srv.URL
	return p
}

// refuse makes the proxy refuse op (on) or forward it again.
func (p *countingProxy) refuse(op string, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refused[op] = on
}

// hold makes the proxy keep the requests of op waiting until release.
func (p *countingProxy) hold(op string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.gates[op] = make(chan struct{})
}

// release forwards the requests of op held, and those that come after.
func (p *countingProxy) release(op string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if g := p.gates[op]; g != nil {
		close(g)
		delete(p.gates, op)
	}
}

// held is how many requests of op are held just now.
func (p *countingProxy) held(op string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waiting[op]
}

func (p *countingProxy) count(op string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ops[op]
}

// An unknown key costs one look-up, not one per request: failures are
// cached briefly too. A key registered just now works at once all the same.
func TestUnknownKeysAreCached(t *testing.T) {
	t.Parallel()
	proxy := newCountingProxy(t, testenv.Endpoint())
	// No sweep and no stream poller: only the requests' own look-ups count.
	srv, err := Start(context.Background(), Config{Addr: "127.0.0.1:0", DynamoEndpoint: proxy.url, TablePrefix: testenv.Prefix(), SweepInterval: -1, StreamPollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	before := proxy.count("GetItem")
	for range 50 {
		if st, body := call(t, "GET", srv.URL()+"/api/tasks", "ck_no-such-key-at-all", ""); st != 401 || body["code"] != "unauthorized" {
			t.Fatalf("unknown key: %d %v", st, body)
		}
	}
	if n := proxy.count("GetItem") - before; n > 1 {
		t.Fatalf("50 requests with one unknown key made %d GetItem requests, want at most 1", n)
	}
	st, body := call(t, "POST", srv.URL()+"/api/agents", srv.AdminKey(), `{"name":"new"}`)
	if st != 201 {
		t.Fatalf("register: %d %v", st, body)
	}
	if st, body := call(t, "GET", srv.URL()+"/api/inbox", body["api_key"].(string), ""); st != 200 {
		t.Fatalf("a key registered just now: %d %v", st, body)
	}
}

// Shard counts out of bounds are refused before anything starts.
func TestStartRefusesShardCountsOutOfBounds(t *testing.T) {
	t.Parallel()
	_, err := Start(testenv.Context(t), Config{Addr: "127.0.0.1:0", Shards: schema.ShardCounts{Claim: schema.MaxClaimShards + 1}})
	if err == nil || !strings.Contains(err.Error(), "claim shard count") {
		t.Fatalf("%v, want the claim count refused", err)
	}
}

// A server started on the tables of one whose shard counts were larger
// refuses to start, naming the count and what was used: its listings,
// claims and sweeps would miss what was written in the shards above its
// counts.
func TestStartRefusesShardCountsBelowThoseUsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	p := testenv.Prefix()
	grown := schema.ShardCounts{Status: schema.MaxStatusShards}
	first, err := Start(ctx, Config{Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: p, Shards: grown})
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	_, err = Start(ctx, Config{Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: p})
	if want := "status shard count 16 is below 20"; err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), schema.EnvStatusShards) {
		t.Fatalf("a start with the default counts after %+v: %v, want %q and the variable", grown, err, want)
	}
	again, err := Start(ctx, Config{Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: p, Shards: grown})
	if err != nil {
		t.Fatalf("a start with the counts used: %v", err)
	}
	again.Close()
}
