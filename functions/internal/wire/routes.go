package wire

// Function names: each is built as dist/<name>/bootstrap.
const (
	Health     = "health"
	Agents     = "agents"
	Tasks      = "tasks"
	Checkouts  = "checkouts"
	Inbox      = "inbox"
	Authorizer = "authorizer"
	Sweeper    = "sweeper"
)

// Functions lists every function, in the order `make build` builds them.
var Functions = []string{Health, Agents, Tasks, Checkouts, Inbox, Authorizer, Sweeper}

// Route is one HTTP API route and the function that serves it.
type Route struct {
	Method, Path, Function string
}

// Routes maps every route of the API to its function. It is the same table
// as the stack's (infra/routes.go), which cannot be imported from here: the
// CDK app is its own module. TestRoutesCoverTheAPI checks that it covers
// every route the handler serves, exactly once, and the stack's
// TestRoutesMatchTheFunctions reads this literal to check the two tables
// agree: keep it a plain literal of three-field routes.
var Routes = []Route{
	{"GET", "/healthz", Health},

	{"POST", "/api/agents", Agents},
	{"GET", "/api/agents", Agents},
	{"DELETE", "/api/agents/{agent_id}", Agents},
	{"POST", "/api/heartbeat", Agents},

	{"POST", "/api/tasks", Tasks},
	{"GET", "/api/tasks", Tasks},
	{"GET", "/api/tasks/{task_id}", Tasks},
	{"GET", "/api/tasks/{task_id}/checkout", Tasks},
	{"GET", "/api/tasks/{task_id}/events", Tasks},
	{"POST", "/api/tasks/{task_id}/watch", Tasks},
	{"GET", "/api/checkouts", Tasks},

	{"POST", "/api/tasks/{task_id}/checkout", Checkouts},
	{"POST", "/api/tasks/{task_id}/renew", Checkouts},
	{"POST", "/api/tasks/{task_id}/release", Checkouts},
	{"POST", "/api/tasks/{task_id}/complete", Checkouts},
	{"POST", "/api/claim", Checkouts},

	{"GET", "/api/inbox", Inbox},
	{"DELETE", "/api/inbox/{message_id}", Inbox},
}
