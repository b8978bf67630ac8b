package main

import "github.com/checkout-dev/checkout/deploy"

// The stack is built from package deploy: the functions, the routes each
// serves and the DynamoDB access each needs are defined there once, for the
// stack, the functions themselves and the tests.
const (
	FnHealth     = deploy.Health
	FnAgents     = deploy.Agents
	FnTasks      = deploy.Tasks
	FnCheckouts  = deploy.Checkouts
	FnInbox      = deploy.Inbox
	FnAuthorizer = deploy.Authorizer
	FnSweeper    = deploy.Sweeper
	FnStream     = deploy.Stream
)

type (
	Route = deploy.Route
	Grant = deploy.Grant
)

var (
	Functions       = deploy.Functions
	Routes          = deploy.Routes
	Access          = deploy.Access
	PublishesEvents = deploy.PublishesEvents
	StreamReaders   = deploy.StreamReaders
)
