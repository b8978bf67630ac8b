// Package apigw serves an http.Handler from AWS Lambda behind an API Gateway
// HTTP API (payload format 2.0).
//
// The adapter is deliberately thin: it turns the event into an *http.Request,
// runs the handler against an in-memory response writer and turns what the
// handler wrote into the response event. It adds two things. The caller's
// identity: the Lambda authorizer's context
// (requestContext.authorizer.lambda) is decoded with
// auth.PrincipalFromAuthorizerContext and put on the request's context with
// httpapi.ContextWithPrincipal, which is where the handlers look for it when
// they run without an Authenticator of their own. And a deadline: the
// request's context ends DeadlineMargin before the invocation's, as the
// local server gives each request a deadline of its own, so that a
// DynamoDB call that stalls ends in time for the handler's answer (503
// unavailable with Retry-After) rather than in the function's timeout,
// which API Gateway answers with its own 500.
//
// The adapter never returns an error to the Lambda runtime: an event it cannot
// turn into a request (an unknown method, a body that is not valid base64)
// gets an HTTP error response in the API's error format, as any other bad
// request would.
package apigw

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/auth"
	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/httpapi"
	"github.com/checkout-dev/checkout/lease"
)

// RequestIDHeader carries API Gateway's request id to the handler, so that
// its logs and the gateway's access logs share one id.
const RequestIDHeader = "X-Request-Id"

// DeadlineMargin is how long before the invocation's deadline (the
// function's timeout) the request's context ends: the time the handler
// has to answer a call that stalled, and the runtime to return it.
const DeadlineMargin = time.Second

// Handler returns a Lambda handler that serves API Gateway v2 HTTP events
// with h.
func Handler(h http.Handler) func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (resp events.APIGatewayV2HTTPResponse, err error) {
		if d, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, d.Add(-DeadlineMargin))
			defer cancel()
		}
		req, status, msg := NewRequest(ctx, ev)
		if req == nil {
			return errorResponse(status, msg), nil
		}
		w := newRecorder()
		defer func() {
			// The handlers recover from their own panics; this is the last
			// line that keeps a bug from killing the runtime.
			if p := recover(); p != nil {
				slog.ErrorContext(ctx, "handler panicked", "panic", fmt.Sprint(p), "request_id", ev.RequestContext.RequestID)
				resp, err = errorResponse(http.StatusInternalServerError, "internal error"), nil
			}
		}()
		h.ServeHTTP(w, req)
		if req.Method == http.MethodHead {
			// Answered as GET, without the body (RFC 9110, 9.3.2), as
			// net/http answers it locally.
			w.body.Reset()
		}
		return w.response(), nil
	}
}

// NewRequest builds the *http.Request that an API Gateway v2 event stands
// for, with the authorizer's principal on its context. When the event cannot
// be turned into a request it returns nil with the status and message to
// answer with.
func NewRequest(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (*http.Request, int, string) {
	method := strings.ToUpper(ev.RequestContext.HTTP.Method)
	if method == "" {
		// Older test events carry the method only in the route key.
		if m, _, ok := strings.Cut(ev.RouteKey, " "); ok && m != "$default" {
			method = strings.ToUpper(m)
		}
	}
	if method == "" || !validToken(method) {
		return nil, http.StatusBadRequest, "the request has no valid HTTP method"
	}

	u := requestURL(ev)

	var body []byte
	if ev.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(ev.Body)
		if err != nil {
			return nil, http.StatusBadRequest, "the request body is not valid base64"
		}
		body = b
	} else {
		body = []byte(ev.Body)
	}

	if p, ok := principal(ev); ok {
		ctx = httpapi.ContextWithPrincipal(ctx, p)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, http.StatusBadRequest, "the request line is not valid"
	}
	// NewRequest re-parses the URL; keep the decoded path exactly as built.
	req.URL = u
	req.RequestURI = u.RequestURI()
	req.ContentLength = int64(len(body))
	req.Proto, req.ProtoMajor, req.ProtoMinor = "HTTP/1.1", 1, 1

	for k, v := range ev.Headers {
		if !validToken(k) {
			continue
		}
		req.Header.Set(k, v)
	}
	// The body's length is known; a header that says otherwise is dropped,
	// as net/http's server would for a request it has framed itself.
	req.Header.Del("Content-Length")
	if len(ev.Cookies) > 0 {
		req.Header.Set("Cookie", strings.Join(ev.Cookies, "; "))
	}
	if id := ev.RequestContext.RequestID; id != "" {
		req.Header.Set(RequestIDHeader, id)
	}
	req.Host = req.Header.Get("Host")
	if req.Host == "" {
		req.Host = ev.RequestContext.DomainName
	}
	req.Header.Del("Host")
	if ip := ev.RequestContext.HTTP.SourceIP; ip != "" {
		req.RemoteAddr = ip + ":0"
	}
	return req, 0, ""
}

