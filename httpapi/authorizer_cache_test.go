package httpapi

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/lease"
)

// countingAuth is fakeAuth that counts its look-ups and knows one more key,
// "ck_demoted", of an agent that is no longer an admin.
type countingAuth struct{ n int }

func (a *countingAuth) Authenticate(ctx context.Context, key string) (lease.Principal, error) {
	a.n++
	if key == "ck_demoted" {
		return lease.Principal{AgentID: "admin", Name: "admin"}, nil
	}
	return fakeAuth{}.Authenticate(ctx, key)
}

// Behind API Gateway the principal is the authorizer's, which API Gateway
// caches for 30 s: a removed admin's key still arrives with the admin's
// identity for that long. The admin-only routes look at the key again
// (RecheckAdmin) and refuse it; other routes, used without an admin-only
// field, trust the cached identity and cost no read.
func TestARemovedAdminsCachedIdentityIsRefusedOnAdminRoutes(t *testing.T) {
	recheck := &countingAuth{}
	hs := newHarness(t, func(o *Options) { o.Auth, o.RecheckAdmin = nil, recheck })
	// as the API Gateway adapter sends it: the cached principal on the
	// context, the key in its header.
	send := func(method, path, key, body string, p lease.Principal) result {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		return hs.send(req.WithContext(ContextWithPrincipal(req.Context(), p)))
	}
	for _, rt := range []struct{ method, path, body string }{
		{http.MethodPost, "/api/agents", `{"name": "minted", "admin": true}`},
		{http.MethodGet, "/api/agents", ""},
		{http.MethodDelete, "/api/agents/agent-7", ""},
	} {
		send(rt.method, rt.path, "ck_removed", rt.body, adminP).expect(t, http.StatusUnauthorized, errcode.Unauthorized)
		send(rt.method, rt.path, "ck_demoted", rt.body, adminP).expect(t, http.StatusForbidden, errcode.Forbidden)
		// Another agent's key under the admin's cached identity.
		send(rt.method, rt.path, "ck_agent", rt.body, adminP).expect(t, http.StatusUnauthorized, errcode.Unauthorized)
	}
	for _, c := range hs.svc.calls {
		t.Errorf("the service was called (%s) for a refused admin", c)
	}
	send(http.MethodPost, "/api/agents", "ck_admin", `{"name": "minted"}`, adminP).expect(t, http.StatusCreated, "")
	n := recheck.n
	send(http.MethodGet, "/api/tasks/t1", "ck_removed", "", agentP).expect(t, http.StatusOK, "")
	if recheck.n != n {
		t.Errorf("a route for every agent looked the key up again (%d look-ups)", recheck.n-n)
	}
}

// A registration of an id removed less than the authorizer's cache time
// ago is 409 agent_exists, saying from when the id may be registered
// again (and Retry-After).
func TestRegisteringARecentlyRemovedIDSaysWhen(t *testing.T) {
	hs := newHarness(t)
	now := t0.Add(10*time.Minute + 500*time.Millisecond) // the harness's clock
	until := now.Add(12*time.Second + 300*time.Millisecond)
	hs.svc.err = &lease.RemovedRecentlyError{AgentID: "x", Until: until}
	res := hs.do(http.MethodPost, "/api/agents", "ck_admin", `{"name": "x", "agent_id": "x"}`).expect(t, http.StatusConflict, errcode.AgentExists)
	if msg, _ := res.json["error"].(string); !strings.Contains(msg, stamp(until)) {
		t.Errorf("message %q does not say from when (%s)", msg, stamp(until))
	}
	if got := res.header.Get("Retry-After"); got != "13" {
		t.Errorf("Retry-After %q, want 13", got)
	}
}

