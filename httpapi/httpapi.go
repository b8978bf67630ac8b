// Package httpapi serves the checkout HTTP API (see httpapi/openapi/openapi.yaml) on
// net/http. The same handler runs in the local server, where it
// authenticates bearer keys itself (Options.Auth), and behind API Gateway,
// where the Lambda authorizer has already done so and the adapter puts the
// principal in the request context (ContextWithPrincipal).
//
// Domain errors become status codes and the {"error","code"} body in one
// function, errorResponse; a database that cannot be reached (see
// Unavailable) is 503 unavailable with Retry-After there, on Lambda as
// locally. Unknown paths are 404 not_found, known paths with another method
// 405 method_not_allowed, both with that body.
package httpapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/checkout-dev/checkout/auth"
	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/lease"
)

// MaxBodyBytes is the largest request body accepted; larger ones are 413.
const MaxBodyBytes = 64 << 10

// DefaultAdminID is the agent id of the built-in admin when Options.AdminID
// is empty: the local server's admin (CHECKOUT_ADMIN_KEY) and the one that
// cmd/mint-admin creates by default in AWS. DELETE /api/agents/{agent_id}
// refuses it with 409 cannot_remove_admin, since removing it would lock
// every admin out (locally until a restart re-creates it).
const DefaultAdminID = "admin"

// RequestIDHeader carries the request id, echoed from the request when it is
// a plausible id, generated otherwise.
const RequestIDHeader = "X-Request-Id"

// Options configure New.
type Options struct {
	// Auth authenticates the bearer key of every request but GET /healthz.
	// When nil, the principal must already be in the request context (put
	// there with ContextWithPrincipal); a request without one is 401.
	Auth auth.Authenticator
	// RecheckAdmin, when set, authenticates the bearer key of every request
	// that uses an admin's power once more before it runs (one consistent
	// read), and refuses it unless the key still belongs to that admin: a
	// request to an admin-only route, and one to an agent route that uses
	// an admin-only field (agent_id naming another agent, force on a
	// release, a cancel by an admin). Behind API Gateway the principal
	// comes from the authorizer's cache, which keeps a removed admin's
	// answer for up to its cache time: without the check, such an admin
	// could still register agents, admins among them, or remove them, act
	// for other agents, force releases and cancel their tasks. A request
	// that uses no admin power is not looked at again. Nil (the local
	// server, whose Auth forgets a removed key at once): no second look.
	RecheckAdmin auth.Authenticator
	// OnAgentRemoved is called after an agent is removed, so that a cache of
	// its key can forget it at once; also after a removal that failed part
	// way, which may have deleted the key already.
	OnAgentRemoved func(agentID string)
	// AdminID is the agent id of the built-in admin, which cannot be
	// removed (default DefaultAdminID). Other admins are ordinary agents.
	AdminID string
	// Health reports whether the database can be reached; GET /healthz
	// answers 503 {"ok": false} (with Retry-After) while it returns an
	// error (the local server's and the Lambda health function's check
	// the database). Nil: /healthz always answers 200. Every other route
	// finds out for itself: an unreachable database is 503 unavailable there.
	Health func(ctx context.Context) error
	// AutoCreateTasks makes a checkout of an unknown task create it.
	AutoCreateTasks bool
	// Logger receives one structured line per request (nil: no logs).
	Logger *slog.Logger
	// Now is the clock used for remaining_seconds (nil: time.Now).
	Now func() time.Time
	// Function restricts the handler to the routes of one Lambda function
	// (deploy.Routes' Function); every other path is 404 not_found or 405
	// method_not_allowed. Empty: every route.
	Function string
}

type handlerFunc func(s *server, w http.ResponseWriter, r *http.Request, p lease.Principal) error

