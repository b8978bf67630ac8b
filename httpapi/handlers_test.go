package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

func TestRoutesSucceed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		method, path, key, body string
		status                  int
		want                    string // a substring of the body
	}{
		{"GET", "/healthz", "", "", 200, `{"ok":true}`},
		{"POST", "/api/agents", "ck_admin", `{"name":"researcher","agent_id":"agent-9"}`, 201, `"api_key":"ck_secret"`},
		{"POST", "/api/agents", "ck_admin", `{"name":"boss","admin":true}`, 201, `"admin":true`},
		{"GET", "/api/agents", "ck_admin", "", 200, `{"agents":[],"next_cursor":null}`},
		{"DELETE", "/api/agents/agent-9", "ck_admin", "", 200, `{"agent_id":"agent-9","removed":true}`},
		{"POST", "/api/heartbeat", "ck_agent", "", 200, `"expires_at":"2026-03-20T14:36:30.123Z"`},
		{"POST", "/api/heartbeat", "ck_agent", `{"ttl":"1h"}`, 200, `"agent_id":"agent-1"`},
		{"POST", "/api/tasks", "ck_agent", `{"task_id":"task-d4e5","title":"Fix login bug"}`, 201, `"status":"todo","created_at":"2026-03-20T14:35:00.123Z","started_at":null,"completed_at":null,"duration_seconds":null,"checkout":null`},
		{"POST", "/api/tasks", "ck_agent", "", 201, `"task_id":"task-gen","title":""`},
		{"GET", "/api/tasks", "ck_agent", "", 200, `"next_cursor":"abc"`},
		{"GET", "/api/tasks?status=todo&limit=1000&cursor=abc", "ck_agent", "", 200, `"tasks":[`},
		{"GET", "/api/tasks/task-1", "ck_agent", "", 200, `"checkout":{"task_id":"task-1"`},
		{"POST", "/api/tasks/task-1/checkout", "ck_agent", "", 200, `"timeout_seconds":1800,"expires_at":"2026-03-20T15:05:00.123Z","remaining_seconds":1199,"reason":""`},
		{"POST", "/api/tasks/task-1/checkout", "ck_agent", `{"timeout":"90s","reason":"why","run_id":"run-7f3c","expected_statuses":["todo"],"watch":true}`, 200, `"reason":"why"`},
		{"GET", "/api/tasks/task-1/checkout", "ck_agent", "", 200, `"locked":true`},
		{"GET", "/api/tasks/free/checkout", "ck_agent", "", 200, `{"task_id":"free","locked":false,"checkout":null}`},
		{"POST", "/api/tasks/task-1/renew", "ck_agent", `{"timeout":"1h","run_id":"run-1","fence":3}`, 200, `"fence":3`},
		{"POST", "/api/tasks/task-1/release", "ck_agent", `{"run_id":"run-1","reason":"later"}`, 200, `{"task_id":"task-1","released_by":"agent-1","held_seconds":310}`},
		{"POST", "/api/tasks/task-1/release", "ck_admin", `{"force":true}`, 200, `"released_by":"admin"`},
		{"POST", "/api/tasks/task-1/complete", "ck_agent", `{"fence":3}`, 200, `"status":"done","created_at":"2026-03-20T13:35:00.123Z","started_at":"2026-03-20T14:35:00.123Z","completed_at":"2026-03-20T14:36:30.623Z","duration_seconds":90`},
		{"GET", "/api/tasks/task-1/events", "ck_agent", "", 200, `"held_seconds":310,"by":"agent-1","reason":"done for now"`},
		{"POST", "/api/tasks/task-1/watch", "ck_agent", "", 200, `{"watching":true}`},
		{"POST", "/api/tasks/task-1/watch", "ck_agent", `{}`, 200, `{"watching":true}`},
		{"GET", "/api/checkouts", "ck_agent", "", 200, `{"checkouts":[{"task_id":"task-1"`},
		{"GET", "/api/checkouts?agent_id=agent-1", "ck_agent", "", 200, `"agent_name":"researcher"`},
		{"GET", "/api/inbox", "ck_agent", "", 200, `{"messages":[{"message_id":"m-1","type":"task_available","task_id":"task-1","reason":"released","at":"2026-03-20T14:35:00.123Z","fence":null,"run_id":null,"not_before":null}]}`},
		{"DELETE", "/api/inbox/m-1", "ck_agent", "", 200, `{"message_id":"m-1","deleted":true}`},
		{"POST", "/api/claim", "ck_agent", `{"timeout":"10m","run_id":"r1"}`, 200, `"task_id":"task-old"`},
	}
	for _, c := range cases {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t)
			res := hs.do(c.method, c.path, c.key, c.body).expect(t, c.status, "")
			if !strings.Contains(string(res.body), c.want) {
				t.Fatalf("body %s\nwant it to contain %s", res.body, c.want)
			}
			if res.header.Get(RequestIDHeader) == "" {
				t.Fatal("no request id")
			}
		})
	}
}

// The events without an end carry no held_seconds.
func TestEventHeldSecondsOnlyOnEndingEvents(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	res := hs.do("GET", "/api/tasks/task-1/events", "ck_agent", "").expect(t, 200, "")
	evs := res.json["events"].([]any)
	if _, ok := evs[0].(map[string]any)["held_seconds"]; ok {
		t.Fatalf("checkout event has held_seconds: %s", res.body)
	}
	if evs[1].(map[string]any)["held_seconds"] != float64(310) {
		t.Fatalf("release event: %s", res.body)
	}
}

