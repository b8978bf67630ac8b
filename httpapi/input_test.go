package httpapi

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/httpapi/openapitest"
	"github.com/checkout-dev/checkout/lease"
)

// badRequest is a request the handler must refuse without calling the
// store: its status and code, and a substring of the sentence.
type badRequest struct {
	method, path, key, body string
	status                  int
	code, says              string
}

func (c badRequest) run(t *testing.T) {
	t.Helper()
	hs := newHarness(t)
	res := hs.do(c.method, c.path, c.key, c.body).expect(t, c.status, c.code)
	if msg, _ := res.json["error"].(string); !strings.Contains(msg, c.says) {
		t.Errorf("error %q does not say %q", msg, c.says)
	}
	if len(hs.svc.calls) != 0 {
		t.Errorf("store called on bad input: %v", hs.svc.calls)
	}
}

// A query string that does not parse, or that gives a parameter twice, is
// 400 invalid_request naming the parameter, on every route that reads
// one: url.Values would drop the pair that does not decode, and Get would
// keep the first of two.
func TestMalformedQueryIs400(t *testing.T) {
	t.Parallel()
	cases := []badRequest{
		{"GET", "/api/tasks?status=%ZZ", "ck_agent", "", 400, "invalid_request", "status"},
		{"GET", "/api/tasks?limit=%ZZ", "ck_agent", "", 400, "invalid_request", "limit"},
		{"GET", "/api/tasks?queue=q&cursor=%", "ck_agent", "", 400, "invalid_request", "cursor"},
		{"GET", "/api/tasks?%ZZ=todo", "ck_agent", "", 400, "invalid_request", "query"},
		{"GET", "/api/tasks?status=todo;limit=5", "ck_agent", "", 400, "invalid_request", "query"},
		{"GET", "/api/tasks?status=todo&status=done", "ck_agent", "", 400, "invalid_request", "status"},
		{"GET", "/api/tasks?limit=1&limit=1000", "ck_agent", "", 400, "invalid_request", "limit"},
		{"GET", "/api/tasks?queue=a&queue=a", "ck_agent", "", 400, "invalid_request", "queue"},
		{"GET", "/api/tasks?st%61tus=todo&status=done", "ck_agent", "", 400, "invalid_request", "status"},
		{"GET", "/api/events?since=%ZZ", "ck_agent", "", 400, "invalid_request", "since"},
		{"GET", "/api/events?type=%ZZ", "ck_agent", "", 400, "invalid_request", "type"},
		{"GET", "/api/events?type=checkout&type=release", "ck_agent", "", 400, "invalid_request", "type"},
		{"GET", "/api/events?limit=5&limit=6", "ck_agent", "", 400, "invalid_request", "limit"},
		{"GET", "/api/checkouts?agent_id=%ZZ", "ck_agent", "", 400, "invalid_request", "agent_id"},
		{"GET", "/api/checkouts?agent_id=a&agent_id=b", "ck_agent", "", 400, "invalid_request", "agent_id"},
	}
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
	// Authentication still comes first.
	newHarness(t).do("GET", "/api/tasks?status=%ZZ", "", "").expect(t, 401, "unauthorized")
	// Good queries, escapes included, still work.
	hs := newHarness(t)
	hs.do("GET", "/api/tasks?st%61tus=todo&queue=q%2D1&limit=5&cursor=", "ck_agent", "").expect(t, 200, "")
	if p := hs.svc.last.(lease.ListTasksParams); p.Status != lease.StatusTodo || p.Queue != "q-1" || p.Limit != 5 {
		t.Fatalf("list params %+v", p)
	}
	hs.do("GET", "/api/events?type=checkout,release&limit=5", "ck_agent", "").expect(t, 200, "")
	hs.do("GET", "/api/checkouts?agent_id=agent-1", "ck_agent", "").expect(t, 200, "")
}

// Every operation of the document that takes query parameters refuses a
// query that does not parse, or that repeats one, so that a new route
// cannot miss checkQuery.
func TestQueryRoutesCoverTheDocument(t *testing.T) {
	t.Parallel()
	for _, r := range queryRoutes(t) {
		for _, name := range r.names {
			for _, query := range []string{name + "=%ZZ", name + "=a&" + name + "=b"} {
				badRequest{r.method, r.path + "?" + query, "ck_admin", "", 400, "invalid_request", name}.run(t)
			}
		}
	}
}

// queryRoute is an operation of the document that takes query parameters:
// its method, its path with ids filled in, and the parameters' names.
type queryRoute struct {
	method, path string
	names        []string
}

