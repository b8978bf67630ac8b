package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// fuzzHandler is the real handler over the fake service.
func fuzzHandler() http.Handler {
	return New(&fakeService{}, Options{Auth: fakeAuth{}})
}

// checkAnswer fails on a 5xx or on an answer that is not a JSON object.
func checkAnswer(t *testing.T, req *http.Request, rec *httptest.ResponseRecorder) {
	t.Helper()
	if rec.Code >= 500 {
		t.Fatalf("%s %q -> %d %s", req.Method, req.URL.String(), rec.Code, rec.Body)
	}
	var v map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("%s %q -> %d: not JSON: %s", req.Method, req.URL.String(), rec.Code, rec.Body)
	}
	if rec.Code >= 400 && (v["code"] == nil || v["error"] == nil) {
		t.Fatalf("%s %q -> %d: not an error body: %s", req.Method, req.URL.String(), rec.Code, rec.Body)
	}
}

func serveBody(t *testing.T, h http.Handler, method, path, key string, body []byte) {
	req := httptest.NewRequest(method, path, strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+key)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	checkAnswer(t, req, rec)
}

func FuzzDecodeCheckout(f *testing.F) {
	f.Add([]byte(`{"timeout":"30m","reason":"x","run_id":"r1","expected_statuses":["todo"],"watch":true}`), false)
	f.Add([]byte(`{"agent_id":"agent-2"}`), true)
	h := fuzzHandler()
	f.Fuzz(func(t *testing.T, body []byte, admin bool) {
		key := "ck_agent"
		if admin {
			key = "ck_admin"
		}
		serveBody(t, h, "POST", "/api/tasks/task-1/checkout", key, body)
	})
}

// bodyRoutes are the routes that read a body, by index for FuzzBodies.
var bodyRoutes = []struct{ method, path string }{
	{"POST", "/api/agents"},
	{"POST", "/api/heartbeat"},
	{"POST", "/api/tasks"},
	{"POST", "/api/tasks/t1/checkout"},
	{"POST", "/api/tasks/t1/renew"},
	{"POST", "/api/tasks/t1/release"},
	{"POST", "/api/tasks/t1/complete"},
	{"POST", "/api/tasks/t1/watch"},
	{"POST", "/api/claim"},
	{"POST", "/api/tasks/batch"},
	{"PATCH", "/api/tasks/t1"},
}

func FuzzBodies(f *testing.F) {
	f.Add(uint8(0), []byte(`{"name":"n","admin":true,"agent_id":"a"}`), true)
	f.Add(uint8(1), []byte(`{"ttl":"90s"}`), false)
	f.Add(uint8(4), []byte(`{"timeout":"1h","run_id":"r","fence":3}`), false)
	f.Add(uint8(5), []byte(`{"force":true,"reason":"stuck"}`), true)
	f.Add(uint8(5), []byte(`{"outcome":"failed","error":"exit status 1"}`), false)
	f.Add(uint8(2), []byte(`{"task_id":"t2","blocked_by":["t1"],"max_attempts":3,"retry_delay":"10s","not_before":"2026-03-20T14:35:00Z"}`), false)
	f.Add(uint8(9), []byte(`{"tasks":[{"task_id":"a","blocked_by":["b"],"not_before":null}]}`), false)
	f.Add(uint8(10), []byte(`{"blocked_by":[],"not_before":null,"retry_delay":"1h","max_attempts":100}`), false)
	h := fuzzHandler()
	f.Fuzz(func(t *testing.T, route uint8, body []byte, admin bool) {
		r := bodyRoutes[int(route)%len(bodyRoutes)]
		key := "ck_agent"
		if admin {
			key = "ck_admin"
		}
		serveBody(t, h, r.method, r.path, key, body)
	})
}

// FuzzPathParams puts arbitrary text into every path parameter and query of
// every route.
func FuzzPathParams(f *testing.F) {
	f.Add("task-1", "status=todo&limit=5")
	f.Add("a%2Fb", "limit=-1")
	f.Add("..", "cursor=%00")
	h := fuzzHandler()
	f.Fuzz(func(t *testing.T, param, query string) {
		seg := url.PathEscape(param)
		for _, r := range Routes() {
			for _, raw := range []string{seg, param} {
				p := strings.NewReplacer("{task_id}", raw, "{agent_id}", raw, "{message_id}", raw).Replace(r.Path)
				u := &url.URL{Path: p, RawQuery: query}
				if raw == param {
					u.Opaque = p // send the text as it is, unescaped
					if strings.ContainsAny(p, " \t\r\n#?") || !strings.HasPrefix(p, "/") {
						continue
					}
				}
				req := httptest.NewRequest(r.Method, "/", nil)
				req.URL = u
				req.RequestURI = ""
				req.Header.Set("Authorization", "Bearer ck_admin")
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, req)
				checkAnswer(t, req, rec)
			}
		}
	})
}
