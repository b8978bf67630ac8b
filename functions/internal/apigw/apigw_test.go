package apigw

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/lease"
)

// seen is what the echo handler saw of a request.
type seen struct {
	Method     string
	Path       string
	RawQuery   string
	Query      map[string][]string
	Host       string
	RemoteAddr string
	RequestID  string
	Auth       string
	CType      string
	Cookies    []string
	Body       string
	Length     int64
}

// echo answers with a JSON description of the request it got.
func echo(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var cookies []string
	for _, c := range r.Cookies() {
		cookies = append(cookies, c.Name+"="+c.Value)
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(seen{
		Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery, Query: r.URL.Query(),
		Host: r.Host, RemoteAddr: r.RemoteAddr, RequestID: r.Header.Get(RequestIDHeader),
		Auth: r.Header.Get("Authorization"), CType: r.Header.Get("Content-Type"),
		Cookies: cookies, Body: string(b), Length: r.ContentLength,
	})
}

func loadEvent(t *testing.T, name string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return ev
}

func TestCapturedEvents(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file      string
		want      seen
		principal *lease.Principal
	}{
		{
			file: "checkout-lambda-authorizer.json",
			want: seen{
				Method: "POST", Path: "/api/tasks/task-d4e5/checkout", Query: map[string][]string{},
				Host: "abcdef1234.execute-api.us-east-1.amazonaws.com", RemoteAddr: "203.0.113.7:0",
				RequestID: "UjvS8gH5IAMEVzA=", Auth: "Bearer ck_3f1b0a9c2d7e4b5a8c6d1e2f3a4b5c6d",
				CType: "application/json",
				Body:  `{"timeout":"30m","reason":"fix it","run_id":"run-7f3c"}`, Length: 55,
			},
			principal: &lease.Principal{AgentID: "agent-a1b2", Name: "researcher"},
		},
		{
			file: "release-base64-body.json",
			want: seen{
				Method: "POST", Path: "/api/tasks/task-d4e5/release", Query: map[string][]string{},
				Host: "abcdef1234.execute-api.us-east-1.amazonaws.com", RemoteAddr: "198.51.100.23:0",
				RequestID: "UjvTAhQ2IAMEbgQ=", Auth: "Bearer ck_3f1b0a9c2d7e4b5a8c6d1e2f3a4b5c6d",
				CType:   "application/json; charset=utf-8",
				Cookies: []string{"session=abc123", "theme=dark"},
				Body:    `{"run_id":"run-7f3c","fence":12,"reason":"handing over"}`, Length: 56,
			},
			principal: &lease.Principal{AgentID: "admin", Name: "admin", Admin: true},
		},
		{
			file: "list-tasks-named-stage.json",
			want: seen{
				Method: "GET", Path: "/api/tasks",
				RawQuery: "status=todo&limit=50&cursor=eyJrIjoidGFzay0xIn0%3D&tag=a&tag=b",
				Query: map[string][]string{
					"status": {"todo"}, "limit": {"50"}, "cursor": {"eyJrIjoidGFzay0xIn0="}, "tag": {"a", "b"},
				},
				Host: "api.checkout.example.com", RemoteAddr: "192.0.2.44:0", RequestID: "UjvUBi0JoAMEcYw=",
				Auth: "Bearer ck_9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d",
			},
			principal: &lease.Principal{AgentID: "agent-c3d4", Name: "planner"},
		},
		{
			file: "healthz-no-authorizer.json",
			want: seen{
				Method: "GET", Path: "/healthz", Query: map[string][]string{},
				Host: "abcdef1234.execute-api.us-east-1.amazonaws.com", RemoteAddr: "192.0.2.1:0",
				RequestID: "UjvVCjKMIAMEd1g=",
			},
		},
		{
			file: "inbox-delete-decoded-path.json",
			want: seen{
				Method: "DELETE", Path: "/api/inbox/msg%4101HV x", Query: map[string][]string{},
				Host: "abcdef1234.execute-api.us-east-1.amazonaws.com", RemoteAddr: "203.0.113.7:0",
				RequestID: "UjvWDkLNIAMEe2h=", Auth: "Bearer ck_3f1b0a9c2d7e4b5a8c6d1e2f3a4b5c6d",
			},
			// The authorizer's context may carry the role as a string.
			principal: &lease.Principal{AgentID: "agent-a1b2", Name: "researcher"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			t.Parallel()
			ev := loadEvent(t, tt.file)
			resp, err := Handler(http.HandlerFunc(echo))(context.Background(), ev)
			if err != nil {
				t.Fatalf("handler error: %v", err)
			}
			if resp.StatusCode != http.StatusOK || resp.IsBase64Encoded {
				t.Fatalf("status %d base64 %v body %s", resp.StatusCode, resp.IsBase64Encoded, resp.Body)
			}
			if ct := resp.Headers["Content-Type"]; ct != "application/json" {
				t.Fatalf("content type %q", ct)
			}
			var got seen
			if err := json.Unmarshal([]byte(resp.Body), &got); err != nil {
				t.Fatalf("body %q: %v", resp.Body, err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("request seen by the handler:\n got %+v\nwant %+v", got, tt.want)
			}

			p, ok := principal(ev)
			if tt.principal == nil {
				if ok {
					t.Fatalf("principal %+v from an event without an authorizer", p)
				}
				return
			}
			if !ok || p != *tt.principal {
				t.Fatalf("principal = %+v, %v; want %+v", p, ok, *tt.principal)
			}
		})
	}
}

// Escaped paths reach the handler's router with their encoding kept, so a
// path parameter may contain a slash.
// An HTTP API hands the function its path already decoded: a request for
// /api/inbox/msg%254101HV%20x arrives as /api/inbox/msg%4101HV x. Decoding
// it again would act on another id (msgA01HV x) than the one asked for.
func TestThePathArrivesDecodedAndIsNotDecodedAgain(t *testing.T) {
	t.Parallel()
	ev := loadEvent(t, "inbox-delete-decoded-path.json")
	mux := http.NewServeMux()
	var got string
	mux.HandleFunc("DELETE /api/inbox/{message_id}", func(w http.ResponseWriter, r *http.Request) {
		got = r.PathValue("message_id")
	})
	resp, _ := Handler(mux)(context.Background(), ev)
	if resp.StatusCode != http.StatusOK || got != "msg%4101HV x" {
		t.Fatalf("status %d, message_id %q", resp.StatusCode, got)
	}
}

func TestResponses(t *testing.T) {
	t.Parallel()
	png := []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
	tests := []struct {
		name    string
		h       http.HandlerFunc
		status  int
		headers map[string]string
		cookies []string
		body    string
		base64  bool
	}{
		{
			name: "json error",
			h: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusConflict)
				io.WriteString(w, `{"error":"task t is already checked out","code":"checked_out"}`)
			},
			status:  409,
			headers: map[string]string{"Content-Type": "application/json"},
			body:    `{"error":"task t is already checked out","code":"checked_out"}`,
		},
		{
			name:    "no explicit status",
			h:       func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hello") },
			status:  200,
			headers: map[string]string{"Content-Type": "text/plain; charset=utf-8"},
			body:    "hello",
		},
		{
			name:    "empty",
			h:       func(w http.ResponseWriter, r *http.Request) {},
			status:  200,
			headers: map[string]string{},
		},
		{
			name: "binary",
			h: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "image/png")
				w.Write(png)
			},
			status:  200,
			headers: map[string]string{"Content-Type": "image/png"},
			body:    base64.StdEncoding.EncodeToString(png),
			base64:  true,
		},
		{
			name: "invalid utf-8 in a json body",
			h: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.Write([]byte{'"', 0xff, '"'})
			},
			status:  200,
			headers: map[string]string{"Content-Type": "application/json"},
			body:    base64.StdEncoding.EncodeToString([]byte{'"', 0xff, '"'}),
			base64:  true,
		},
		{
			name: "cookies and repeated headers",
			h: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Add("Vary", "Accept")
				w.Header().Add("Vary", "Authorization")
				http.SetCookie(w, &http.Cookie{Name: "a", Value: "1"})
				http.SetCookie(w, &http.Cookie{Name: "b", Value: "2"})
				w.WriteHeader(http.StatusNoContent)
				w.WriteHeader(http.StatusTeapot) // ignored, as net/http does
			},
			status:  204,
			headers: map[string]string{"Vary": "Accept, Authorization"},
			cookies: []string{"a=1", "b=2"},
		},
		{
			name: "panic",
			h: func(w http.ResponseWriter, r *http.Request) {
				panic("boom")
			},
			status:  500,
			headers: map[string]string{"Content-Type": "application/json"},
			body:    `{"code":"internal","error":"internal error"}`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := loadEvent(t, "healthz-no-authorizer.json")
			resp, err := Handler(tt.h)(context.Background(), ev)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != tt.status || resp.Body != tt.body || resp.IsBase64Encoded != tt.base64 {
				t.Fatalf("got %d %q base64=%v; want %d %q base64=%v",
					resp.StatusCode, resp.Body, resp.IsBase64Encoded, tt.status, tt.body, tt.base64)
			}
			if !reflect.DeepEqual(resp.Headers, tt.headers) {
				t.Fatalf("headers %v, want %v", resp.Headers, tt.headers)
			}
			if !reflect.DeepEqual(resp.Cookies, tt.cookies) {
				t.Fatalf("cookies %v, want %v", resp.Cookies, tt.cookies)
			}
		})
	}
}

