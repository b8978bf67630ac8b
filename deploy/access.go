package deploy

import "github.com/checkout-dev/checkout/lease/schema"

// Grant is what one function may do to one table. Actions apply to the table
// itself (its ARN); QueryIndexes lists the global secondary indexes the
// function may Query (their ARNs are <table-arn>/index/<name>).
type Grant struct {
	Table        string
	Actions      []string
	QueryIndexes []string
}

// Grants is the single least-privilege map of the stack: for each function,
// exactly the DynamoDB actions, tables and indexes it uses. The stack writes
// one IAM statement per entry and the template tests check the policies
// against this map, so nothing else can slip in. Scan is never granted.
// GetItem on tasks, for functions that otherwise only update tasks, is the
// read that follows a failed condition when the server did not return the
// item with it.
var Grants = map[string][]Grant{
	Authorizer: {
		{Table: schema.AgentsTable, Actions: []string{"GetItem"}},
	},
	Agents: {
		{Table: schema.AgentsTable, Actions: []string{"PutItem", "DeleteItem"}, QueryIndexes: []string{schema.AgentsAll}},
		{Table: schema.HeartbeatsTable, Actions: []string{"GetItem", "PutItem", "UpdateItem", "BatchGetItem"}},
		{Table: schema.TasksTable, Actions: []string{"GetItem", "UpdateItem"}, QueryIndexes: []string{schema.TasksByHolder}},
		// Query and BatchWriteItem: a removed agent's inbox is emptied.
		{Table: schema.InboxTable, Actions: []string{"Query", "BatchWriteItem"}},
	},
	Tasks: {
		// BatchGetItem: listings confirm what the indexes propose.
		// by_claim: the oldest todo task of each queue, GET /api/queues.
		{Table: schema.TasksTable, Actions: []string{"PutItem", "GetItem", "UpdateItem", "BatchGetItem"}, QueryIndexes: []string{schema.TasksByStatus, schema.TasksByLeaseExpiry, schema.TasksByHolder, schema.TasksByClaim}},
		// GetItem and BatchGetItem also read the queue counters.
		{Table: schema.HeartbeatsTable, Actions: []string{"GetItem", "BatchGetItem"}},
		// by_feed: the fleet feed, GET /api/events.
		{Table: schema.EventsTable, Actions: []string{"Query"}, QueryIndexes: []string{schema.EventsByFeed}},
	},
	Checkouts: {
		{Table: schema.TasksTable, Actions: []string{"GetItem", "PutItem", "UpdateItem"}, QueryIndexes: []string{schema.TasksByClaim, schema.TasksByLeaseExpiry, schema.TasksByHolder}},
		// UpdateItem: the receipts of claims that name their run id.
		{Table: schema.HeartbeatsTable, Actions: []string{"GetItem", "UpdateItem"}, QueryIndexes: []string{schema.HeartbeatsByExpiry}},
		{Table: schema.AgentsTable, Actions: []string{"GetItem"}},
	},
	Inbox: {
		// UpdateItem: a deleted message is marked, so that a replayed change
		// cannot bring it back; TTL removes it.
		{Table: schema.InboxTable, Actions: []string{"Query", "UpdateItem"}},
	},
	// Stream also reads the tasks table's stream (see StreamReaders).
	Stream: {
		// BatchGetItem: watchers' heartbeats and the queue counters, which
		// UpdateItem moves.
		{Table: schema.HeartbeatsTable, Actions: []string{"BatchGetItem", "UpdateItem"}},
		{Table: schema.EventsTable, Actions: []string{"BatchWriteItem"}},
		{Table: schema.InboxTable, Actions: []string{"PutItem"}},
		// Webhook deliveries that failed for good.
		{Table: schema.WebhookDeadLettersTable, Actions: []string{"PutItem"}},
	},
	Sweeper: {
		{Table: schema.TasksTable, Actions: []string{"GetItem", "UpdateItem"}, QueryIndexes: []string{schema.TasksByLeaseExpiry, schema.TasksByHolder}},
		{Table: schema.HeartbeatsTable, Actions: []string{"GetItem", "UpdateItem"}, QueryIndexes: []string{schema.HeartbeatsByExpiry}},
	},
}

// PublishesEvents lists the functions that may put events on the service's
// event bus (events:PutEvents on that bus only): the stream function, which
// publishes every transition's notices.
var PublishesEvents = map[string]bool{
	Stream: true,
}

// StreamReaders lists the functions that read the tasks table's change
// stream (its event source mapping): the stream function alone.
var StreamReaders = map[string]bool{
	Stream: true,
}
