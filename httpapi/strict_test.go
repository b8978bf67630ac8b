package httpapi

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/httpapi/openapitest"
)

// bodyRouteCase is one route that decodes a JSON body: a body it accepts, and
// bodies that name a field other than exactly (case included).
type bodyRouteCase struct {
	method, pattern, path, key string
	valid                      string
	status                     int
	inexact                    []string
}

var bodyRouteCases = []bodyRouteCase{
	{"POST", "/api/agents", "/api/agents", "ck_admin", `{"name":"x","agent_id":"a1","admin":false}`, 201,
		[]string{`{"NAME":"x"}`, `{"Name":"x"}`, `{"name":"x","Agent_ID":"a1"}`, `{"name":"x","ADMIN":true}`, `{"name":"x","agent_Id":"a1"}`}},
	{"POST", "/api/heartbeat", "/api/heartbeat", "ck_agent", `{"ttl":"90s"}`, 200,
		[]string{`{"TTL":"90s"}`, `{"Ttl":"90s"}`}},
	{"POST", "/api/tasks", "/api/tasks", "ck_agent", `{"task_id":"t1","title":"x","blocked_by":["t0"],"max_attempts":3,"retry_delay":"30s","not_before":"2026-03-20T15:00:00Z"}`, 201,
		[]string{`{"Task_ID":"t1"}`, `{"TASK_ID":"t1"}`, `{"Title":"x"}`, `{"task_id":"t1","TITLE":"x"}`,
			`{"Blocked_By":["t0"]}`, `{"MAX_ATTEMPTS":3}`, `{"retryDelay":"30s"}`, `{"Not_Before":null}`}},
	{"POST", "/api/tasks/{task_id}/checkout", "/api/tasks/task-1/checkout", "ck_agent",
		`{"timeout":"1s","reason":"r","run_id":"r1","expected_statuses":["todo"],"watch":true}`, 200,
		[]string{`{"TIMEOUT":"1s"}`, `{"Timeout":"1s"}`, `{"Reason":"r"}`, `{"RUN_ID":"r1"}`, `{"Expected_Statuses":["todo"]}`, `{"Watch":true}`,
			`{"timeout":"1s","TIMEOUT":"2s"}`}},
	{"POST", "/api/tasks/{task_id}/renew", "/api/tasks/task-1/renew", "ck_agent", `{"timeout":"1m","run_id":"r1","fence":3}`, 200,
		[]string{`{"Timeout":"1m"}`, `{"FENCE":3}`, `{"Run_Id":"r1"}`}},
	{"POST", "/api/tasks/{task_id}/release", "/api/tasks/task-1/release", "ck_agent", `{"run_id":"r1","fence":3,"force":false,"reason":"r","outcome":"failed","error":"e"}`, 200,
		[]string{`{"Reason":"r"}`, `{"FORCE":false}`, `{"Fence":3}`, `{"RUN_ID":"r1"}`, `{"Outcome":"failed"}`, `{"outcome":"failed","ERROR":"e"}`}},
	{"POST", "/api/tasks/{task_id}/complete", "/api/tasks/task-1/complete", "ck_agent", `{"run_id":"r1","fence":3}`, 200,
		[]string{`{"Run_ID":"r1"}`, `{"FENCE":3}`}},
	{"POST", "/api/tasks/{task_id}/watch", "/api/tasks/task-1/watch", "ck_agent", `{}`, 200,
		[]string{`{"Watch":true}`}},
	{"POST", "/api/claim", "/api/claim", "ck_agent", `{"timeout":"1s","reason":"r","run_id":"r1","queues":["backend"],"wait":"1s"}`, 200,
		[]string{`{"TIMEOUT":"1s"}`, `{"Reason":"r"}`, `{"Run_ID":"r1"}`, `{"run_id":"r1","timeOut":"1s"}`, `{"Queues":["a"]}`, `{"WAIT":"1s"}`}},
	{"POST", "/api/tasks/batch", "/api/tasks/batch", "ck_agent", `{"tasks":[{"task_id":"t1","title":"x","queue":"q","priority":7,"description":"d","metadata":{"Any":1},"blocked_by":[],"max_attempts":1,"retry_delay":"0s","not_before":null}]}`, 200,
		[]string{`{"Tasks":[]}`, `{"tasks":[{"Task_ID":"t1"}]}`, `{"tasks":[{"PRIORITY":1}]}`, `{"tasks":[{"blocked_By":[]}]}`, `{"tasks":[{"Max_Attempts":1}]}`}},
	{"PATCH", "/api/tasks/{task_id}", "/api/tasks/task-1", "ck_agent", `{"title":"x","description":"d","metadata":{"K":1},"queue":"q","priority":1,"status":"todo","blocked_by":["t0"],"max_attempts":100,"retry_delay":"1h","not_before":null}`, 200,
		[]string{`{"Title":"x"}`, `{"STATUS":"todo"}`, `{"Priority":1}`, `{"Queue":"q"}`, `{"BLOCKED_BY":[]}`, `{"Retry_Delay":"1s"}`, `{"NOT_BEFORE":null}`, `{"max_Attempts":2}`}},
}

// Every operation of the document that takes a request body is in
// bodyRouteCases, so a new route cannot miss the strict-input tests.
func TestBodyRoutesCoverTheDocument(t *testing.T) {
	t.Parallel()
	doc, err := openapitest.Load()
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for p, item := range doc.Paths.Map() {
		for m, op := range item.Operations() {
			if op.RequestBody != nil {
				want = append(want, m+" "+p)
			}
		}
	}
	have := map[string]bool{}
	for _, r := range bodyRouteCases {
		have[r.method+" "+r.pattern] = true
	}
	sort.Strings(want)
	for _, op := range want {
		if !have[op] {
			t.Errorf("%s takes a body but is not in bodyRouteCases", op)
		}
	}
	if len(have) != len(want) {
		t.Errorf("bodyRouteCases has %d routes, the document %d with a body: %v", len(have), len(want), want)
	}
}

