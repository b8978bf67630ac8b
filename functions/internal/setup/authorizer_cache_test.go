package setup

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/auth"
	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
)

// cachedEvent is the event API Gateway sends the agents function for a
// request whose key's authorizer answer (p) it still caches.
func cachedEvent(method, path, key, body string, p lease.Principal) events.APIGatewayV2HTTPRequest {
	return events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: method + " " + path, RawPath: path, Body: body,
		Headers: map[string]string{"authorization": "Bearer " + key, "content-type": "application/json"},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			Stage: "$default", HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{
				auth.ContextAgentID: p.AgentID, auth.ContextAgentName: p.Name, auth.ContextAdmin: "true",
			}},
		},
	}
}

// In AWS the authorizer's answer is cached for deploy.AuthorizerCacheTTL:
// a removed admin's key still arrives with its admin identity for that
// long. The agents function looks at the key again on its admin routes and
// refuses it, so the removed admin cannot mint keys; and it refuses to
// register a removed id again within that time, when the old key would act
// as the new agent.
func TestAgentsFunctionRefusesWhatTheAuthorizerCacheStillLetsThrough(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 3, 20, 14, 0, 0, 0, time.UTC))
	env := Env{TablePrefix: testenv.Tables(t).Prefix, Now: clock.Now}
	quiet := slog.New(slog.DiscardHandler)
	store := NewStore(lease.NewLocalClient(testenv.Endpoint()), nil, env, quiet)
	const rootKey, opsKey = "ck_root-admin-key-0123456789", "ck_ops-admin-key-0123456789"
	if err := store.EnsureAgent(ctx, "admin", "admin", true, rootKey); err != nil {
		t.Fatal(err)
	}
	if err := store.EnsureAgent(ctx, "ops", "ops", true, opsKey); err != nil {
		t.Fatal(err)
	}
	agents := HTTP(deploy.Agents, store, nil, env, quiet)
	call := func(method, path, key, body string, p lease.Principal) (int, map[string]any) {
		t.Helper()
		resp, err := agents(ctx, cachedEvent(method, path, key, body, p))
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		if err := json.Unmarshal([]byte(resp.Body), &out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, resp.Body)
		}
		return resp.StatusCode, out
	}
	root, ops := lease.Principal{AgentID: "admin", Name: "admin", Admin: true}, lease.Principal{AgentID: "ops", Name: "ops", Admin: true}

	if st, _ := call(http.MethodGet, "/api/agents", opsKey, "", ops); st != http.StatusOK {
		t.Fatalf("ops lists agents: %d", st)
	}
	if st, out := call(http.MethodDelete, "/api/agents/ops", rootKey, "", root); st != http.StatusOK {
		t.Fatalf("remove ops: %d %v", st, out)
	}
	// ops's key, still cached as an admin's: refused.
	for _, r := range []struct{ method, path, body string }{
		{http.MethodPost, "/api/agents", `{"name": "backdoor", "admin": true}`},
		{http.MethodGet, "/api/agents", ""},
		{http.MethodDelete, "/api/agents/admin", ""},
	} {
		if st, out := call(r.method, r.path, opsKey, r.body, ops); st != http.StatusUnauthorized || out["code"] != errcode.Unauthorized {
			t.Errorf("%s %s with the removed admin's cached identity: %d %v, want 401 unauthorized", r.method, r.path, st, out)
		}
	}
	if _, err := store.GetAgent(ctx, "backdoor"); err == nil {
		t.Error("the removed admin registered an agent")
	}

	// Registering ops again within the cache time: 409, saying from when.
	clock.Advance(deploy.AuthorizerCacheTTL - time.Second)
	st, out := call(http.MethodPost, "/api/agents", rootKey, `{"name": "ops again", "agent_id": "ops"}`, root)
	if st != http.StatusConflict || out["code"] != errcode.AgentExists {
		t.Fatalf("register ops %v after its removal: %d %v, want 409 agent_exists", deploy.AuthorizerCacheTTL-time.Second, st, out)
	}
	clock.Advance(time.Second)
	if st, out := call(http.MethodPost, "/api/agents", rootKey, `{"name": "ops again", "agent_id": "ops"}`, root); st != http.StatusCreated {
		t.Fatalf("register ops once the cache time has passed: %d %v", st, out)
	}
}

