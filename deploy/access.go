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
//
// GetItem on schema.TasksTableV1, the tasks table of the earlier schema
// (which the stack does not create: it is left from an earlier deployment,
// or missing), is the migration guard's read of the marker
// `checkout-server migrate -aws` leaves there (see AwaitsMigration).
var Grants = map[string][]Grant{
	// DescribeTable: GET /healthz checks that DynamoDB answers, without
	// reading an item; GetItem on the earlier tasks table, that no
	// migration waits (see AwaitsMigration).
	Health: {
		{Table: schema.TasksTable, Actions: []string{"DescribeTable"}},
		{Table: schema.TasksTableV1, Actions: []string{"GetItem"}},
	},
	Authorizer: {
		{Table: schema.AgentsTable, Actions: []string{"GetItem"}},
	},
	// GetItem and UpdateItem on heartbeats, for the agents, tasks,
	// checkouts, claim and sweeper functions, also check and raise the record of
	// the shard counts in use (lease.RecordShards) at a cold start.
	Agents: {
		{Table: schema.TasksTableV1, Actions: []string{"GetItem"}},
		// GetItem: a removal reads the agent it removes, and an admin
		// route looks the caller's key up again (the authorizer's answer
		// is cached). BatchGetItem: a page of the agent listing confirms
		// what the all_agents index proposes.
		{Table: schema.AgentsTable, Actions: []string{"GetItem", "PutItem", "DeleteItem", "BatchGetItem"}, QueryIndexes: []string{schema.AgentsAll}},
		{Table: schema.HeartbeatsTable, Actions: []string{"GetItem", "PutItem", "UpdateItem", "BatchGetItem"}},
		// by_lease_expiry: a removed agent's leases, found by a filter.
		{Table: schema.TasksTable, Actions: []string{"GetItem", "UpdateItem"}, QueryIndexes: []string{schema.TasksByLeaseExpiry}},
		// Query and BatchWriteItem: a removed agent's inbox is emptied.
		{Table: schema.InboxTable, Actions: []string{"Query", "BatchWriteItem"}},
	},
	Tasks: {
		{Table: schema.TasksTableV1, Actions: []string{"GetItem"}},
		// BatchGetItem: listings confirm what the indexes propose, and read
		// the tasks' bodies. DeleteItem: a PATCH of the description or
		// metadata deletes the body it replaced.
		// by_claim: the oldest todo task of each queue, GET /api/queues.
		{Table: schema.TasksTable, Actions: []string{"PutItem", "GetItem", "UpdateItem", "BatchGetItem", "DeleteItem"}, QueryIndexes: []string{schema.TasksByStatus, schema.TasksByLeaseExpiry, schema.TasksByClaim}},
		// GetItem and BatchGetItem also read the queue counters and the
		// queue registry, which UpdateItem adds a task's new queue to
		// before its first task is written; GetItem reads the graph's
		// epoch and UpdateItem takes and gives back its lock, which a
		// PATCH naming blockers holds for its writes.
		{Table: schema.HeartbeatsTable, Actions: []string{"GetItem", "BatchGetItem", "UpdateItem"}},
		// by_feed: the fleet feed, GET /api/events. Query (the table): a
		// task's first watch, when the task was freed and changed again
		// before its watched flag, reads the task's events since its place
		// to find the freeing; GetItem: a watch that missed a freeing the
		// task has since moved past, recorded before freeing records
		// carried their message, reads it. Each tells its watcher itself.
		{Table: schema.EventsTable, Actions: []string{"Query", "GetItem"}, QueryIndexes: []string{schema.EventsByFeed}},
		// A watch is an item of its own: read the task's watches, place one.
		// PutItem, DeleteItem: a dependency's edge, put when a task names
		// its blocker and deleted when it no longer does (Query: a task's
		// dependents; GetItem: whether a task names a blocker that already
		// blocks the most tasks one may). A watch placed after a freeing
		// tells its watcher itself: PutItem the message, BatchGetItem its
		// tombstone, DeleteItem it again if the agent had deleted it.
		{Table: schema.InboxTable, Actions: []string{"Query", "GetItem", "BatchGetItem", "UpdateItem", "PutItem", "DeleteItem"}},
		// GetItem: an admin's cancel looks the caller's key up again (the
		// authorizer's answer is cached).
		{Table: schema.AgentsTable, Actions: []string{"GetItem"}},
	},
	Checkouts: {
		{Table: schema.TasksTableV1, Actions: []string{"GetItem"}},
		// BatchGetItem: a completion answers with the task and its body.
		// DeleteItem: a task created with a checkout whose id turns out
		// taken deletes the body it wrote.
		// No index: a checkout judges a lease on the task and its holder's
		// heartbeat item (the sweeper, agent removal and GET /api/checkouts,
		// in the tasks function, query those indexes), and claims, which
		// read by_claim, are the claim function's.
		{Table: schema.TasksTable, Actions: []string{"GetItem", "PutItem", "UpdateItem", "BatchGetItem", "DeleteItem"}},
		// UpdateItem: the receipts of claims that name their run id;
		// GetItem and BatchGetItem also read the queue registry's pages,
		// which a checkout that creates its task adds its queue to.
		{Table: schema.HeartbeatsTable, Actions: []string{"GetItem", "UpdateItem", "BatchGetItem"}},
		// GetItem: an admin acting for another agent looks that agent up,
		// and the caller's key up again (the authorizer's answer is
		// cached), as does a force release.
		{Table: schema.AgentsTable, Actions: []string{"GetItem"}},
		// Query: a named claim's retry whose receipt lost its grant finds it
		// in the tried tasks' trails; and a conflict's first watch of a
		// task, freed and changed again before its watched flag, reads
		// the task's events since its place to find the freeing. GetItem:
		// a conflict's watch that missed a freeing the task has since
		// moved past, recorded before freeing records carried their
		// message, reads it. Each tells its watcher itself.
		{Table: schema.EventsTable, Actions: []string{"Query", "GetItem"}},
		// A conflict that asks to watch: read the task's watches, place
		// one; and when the task was freed between the conflict and the
		// watch, tell the watcher itself (PutItem the message,
		// BatchGetItem its tombstone, DeleteItem it again if the agent
		// had deleted it).
		{Table: schema.InboxTable, Actions: []string{"Query", "UpdateItem", "PutItem", "BatchGetItem", "DeleteItem"}},
	},
	// Claim is the checkouts function's code serving POST /api/claim alone
	// (see Claim), and needs less: a claim creates no task and watches
	// none.
	Claim: {
		{Table: schema.TasksTableV1, Actions: []string{"GetItem"}},
		// by_claim: the candidates; UpdateItem grants one (or gives back a
		// second grant of one run id); GetItem: the task after a failed
		// condition, and a tried task's trail.
		{Table: schema.TasksTable, Actions: []string{"GetItem", "UpdateItem"}, QueryIndexes: []string{schema.TasksByClaim}},
		// GetItem: a dead holder's heartbeat and the claimer's own;
		// GetItem and UpdateItem: the receipts of claims that name their
		// run id, and the record of the shard counts. DeleteItem: a
		// receipt a removed agent left, which its id registered again
		// does not own.
		{Table: schema.HeartbeatsTable, Actions: []string{"GetItem", "UpdateItem", "DeleteItem"}},
		// GetItem: an admin's claim for another agent looks that agent up,
		// and the caller's key up again (the authorizer's answer is
		// cached).
		{Table: schema.AgentsTable, Actions: []string{"GetItem"}},
		// Query: a named claim's retry whose receipt lost its grant finds it
		// in the tried tasks' trails.
		{Table: schema.EventsTable, Actions: []string{"Query"}},
	},
	Inbox: {
		// A deleted message is marked (UpdateItem), given a tombstone
		// (PutItem), so that a replayed change cannot bring it back, and
		// deleted (DeleteItem); TTL removes the tombstone.
		{Table: schema.InboxTable, Actions: []string{"Query", "UpdateItem", "PutItem", "DeleteItem"}},
		// GetItem: the caller's heartbeat item, whose removal and
		// registration times hide a message that outlived a removal.
		{Table: schema.HeartbeatsTable, Actions: []string{"GetItem"}},
	},
	// Stream also reads the tasks table's stream (see StreamReaders).
	Stream: {
		// UpdateItem: a completion unblocks its dependents; BatchGetItem:
		// a new dependent's blockers, settled again; GetItem: a failed
		// release's error, for its event.
		{Table: schema.TasksTable, Actions: []string{"GetItem", "UpdateItem", "BatchGetItem"}},
		// BatchGetItem: watchers' heartbeats and the queue counters, which
		// UpdateItem moves; GetItem (and BatchGetItem): the queue registry,
		// which a queue's first count adds it to when it is missing.
		{Table: schema.HeartbeatsTable, Actions: []string{"GetItem", "BatchGetItem", "UpdateItem"}},
		{Table: schema.EventsTable, Actions: []string{"BatchWriteItem"}},
		// Messages; BatchGetItem: the tombstones of the messages a batch
		// wrote, and DeleteItem deletes a message again when its agent
		// had deleted it (a replay). Query and DeleteItem: the watches a
		// freeing tells, read and then used up.
		// UpdateItem: a watch placed again after the freeing stays, moved.
		{Table: schema.InboxTable, Actions: []string{"PutItem", "BatchGetItem", "Query", "DeleteItem", "UpdateItem"}},
	},
	// Notices also reads the tasks table's stream (see StreamReaders).
	Notices: {
		// GetItem: a failed release's error, for its notice's event.
		{Table: schema.TasksTable, Actions: []string{"GetItem"}},
		// Webhook deliveries that failed for good.
		{Table: schema.WebhookDeadLettersTable, Actions: []string{"PutItem"}},
	},
	Sweeper: {
		{Table: schema.TasksTableV1, Actions: []string{"GetItem"}},
		// by_lease_expiry also holds the delayed tasks whose not_before
		// passed, which UpdateItem ranks again.
		{Table: schema.TasksTable, Actions: []string{"GetItem", "UpdateItem"}, QueryIndexes: []string{schema.TasksByLeaseExpiry}},
		// by_expiry: the agents due to be judged; GetItem reads each one's
		// heartbeat, UpdateItem settles a death it came back from.
		{Table: schema.HeartbeatsTable, Actions: []string{"GetItem", "UpdateItem"}, QueryIndexes: []string{schema.HeartbeatsByExpiry}},
	},
}