func TestParamsReachTheService(t *testing.T) {
	t.Parallel()
	t.Run("checkout defaults", func(t *testing.T) {
		hs := newHarness(t)
		hs.do("POST", "/api/tasks/task-1/checkout", "ck_agent", "").expect(t, 200, "")
		got := hs.svc.last.(lease.CheckoutParams)
		want := lease.CheckoutParams{TaskID: "task-1", AgentID: "agent-1", AgentName: "researcher", Timeout: 30 * time.Minute}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	})
	t.Run("checkout auto-create and watch", func(t *testing.T) {
		hs := newHarness(t, func(o *Options) { o.AutoCreateTasks = true })
		hs.do("POST", "/api/tasks/task-1/checkout", "ck_agent", `{"watch":true,"expected_statuses":["done","cancelled"],"run_id":"r"}`).expect(t, 200, "")
		got := hs.svc.last.(lease.CheckoutParams)
		if !got.CreateIfMissing || !got.Watch || got.RunID != "r" || fmt.Sprint(got.ExpectedStatuses) != "[done cancelled]" {
			t.Fatalf("got %+v", got)
		}
	})
	t.Run("admin on behalf", func(t *testing.T) {
		hs := newHarness(t)
		hs.svc.agents = []lease.Agent{{AgentID: "agent-7", Name: "writer"}}
		res := hs.do("POST", "/api/tasks/task-1/checkout", "ck_admin", `{"agent_id":"agent-7"}`).expect(t, 200, "")
		got := hs.svc.last.(lease.CheckoutParams)
		if got.AgentID != "agent-7" || got.AgentName != "writer" || got.By == "" || got.By == "agent-7" || res.json["agent_name"] != "writer" {
			t.Fatalf("got %+v: %s", got, res.body)
		}
		hs.do("POST", "/api/tasks/task-1/checkout", "ck_admin", `{"agent_id":"ghost"}`).expect(t, 404, "agent_not_found")
		// Bad input is refused before any read: a claim for an unknown agent
		// with a bad wait or queue is 400, and looks no agent up.
		before := len(hs.svc.calls)
		hs.do("POST", "/api/claim", "ck_admin", `{"agent_id":"ghost","wait":"1h"}`).expect(t, 400, "invalid_timeout")
		hs.do("POST", "/api/claim", "ck_admin", `{"agent_id":"ghost","queues":["no spaces"]}`).expect(t, 400, "invalid_id")
		if calls := hs.svc.calls[before:]; len(calls) != 0 {
			t.Fatalf("refused claims called the service: %v", calls)
		}
		hs.do("POST", "/api/claim", "ck_admin", `{"agent_id":"agent-7"}`).expect(t, 200, "")
		if c := hs.svc.last.(lease.ClaimParams); c.AgentID != "agent-7" || c.AgentName != "writer" || c.By != got.By || c.Timeout != 30*time.Minute {
			t.Fatalf("claim got %+v", c)
		}
	})
	t.Run("renew without timeout keeps the lease's own", func(t *testing.T) {
		hs := newHarness(t)
		hs.do("POST", "/api/tasks/task-1/renew", "ck_agent", `{}`).expect(t, 200, "")
		if got := hs.svc.last.(lease.RenewParams); got.Timeout != 0 || got.AgentID != "agent-1" {
			t.Fatalf("got %+v", got)
		}
	})
	t.Run("heartbeat default ttl", func(t *testing.T) {
		hs := newHarness(t)
		hs.do("POST", "/api/heartbeat", "ck_agent", ``).expect(t, 200, "")
		if got := hs.svc.last.(time.Duration); got != 90*time.Second {
			t.Fatalf("ttl %v", got)
		}
	})
	t.Run("list defaults", func(t *testing.T) {
		hs := newHarness(t)
		hs.do("GET", "/api/tasks", "ck_agent", ``).expect(t, 200, "")
		if got := hs.svc.last.(lease.ListTasksParams); got.Limit != 100 || got.Status != "" {
			t.Fatalf("got %+v", got)
		}
	})
	t.Run("remove forgets the key", func(t *testing.T) {
		hs := newHarness(t)
		hs.do("DELETE", "/api/agents/agent-3", "ck_admin", ``).expect(t, 200, "")
		if fmt.Sprint(hs.removed) != "[agent-3]" {
			t.Fatalf("removed %v", hs.removed)
		}
		hs.svc.err = lease.ErrAgentNotFound
		hs.do("DELETE", "/api/agents/agent-4", "ck_admin", ``).expect(t, 404, "agent_not_found")
		if fmt.Sprint(hs.removed) != "[agent-3]" {
			t.Fatalf("a failed removal was reported: %v", hs.removed)
		}
	})
}