// queryRoutes lists the document's operations that take query parameters.
func queryRoutes(t *testing.T) []queryRoute {
	t.Helper()
	doc, err := openapitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	fill := strings.NewReplacer("{task_id}", "task-1", "{agent_id}", "agent-1", "{message_id}", "m-1")
	var out []queryRoute
	for p, item := range doc.Paths.Map() {
		for m, op := range item.Operations() {
			r := queryRoute{method: m, path: fill.Replace(p)}
			for _, param := range op.Parameters {
				if param.Value.In == "query" {
					r.names = append(r.names, param.Value.Name)
				}
			}
			if len(r.names) > 0 {
				out = append(out, r)
			}
		}
	}
	return out
}

// A query parameter a route does not take is 400 invalid_request naming
// it, on every route that takes any: a mistyped filter (?stauts=todo) used
// to list everything. Every parameter the document names is taken.
func TestUnknownQueryParameterIs400(t *testing.T) {
	t.Parallel()
	routes := queryRoutes(t)
	for _, r := range routes {
		badRequest{r.method, r.path + "?stauts=todo", "ck_admin", "", 400, "invalid_request", `unknown query parameter "stauts"`}.run(t)
		for _, name := range r.names {
			res := newHarness(t).do(r.method, r.path+"?"+name+"=", "ck_admin", "")
			if msg, _ := res.json["error"].(string); strings.Contains(msg, "unknown query parameter") {
				t.Errorf("%s %s?%s= refused as unknown: %s", r.method, r.path, name, msg)
			}
		}
	}
	if len(routes) < 4 {
		t.Fatalf("%d routes with query parameters in the document, want at least 4", len(routes))
	}
}

// If-Match is a task version, N or "N" (a decimal without sign or leading
// zeros; versions start at 1), given once. A weak tag never matches under
// If-Match (RFC 9110 strong comparison): 412 version_mismatch; "*" is
// any version. Anything else is 400 invalid_request. The store is not called either way.
func TestIfMatchIsExact(t *testing.T) {
	t.Parallel()
	patch := func(hs *harness, ifMatch ...string) result {
		req := httptest.NewRequest("PATCH", "/api/tasks/t1", strings.NewReader(`{"priority":3}`))
		req.Header.Set("Authorization", "Bearer ck_agent")
		for _, v := range ifMatch {
			req.Header.Add("If-Match", v)
		}
		return hs.send(req)
	}
	for _, v := range []string{`"1`, `1"`, `""1""`, `+1`, `-1`, `01`, `"01"`, `0`, `"0"`, `1.0`, `1,2`, `"1", "2"`, `**`, `W/1`, `w/"1"`, `W/""`, `W/"01"`, `x`, `"9223372036854775808"`, `" 1"`} {
		t.Run("malformed "+v, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t)
			res := patch(hs, v).expect(t, 400, "invalid_request")
			if msg, _ := res.json["error"].(string); !strings.Contains(msg, "If-Match") {
				t.Errorf("error %q does not name If-Match", msg)
			}
			if len(hs.svc.calls) != 0 {
				t.Errorf("store called: %v", hs.svc.calls)
			}
		})
	}
	for _, v := range []string{`W/"1"`, `W/"7"`} {
		t.Run("weak "+v, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t)
			res := patch(hs, v).expect(t, 412, "version_mismatch")
			if msg, _ := res.json["error"].(string); !strings.Contains(msg, "weak") {
				t.Errorf("error %q does not say the tag is weak", msg)
			}
			if len(hs.svc.calls) != 0 {
				t.Errorf("store called: %v", hs.svc.calls)
			}
		})
	}
	t.Run("twice", func(t *testing.T) {
		t.Parallel()
		hs := newHarness(t)
		patch(hs, "1", "1").expect(t, 400, "invalid_request")
		if len(hs.svc.calls) != 0 {
			t.Errorf("store called: %v", hs.svc.calls)
		}
	})
	// "*" matches any version of a task that exists (RFC 9110): no
	// condition, and an unknown task is 404 as without it.
	for v, want := range map[string]int64{`1`: 1, `"1"`: 1, `"7"`: 7, `10`: 10, `9223372036854775807`: 1<<63 - 1, `*`: 0} {
		t.Run("good "+v, func(t *testing.T) {
			t.Parallel()
			hs := newHarness(t)
			patch(hs, v).expect(t, 200, "")
			if got := hs.svc.last.(lease.UpdateTaskParams).IfVersion; got != want {
				t.Fatalf("IfVersion %d, want %d", got, want)
			}
		})
	}
}

