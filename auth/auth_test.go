package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/lease"
)

type countingAuth struct {
	mu    sync.Mutex
	keys  map[string]lease.Principal
	calls int
	err   error
	// during runs inside Authenticate, to interleave a revocation.
	during func()
}

func (a *countingAuth) Authenticate(_ context.Context, key string) (lease.Principal, error) {
	a.mu.Lock()
	a.calls++
	p, ok := a.keys[key]
	err, during := a.err, a.during
	a.mu.Unlock()
	if during != nil {
		during()
	}
	if err != nil {
		return lease.Principal{}, err
	}
	if !ok {
		return lease.Principal{}, lease.ErrUnauthorized
	}
	return p, nil
}

func (a *countingAuth) count() int { a.mu.Lock(); defer a.mu.Unlock(); return a.calls }

var agent = lease.Principal{AgentID: "agent-1", Name: "researcher"}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func TestCacheHitsAndExpiry(t *testing.T) {
	a := &countingAuth{keys: map[string]lease.Principal{"ck_1": agent}}
	clk := &clock{t: time.Unix(1000, 0)}
	c := NewCache(a, 30*time.Second, clk.now)
	ctx := context.Background()
	for range 3 {
		p, err := c.Authenticate(ctx, "ck_1")
		if err != nil || p != agent {
			t.Fatalf("%v %v", p, err)
		}
	}
	if a.count() != 1 {
		t.Fatalf("%d lookups, want 1", a.count())
	}
	clk.t = clk.t.Add(30 * time.Second)
	if _, err := c.Authenticate(ctx, "ck_1"); err != nil {
		t.Fatal(err)
	}
	if a.count() != 2 {
		t.Fatalf("expired entry served: %d lookups", a.count())
	}
	// Refusals are cached for NegativeTTL.
	for range 2 {
		if _, err := c.Authenticate(ctx, "ck_bad"); !errors.Is(err, lease.ErrUnauthorized) {
			t.Fatal(err)
		}
	}
	if a.count() != 3 {
		t.Fatalf("%d lookups, want 3", a.count())
	}
	// Empty and oversized keys are refused without a lookup.
	for _, k := range []string{"", strings.Repeat("k", MaxKeyLen+1)} {
		if _, err := c.Authenticate(ctx, k); !errors.Is(err, lease.ErrUnauthorized) {
			t.Fatal(err)
		}
	}
	if a.count() != 3 {
		t.Fatalf("%d lookups, want 3", a.count())
	}
	// Internal errors pass through and are not cached.
	a.err = errors.New("store down")
	if _, err := c.Authenticate(ctx, "ck_new"); err == nil || errors.Is(err, lease.ErrUnauthorized) {
		t.Fatalf("err %v", err)
	}
	a.err = nil
	a.keys["ck_new"] = agent
	if _, err := c.Authenticate(ctx, "ck_new"); err != nil {
		t.Fatalf("a store error was cached as a refusal: %v", err)
	}
}

// A refused key is refused again without a look-up for NegativeTTL, then
// looked up again: a key that starts working (the local admin's, written
// again) works once that short time has passed, or at once after Reset.
func TestRefusalsAreCachedBriefly(t *testing.T) {
	a := &countingAuth{keys: map[string]lease.Principal{}}
	clk := &clock{t: time.Unix(1000, 0)}
	c := NewCache(a, 30*time.Second, clk.now)
	ctx := context.Background()
	for range 50 {
		if _, err := c.Authenticate(ctx, "ck_unknown"); !errors.Is(err, lease.ErrUnauthorized) {
			t.Fatal(err)
		}
	}
	if a.count() != 1 {
		t.Fatalf("50 refusals of one key made %d look-ups, want 1", a.count())
	}
	// Other keys are not affected.
	a.mu.Lock()
	a.keys["ck_1"] = agent
	a.mu.Unlock()
	if p, err := c.Authenticate(ctx, "ck_1"); err != nil || p != agent {
		t.Fatalf("%v %v", p, err)
	}
	// The refusal expires.
	a.mu.Lock()
	a.keys["ck_unknown"] = agent
	a.mu.Unlock()
	clk.t = clk.t.Add(NegativeTTL - time.Millisecond)
	if _, err := c.Authenticate(ctx, "ck_unknown"); !errors.Is(err, lease.ErrUnauthorized) {
		t.Fatalf("refusal forgotten early: %v", err)
	}
	clk.t = clk.t.Add(time.Millisecond)
	if _, err := c.Authenticate(ctx, "ck_unknown"); err != nil {
		t.Fatalf("refusal outlived NegativeTTL: %v", err)
	}
	// Reset forgets refusals (and successes) at once.
	if _, err := c.Authenticate(ctx, "ck_other"); !errors.Is(err, lease.ErrUnauthorized) {
		t.Fatal(err)
	}
	a.mu.Lock()
	a.keys["ck_other"] = agent
	a.mu.Unlock()
	c.Reset()
	if _, err := c.Authenticate(ctx, "ck_other"); err != nil {
		t.Fatalf("refusal survived Reset: %v", err)
	}
	before := a.count()
	c.Reset()
	if _, err := c.Authenticate(ctx, "ck_1"); err != nil || a.count() != before+1 {
		t.Fatalf("success survived Reset: %v, %d look-ups", err, a.count()-before)
	}
}

