package httpapi

import (
	"testing"

	"github.com/checkout-dev/checkout/lease"
)

// GET /api/agents comes in pages: limit and cursor are passed on, the
// page's cursor is next_cursor (null on the last), and a bad limit or
// cursor, or another parameter, is 400 (the harness checks each answer
// against the OpenAPI document). It used to answer every agent at once
// and ignore its query.
func TestListAgentsPages(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	hs.svc.agents = []lease.Agent{{AgentID: "a1", Name: "one", CreatedAt: t0}, {AgentID: "a2", Name: "two", CreatedAt: t0}}
	all := hs.do("GET", "/api/agents", "ck_admin", "").expect(t, 200, "")
	if as, _ := all.json["agents"].([]any); len(as) != 2 || all.json["next_cursor"] != nil {
		t.Fatalf("every agent: %s", all.body)
	}
	first := hs.do("GET", "/api/agents?limit=1", "ck_admin", "").expect(t, 200, "")
	if as, _ := first.json["agents"].([]any); len(as) != 1 || first.json["next_cursor"] != "next" {
		t.Fatalf("limit 1: %s", first.body)
	}
	second := hs.do("GET", "/api/agents?cursor=next", "ck_admin", "").expect(t, 200, "")
	if as, _ := second.json["agents"].([]any); len(as) != 1 || as[0].(map[string]any)["agent_id"] != "a2" || second.json["next_cursor"] != nil {
		t.Fatalf("the page after: %s", second.body)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "limit=-1", "cursor=bogus", "lmit=5", "agent_id=a1"} {
		hs.do("GET", "/api/agents?"+q, "ck_admin", "").expect(t, 400, "invalid_request")
	}
	hs.do("GET", "/api/agents?limit=1", "ck_agent", "").expect(t, 403, "")
}

// GET /api/whoami answers the caller's identity from its key alone (the
// store is not called), for an agent and for an admin; without a key it
// is 401.
func TestWhoamiAnswersTheCaller(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	res := hs.do("GET", "/api/whoami", "ck_agent", "").expect(t, 200, "")
	if res.json["agent_id"] != "agent-1" || res.json["admin"] != false || res.json["name"] == nil {
		t.Errorf("whoami of an agent: %s", res.body)
	}
	res = hs.do("GET", "/api/whoami", "ck_admin", "").expect(t, 200, "")
	if res.json["agent_id"] != "admin" || res.json["admin"] != true {
		t.Errorf("whoami of the admin: %s", res.body)
	}
	hs.do("GET", "/api/whoami", "", "").expect(t, 401, "unauthorized")
	if len(hs.svc.calls) != 0 {
		t.Errorf("whoami called the store: %v", hs.svc.calls)
	}
}