// Two Authorization headers are ambiguous: 401, whichever comes first.
func TestTwoAuthorizationHeadersAre401(t *testing.T) {
	t.Parallel()
	for _, pair := range [][2]string{
		{"Bearer ck_agent", "Bearer ck_agent"},
		{"Bearer ck_agent", "Bearer ck_admin"},
		{"Bearer ck_agent", "Bearer ck_unknown"},
		{"Bearer ck_unknown", "Bearer ck_agent"},
		{"Bearer ck_admin", ""},
	} {
		hs := newHarness(t)
		req := httptest.NewRequest("GET", "/api/inbox", nil)
		req.Header.Add("Authorization", pair[0])
		req.Header.Add("Authorization", pair[1])
		hs.send(req).expect(t, 401, "unauthorized")
		if len(hs.svc.calls) != 0 {
			t.Errorf("%q: store called: %v", pair, hs.svc.calls)
		}
	}
}

// fence 0 is no grant's fence: 400, as a negative one is. An absent or
// null fence is "no fence".
func TestFenceZeroIs400(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"/api/tasks/task-1/renew", "/api/tasks/task-1/release", "/api/tasks/task-1/complete"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			for _, body := range []string{`{"fence":0}`, `{"fence":-1}`, `{"run_id":"r1","fence":0}`} {
				badRequest{"POST", path, "ck_agent", body, 400, "invalid_request", "fence must be a positive integer"}.run(t)
			}
			for body, want := range map[string]int64{``: 0, `{}`: 0, `{"fence":null}`: 0, `{"fence":1}`: 1, `{"fence":3}`: 3} {
				hs := newHarness(t)
				hs.do("POST", path, "ck_agent", body).expect(t, 200, "")
				var got int64
				switch p := hs.svc.last.(type) {
				case lease.RenewParams:
					got = p.Fence
				case lease.ReleaseParams:
					got = p.Fence
				case lease.CompleteParams:
					got = p.Fence
				}
				if got != want {
					t.Errorf("%s: fence %d, want %d", body, got, want)
				}
			}
		})
	}
}

// not_before is RFC 3339 (section 5.6): T and Z in either case, a
// fraction after a dot only, an offset under 24 hours.
func TestNotBeforeIsRFC3339(t *testing.T) {
	t.Parallel()
	nine := time.Date(2026, 3, 21, 9, 0, 0, 0, time.UTC)
	good := map[string]time.Time{
		`2026-03-21t09:00:00z`:         nine,
		`2026-03-21T09:00:00z`:         nine,
		`2026-03-21t09:00:00Z`:         nine,
		`2026-03-21t10:00:00+01:00`:    nine,
		`2026-03-21T09:00:00.5Z`:       nine.Add(500 * time.Millisecond),
		`2026-03-22T08:59:00+23:59`:    nine,
		`2026-03-20T09:01:00-23:59`:    nine,
		`2026-03-21T09:00:00-00:00`:    nine,
		`2026-03-21T09:00:00.000z`:     nine,
		`2026-03-21t09:00:00.25+00:00`: nine.Add(250 * time.Millisecond),
	}
	for v, want := range good {
		hs := newHarness(t)
		hs.do("POST", "/api/tasks", "ck_agent", `{"not_before":"`+v+`"}`).expect(t, 201, "")
		if p := hs.svc.last.(lease.CreateTaskParams); p.NotBefore == nil || !p.NotBefore.Equal(want) {
			t.Errorf("%s: not_before %v, want %v", v, p.NotBefore, want)
		}
		hs.do("PATCH", "/api/tasks/t1", "ck_agent", `{"not_before":"`+v+`"}`).expect(t, 200, "")
		if p := hs.svc.last.(lease.UpdateTaskParams); p.NotBefore == nil || !p.NotBefore.Equal(want) {
			t.Errorf("PATCH %s: not_before %v, want %v", v, p.NotBefore, want)
		}
	}
	for _, v := range []string{`2026-03-21T09:00:00+24:00`, `2026-03-21T09:00:00-24:00`, `2026-03-21T09:00:00+99:00`, `2026-03-21T09:00:00+05:60`,
		`2026-03-21T09:00:00,5Z`, `2026-03-21T09:00:00,000Z`, `2026-03-21 09:00:00Z`, `2026-03-21x09:00:00Z`, `2026-03-21T09:00:00`} {
		badRequest{"POST", "/api/tasks", "ck_agent", `{"not_before":"` + v + `"}`, 400, "invalid_request", "not_before must be an RFC 3339 time"}.run(t)
		badRequest{"PATCH", "/api/tasks/t1", "ck_agent", `{"not_before":"` + v + `"}`, 400, "invalid_request", "not_before"}.run(t)
		badRequest{"POST", "/api/tasks/batch", "ck_agent", `{"tasks":[{"not_before":"` + v + `"}]}`, 400, "invalid_request", "tasks[0]: not_before"}.run(t)
	}
}