// The admin-only fields of the agent routes are refused to a removed
// admin's cached identity as the admin routes are: it cannot act for
// another agent, force a release or cancel a task another agent holds. A
// live admin's use looks the key up again (GetItem on agents, granted to
// every function that does), and a plain agent's request does not.
func TestAgentRoutesRefuseAdminFieldsTheAuthorizerCacheStillLetsThrough(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	g := newGrantCheck(t)
	app := NewStore(lease.NewLocalClient(testenv.Endpoint()), nil, g.env, quiet)
	const rootKey, opsKey = "ck_root-admin-key-0123456789", "ck_ops-admin-key-0123456789"
	if err := app.EnsureAgent(ctx, "admin", "admin", true, rootKey); err != nil {
		t.Fatal(err)
	}
	if err := app.EnsureAgent(ctx, "ops", "ops", true, opsKey); err != nil {
		t.Fatal(err)
	}
	reg, err := app.RegisterAgent(ctx, lease.RegisterParams{AgentID: "bob", Name: "bob"})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t1", "t2", "t3"} {
		if _, err := app.CreateTask(ctx, lease.CreateTaskParams{TaskID: id}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := app.Checkout(ctx, lease.CheckoutParams{TaskID: "t1", AgentID: "bob", AgentName: "bob", Timeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := app.RemoveAgent(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	root, ops := lease.Principal{AgentID: "admin", Name: "admin", Admin: true}, lease.Principal{AgentID: "ops", Name: "ops", Admin: true}
	bob := lease.Principal{AgentID: "bob", Name: "bob"}

	// call sends one request to function fn, whose store records its
	// calls in c.
	call := func(c *grantCheck, fn, method, path, key, body string, p lease.Principal) (int, map[string]any) {
		t.Helper()
		ev := cachedEvent(method, path, key, body, p)
		ev.RequestContext.Authorizer.Lambda[auth.ContextAdmin] = strconv.FormatBool(p.Admin)
		resp, err := HTTP(fn, c.store(fn, nil), nil, c.env, quiet)(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		if err := json.Unmarshal([]byte(resp.Body), &out); err != nil {
			t.Fatalf("%s %s: %v: %s", method, path, err, resp.Body)
		}
		return resp.StatusCode, out
	}
	type req struct{ fn, method, path, body string }
	for _, r := range []req{
		{deploy.Checkouts, http.MethodPost, "/api/tasks/t2/checkout", `{"agent_id": "bob"}`},
		{deploy.Claim, http.MethodPost, "/api/claim", `{"agent_id": "bob"}`},
		{deploy.Checkouts, http.MethodPost, "/api/tasks/t1/renew", `{"agent_id": "bob", "timeout": "2h"}`},
		{deploy.Checkouts, http.MethodPost, "/api/tasks/t1/release", `{"agent_id": "bob"}`},
		{deploy.Checkouts, http.MethodPost, "/api/tasks/t1/release", `{"force": true}`},
		{deploy.Checkouts, http.MethodPost, "/api/tasks/t1/complete", `{"agent_id": "bob"}`},
		{deploy.Tasks, http.MethodPatch, "/api/tasks/t1", `{"status": "cancelled"}`},
	} {
		if st, out := call(g, r.fn, r.method, r.path, opsKey, r.body, ops); st != http.StatusUnauthorized || out["code"] != errcode.Unauthorized {
			t.Errorf("%s %s %s with the removed admin's cached identity: %d %v, want 401 unauthorized", r.method, r.path, r.body, st, out)
		}
	}
	for id, holder := range map[string]string{"t1": "bob", "t2": "", "t3": ""} {
		task, err := app.GetTask(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got := ""
		if task.Checkout != nil {
			got = task.Checkout.AgentID
		}
		if got != holder || task.Status == lease.StatusCancelled {
			t.Errorf("%s after the removed admin's requests: %s held by %q, want held by %q", id, task.Status, got, holder)
		}
	}
	if task, err := app.GetTask(ctx, "t1"); err != nil || task.Checkout == nil || task.Checkout.AgentID != "bob" || !task.Checkout.ExpiresAt.Before(time.Now().Add(90*time.Minute)) {
		t.Errorf("t1 after the removed admin's requests: %+v %v, want bob's lease, not renewed", task.Checkout, err)
	}

	// A plain agent's requests look no key up again.
	plain := &grantCheck{t: t, env: g.env, used: &usage{prefix: g.env.TablePrefix}}
	for _, r := range []req{
		{deploy.Checkouts, http.MethodPost, "/api/tasks/t1/renew", `{}`},
		{deploy.Checkouts, http.MethodPost, "/api/tasks/t2/checkout", `{}`},
		{deploy.Checkouts, http.MethodPost, "/api/tasks/t2/release", `{}`},
		{deploy.Claim, http.MethodPost, "/api/claim", `{}`},
		{deploy.Tasks, http.MethodPatch, "/api/tasks/t2", `{"status": "cancelled"}`},
	} {
		if st, out := call(plain, r.fn, r.method, r.path, reg.APIKey, r.body, bob); st != http.StatusOK {
			t.Errorf("%s %s %s by bob: %d %v, want 200", r.method, r.path, r.body, st, out)
		}
	}
	for _, fn := range []string{deploy.Checkouts, deploy.Claim, deploy.Tasks} {
		if plain.made(fn, "GetItem agents") {
			t.Errorf("the %s function read agents for a plain agent's request", fn)
		}
	}
	plain.check()

	// A live admin's: each works, after one look-up.
	for _, r := range []req{
		{deploy.Checkouts, http.MethodPost, "/api/tasks/t1/renew", `{"agent_id": "bob"}`},
		{deploy.Checkouts, http.MethodPost, "/api/tasks/t1/release", `{"force": true}`},
		{deploy.Claim, http.MethodPost, "/api/claim", `{"agent_id": "bob"}`},
		{deploy.Tasks, http.MethodPatch, "/api/tasks/t1", `{"status": "cancelled"}`},
	} {
		if st, out := call(g, r.fn, r.method, r.path, rootKey, r.body, root); st != http.StatusOK {
			t.Errorf("%s %s %s by the admin: %d %v, want 200", r.method, r.path, r.body, st, out)
		}
	}
	for _, fn := range []string{deploy.Checkouts, deploy.Claim, deploy.Tasks} {
		if !g.made(fn, "GetItem agents") {
			t.Errorf("the %s function never looked the admin's key up again", fn)
		}
	}
	g.check()
}