func TestDomainErrors(t *testing.T) {
	t.Parallel()
	holder := sampleCheckout("task-1", "agent-2")
	cases := []struct {
		name, method, path, body string
		err                      error
		status                   int
		code                     string
		want                     string
	}{
		{"unknown task", "GET", "/api/tasks/task-1", "", fmt.Errorf("get: %w", lease.ErrTaskNotFound), 404, "task_not_found", "task task-1"},
		{"conflict", "POST", "/api/tasks/task-1/checkout", "", &lease.ConflictError{Holder: holder}, 409, "checked_out", `"error":"task task-1 is already checked out","code":"checked_out","holder":{"task_id":"task-1","agent_id":"agent-2"`},
		{"status mismatch", "POST", "/api/tasks/task-1/checkout", "", &lease.StatusMismatchError{TaskID: "task-1", Status: lease.StatusDone}, 409, "status_mismatch", `"status":"done"`},
		{"checkout unknown", "POST", "/api/tasks/task-1/checkout", "", lease.ErrTaskNotFound, 404, "task_not_found", ""},
		{"not holder", "POST", "/api/tasks/task-1/renew", "", &lease.NotHolderError{Holder: holder}, 403, "not_holder", `"holder":{`},
		{"not checked out", "POST", "/api/tasks/task-1/release", "", lease.ErrNotCheckedOut, 404, "not_checked_out", ""},
		{"complete not holder", "POST", "/api/tasks/task-1/complete", "", &lease.NotHolderError{Holder: holder}, 403, "not_holder", ""},
		{"not holder, another agent", "POST", "/api/tasks/task-1/renew", "", &lease.NotHolderError{Holder: holder, Caller: "agent-9"}, 403, "not_holder", `"error":"task task-1 is held by agent-2, not by the caller"`},
		{"not holder, another run", "POST", "/api/tasks/task-1/renew", "", &lease.NotHolderError{Holder: holder, Caller: "agent-2"}, 403, "not_holder", `"error":"task task-1 is held by agent-2 under another run or fence than the request names"`},
		{"force release of another lease", "POST", "/api/tasks/task-1/release", `{"force":true,"fence":9}`, &lease.NotHolderError{Holder: holder, Caller: "admin", Forced: true}, 403, "not_holder", `"error":"task task-1 is held by agent-2 under run ` + holder.RunID + `, fence ` + fmt.Sprint(holder.Fence) + `, which is not the lease the force release names"`},
		{"complete not checked out", "POST", "/api/tasks/task-1/complete", "", lease.ErrNotCheckedOut, 404, "not_checked_out", ""},
		{"no task", "POST", "/api/claim", "", lease.ErrNoTaskAvailable, 404, "no_task_available", ""},
		{"task exists", "POST", "/api/tasks", `{"task_id":"t"}`, lease.ErrTaskExists, 409, "task_exists", ""},
		{"agent exists", "POST", "/api/agents", `{"name":"x","agent_id":"a"}`, lease.ErrAgentExists, 409, "agent_exists", ""},
		{"message", "DELETE", "/api/inbox/m-9", "", lease.ErrMessageNotFound, 404, "not_found", ""},
		{"events", "GET", "/api/tasks/task-1/events", "", lease.ErrTaskNotFound, 404, "task_not_found", ""},
		{"watch", "POST", "/api/tasks/task-1/watch", "", lease.ErrTaskNotFound, 404, "task_not_found", ""},
		{"lock status", "GET", "/api/tasks/task-1/checkout", "", lease.ErrTaskNotFound, 404, "task_not_found", ""},
		{"validation", "GET", "/api/tasks?cursor=zzz", "", &lease.ValidationError{Code: "invalid_request", Message: "cursor is not valid"}, 400, "invalid_request", `"error":"cursor is not valid"`},
		{"validation code kept", "POST", "/api/heartbeat", "", &lease.ValidationError{Code: "invalid_timeout", Message: "ttl out of range"}, 400, "invalid_timeout", ""},
		{"unknown validation code", "POST", "/api/heartbeat", "", &lease.ValidationError{Code: "weird", Message: "bad"}, 400, "invalid_request", ""},
		{"internal", "GET", "/api/tasks/task-1", "", errBoom, 500, "internal", ""},
		{"internal list", "GET", "/api/inbox", "", errBoom, 500, "internal", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t)
			hs.svc.err = c.err
			key := "ck_agent"
			if strings.HasPrefix(c.path, "/api/agents") || strings.Contains(c.body, `"force":true`) {
				key = "ck_admin"
			}
			res := hs.do(c.method, c.path, key, c.body).expect(t, c.status, c.code)
			if c.want != "" && !strings.Contains(string(res.body), c.want) {
				t.Fatalf("body %s\nwant it to contain %s", res.body, c.want)
			}
			if strings.Contains(string(res.body), "dynamodb") || strings.Contains(string(res.body), "lease:") {
				t.Fatalf("internal text leaked: %s", res.body)
			}
			if c.status == 500 && !strings.Contains(hs.logs.String(), "connection reset") {
				t.Fatalf("the internal error was not logged: %s", hs.logs)
			}
		})
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	for _, hdr := range []string{"", "Bearer", "Bearer ", "Basic ck_agent", "Bearer ck_unknown", "Bearer ck agent", "bearer"} {
		req := httptest.NewRequest("GET", "/api/tasks", nil)
		if hdr != "" {
			req.Header.Set("Authorization", hdr)
		}
		hs.send(req).expect(t, 401, "unauthorized")
	}
	// Authentication comes before validation and before the role.
	hs.do("GET", "/api/tasks/bad%20id", "", "").expect(t, 401, "unauthorized")
	hs.do("POST", "/api/agents", "", `{`).expect(t, 401, "unauthorized")
	// A scheme in any case works.
	req := httptest.NewRequest("GET", "/api/inbox", nil)
	req.Header.Set("Authorization", "bearer ck_agent")
	hs.send(req).expect(t, 200, "")
	if len(hs.svc.calls) != 1 {
		t.Fatalf("service called on refused requests: %v", hs.svc.calls)
	}

	// The store failing is a 500, never a pass.
	broken := newHarness(t, func(o *Options) { o.Auth = fakeAuth{err: errBoom} })
	broken.do("GET", "/api/tasks", "ck_agent", "").expect(t, 500, "internal")
	if len(broken.svc.calls) != 0 {
		t.Fatal("the service was called without authentication")
	}
}