// handlers gives each route of deploy.Routes, the one route table, its
// handler, by the route's operation (its operationId in the OpenAPI
// document); New refuses a table with a route missing here.
var handlers = map[string]handlerFunc{
	"healthz":       (*server).healthz,
	"registerAgent": (*server).registerAgent,
	"listAgents":    withQuery((*server).listAgents, "limit", "cursor"),
	"removeAgent":   (*server).removeAgent,
	"heartbeat":     (*server).heartbeat,
	"whoami":        (*server).whoami,
	"createTask":    (*server).createTask,
	"listTasks":     withQuery((*server).listTasks, "status", "queue", "limit", "cursor"),
	"createTasks":   (*server).createTasks,
	"getTask":       (*server).getTask,
	"updateTask":    (*server).updateTask,
	"checkout":      (*server).checkout,
	"lockStatus":    (*server).lockStatus,
	"renew":         (*server).renew,
	"release":       (*server).release,
	"complete":      (*server).complete,
	"events":        withQuery((*server).events, "limit", "cursor"),
	"watch":         (*server).watch,
	"listCheckouts": withQuery((*server).listCheckouts, "agent_id", "limit", "cursor"),
	"inbox":         (*server).inbox,
	"deleteMessage": (*server).deleteMessage,
	"claim":         (*server).claim,
	"feed":          withQuery((*server).feed, "since", "cursor", "limit", "type"),
	"listQueues":    withQuery((*server).listQueues, "limit", "cursor"),
}

// withQuery is h for a route that reads the query parameters names: a
// query string that checkQuery refuses, or that names another parameter
// (a mistyped filter would otherwise list everything), is answered before
// h runs.
func withQuery(h handlerFunc, names ...string) handlerFunc {
	return func(s *server, w http.ResponseWriter, r *http.Request, p lease.Principal) error {
		if err := checkQuery(r.URL.RawQuery, names); err != nil {
			return err
		}
		return h(s, w, r, p)
	}
}

type route struct {
	deploy.Route
	handler handlerFunc
}

// Routes lists the routes of the JSON API that the handler serves, in the
// table's order: deploy.Routes without the dashboard's static files, which
// package ui serves.
func Routes() []deploy.Route {
	var out []deploy.Route
	for _, r := range deploy.Routes {
		if !r.Dashboard() {
			out = append(out, r)
		}
	}
	return out
}

// shadowsTaskID lists the literal paths that are also /api/tasks/{task_id}.
var shadowsTaskID = map[string]bool{"/api/tasks/batch": true}

type server struct {
	svc  Service
	opts Options
	log  *slog.Logger
	now  func() time.Time
	mux  *http.ServeMux
}

// New returns the handler of every route of the API.
func New(svc Service, opts Options) http.Handler {
	s := &server{svc: svc, opts: opts, log: opts.Logger, now: opts.Now, mux: http.NewServeMux()}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.opts.AdminID == "" {
		s.opts.AdminID = DefaultAdminID
	}
	methods := map[string][]string{}
	for _, r := range Routes() {
		if opts.Function != "" && r.Function != opts.Function {
			continue
		}
		h, ok := handlers[r.Op]
		if !ok {
			panic("httpapi: no handler for route " + r.Key() + " (operation " + r.Op + ")")
		}
		pattern := strings.TrimPrefix(r.Pattern(), r.Method+" ")
		s.mux.Handle(r.Pattern(), s.serveRoute(route{r, h}))
		methods[pattern] = append(methods[pattern], r.Method)
	}
	for pattern, ms := range methods {
		if shadowsTaskID[pattern] {
			// The path is also a task's (a task may be called "batch"):
			// its other methods go to the task routes.
			continue
		}
		// A pattern without a method matches only what the ones with a
		// method did not: the same path with another method. A path that
		// is also a task's allows the methods of both.
		s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			on, allowed := pattern, ms
			if shadowsTaskID[r.URL.Path] {
				on, allowed = r.URL.Path, append(slices.Clone(ms), methods[r.URL.Path]...)
			}
			slices.Sort(allowed)
			allow := strings.Join(slices.Compact(allowed), ", ")
			w.Header().Set("Allow", allow)
			s.fail(w, r, errorf(errcode.MethodNotAllowed, "method %s is not allowed on %s; allowed: %s", r.Method, on, allow))
		})
	}
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		s.fail(w, r, errNotFound)
	})
	return s
}

var errNotFound = errorf(errcode.NotFound, "no such path")

type principalKey struct{}