// Random keys cannot grow the cache: at most MaxNegative refusals are held,
// the oldest forgotten first, and the newest still answer without a look-up.
func TestRefusalsAreBounded(t *testing.T) {
	a := &countingAuth{keys: map[string]lease.Principal{}}
	c := NewCache(a, time.Minute, nil)
	ctx := context.Background()
	n := 3*MaxNegative + 17
	for i := range n {
		_, _ = c.Authenticate(ctx, fmt.Sprintf("ck_random-%d", i))
		if len(c.refused) > MaxNegative || len(c.ring) > MaxNegative {
			t.Fatalf("after %d keys: %d refusals held, %d in the ring", i+1, len(c.refused), len(c.ring))
		}
	}
	if len(c.refused) != MaxNegative {
		t.Fatalf("%d refusals held, want %d", len(c.refused), MaxNegative)
	}
	before := a.count()
	_, _ = c.Authenticate(ctx, fmt.Sprintf("ck_random-%d", n-1)) // newest: cached
	if a.count() != before {
		t.Fatal("the newest refusal was evicted")
	}
	_, _ = c.Authenticate(ctx, "ck_random-0") // oldest: evicted, looked up
	if a.count() != before+1 {
		t.Fatal("the oldest refusal was kept")
	}
}

// A look-up in flight during Reset does not put its refusal back.
func TestResetDuringRefusedLookup(t *testing.T) {
	a := &countingAuth{keys: map[string]lease.Principal{}}
	c := NewCache(a, time.Hour, nil)
	a.during = func() { c.Reset() }
	_, _ = c.Authenticate(context.Background(), "ck_x")
	a.during = nil
	if len(c.refused) != 0 {
		t.Fatalf("stale refusal cached: %v", c.refused)
	}
}

func TestCacheHoldsHashesOnly(t *testing.T) {
	a := &countingAuth{keys: map[string]lease.Principal{"ck_secret": agent}}
	c := NewCache(a, time.Minute, nil)
	if _, err := c.Authenticate(context.Background(), "ck_secret"); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.entries[sha256.Sum256([]byte("ck_secret"))]; !ok || len(c.entries) != 1 {
		t.Fatalf("entries %v", c.entries)
	}
}

