// Package deploy is the single description of the service's routes and of
// how it is deployed: every HTTP route with its method, path, access level
// and the Lambda function that serves it, and the DynamoDB access each
// function needs. Everything is built from it: the HTTP handler's mux
// (package httpapi, locally and in every function), each function's share of
// the routes, and the CDK app's routes and IAM policies. Tests hold the code
// to it: a function that makes a DynamoDB call its grants do not cover fails
// functions/internal/wire's tests before it can fail in AWS.
//
// The package depends only on lease/schema, so the CDK module can import it.
package deploy

import "strings"

// Function names. Each is built by `make build` as dist/<name>/bootstrap.
const (
	Health     = "health"
	Agents     = "agents"
	Tasks      = "tasks"
	Checkouts  = "checkouts"
	Inbox      = "inbox"
	Authorizer = "authorizer"
	Sweeper    = "sweeper"
	// Stream reads the tasks table's change stream and carries each
	// transition's consequences: archived events, inbox messages, notices.
	Stream = "stream"
)

// Functions lists every Lambda function of the stack, in a stable order.
var Functions = []string{Health, Agents, Tasks, Checkouts, Inbox, Authorizer, Sweeper, Stream}

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
// {name} and the greedy {name+}), who may call it and the function that
// serves it.
type Route struct {
	Method   string
	Path     string
	Access   Access
	Function string
}

// Key is the API Gateway route key, for example "GET /healthz".
func (r Route) Key() string { return r.Method + " " + r.Path }

// Routes is the route table of the HTTP API, the only one: the handler
// serves exactly these routes (a function only its own), and the stack
// creates exactly these.
var Routes = []Route{
	{"GET", "/healthz", Public, Health},

	{"POST", "/api/agents", Admin, Agents},
	{"GET", "/api/agents", Admin, Agents},
	{"DELETE", "/api/agents/{agent_id}", Admin, Agents},
	{"POST", "/api/heartbeat", Agent, Agents},

	{"POST", "/api/tasks", Agent, Tasks},
	{"GET", "/api/tasks", Agent, Tasks},
	{"POST", "/api/tasks/batch", Agent, Tasks},
	{"GET", "/api/tasks/{task_id}", Agent, Tasks},
	{"PATCH", "/api/tasks/{task_id}", Agent, Tasks},
	{"GET", "/api/tasks/{task_id}/checkout", Agent, Tasks},
	{"GET", "/api/tasks/{task_id}/events", Agent, Tasks},
	{"POST", "/api/tasks/{task_id}/watch", Agent, Tasks},
	{"GET", "/api/checkouts", Agent, Tasks},
	{"GET", "/api/events", Agent, Tasks},
	{"GET", "/api/queues", Agent, Tasks},

	{"POST", "/api/tasks/{task_id}/checkout", Agent, Checkouts},
	{"POST", "/api/tasks/{task_id}/renew", Agent, Checkouts},
	{"POST", "/api/tasks/{task_id}/release", Agent, Checkouts},
	{"POST", "/api/tasks/{task_id}/complete", Agent, Checkouts},
	{"POST", "/api/claim", Agent, Checkouts},

	{"GET", "/api/inbox", Agent, Inbox},
	{"DELETE", "/api/inbox/{message_id}", Agent, Inbox},

	// The dashboard's static files (package ui), public: the page signs in
	// with an API key of its own and calls the routes above.
	{"GET", "/", Public, Health},
	{"GET", "/ui/{proxy+}", Public, Health},
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
