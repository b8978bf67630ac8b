// Package deploy is the single description of how the service is deployed:
// its Lambda functions, the HTTP routes each one serves, and the DynamoDB
// access each one needs. The CDK app builds the stack from it (routes, IAM
// policies), the Lambda functions dispatch on it, and tests hold the code to
// it: a function that makes a DynamoDB call its grants do not cover fails
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

// Route is one HTTP API route and the function that serves it.
type Route struct {
	Method   string
	Path     string
	Function string
	// Public routes skip the Lambda authorizer.
	Public bool
}

// Key is the API Gateway route key, for example "GET /healthz".
func (r Route) Key() string { return r.Method + " " + r.Path }

// Routes is the single route table of the HTTP API: the stack creates exactly
// these routes and the template tests check exactly these.
var Routes = []Route{
	{"GET", "/healthz", Health, true},

	{"POST", "/api/agents", Agents, false},
	{"GET", "/api/agents", Agents, false},
	{"DELETE", "/api/agents/{agent_id}", Agents, false},
	{"POST", "/api/heartbeat", Agents, false},

	{"POST", "/api/tasks", Tasks, false},
	{"GET", "/api/tasks", Tasks, false},
	{"POST", "/api/tasks/batch", Tasks, false},
	{"GET", "/api/tasks/{task_id}", Tasks, false},
	{"PATCH", "/api/tasks/{task_id}", Tasks, false},
	{"GET", "/api/tasks/{task_id}/checkout", Tasks, false},
	{"GET", "/api/tasks/{task_id}/events", Tasks, false},
	{"POST", "/api/tasks/{task_id}/watch", Tasks, false},
	{"GET", "/api/checkouts", Tasks, false},
	{"GET", "/api/events", Tasks, false},

	{"POST", "/api/tasks/{task_id}/checkout", Checkouts, false},
	{"POST", "/api/tasks/{task_id}/renew", Checkouts, false},
	{"POST", "/api/tasks/{task_id}/release", Checkouts, false},
	{"POST", "/api/tasks/{task_id}/complete", Checkouts, false},
	{"POST", "/api/claim", Checkouts, false},

	{"GET", "/api/inbox", Inbox, false},
	{"DELETE", "/api/inbox/{message_id}", Inbox, false},

	// The dashboard's static files (package ui), public: the page signs in
	// with an API key of its own and calls the routes above.
	{"GET", "/", Health, true},
	{"GET", "/ui/{proxy+}", Health, true},
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