// ContextWithPrincipal returns ctx carrying the authenticated caller; the
// handler uses it when Options.Auth is nil.
func ContextWithPrincipal(ctx context.Context, p lease.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

func principalFrom(ctx context.Context) (lease.Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(lease.Principal)
	return p, ok && p.AgentID != ""
}

// reqState is what the log line of a request needs to learn from deeper
// down, and whether the caller's admin power has been checked again.
type reqState struct {
	route   string
	agentID string
	err     error
	// gone: the client closed the request before its answer.
	gone bool
	// adminRechecked: the caller's key has been found an admin's once
	// more (isAdmin).
	adminRechecked bool
}

type stateKey struct{}

func stateFrom(ctx context.Context) *reqState {
	if st, ok := ctx.Value(stateKey{}).(*reqState); ok {
		return st
	}
	return &reqState{}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ServeHTTP assigns the request id, recovers from panics, refuses unclean
// paths (which ServeMux would redirect) and logs one line per request.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	id := r.Header.Get(RequestIDHeader)
	if !validRequestID(id) {
		id = newRequestID()
	}
	w.Header().Set(RequestIDHeader, id)
	st := &reqState{}
	r = r.WithContext(context.WithValue(r.Context(), stateKey{}, st))
	sw := &statusWriter{ResponseWriter: w}
	if r.ContentLength > MaxBodyBytes && r.Context().Value(http.ServerContextKey) != nil {
		// Whatever the answer (413, or 401 before it), the body is not
		// read. Without this, net/http reads a declared body of up to 256
		// KiB before it sends any answer, and a client that waits for the
		// answer before sending hangs until the read timeout. Behind API
		// Gateway there is no connection to close.
		w.Header().Set("Connection", "close")
	}

	defer func() {
		if v := recover(); v != nil {
			if err, ok := v.(error); ok && errors.Is(err, http.ErrAbortHandler) {
				panic(v)
			}
			st.err = fmt.Errorf("panic: %v\n%s", v, debug.Stack())
			if sw.status == 0 {
				s.writeJSON(sw, http.StatusInternalServerError, internalBody)
			}
		}
		s.logRequest(r, id, st, sw.status, time.Since(start))
	}()

	if !cleanPath(r.URL.Path) {
		s.fail(sw, r, errNotFound)
		return
	}
	s.mux.ServeHTTP(sw, r)
}

func (s *server) logRequest(r *http.Request, id string, st *reqState, status int, latency time.Duration) {
	level := slog.LevelInfo
	attrs := []slog.Attr{
		slog.String("request_id", id),
		slog.String("method", r.Method),
		slog.String("route", st.route),
		slog.String("path", r.URL.Path),
		slog.Int("status", status),
		slog.Float64("latency_ms", float64(latency.Microseconds())/1000),
		slog.String("agent_id", st.agentID),
	}
	switch {
	case st.gone:
		attrs = append(attrs, slog.String("error", "the client closed the request before its answer"))
	case st.err != nil:
		level = slog.LevelError
		attrs = append(attrs, slog.String("error", st.err.Error()))
	}
	s.log.LogAttrs(r.Context(), level, "request", attrs...)
}

// cleanPath reports whether p is a path ServeMux would serve as it is,
// without redirecting to a cleaned form.
func cleanPath(p string) bool {
	if p == "" || p[0] != '/' {
		return false
	}
	c := path.Clean(p)
	if strings.HasSuffix(p, "/") && c != "/" {
		c += "/"
	}
	return c == p
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':' || c == '=' || c == '+' || c == '/') {
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// serveRoute authenticates, checks the role, bounds the body and runs the
// route's handler.
func (s *server) serveRoute(rt route) http.Handler {
	name := rt.Key()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		st := stateFrom(r.Context())
		st.route = name
		var p lease.Principal
		if rt.Access != deploy.Public {
			var err error
			p, err = s.authenticate(r)
			if err != nil {
				s.fail(w, r, err)
				return
			}
			st.agentID = p.AgentID
			if rt.Access == deploy.Admin && !p.Admin {
				s.fail(w, r, errForbidden("this route is for admins only"))
				return
			}
			if rt.Access == deploy.Admin {
				if err := s.stillAdmin(r, p, "this route is for admins only"); err != nil {
					s.fail(w, r, err)
					return
				}
			}
		}
		if r.ContentLength > MaxBodyBytes {
			// Refused on its declared length alone, before it is read.
			s.fail(w, r, errTooLarge)
			return
		}
		// A body without a declared length is cut at the limit as it is read.
		r.Body = http.MaxBytesReader(w, r.Body, MaxBodyBytes)
		if err := rt.handler(s, w, r, p); err != nil {
			s.fail(w, r, err)
		}
	})
}

