package setup

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/auth"
	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
)

// An admin's claim for another agent (agent_id in the body) looks that
// agent up, for its name (GetItem on agents), as a checkout for another
// agent does: the claim function is granted the read (it had no grant on
// agents, and AWS would have refused it: a 500 for every such claim).
func TestClaimFunctionLooksUpTheAgentAnAdminClaimsFor(t *testing.T) {
	ctx := context.Background()
	store, env, checkGrants := storeOf(t, deploy.Claim)
	app := NewStore(lease.NewLocalClient(testenv.Endpoint()), nil, env, nil)
	if _, err := app.RegisterAgent(ctx, lease.RegisterParams{AgentID: "bob", Name: "Bob"}); err != nil {
		t.Fatal(err)
	}
	// Acting for another agent looks the admin's key up again.
	const adminKey = "ck_admin-key-0123456789"
	if err := app.EnsureAgent(ctx, "admin", "admin", true, adminKey); err != nil {
		t.Fatal(err)
	}
	if _, err := app.CreateTask(ctx, lease.CreateTaskParams{TaskID: "t"}); err != nil {
		t.Fatal(err)
	}
	h := HTTP(deploy.Claim, store, nil, env, nil)
	resp, err := h(ctx, events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: "POST /api/claim", RawPath: "/api/claim",
		Headers: map[string]string{"content-type": "application/json", "authorization": "Bearer " + adminKey},
		Body:    `{"agent_id":"bob"}`,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey: "POST /api/claim",
			HTTP:     events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/api/claim"},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{
				auth.ContextAgentID: "admin", auth.ContextAgentName: "admin", auth.ContextAdmin: true,
			}},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		TaskID    string `json:"task_id"`
		AgentID   string `json:"agent_id"`
		AgentName string `json:"agent_name"`
	}
	if resp.StatusCode != http.StatusOK || json.Unmarshal([]byte(resp.Body), &got) != nil || got.TaskID != "t" || got.AgentID != "bob" || got.AgentName != "Bob" {
		t.Errorf("an admin's claim for bob: %d %s; want 200, t leased to bob (Bob)", resp.StatusCode, resp.Body)
	}
	checkGrants()
}

// A named claim (run_id) of an agent registered again after its removal,
// whose removed self left a receipt of the same run id: the receipt is
// not the new agent's, and the claim deletes it (DeleteItem on
// heartbeats, where receipts are kept) and claims afresh. The claim
// function is granted the deletion (it had GetItem and UpdateItem on
// heartbeats only, and AWS would have refused it: a 500 for the new
// agent's claim, every time it retried).
func TestClaimFunctionDeletesARemovedAgentsReceipt(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 3, 20, 14, 0, 0, 0, time.UTC))
	g := newGrantCheck(t)
	g.env.Now = clock.Now
	claim := g.store(deploy.Claim, nil)
	app := NewStore(lease.NewLocalClient(testenv.Endpoint()), nil, g.env, nil)
	if _, err := app.RegisterAgent(ctx, lease.RegisterParams{AgentID: "alice", Name: "alice"}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t1", "t2"} {
		if _, err := app.CreateTask(ctx, lease.CreateTaskParams{TaskID: id}); err != nil {
			t.Fatal(err)
		}
	}
	first, err := claim.Claim(ctx, lease.ClaimParams{AgentID: "alice", RunID: "run-1", Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.RemoveAgent(ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	clock.Advance(deploy.AuthorizerCacheTTL + time.Second)
	if _, err := app.RegisterAgent(ctx, lease.RegisterParams{AgentID: "alice", Name: "alice again"}); err != nil {
		t.Fatal(err)
	}
	again, err := claim.Claim(ctx, lease.ClaimParams{AgentID: "alice", RunID: "run-1", Timeout: time.Hour})
	if err != nil {
		t.Fatalf("the new alice's claim of run-1: %v", err)
	}
	if again.Fence == first.Fence && again.TaskID == first.TaskID {
		t.Errorf("the new alice's claim answered the removed alice's lease %s/%d", first.TaskID, first.Fence)
	}
	if !g.made(deploy.Claim, "DeleteItem heartbeats") {
		t.Error("the claim never deleted the removed agent's receipt: the test missed the path")
	}
	g.check()
}