// AwaitsMigration lists the functions that read or write today's tasks
// table on their own initiative and so wait, while a tasks table of the
// earlier schema exists without the marker of a finished `checkout-server
// migrate -aws`: the route functions answer 503 unavailable, the sweeper
// skips its runs. Each is granted GetItem on the earlier table for that
// check. The health function reads the same marker, so that GET /healthz
// answers 503 while they wait. The stream and notices functions are not
// among them: they only carry the consequences of changes already made to
// today's table, and before the migration the only ones are the
// migration's own copies (which they must see, and ignore as transitions).
var AwaitsMigration = map[string]bool{
	Agents:    true,
	Tasks:     true,
	Checkouts: true,
	Claim:     true,
	Sweeper:   true,
}

// PublishesEvents lists the functions that may put events on the service's
// event bus (events:PutEvents on that bus only): the notices function,
// which publishes every transition's notices.
var PublishesEvents = map[string]bool{
	Notices: true,
}

// StreamReaders lists the functions that read the tasks table's change
// stream, each through an event source mapping of its own: the stream
// function (the consequences) and the notices function (the notices).
// DynamoDB Streams serves at most two readers of a shard at once without
// throttling them: keep it at two.
var StreamReaders = map[string]bool{
	Stream:  true,
	Notices: true,
}