var errTooLarge = &http.MaxBytesError{Limit: MaxBodyBytes}

func errForbidden(msg string) error { return errorf(errcode.Forbidden, "%s", msg) }

var errUnauthorized = &apiError{status: statusOf(errcode.Unauthorized), code: errcode.Unauthorized, message: errUnauthorizedBody.Error}

func (s *server) authenticate(r *http.Request) (lease.Principal, error) {
	if s.opts.Auth == nil {
		p, ok := principalFrom(r.Context())
		if !ok {
			return lease.Principal{}, errUnauthorized
		}
		return p, nil
	}
	header := r.Header.Values("Authorization")
	if len(header) != 1 {
		return lease.Principal{}, errUnauthorized // none, or two: whose request is it?
	}
	key, ok := auth.BearerKey(header[0])
	if !ok {
		return lease.Principal{}, errUnauthorized
	}
	p, err := s.opts.Auth.Authenticate(r.Context(), key)
	if errors.Is(err, lease.ErrUnauthorized) {
		return lease.Principal{}, errUnauthorized
	}
	if err != nil {
		return lease.Principal{}, fmt.Errorf("authenticate: %w", err)
	}
	if p.AgentID == "" {
		return lease.Principal{}, errUnauthorized
	}
	return p, nil
}

// stillAdmin is called before p, an admin, uses an admin's power: it
// refuses the request unless isAdmin finds p an admin still (403 forbidden
// saying forbidden when the key is p's but no longer an admin's).
func (s *server) stillAdmin(r *http.Request, p lease.Principal, forbidden string) error {
	admin, err := s.isAdmin(r, p)
	if err != nil {
		return err
	}
	if !admin {
		return errForbidden(forbidden)
	}
	return nil
}

// isAdmin reports whether p, an admin by its principal, is one still: with
// Options.RecheckAdmin it authenticates r's bearer key again (once per
// request) and refuses the request (401) unless the key still belongs to
// p. Without it, p is trusted.
func (s *server) isAdmin(r *http.Request, p lease.Principal) (bool, error) {
	st := stateFrom(r.Context())
	if s.opts.RecheckAdmin == nil || st.adminRechecked {
		return p.Admin, nil
	}
	header := r.Header.Values("Authorization")
	if len(header) != 1 {
		return false, errUnauthorized
	}
	key, ok := auth.BearerKey(header[0])
	if !ok {
		return false, errUnauthorized
	}
	now, err := s.opts.RecheckAdmin.Authenticate(r.Context(), key)
	if errors.Is(err, lease.ErrUnauthorized) {
		return false, errUnauthorized
	}
	if err != nil {
		return false, fmt.Errorf("authenticate: %w", err)
	}
	if now.AgentID != p.AgentID {
		return false, errUnauthorized
	}
	st.adminRechecked = now.Admin
	return now.Admin, nil
}

// statusClientGone is the status logged for a request whose client closed
// it before its answer.
const statusClientGone = 499

var internalBody = errorBody{Error: "the server failed to handle the request; it has been logged", Code: errcode.Internal}

// fail answers with the error's status and body; unexpected errors are
// logged with the request and answered with a generic 500.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil && errors.Is(err, context.Canceled) {
		// The client went away before its answer: nobody reads this one,
		// and no server fault is logged (499, as proxies record it).
		stateFrom(r.Context()).gone = true
		w.WriteHeader(statusClientGone)
		return
	}
	status, body, internal := errorResponse(err, r.PathValue("task_id"), s.now())
	if internal {
		stateFrom(r.Context()).err = err
		body = internalBody
	}
	if status == http.StatusServiceUnavailable {
		stateFrom(r.Context()).err = err // why, for the log line
		w.Header().Set("Retry-After", RetryAfter)
	}
	if body.RetryAfterSeconds != nil {
		w.Header().Set("Retry-After", strconv.FormatInt(*body.RetryAfterSeconds, 10))
	}
	if body.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(body.retryAfter, 10))
	}
	s.writeJSON(w, status, body)
}

func (s *server) writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		// Only our own types are encoded; this cannot happen.
		status = statusOf(errcode.Internal)
		data, _ = json.Marshal(errorBody{Error: "the server failed to encode its answer", Code: errcode.Internal})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(data, '\n'))
}
