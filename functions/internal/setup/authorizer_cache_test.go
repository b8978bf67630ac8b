package setup

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
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
