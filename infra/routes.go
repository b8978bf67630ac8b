package main

// Function names. Each is built by `make build` as dist/<name>/bootstrap.
const (
	FnHealth     = "health"
	FnAgents     = "agents"
	FnTasks      = "tasks"
	FnCheckouts  = "checkouts"
	FnInbox      = "inbox"
	FnAuthorizer = "authorizer"
	FnSweeper    = "sweeper"
)

// Functions lists every Lambda function of the stack, in a stable order.
var Functions = []string{FnHealth, FnAgents, FnTasks, FnCheckouts, FnInbox, FnAuthorizer, FnSweeper}

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
	{"GET", "/healthz", FnHealth, true},

	{"POST", "/api/agents", FnAgents, false},
	{"GET", "/api/agents", FnAgents, false},
	{"DELETE", "/api/agents/{agent_id}", FnAgents, false},
	{"POST", "/api/heartbeat", FnAgents, false},

	{"POST", "/api/tasks", FnTasks, false},
	{"GET", "/api/tasks", FnTasks, false},
	{"GET", "/api/tasks/{task_id}", FnTasks, false},
	{"GET", "/api/tasks/{task_id}/checkout", FnTasks, false},
	{"GET", "/api/tasks/{task_id}/events", FnTasks, false},
	{"POST", "/api/tasks/{task_id}/watch", FnTasks, false},
	{"GET", "/api/checkouts", FnTasks, false},

	{"POST", "/api/tasks/{task_id}/checkout", FnCheckouts, false},
	{"POST", "/api/tasks/{task_id}/renew", FnCheckouts, false},
	{"POST", "/api/tasks/{task_id}/release", FnCheckouts, false},
	{"POST", "/api/tasks/{task_id}/complete", FnCheckouts, false},
	{"POST", "/api/claim", FnCheckouts, false},

	{"GET", "/api/inbox", FnInbox, false},
	{"DELETE", "/api/inbox/{message_id}", FnInbox, false},
}
