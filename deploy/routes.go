// Package deploy is the single description of the service's routes and of
// how it is deployed: every HTTP route with its method, path, access level,
// operation and the Lambda function that serves it, and the DynamoDB access
// each function needs. Everything is built from it: the HTTP handler's mux
// (package httpapi, in the local server and in every function), each
// function's share of the routes, the client's paths, and the CDK app's
// routes and IAM policies. Tests hold the code to it: a function that makes
// a DynamoDB call its grants do not cover fails the functions' tests before
// it can fail in AWS, and a route the OpenAPI document lacks fails
// httpapi's.
//
// It sits at the root, beside the packages that import it, and depends only
// on lease/schema: the HTTP layer, the functions and the CDK module all
// import it, and it imports none of them.
package deploy

import (
	"net/url"
	"strings"
	"time"
)

// Function names. Each is built by `make build` as dist/<name>/bootstrap.
const (
	Health    = "health"
	Agents    = "agents"
	Tasks     = "tasks"
	Checkouts = "checkouts"
	// Claim serves POST /api/claim alone, apart from Checkouts: a claim
	// that waits holds its invocation for up to 20 s, and waiting agents
	// must not use up the concurrency that renewals, releases and
	// completions need (a throttled renewal is a lease lost).
	Claim      = "claim"
	Inbox      = "inbox"
	Authorizer = "authorizer"
	Sweeper    = "sweeper"
	// Stream reads the tasks table's change stream and carries each
	// transition's consequences: archived events and their feed, inbox
	// messages, queue counts, unblocking.
	Stream = "stream"
	// Notices reads the same stream on a mapping of its own and publishes
	// each transition's notices (EventBridge, webhooks), so that a slow
	// receiver never delays what Stream does.
	Notices = "notices"
)

// Functions lists every Lambda function of the stack, in a stable order.
var Functions = []string{Health, Agents, Tasks, Checkouts, Claim, Inbox, Authorizer, Sweeper, Stream, Notices}

// AuthorizerCacheTTL is how long API Gateway caches the Lambda
// authorizer's answer for one Authorization header (the stack's authorizer
// cache time: infra/stack.go's authorizerCacheSecs is taken from it).
// For that long a removed agent's key still passes as its id: the
// functions refuse to register the id again until then, and look at an
// admin's key again whenever it uses an admin's power.
const AuthorizerCacheTTL = 30 * time.Second

// Access is who may call a route.
type Access int

const (
	// Agent routes take any registered agent's key.
	Agent Access = iota
	// Admin routes take an admin's key; other agents get 403 forbidden.
	Admin
	// Public routes take no key: they skip the Lambda authorizer.
	Public
)

// Route is one HTTP API route: its method and path (API Gateway's syntax,
// {name} and the greedy {name+}), who may call it, the function that
// serves it, and its operation: the operationId the OpenAPI document gives
// it, by which the HTTP layer finds its handler (empty for the dashboard's
// files).
type Route struct {
	Method   string
	Path     string
	Access   Access
	Function string
	Op       string
}

// TaskCheckoutPath is the path of a task's lease: POST takes it, GET says
// who holds it. Clients fill it with Expand.
const TaskCheckoutPath = "/api/tasks/{task_id}/checkout"

// Key is the API Gateway route key, for example "GET /healthz".
func (r Route) Key() string { return r.Method + " " + r.Path }

// Routes is the route table of the HTTP API, the only one: the handler
// serves exactly these routes (a function only its own), and the stack
// creates exactly these.
var Routes = []Route{
	{"GET", "/healthz", Public, Health, "healthz"},

	{"POST", "/api/agents", Admin, Agents, "registerAgent"},
	{"GET", "/api/agents", Admin, Agents, "listAgents"},
	{"DELETE", "/api/agents/{agent_id}", Admin, Agents, "removeAgent"},
	{"POST", "/api/heartbeat", Agent, Agents, "heartbeat"},
	{"GET", "/api/whoami", Agent, Agents, "whoami"},

	{"POST", "/api/tasks", Agent, Tasks, "createTask"},
	{"GET", "/api/tasks", Agent, Tasks, "listTasks"},
	{"POST", "/api/tasks/batch", Agent, Tasks, "createTasks"},
	{"GET", "/api/tasks/{task_id}", Agent, Tasks, "getTask"},
	{"PATCH", "/api/tasks/{task_id}", Agent, Tasks, "updateTask"},
	{"GET", TaskCheckoutPath, Agent, Tasks, "lockStatus"},
	{"GET", "/api/tasks/{task_id}/events", Agent, Tasks, "events"},
	{"POST", "/api/tasks/{task_id}/watch", Agent, Tasks, "watch"},
	{"GET", "/api/checkouts", Agent, Tasks, "listCheckouts"},
	{"GET", "/api/events", Agent, Tasks, "feed"},
	{"GET", "/api/queues", Agent, Tasks, "listQueues"},

	{"POST", TaskCheckoutPath, Agent, Checkouts, "checkout"},
	{"POST", "/api/tasks/{task_id}/renew", Agent, Checkouts, "renew"},
	{"POST", "/api/tasks/{task_id}/release", Agent, Checkouts, "release"},
	{"POST", "/api/tasks/{task_id}/complete", Agent, Checkouts, "complete"},
	{"POST", "/api/claim", Agent, Claim, "claim"},

	{"GET", "/api/inbox", Agent, Inbox, "inbox"},
	{"DELETE", "/api/inbox/{message_id}", Agent, Inbox, "deleteMessage"},

	// The dashboard's static files (package ui), public: the page signs in
	// with an API key of its own and calls the routes above.
	{"GET", "/", Public, Health, ""},
	{"GET", "/ui/{proxy+}", Public, Health, ""},
}

// ByKey returns the route whose key (see Key) is key.
func ByKey(key string) (Route, bool) {
	for _, r := range Routes {
		if r.Key() == key {
			return r, true
		}
	}
	return Route{}, false
}

// Expand fills path's parameters, in order, with values, each escaped as a
// path segment: Expand(TaskCheckoutPath, "task-d4e5") is
// /api/tasks/task-d4e5/checkout.
func Expand(path string, values ...string) string {
	var b strings.Builder
	for {
		i := strings.IndexByte(path, '{')
		j := strings.IndexByte(path, '}')
		if i < 0 || j < i || len(values) == 0 {
			b.WriteString(path)
			return b.String()
		}
		b.WriteString(path[:i])
		b.WriteString(url.PathEscape(values[0]))
		path, values = path[j+1:], values[1:]
	}
}

// Dashboard reports whether r serves the dashboard's static files rather
// than the JSON API.
func (r Route) Dashboard() bool {
	return r.Function == Health && (r.Path == "/" || strings.HasPrefix(r.Path, "/ui/"))
}

// Pattern is the route as a net/http ServeMux pattern: "GET /" matches
// the root alone ("GET /{$}"), and API Gateway's greedy {name+} is
// ServeMux's {name...}.
func (r Route) Pattern() string {
	p := r.Path
	if p == "/" {
		p = "/{$}"
	}
	if i := strings.LastIndex(p, "+}"); i >= 0 && i == len(p)-2 {
		p = p[:i] + "...}"
	}
	return r.Method + " " + p
}
