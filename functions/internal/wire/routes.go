package wire

import "github.com/checkout-dev/checkout/deploy"

// Function names: each is built as dist/<name>/bootstrap. The functions, their
// routes and their grants are defined once, in package deploy, which the
// stack is built from too.
const (
	Health     = deploy.Health
	Agents     = deploy.Agents
	Tasks      = deploy.Tasks
	Checkouts  = deploy.Checkouts
	Inbox      = deploy.Inbox
	Authorizer = deploy.Authorizer
	Sweeper    = deploy.Sweeper
	Stream     = deploy.Stream
)

// Route is one HTTP API route and the function that serves it.
type Route = deploy.Route

var (
	// Functions lists every function, in the order `make build` builds them.
	Functions = deploy.Functions
	// Routes maps every route of the API to its function.
	Routes = deploy.Routes
)