// JSON field names match exactly: a field that differs only in case is an
// unknown field (400 invalid_json), on every route that takes a body, and
// the store is never called.
func TestFieldNamesMatchExactly(t *testing.T) {
	t.Parallel()
	for _, r := range bodyRouteCases {
		t.Run(r.method+" "+r.pattern, func(t *testing.T) {
			t.Parallel()
			newHarness(t).do(r.method, r.path, r.key, r.valid).expect(t, r.status, "")
			for _, body := range r.inexact {
				hs := newHarness(t)
				res := hs.do(r.method, r.path, r.key, body)
				if res.status != 400 || res.json["code"] != "invalid_json" {
					t.Errorf("%s: %d %s, want 400 invalid_json", body, res.status, res.body)
					continue
				}
				if msg, _ := res.json["error"].(string); !strings.Contains(msg, "unknown field") {
					t.Errorf("%s: error %q does not name the unknown field", body, msg)
				}
				if len(hs.svc.calls) != 0 {
					t.Errorf("%s: store called %v", body, hs.svc.calls)
				}
			}
		})
	}
}

// A declared Content-Length over 64 KiB is answered 413 at once, before a
// byte of the body is read: the client here sends only the headers and
// waits. A body without a Content-Length is cut at 64 KiB and is 413 too.
// Both over a real connection, on every route that takes a body.
func TestBodyOverLimitIs413BeforeItIsRead(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	srv := httptest.NewServer(hs.h)
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	for _, r := range bodyRouteCases {
		t.Run(r.method+" "+r.pattern, func(t *testing.T) {
			t.Parallel()
			for _, key := range []string{r.key, ""} {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				auth := ""
				if key != "" {
					auth = "Authorization: Bearer " + key + "\r\n"
				}
				fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
					r.method, r.path, auth, MaxBodyBytes+1)
				_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					t.Fatalf("key %q: no answer before the body was sent: %v", key, err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				want, code := 413, "payload_too_large"
				if key == "" {
					// Authentication still comes first; the answer is as prompt.
					want, code = 401, "unauthorized"
				}
				var m map[string]any
				_ = json.Unmarshal(body, &m)
				if resp.StatusCode != want || m["code"] != code {
					t.Fatalf("key %q: %d %s, want %d %s", key, resp.StatusCode, body, want, code)
				}
				if err := openapitest.Validate(r.method, r.path, resp.StatusCode, resp.Header, body); err != nil {
					t.Error(err)
				}
			}

			// Chunked, no Content-Length: read up to the limit, then 413.
			big := `{"reason":"` + strings.Repeat("x", MaxBodyBytes) + `"}`
			req, _ := http.NewRequest(r.method, srv.URL+r.path, io.NopCloser(strings.NewReader(big)))
			req.ContentLength = -1
			req.Header.Set("Authorization", "Bearer "+r.key)
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 413 || !strings.Contains(string(body), `"code":"payload_too_large"`) {
				t.Fatalf("chunked body over the limit: %d %s", resp.StatusCode, body)
			}
		})
	}
}

// Exact names hold at every depth: in arrays of objects, in objects held by
// pointers or maps, and through embedded structs; map keys and raw values
// are free. (encoding/json cannot fill an embedded pointer to an
// unexported struct, so the embedded struct is held by value.)
func TestExactFieldsNested(t *testing.T) {
	t.Parallel()
	type inner struct {
		TaskID string `json:"task_id"`
	}
	type embedded struct {
		Reason string `json:"reason"`
	}
	type body struct {
		embedded
		Tasks    []inner            `json:"tasks"`
		One      *inner             `json:"one"`
		ByName   map[string]inner   `json:"by_name"`
		Metadata map[string]any     `json:"metadata"`
		Raw      json.RawMessage    `json:"raw"`
		Plain    string             // no tag: the Go name, exactly
		Skipped  string             `json:"-"`
		Extra    map[string]*inner  `json:"extra,omitempty"`
		_        struct{ X string } // unexported: not a field
	}
	ok := []string{
		`{"reason":"r","tasks":[{"task_id":"a"},{"task_id":"b"}],"one":{"task_id":"c"},"by_name":{"ANY":{"task_id":"d"}}}`,
		`{"metadata":{"Task_ID":1,"X":{"Y":2}},"raw":{"Whatever":true},"Plain":"p","extra":{"k":null},"one":null,"tasks":null}`,
	}
	bad := map[string]string{
		`{"Reason":"r"}`: "Reason",
		`{"tasks":[{"task_id":"a"},{"Task_ID":"b"}]}`: "Task_ID",
		`{"one":{"TASK_ID":"c"}}`:                     "TASK_ID",
		`{"by_name":{"k":{"taskId":"d"}}}`:            "taskId",
		`{"plain":"p"}`:                               "plain",
		`{"Skipped":"s"}`:                             "Skipped",
		`{"extra":{"k":{"Task_id":"e"}}}`:             "Task_id",
	}
	for _, b := range ok {
		var v body
		if err := decode(httptest.NewRequest("POST", "/", strings.NewReader(b)), &v); err != nil {
			t.Errorf("%s: %v", b, err)
		}
	}
	for b, name := range bad {
		var v body
		err := decode(httptest.NewRequest("POST", "/", strings.NewReader(b)), &v)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", name)) {
			t.Errorf("%s: %v, want unknown field %q", b, err, name)
		}
	}
}