// requestURL rebuilds the URL from the path and raw query string. With a
// named stage, API Gateway puts the stage in rawPath (/prod/api/tasks); the
// routes do not know about stages, so it is taken off.
func requestURL(ev events.APIGatewayV2HTTPRequest) *url.URL {
	raw := ev.RawPath
	if raw == "" {
		raw = ev.RequestContext.HTTP.Path
	}
	if raw == "" || raw[0] != '/' {
		raw = "/" + raw
	}
	if st := ev.RequestContext.Stage; st != "" && st != "$default" {
		prefix := "/" + st
		if raw == prefix {
			raw = "/"
		} else if strings.HasPrefix(raw, prefix+"/") {
			raw = raw[len(prefix):]
		}
	}
	// An HTTP API hands over the path already decoded (rawPath and
	// requestContext.http.path alike): a "%" in it is a percent sign the
	// client sent encoded, so it is not decoded again.
	return &url.URL{Path: raw, RawQuery: ev.RawQueryString}
}

func principal(ev events.APIGatewayV2HTTPRequest) (p lease.Principal, ok bool) {
	if ev.RequestContext.Authorizer == nil || ev.RequestContext.Authorizer.Lambda == nil {
		return p, false
	}
	return auth.PrincipalFromAuthorizerContext(ev.RequestContext.Authorizer.Lambda)
}

// validToken reports whether s is an HTTP token (a method or header name).
func validToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, c) >= 0 {
			return false
		}
	}
	return true
}

// recorder is the in-memory http.ResponseWriter the handler writes to.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newRecorder() *recorder { return &recorder{header: make(http.Header)} }

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status != 0 {
		return
	}
	if status < 100 || status > 999 {
		status = http.StatusInternalServerError
	}
	r.status = status
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.WriteHeader(http.StatusOK)
	}
	return r.body.Write(b)
}

func (r *recorder) Flush() {}

func (r *recorder) response() events.APIGatewayV2HTTPResponse {
	status := r.status
	if status == 0 {
		status = http.StatusOK
	}
	resp := events.APIGatewayV2HTTPResponse{StatusCode: status, Headers: map[string]string{}}
	for k, vs := range r.header {
		if len(vs) == 0 {
			continue
		}
		if http.CanonicalHeaderKey(k) == "Set-Cookie" {
			resp.Cookies = append(resp.Cookies, vs...)
			continue
		}
		resp.Headers[k] = strings.Join(vs, ", ")
	}
	body := r.body.Bytes()
	if len(body) > 0 && resp.Headers["Content-Type"] == "" {
		resp.Headers["Content-Type"] = http.DetectContentType(body)
	}
	if isText(resp.Headers["Content-Type"]) && utf8.Valid(body) {
		resp.Body = string(body)
	} else {
		resp.Body = base64.StdEncoding.EncodeToString(body)
		resp.IsBase64Encoded = true
	}
	return resp
}

// isText reports whether a body of this content type goes back as a plain
// string; anything else is base64 encoded.
func isText(contentType string) bool {
	if contentType == "" {
		return true
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	switch {
	case strings.HasPrefix(mt, "text/"),
		mt == "application/json", strings.HasSuffix(mt, "+json"),
		mt == "application/xml", strings.HasSuffix(mt, "+xml"),
		mt == "application/javascript", mt == "application/yaml",
		mt == "application/x-www-form-urlencoded":
		return true
	}
	return false
}

// errorResponse is an error in the API's format, for events that never reach
// the handler.
func errorResponse(status int, msg string) events.APIGatewayV2HTTPResponse {
	code := errcode.InvalidRequest
	if status >= 500 {
		code = errcode.Internal
	}
	b, _ := json.Marshal(map[string]string{"error": msg, "code": code})
	return events.APIGatewayV2HTTPResponse{
		StatusCode: status,
		Headers:    map[string]string{"Content-Type": "application/json"},
		Body:       string(b),
	}
}