func TestForgetRevokesAtOnce(t *testing.T) {
	a := &countingAuth{keys: map[string]lease.Principal{"ck_1": agent, "ck_2": {AgentID: "agent-2"}}}
	c := NewCache(a, time.Hour, nil)
	ctx := context.Background()
	for _, k := range []string{"ck_1", "ck_2"} {
		if _, err := c.Authenticate(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	delete(a.keys, "ck_1") // the store removed the agent
	c.Forget("agent-1")
	if _, err := c.Authenticate(ctx, "ck_1"); !errors.Is(err, lease.ErrUnauthorized) {
		t.Fatalf("revoked key still works: %v", err)
	}
	before := a.count()
	if _, err := c.Authenticate(ctx, "ck_2"); err != nil || a.count() != before {
		t.Fatalf("other agents' entries dropped: %v", err)
	}
}

// A lookup that was in flight when the agent was removed must not put the
// old principal back into the cache.
func TestForgetDuringLookup(t *testing.T) {
	a := &countingAuth{keys: map[string]lease.Principal{"ck_1": agent}}
	c := NewCache(a, time.Hour, nil)
	a.during = func() { c.Forget("agent-1") }
	if _, err := c.Authenticate(context.Background(), "ck_1"); err != nil {
		t.Fatal(err)
	}
	a.during = nil
	if len(c.entries) != 0 {
		t.Fatalf("stale entry cached: %v", c.entries)
	}
}

// Concurrent look-ups and revocations: every answer is the agent (never
// another principal, never a refusal of a valid key); and without
// revocations, 1,600 concurrent authentications make at most one look-up
// per goroutine, the ones racing to fill the cache. (Under -race, also no
// data race.)
func TestCacheConcurrent(t *testing.T) {
	a := &countingAuth{keys: map[string]lease.Principal{"ck_1": agent}}
	c := NewCache(a, time.Hour, nil)
	run := func(forget bool) {
		var wg sync.WaitGroup
		for i := range 16 {
			wg.Go(func() {
				for range 100 {
					p, err := c.Authenticate(context.Background(), "ck_1")
					if err != nil || p != agent {
						t.Errorf("authenticate: %+v %v, want %+v", p, err, agent)
						return
					}
					if forget && i%4 == 0 {
						c.Forget("agent-1")
					}
				}
			})
		}
		wg.Wait()
	}
	run(false)
	if n := a.count(); n < 1 || n > 16 {
		t.Fatalf("%d look-ups for 1600 concurrent authentications of one key, want 1 to 16", n)
	}
	run(true)
}

func TestBearerKey(t *testing.T) {
	cases := map[string]string{
		"Bearer ck_abc":  "ck_abc",
		"bearer ck_abc":  "ck_abc",
		"BEARER  ck_abc": "ck_abc",
		"Bearer":         "",
		"Bearer ":        "",
		"Basic ck_abc":   "",
		"ck_abc":         "",
		"Bearer ck abc":  "",
		"Bearer ck\tabc": "",
		"Bearer ck_é":    "",
		"":               "",
		"Bearerck_abc":   "",
	}
	for in, want := range cases {
		got, ok := BearerKey(in)
		if got != want || ok != (want != "") {
			t.Errorf("BearerKey(%q) = %q, %v; want %q", in, got, ok, want)
		}
	}
}

func TestAuthorizer(t *testing.T) {
	a := &countingAuth{keys: map[string]lease.Principal{
		"ck_1":     agent,
		"ck_admin": {AgentID: "admin", Name: "admin", Admin: true},
	}}
	h := Authorizer(a)
	ctx := context.Background()
	req := func(hdr string) events.APIGatewayV2CustomAuthorizerV2Request {
		return events.APIGatewayV2CustomAuthorizerV2Request{Headers: map[string]string{"authorization": hdr}, IdentitySource: []string{hdr}}
	}
	res, err := h(ctx, req("Bearer ck_1"))
	if err != nil || !res.IsAuthorized {
		t.Fatalf("%+v %v", res, err)
	}
	want := map[string]interface{}{"agent_id": "agent-1", "agent_name": "researcher", "admin": "false"}
	for k, v := range want {
		if res.Context[k] != v {
			t.Errorf("context[%s] = %v, want %v", k, res.Context[k], v)
		}
	}
	p, ok := PrincipalFromAuthorizerContext(res.Context)
	if !ok || p != agent {
		t.Fatalf("round trip: %+v %v", p, ok)
	}
	res, _ = h(ctx, req("Bearer ck_admin"))
	if p, ok := PrincipalFromAuthorizerContext(res.Context); !ok || !p.Admin {
		t.Fatalf("admin round trip: %+v", p)
	}
	for _, hdr := range []string{"", "Bearer ck_nope", "Basic ck_1", "Bearer"} {
		res, err := h(ctx, req(hdr))
		// Let through without an agent, so the route answers 401 with the
		// contract's body rather than API Gateway's own 403.
		if err != nil || !res.IsAuthorized || res.Context != nil {
			t.Errorf("%q: %+v %v", hdr, res, err)
		}
		if _, ok := PrincipalFromAuthorizerContext(res.Context); ok {
			t.Errorf("%q: a principal came out of a refused key", hdr)
		}
	}
	// Header names in any case; identity source alone also works.
	res, _ = h(ctx, events.APIGatewayV2CustomAuthorizerV2Request{IdentitySource: []string{"Bearer ck_1"}})
	if !res.IsAuthorized {
		t.Error("identity source ignored")
	}
	a.err = errors.New("store down")
	res, err = h(ctx, req("Bearer ck_1"))
	if err == nil || res.IsAuthorized {
		t.Fatalf("internal error authorized: %+v %v", res, err)
	}
}

func TestPrincipalFromAuthorizerContext(t *testing.T) {
	cases := []struct {
		m    map[string]interface{}
		ok   bool
		want lease.Principal
	}{
		{map[string]interface{}{"agent_id": "a1", "agent_name": "n", "admin": "true"}, true, lease.Principal{AgentID: "a1", Name: "n", Admin: true}},
		{map[string]interface{}{"agent_id": "a1", "admin": true}, true, lease.Principal{AgentID: "a1", Admin: true}},
		{map[string]interface{}{"agent_id": "a1"}, true, lease.Principal{AgentID: "a1"}},
		{map[string]interface{}{"agent_id": "a1", "admin": "yes"}, false, lease.Principal{}},
		{map[string]interface{}{"agent_id": "a1", "admin": 1.0}, false, lease.Principal{}},
		{map[string]interface{}{"agent_id": ""}, false, lease.Principal{}},
		{map[string]interface{}{"agent_id": 7}, false, lease.Principal{}},
		{nil, false, lease.Principal{}},
	}
	for _, c := range cases {
		p, ok := PrincipalFromAuthorizerContext(c.m)
		if ok != c.ok || p != c.want {
			t.Errorf("%v: %+v %v", c.m, p, ok)
		}
	}
}