func TestPrincipalFromContext(t *testing.T) {
	t.Parallel()
	hs := newHarness(t, func(o *Options) { o.Auth = nil })
	hs.do("GET", "/api/inbox", "ck_agent", "").expect(t, 401, "unauthorized")
	req := httptest.NewRequest("GET", "/api/inbox", nil)
	req = req.WithContext(ContextWithPrincipal(req.Context(), agentP))
	hs.send(req).expect(t, 200, "")
	if hs.svc.last != "agent-1" {
		t.Fatalf("inbox of %v", hs.svc.last)
	}
	req = httptest.NewRequest("GET", "/api/agents", nil)
	req = req.WithContext(ContextWithPrincipal(req.Context(), agentP))
	hs.send(req).expect(t, 403, "forbidden")
	hs.do("GET", "/healthz", "", "").expect(t, 200, "")
}

func TestForbidden(t *testing.T) {
	t.Parallel()
	cases := []struct{ method, path, body string }{
		{"POST", "/api/agents", `{"name":"x"}`},
		{"GET", "/api/agents", ""},
		{"DELETE", "/api/agents/agent-1", ""},
		{"POST", "/api/tasks/task-1/checkout", `{"agent_id":"agent-2"}`},
		{"POST", "/api/claim", `{"agent_id":"agent-2"}`},
		{"POST", "/api/tasks/task-1/renew", `{"agent_id":"agent-2"}`},
		{"POST", "/api/tasks/task-1/release", `{"agent_id":"agent-2"}`},
		{"POST", "/api/tasks/task-1/complete", `{"agent_id":"agent-2"}`},
		{"POST", "/api/tasks/task-1/release", `{"force":true}`},
	}
	for _, c := range cases {
		hs := newHarness(t)
		hs.do(c.method, c.path, "ck_agent", c.body).expect(t, 403, "forbidden")
		if len(hs.svc.calls) != 0 {
			t.Fatalf("%s %s: service called: %v", c.method, c.path, hs.svc.calls)
		}
	}
	// force: false is not an admin field in use.
	newHarness(t).do("POST", "/api/tasks/task-1/release", "ck_agent", `{"force":false}`).expect(t, 200, "")
}

// A path that is no route is not found, with a key or without.
func TestNotFound(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	for _, p := range []string{"/", "/nope", "/api", "/api/tasks/", "/api/tasks/t/x", "/api/tasks/t/checkout/x", "/api//tasks", "/api/tasks/../agents", "/healthz/"} {
		hs.do("GET", p, "ck_agent", "").expect(t, 404, "not_found")
	}
	hs.do("GET", "/nope", "", "").expect(t, 404, "not_found")
}