// Events that cannot become a request get a 400 in the API's error format,
// never an error for the runtime and never a call to the handler.
func TestBadEvents(t *testing.T) {
	t.Parallel()
	base := loadEvent(t, "checkout-lambda-authorizer.json")
	tests := []struct {
		name   string
		modify func(*events.APIGatewayV2HTTPRequest)
		msg    string
	}{
		{"zero event", func(ev *events.APIGatewayV2HTTPRequest) { *ev = events.APIGatewayV2HTTPRequest{} }, "method"},
		{"bad method", func(ev *events.APIGatewayV2HTTPRequest) { ev.RequestContext.HTTP.Method = "GE T" }, "method"},
		{"bad base64", func(ev *events.APIGatewayV2HTTPRequest) {
			ev.IsBase64Encoded = true
			ev.Body = "not base64!"
		}, "base64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ev := base
			tt.modify(&ev)
			called := false
			resp, err := Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { called = true }))(context.Background(), ev)
			if err != nil || called {
				t.Fatalf("err %v, handler called %v", err, called)
			}
			var body struct{ Error, Code string }
			if resp.StatusCode != 400 || json.Unmarshal([]byte(resp.Body), &body) != nil ||
				body.Code != "invalid_request" || !strings.Contains(body.Error, tt.msg) {
				t.Fatalf("got %d %s", resp.StatusCode, resp.Body)
			}
		})
	}
}