// A batch's tasks are objects: a null one is refused, named by its index,
// as every other error of a batch's task is.
func TestBatchTaskErrorsNameTheTask(t *testing.T) {
	t.Parallel()
	cases := []badRequest{
		{"POST", "/api/tasks/batch", "ck_agent", `{"tasks":[null]}`, 400, "invalid_json", "tasks[0]"},
		{"POST", "/api/tasks/batch", "ck_agent", `{"tasks":[{"task_id":"a"},null]}`, 400, "invalid_json", "tasks[1]"},
		{"POST", "/api/tasks/batch", "ck_agent", `{"tasks":[{"task_id":"a"},{"x":1}]}`, 400, "invalid_json", `tasks[1]: unknown field "x"`},
		{"POST", "/api/tasks/batch", "ck_agent", `{"tasks":[{"Task_ID":"a"}]}`, 400, "invalid_json", `tasks[0]: unknown field "Task_ID"`},
	}
	for _, c := range cases {
		t.Run(c.body, func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
}

// A key given twice in one object of a body is 400 invalid_request naming
// it (decoders differ on which one wins), at any depth; metadata is left to
// the store's rule for it.
func TestDuplicateKeysAre400(t *testing.T) {
	t.Parallel()
	cases := []badRequest{
		{"POST", "/api/tasks", "ck_agent", `{"task_id":"a","task_id":"b"}`, 400, "invalid_request", `"task_id"`},
		{"POST", "/api/tasks", "ck_agent", `{"task_id":"a","title":"x","task_\u0069d":"a"}`, 400, "invalid_request", `"task_id"`},
		{"POST", "/api/tasks", "ck_agent", `{"not_before":null,"not_before":"2026-03-21T09:00:00Z"}`, 400, "invalid_request", `"not_before"`},
		{"POST", "/api/tasks/batch", "ck_agent", `{"tasks":[],"tasks":[{}]}`, 400, "invalid_request", `"tasks"`},
		{"POST", "/api/tasks/batch", "ck_agent", `{"tasks":[{"task_id":"a"},{"priority":1,"priority":2}]}`, 400, "invalid_request", `tasks[1]: the key "priority"`},
		{"PATCH", "/api/tasks/t1", "ck_agent", `{"status":"cancelled","status":"todo"}`, 400, "invalid_request", `"status"`},
		{"POST", "/api/tasks/task-1/checkout", "ck_agent", `{"timeout":"1m","timeout":"2m"}`, 400, "invalid_request", `"timeout"`},
		{"POST", "/api/tasks/task-1/release", "ck_agent", `{"fence":1,"fence":2}`, 400, "invalid_request", `"fence"`},
		{"POST", "/api/claim", "ck_agent", `{"queues":["a"],"queues":["b"]}`, 400, "invalid_request", `"queues"`},
		{"POST", "/api/heartbeat", "ck_agent", `{"ttl":"1m","ttl":"2m"}`, 400, "invalid_request", `"ttl"`},
		{"POST", "/api/agents", "ck_admin", `{"name":"a","name":"b"}`, 400, "invalid_request", `"name"`},
	}
	for _, c := range cases {
		t.Run(c.body, func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
	// Keys inside metadata are the store's to judge, not decode's.
	var body taskBody
	if err := decode(httptest.NewRequest("POST", "/", strings.NewReader(`{"metadata":{"a":1,"a":2,"b":{"c":1,"c":2}}}`)), &body); err != nil {
		t.Fatalf("decode refused metadata's keys: %v", err)
	}
}

// The audit trail records the service's own acts as by "system", and the
// built-in admin is "admin": no agent may be registered as system, or as
// the admin in another case.
func TestReservedAgentIDs(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"system", "SYSTEM", "System"} {
		badRequest{"POST", "/api/agents", "ck_admin", `{"name":"x","agent_id":"` + id + `"}`, 400, "invalid_id", "reserved"}.run(t)
	}
	for _, id := range []string{"admin", "ADMIN", "Admin"} {
		badRequest{"POST", "/api/agents", "ck_admin", `{"name":"x","agent_id":"` + id + `"}`, 409, "agent_exists", "admin"}.run(t)
	}
	// A deployment whose admin has another id reserves that one.
	hs := newHarness(t, func(o *Options) { o.AdminID = "root" })
	hs.do("POST", "/api/agents", "ck_admin", `{"name":"x","agent_id":"Root"}`).expect(t, 409, "agent_exists")
	hs.do("POST", "/api/agents", "ck_admin", `{"name":"x","agent_id":"systems"}`).expect(t, 201, "")
}