// The admin-only fields of agent routes (agent_id naming another agent,
// force on a release, a cancel, which may end another agent's lease) are
// admin powers as much as the admin routes are: with the authorizer's
// cached identity of a removed admin they are refused as those routes
// refuse it, and a live admin's use costs one look-up. A request that uses
// no admin power looks nothing up.
func TestARemovedAdminsCachedIdentityIsRefusedOnAdminFields(t *testing.T) {
	recheck := &countingAuth{}
	hs := newHarness(t, func(o *Options) { o.Auth, o.RecheckAdmin = nil, recheck })
	hs.svc.agents = []lease.Agent{{AgentID: "agent-2", Name: "writer", CreatedAt: t0}}
	send := func(method, path, key, body string, p lease.Principal) result {
		t.Helper()
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		return hs.send(req.WithContext(ContextWithPrincipal(req.Context(), p)))
	}
	powers := []struct{ method, path, body string }{
		{http.MethodPost, "/api/tasks/t1/checkout", `{"agent_id": "agent-2"}`},
		{http.MethodPost, "/api/claim", `{"agent_id": "agent-2"}`},
		{http.MethodPost, "/api/tasks/t1/renew", `{"agent_id": "agent-2"}`},
		{http.MethodPost, "/api/tasks/t1/release", `{"agent_id": "agent-2"}`},
		{http.MethodPost, "/api/tasks/t1/release", `{"force": true}`},
		{http.MethodPost, "/api/tasks/t1/release", `{"force": true, "agent_id": "agent-2"}`},
		{http.MethodPost, "/api/tasks/t1/complete", `{"agent_id": "agent-2"}`},
	}
	cancel := struct{ method, path, body string }{http.MethodPatch, "/api/tasks/t1", `{"status": "cancelled"}`}
	for _, rt := range append(powers, cancel) {
		send(rt.method, rt.path, "ck_removed", rt.body, adminP).expect(t, http.StatusUnauthorized, errcode.Unauthorized)
		send(rt.method, rt.path, "ck_agent", rt.body, adminP).expect(t, http.StatusUnauthorized, errcode.Unauthorized)
	}
	for _, rt := range powers {
		send(rt.method, rt.path, "ck_demoted", rt.body, adminP).expect(t, http.StatusForbidden, errcode.Forbidden)
	}
	for _, c := range hs.svc.calls {
		t.Errorf("the service was called (%s) for a refused admin", c)
	}
	// A cancel is an admin's only if another agent holds the task, which
	// the service decides: a key no longer an admin's cancels as an agent.
	send(cancel.method, cancel.path, "ck_demoted", cancel.body, adminP).expect(t, http.StatusOK, "")
	if p, ok := hs.svc.last.(lease.UpdateTaskParams); !ok || p.Admin {
		t.Errorf("a cancel with a key no longer an admin's: %+v, want an agent's (Admin false)", hs.svc.last)
	}
	powers = append(powers, cancel)
	for _, rt := range powers {
		n := recheck.n
		send(rt.method, rt.path, "ck_admin", rt.body, adminP).expect(t, http.StatusOK, "")
		if recheck.n != n+1 {
			t.Errorf("%s %s %s by a live admin: %d look-ups, want 1", rt.method, rt.path, rt.body, recheck.n-n)
		}
	}
	n := recheck.n
	for _, rt := range []struct {
		method, path, body string
		p                  lease.Principal
	}{
		{http.MethodPost, "/api/tasks/t1/checkout", `{}`, agentP},
		{http.MethodPost, "/api/claim", `{}`, agentP},
		{http.MethodPost, "/api/tasks/t1/renew", `{}`, agentP},
		{http.MethodPost, "/api/tasks/t1/release", `{}`, agentP},
		{http.MethodPost, "/api/tasks/t1/complete", `{}`, agentP},
		{http.MethodPatch, "/api/tasks/t1", `{"status": "cancelled"}`, agentP},
		// An admin acting as itself uses no admin power either.
		{http.MethodPost, "/api/tasks/t1/checkout", `{"agent_id": "admin"}`, adminP},
		{http.MethodPost, "/api/tasks/t1/release", `{}`, adminP},
		{http.MethodPatch, "/api/tasks/t1", `{"title": "renamed"}`, adminP},
	} {
		send(rt.method, rt.path, "ck_removed", rt.body, rt.p).expect(t, http.StatusOK, "")
	}
	if recheck.n != n {
		t.Errorf("requests using no admin power looked the key up again (%d look-ups)", recheck.n-n)
	}
}