func TestMethodFromRouteKey(t *testing.T) {
	t.Parallel()
	ev := loadEvent(t, "checkout-lambda-authorizer.json")
	ev.RequestContext.HTTP.Method = ""
	ev.RawPath = ""
	resp, _ := Handler(http.HandlerFunc(echo))(context.Background(), ev)
	var got seen
	json.Unmarshal([]byte(resp.Body), &got)
	if got.Method != "POST" || got.Path != "/api/tasks/task-d4e5/checkout" {
		t.Fatalf("got %s %s", got.Method, got.Path)
	}
}

// FuzzHandler feeds arbitrary request lines and bodies through the adapter:
// it must never fail the invocation, panic, or answer with a 5xx.
func FuzzHandler(f *testing.F) {
	f.Add("GET", "/api/tasks", "status=todo", "", false, "Bearer ck_x")
	f.Add("POST", "/api/tasks/t%2F1/checkout", "", `{"timeout":"1s"}`, false, "")
	f.Add("post", "//..//%zz", "a=%zz&&=", "e30=", true, "x")
	f.Add("", "", "", "!!", true, "\x00")
	f.Fuzz(func(t *testing.T, method, path, query, body string, b64 bool, authz string) {
		ev := loadEvent(t, "checkout-lambda-authorizer.json")
		ev.RequestContext.HTTP.Method = method
		ev.RawPath = path
		ev.RawQueryString = query
		ev.Body = body
		ev.IsBase64Encoded = b64
		ev.Headers["authorization"] = authz
		ev.Headers[authz] = query
		resp, err := Handler(http.HandlerFunc(echo))(context.Background(), ev)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 && resp.StatusCode != 400 {
			t.Fatalf("status %d: %s", resp.StatusCode, resp.Body)
		}
	})
}

// A HEAD request is answered as GET without the body (RFC 9110, 9.3.2), as
// the local server's net/http answers it: no route names HEAD, so in AWS
// it reaches the health function through $default.
func TestHeadIsAnsweredWithoutTheBody(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"ok":true}`)
	})
	ev := events.APIGatewayV2HTTPRequest{RouteKey: "$default", RawPath: "/healthz"}
	ev.RequestContext.HTTP.Method = "HEAD"
	resp, err := Handler(mux)(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Body != "" || resp.IsBase64Encoded {
		t.Fatalf("HEAD /healthz: status %d, body %q (base64 %v), want 200 and no body", resp.StatusCode, resp.Body, resp.IsBase64Encoded)
	}
	if resp.Headers["Content-Type"] != "application/json" {
		t.Errorf("HEAD /healthz: Content-Type %q, want the GET's", resp.Headers["Content-Type"])
	}
}