// A route's path with another method is not allowed, and Allow lists the
// methods it takes: for /api/tasks/batch, those of a batch and of a task
// called "batch".
func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	for request, allow := range map[string]string{ // "METHOD path": the Allow header
		"POST /healthz":                "GET",
		"PUT /api/tasks":               "GET, POST",
		"DELETE /api/tasks/t1":         "GET, PATCH",
		"DELETE /api/tasks/batch":      "GET, PATCH, POST", // a batch, or the task "batch"
		"PUT /api/tasks/batch":         "GET, PATCH, POST",
		"PATCH /api/tasks/t1/checkout": "GET, POST",
		"GET /api/claim":               "POST",
		"POST /api/inbox/m-1":          "DELETE",
		"GET /api/tasks/t1/renew":      "POST",
	} {
		t.Run(request+" is not allowed, and Allow names "+allow, func(t *testing.T) {
			method, path, _ := strings.Cut(request, " ")
			res := hs.do(method, path, "", "").expect(t, 405, "method_not_allowed")
			if got := res.header.Get("Allow"); got != allow {
				t.Errorf("%s %s: Allow %q, want %q", method, path, got, allow)
			}
			if msg, _ := res.json["error"].(string); !strings.HasSuffix(msg, "allowed: "+allow) {
				t.Errorf("%s %s: %q does not end with the methods allowed", method, path, msg)
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	t.Parallel()
	big := `{"reason":"` + strings.Repeat("x", MaxBodyBytes) + `"}`
	cases := []struct {
		name, method, path, key, body string
		status                        int
		code                          string
	}{
		{"too large", "POST", "/api/tasks/task-1/checkout", "ck_agent", big, 413, "payload_too_large"},
		{"too large claim", "POST", "/api/claim", "ck_agent", big, 413, "payload_too_large"},
		{"unknown field", "POST", "/api/tasks/task-1/checkout", "ck_agent", `{"timeout":"1m","ttl":"1m"}`, 400, "invalid_json"},
		{"wrong type", "POST", "/api/tasks/task-1/checkout", "ck_agent", `{"timeout":30}`, 400, "invalid_json"},
		{"wrong type bool", "POST", "/api/tasks/task-1/checkout", "ck_agent", `{"watch":"yes"}`, 400, "invalid_json"},
		{"wrong type statuses", "POST", "/api/tasks/task-1/checkout", "ck_agent", `{"expected_statuses":"todo"}`, 400, "invalid_json"},
		{"trailing data", "POST", "/api/tasks/task-1/checkout", "ck_agent", `{} {}`, 400, "invalid_json"},
		{"trailing garbage", "POST", "/api/tasks/task-1/checkout", "ck_agent", `{}x`, 400, "invalid_json"},
		{"not an object", "POST", "/api/tasks/task-1/checkout", "ck_agent", `[]`, 400, "invalid_json"},
		{"null body", "POST", "/api/tasks/task-1/checkout", "ck_agent", `null`, 400, "invalid_json"},
		{"malformed", "POST", "/api/tasks", "ck_agent", `{"task_id":`, 400, "invalid_json"},
		{"watch body field", "POST", "/api/tasks/task-1/watch", "ck_agent", `{"x":1}`, 400, "invalid_json"},
		{"fence float", "POST", "/api/tasks/task-1/renew", "ck_agent", `{"fence":1.5}`, 400, "invalid_json"},
		{"fence huge", "POST", "/api/tasks/task-1/renew", "ck_agent", `{"fence":99999999999999999999}`, 400, "invalid_json"},
		{"fence negative", "POST", "/api/tasks/task-1/complete", "ck_agent", `{"fence":-1}`, 400, "invalid_request"},
		{"bad task id", "GET", "/api/tasks/-bad", "ck_agent", "", 400, "invalid_id"},
		{"bad task id escaped slash", "GET", "/api/tasks/a%2Fb", "ck_agent", "", 400, "invalid_id"},
		{"bad task id long", "POST", "/api/tasks/" + strings.Repeat("a", 129) + "/checkout", "ck_agent", "", 400, "invalid_id"},
		{"bad body task id", "POST", "/api/tasks", "ck_agent", `{"task_id":"a b"}`, 400, "invalid_id"},
		{"empty body task id", "POST", "/api/tasks", "ck_agent", `{"task_id":""}`, 400, "invalid_id"},
		{"bad run id", "POST", "/api/tasks/task-1/checkout", "ck_agent", `{"run_id":"é"}`, 400, "invalid_id"},
		{"bad agent id admin", "POST", "/api/tasks/task-1/checkout", "ck_admin", `{"agent_id":"_x"}`, 400, "invalid_id"},
		{"bad agent id register", "POST", "/api/agents", "ck_admin", `{"name":"x","agent_id":"a/b"}`, 400, "invalid_id"},
		{"bad agent id delete", "DELETE", "/api/agents/.x", "ck_admin", "", 400, "invalid_id"},
		{"bad agent id query", "GET", "/api/checkouts?agent_id=%20", "ck_agent", "", 400, "invalid_id"},
		{"name missing", "POST", "/api/agents", "ck_admin", `{}`, 400, "invalid_request"},
		{"name blank", "POST", "/api/agents", "ck_admin", `{"name":"  "}`, 400, "invalid_request"},
		{"name too long", "POST", "/api/agents", "ck_admin", `{"name":"` + strings.Repeat("n", 257) + `"}`, 400, "invalid_request"},
		{"title too long", "POST", "/api/tasks", "ck_agent", `{"title":"` + strings.Repeat("t", 1025) + `"}`, 400, "invalid_request"},
		{"timeout unparsable", "POST", "/api/tasks/task-1/checkout", "ck_agent", `{"timeout":"soon"}`, 400, "invalid_timeout"},
		{"timeout empty", "POST", "/api/tasks/task-1/checkout", "ck_agent", `{"timeout":""}`, 400, "invalid_timeout"},
		{"timeout too short", "POST", "/api/tasks/task-1/checkout", "ck_agent", `{"timeout":"999ms"}`, 400, "invalid_timeout"},
		{"timeout too long", "POST", "/api/tasks/task-1/checkout", "ck_agent", `{"timeout":"24h0m1s"}`, 400, "invalid_timeout"},
		{"timeout not whole seconds", "POST", "/api/tasks/task-1/checkout", "ck_agent", `{"timeout":"1500ms"}`, 400, "invalid_timeout"},
		{"renew timeout not whole seconds", "POST", "/api/tasks/task-1/renew", "ck_agent", `{"timeout":"90.5s"}`, 400, "invalid_timeout"},
		{"claim timeout not whole seconds", "POST", "/api/claim", "ck_agent", `{"timeout":"1m0.001s"}`, 400, "invalid_timeout"},
		{"timeout negative", "POST", "/api/tasks/task-1/renew", "ck_agent", `{"timeout":"-1m"}`, 400, "invalid_timeout"},
		{"claim timeout", "POST", "/api/claim", "ck_agent", `{"timeout":"0s"}`, 400, "invalid_timeout"},
		{"ttl too long", "POST", "/api/heartbeat", "ck_agent", `{"ttl":"61m"}`, 400, "invalid_timeout"},
		{"ttl too short", "POST", "/api/heartbeat", "ck_agent", `{"ttl":"500ms"}`, 400, "invalid_timeout"},
		{"statuses empty", "POST", "/api/tasks/task-1/checkout", "ck_agent", `{"expected_statuses":[]}`, 400, "invalid_request"},
		{"statuses bad", "POST", "/api/tasks/task-1/checkout", "ck_agent", `{"expected_statuses":["open"]}`, 400, "invalid_request"},
		{"reason too long", "POST", "/api/tasks/task-1/release", "ck_agent", `{"reason":"` + strings.Repeat("r", 1025) + `"}`, 400, "invalid_request"},
		{"bad status", "GET", "/api/tasks?status=open", "ck_agent", "", 400, "invalid_request"},
		{"limit zero", "GET", "/api/tasks?limit=0", "ck_agent", "", 400, "invalid_request"},
		{"limit big", "GET", "/api/tasks?limit=1001", "ck_agent", "", 400, "invalid_request"},
		{"limit text", "GET", "/api/tasks?limit=ten", "ck_agent", "", 400, "invalid_request"},
		{"message id long", "DELETE", "/api/inbox/" + strings.Repeat("m", 513), "ck_agent", "", 404, "not_found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t)
			hs.do(c.method, c.path, c.key, c.body).expect(t, c.status, c.code)
			for _, call := range hs.svc.calls {
				if call != "GetAgent" {
					t.Fatalf("service changed on bad input: %v", hs.svc.calls)
				}
			}
		})
	}
}

func TestNullFieldsAreAbsent(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	hs.do("POST", "/api/tasks/task-1/checkout", "ck_agent", `{"timeout":null,"run_id":null,"expected_statuses":null,"agent_id":null,"watch":null,"reason":null}`).expect(t, 200, "")
	if got := hs.svc.last.(lease.CheckoutParams); got.Timeout != lease.DefaultTimeout || got.ExpectedStatuses != nil {
		t.Fatalf("got %+v", got)
	}
}

func TestRequestIDAndLogs(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	req := httptest.NewRequest("GET", "/api/tasks/task-1", nil)
	req.Header.Set("Authorization", "Bearer ck_agent")
	req.Header.Set(RequestIDHeader, "req-123")
	res := hs.send(req).expect(t, 200, "")
	if got := res.header.Get(RequestIDHeader); got != "req-123" {
		t.Fatalf("request id %q", got)
	}
	log := hs.logs.String()
	for _, want := range []string{`"request_id":"req-123"`, `"method":"GET"`, `"route":"GET /api/tasks/{task_id}"`, `"status":200`, `"latency_ms":`, `"agent_id":"agent-1"`} {
		if !strings.Contains(log, want) {
			t.Errorf("log %s lacks %s", log, want)
		}
	}
	req = httptest.NewRequest("GET", "/healthz", nil)
	req.Header.Set(RequestIDHeader, "bad id\n")
	res = hs.send(req)
	if got := res.header.Get(RequestIDHeader); got == "" || strings.ContainsAny(got, " \n") {
		t.Fatalf("request id %q", got)
	}
}

type panicService struct{ *fakeService }

func (panicService) GetTask(ctx context_, id string) (lease.Task, error) { panic("boom") }

func TestPanicIsInternal(t *testing.T) {
	t.Parallel()
	var logs strings.Builder
	h := New(panicService{&fakeService{}}, Options{Auth: fakeAuth{}, Logger: newTestLogger(&logs)})
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/api/tasks/t1", nil)
	req.Header.Set("Authorization", "Bearer ck_agent")
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusInternalServerError || !strings.Contains(rec.Body.String(), `"code":"internal"`) || strings.Contains(rec.Body.String(), "boom") {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	if !strings.Contains(logs.String(), "panic: boom") {
		t.Fatalf("panic not logged: %s", logs.String())
	}
}

// The built-in admin (Options.AdminID, default "admin") cannot be removed:
// 409 cannot_remove_admin, without a call to the store or to OnAgentRemoved.
func TestBuiltinAdminCannotBeRemoved(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	hs.do("DELETE", "/api/agents/admin", "ck_admin", "").expect(t, 409, "cannot_remove_admin")
	if len(hs.svc.calls) != 0 || len(hs.removed) != 0 {
		t.Fatalf("store called %v, removed %v", hs.svc.calls, hs.removed)
	}
	// A deployment whose admin has another id protects that one.
	hs = newHarness(t, func(o *Options) { o.AdminID = "root" })
	hs.do("DELETE", "/api/agents/root", "ck_admin", "").expect(t, 409, "cannot_remove_admin")
	hs.do("DELETE", "/api/agents/admin", "ck_admin", "").expect(t, 200, "")
	// Refused only to admins: a non-admin is 403 first.
	newHarness(t).do("DELETE", "/api/agents/admin", "ck_agent", "").expect(t, 403, "forbidden")
}

// agent_id is admin-only (API.md): from a non-admin it is 403 forbidden on
// every lease route, naming another agent or the caller itself, and the
// store is not called; the refusal says which. An admin may name itself
// (its own act) or another agent.
func TestAgentIDIsAdminOnly(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/api/tasks/task-1/checkout", "/api/claim", "/api/tasks/task-1/renew", "/api/tasks/task-1/release", "/api/tasks/task-1/complete"} {
		hs := newHarness(t)
		res := hs.do("POST", path, "ck_agent", `{"agent_id":"agent-1"}`).expect(t, 403, "forbidden")
		if msg := res.json["error"].(string); !strings.Contains(msg, "leave it out") || !strings.Contains(msg, "agent-1") {
			t.Errorf("%s: the refusal of the caller naming itself should say to leave agent_id out: %q", path, msg)
		}
		res = hs.do("POST", path, "ck_agent", `{"agent_id":"agent-2"}`).expect(t, 403, "forbidden")
		if msg := res.json["error"].(string); !strings.Contains(msg, "agent-2") || !strings.Contains(msg, "agent-1") {
			t.Errorf("%s: the refusal should name both agents: %q", path, msg)
		}
		if len(hs.svc.calls) != 0 {
			t.Errorf("%s: a refused agent_id called the store: %v", path, hs.svc.calls)
		}
		hs.do("POST", path, "ck_admin", `{"agent_id":"admin"}`).expect(t, 200, "")
	}
	hs := newHarness(t)
	hs.svc.agents = []lease.Agent{{AgentID: "agent-7", Name: "writer"}}
	hs.do("POST", "/api/tasks/task-1/renew", "ck_admin", `{"agent_id":"agent-7","fence":3}`).expect(t, 200, "")
	if got := hs.svc.last.(lease.RenewParams); got.AgentID != "agent-7" || got.Fence != 3 {
		t.Fatalf("renew for agent-7: %+v", got)
	}
	hs.do("POST", "/api/tasks/task-1/release", "ck_admin", `{"agent_id":"agent-7"}`).expect(t, 200, "")
	if got := hs.svc.last.(lease.ReleaseParams); got.AgentID != "agent-7" {
		t.Fatalf("release for agent-7: %+v", got)
	}
	hs.do("POST", "/api/tasks/task-1/complete", "ck_admin", `{"agent_id":"agent-7"}`).expect(t, 200, "")
	if got := hs.svc.last.(lease.CompleteParams); got.AgentID != "agent-7" {
		t.Fatalf("complete for agent-7: %+v", got)
	}
	hs.do("POST", "/api/tasks/task-1/renew", "ck_admin", `{"agent_id":"ghost"}`).expect(t, 404, "agent_not_found")
	hs.do("POST", "/api/tasks/task-1/release", "ck_admin", `{"agent_id":"-bad"}`).expect(t, 400, "invalid_id")
}

// A conflict says whether the live lease is the same agent's under another
// run, so that a holder checking out again (a restarted process, a second
// CLI call) can tell "I already hold it" from "someone else does".
func TestConflictSaysWhetherTheHolderIsTheSameAgent(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	hs.svc.err = &lease.ConflictError{Holder: sampleCheckout("task-1", "agent-1")}
	res := hs.do("POST", "/api/tasks/task-1/checkout", "ck_agent", "").expect(t, 409, "checked_out")
	if res.json["same_agent"] != true {
		t.Fatalf("own lease under another run: %s", res.body)
	}
	hs.svc.err = &lease.ConflictError{Holder: sampleCheckout("task-1", "agent-2")}
	res = hs.do("POST", "/api/tasks/task-1/checkout", "ck_agent", "").expect(t, 409, "checked_out")
	if res.json["same_agent"] != false {
		t.Fatalf("another agent's lease: %s", res.body)
	}
	hs.svc.agents = []lease.Agent{{AgentID: "agent-2", Name: "writer"}}
	hs.svc.err = nil
	hs.svc.checkout = func(p lease.CheckoutParams) (lease.Checkout, error) {
		return lease.Checkout{}, &lease.ConflictError{Holder: sampleCheckout("task-1", "agent-2")}
	}
	res = hs.do("POST", "/api/tasks/task-1/checkout", "ck_admin", `{"agent_id":"agent-2"}`).expect(t, 409, "checked_out")
	if res.json["same_agent"] != true {
		t.Fatalf("admin for agent-2, held by agent-2: %s", res.body)
	}
}

// The new task fields reach the service as given; a null metadata is an
// absent one, as every null field is.
func TestTaskFieldsReachTheService(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	patch := func(body, ifMatch string) result {
		req := httptest.NewRequest("PATCH", "/api/tasks/t1", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer ck_agent")
		req.Header.Set("If-Match", ifMatch)
		return hs.send(req)
	}
	hs.do("POST", "/api/tasks", "ck_agent", `{"task_id":"t1","queue":"q","priority":0,"description":"d","metadata":null}`).expect(t, 201, "")
	p := hs.svc.last.(lease.CreateTaskParams)
	if p.Queue != "q" || p.Priority == nil || *p.Priority != 0 || p.Description != "d" || p.Metadata != nil {
		t.Fatalf("create params %+v", p)
	}
	patch(`{"status":"cancelled","priority":3}`, `"7"`).expect(t, 200, "")
	u := hs.svc.last.(lease.UpdateTaskParams)
	if u.IfVersion != 7 || u.Status == nil || *u.Status != lease.StatusCancelled || *u.Priority != 3 || u.AgentID == "" {
		t.Fatalf("update params %+v", u)
	}
	patch(`{}`, "x").expect(t, 400, "invalid_request")
	hs.do("POST", "/api/claim", "ck_agent", `{"queues":[]}`).expect(t, 400, "invalid_request")
	hs.do("POST", "/api/claim", "ck_agent", `{"wait":"21s"}`).expect(t, 400, "invalid_timeout")
	hs.do("POST", "/api/claim", "ck_agent", `{"queues":["a","b"],"wait":"2s"}`).expect(t, 200, "")
	c := hs.svc.last.(lease.ClaimParams)
	if len(c.Queues) != 2 || c.Wait != 2*time.Second {
		t.Fatalf("claim params %+v", c)
	}
}

// A query parameter given empty is taken as absent on every route that
// takes one (the document's conventions say so), so that a script may pass
// an empty cursor for the first page: the service is asked exactly what it
// is asked without the parameter.
func TestEmptyQueryValuesAreAbsent(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ path, key, params string }{
		{"/api/agents", "ck_admin", "limit=&cursor="},
		{"/api/tasks", "ck_agent", "status=&queue=&limit=&cursor="},
		{"/api/checkouts", "ck_agent", "agent_id=&limit=&cursor="},
		{"/api/events", "ck_agent", "since=&cursor=&limit=&type="},
		{"/api/tasks/task-1/events", "ck_agent", "limit=&cursor="},
	} {
		t.Run(c.path, func(t *testing.T) {
			bare := newHarness(t)
			bare.do("GET", c.path, c.key, "").expect(t, 200, "")
			empty := newHarness(t)
			empty.do("GET", c.path+"?"+c.params, c.key, "").expect(t, 200, "")
			if fmt.Sprintf("%v %+v", bare.svc.calls, bare.svc.last) != fmt.Sprintf("%v %+v", empty.svc.calls, empty.svc.last) {
				t.Fatalf("with %s the service was asked %v %+v; without, %v %+v", c.params, empty.svc.calls, empty.svc.last, bare.svc.calls, bare.svc.last)
			}
			if len(empty.svc.calls) == 0 {
				t.Fatal("the service was not asked")
			}
		})
	}
	// The queues listing and a whole number with leading zeros.
	hs := newHarness(t)
	hs.do("GET", "/api/queues?limit=&cursor=", "ck_agent", "").expect(t, 200, "")
	hs.do("GET", "/api/tasks?limit=05", "ck_agent", "").expect(t, 200, "")
	if got := hs.svc.last.(lease.ListTasksParams); got.Limit != 5 {
		t.Fatalf("limit=05 reached the service as %d", got.Limit)
	}
}

// A force release acts as no holder: it is the admin's own act, recorded
// as the caller's, even when the body names an agent. Otherwise an admin
// could put a force release in the trail under any agent's name, a
// non-admin's included.
func TestForceReleaseIsTheCallersAct(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	hs.svc.agents = []lease.Agent{{AgentID: "agent-7", Name: "writer"}}
	hs.do("POST", "/api/tasks/task-1/release", "ck_admin", `{"force":true,"agent_id":"agent-7","reason":"stuck"}`).expect(t, 200, "")
	if got := hs.svc.last.(lease.ReleaseParams); !got.Force || got.AgentID != "admin" {
		t.Fatalf("force release naming agent-7: %+v, want it made as admin", got)
	}
}

// A removal that fails part way may already have deleted the agent's key
// (the store deletes it before the agent item and before ending its
// leases), and a retry then finds no agent (404): the key's cached answer
// must be dropped at the failure too, or the removed key keeps working for
// the cache's lifetime on the local server.
func TestFailedRemovalForgetsTheKey(t *testing.T) {
	t.Parallel()
	for _, err := range []error{errBoom, context.Canceled} {
		hs := newHarness(t)
		hs.svc.err = err
		req := httptest.NewRequest("DELETE", "/api/agents/agent-3", nil)
		req.Header.Set("Authorization", "Bearer ck_admin")
		hs.h.ServeHTTP(httptest.NewRecorder(), req)
		if fmt.Sprint(hs.removed) != "[agent-3]" {
			t.Errorf("removal failing with %v: forgotten %v, want [agent-3]", err, hs.removed)
		}
	}
}

// A renewal, release or completion an admin makes for another agent
// (agent_id naming it) acts on that agent's lease, and is the admin's act:
// the service hears who asked (By), so the trail names the admin, not the
// holder, and the holder is told its lease ended. An admin's agent_id
// naming itself is its own act.
func TestHolderRequestsForAnotherAgentAreTheCallersAct(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	hs.svc.agents = []lease.Agent{{AgentID: "agent-7", Name: "writer"}}
	hs.do("POST", "/api/tasks/task-1/renew", "ck_admin", `{"agent_id":"agent-7"}`).expect(t, 200, "")
	if got := hs.svc.last.(lease.RenewParams); got.AgentID != "agent-7" || got.By != "admin" {
		t.Fatalf("renew for agent-7: %+v, want it for agent-7 by admin", got)
	}
	hs.do("POST", "/api/tasks/task-1/release", "ck_admin", `{"agent_id":"agent-7","outcome":"failed"}`).expect(t, 200, "")
	if got := hs.svc.last.(lease.ReleaseParams); got.AgentID != "agent-7" || got.By != "admin" || got.Force {
		t.Fatalf("release for agent-7: %+v, want it for agent-7 by admin", got)
	}
	hs.do("POST", "/api/tasks/task-1/complete", "ck_admin", `{"agent_id":"agent-7"}`).expect(t, 200, "")
	if got := hs.svc.last.(lease.CompleteParams); got.AgentID != "agent-7" || got.By != "admin" {
		t.Fatalf("complete for agent-7: %+v, want it for agent-7 by admin", got)
	}
	hs.do("POST", "/api/tasks/task-1/complete", "ck_admin", `{"agent_id":"admin"}`).expect(t, 200, "")
	if got := hs.svc.last.(lease.CompleteParams); got.AgentID != "admin" || got.By != "" {
		t.Fatalf("complete naming the caller itself: %+v, want its own", got)
	}
}
