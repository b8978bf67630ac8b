// Package schema is the single definition of the checkout service's DynamoDB
// tables: their names, keys, sparse global secondary indexes and TTL
// attributes. The lease store creates tables from it locally (EnsureTables)
// and the CDK app in infra/ builds the deployed tables from it, so the two can
// never drift apart.
//
// The package has no dependencies so that the CDK module can import it
// without pulling in the AWS SDK.
package schema

// KeyType is the DynamoDB scalar type of a key attribute.
type KeyType string

const (
	String KeyType = "S"
	Number KeyType = "N"
)

// Key names one key attribute and its type.
type Key struct {
	Name string
	Type KeyType
}

// Index is a global secondary index. Indexes marked Sparse hold only the
// items that carry their partition key attribute.
//
// An index is billed a write whenever a write of its table changes an entry's
// keys or projected attributes, sized by what it projects. So no index
// projects ALL of a task: each keeps its keys (KEYS_ONLY) or its keys and the
// few attributes its readers use (Include), and a transition that changes
// neither leaves the index alone. Readers that need more read the items
// themselves, consistently, which they do anyway: no decision trusts an
// index read.
type Index struct {
	Name         string
	PartitionKey Key
	SortKey      *Key
	Sparse       bool
	// Include lists the non-key attributes the index projects (INCLUDE);
	// with none it projects its keys and the table's only (KEYS_ONLY). All
	// projects every attribute (ALL), for small items whose readers want
	// them whole.
	Include []string
	All     bool
	// Purpose says which access pattern the index serves.
	Purpose string
}

// ProjectionType is the index's DynamoDB projection type: ALL, INCLUDE or
// KEYS_ONLY.
func (ix Index) ProjectionType() string {
	switch {
	case ix.All:
		return "ALL"
	case len(ix.Include) > 0:
		return "INCLUDE"
	}
	return "KEYS_ONLY"
}

// Table describes one table.
type Table struct {
	// Name is the logical name; the deployed name is Prefix + Name.
	Name         string
	PartitionKey Key
	SortKey      *Key
	Indexes      []Index
	// TTLAttribute, when set, holds an epoch-seconds number after which
	// DynamoDB may delete the item. TTL is garbage collection only: no
	// decision ever depends on whether an item has been deleted yet.
	TTLAttribute string
	// Stream turns on the table's change stream (NEW_AND_OLD_IMAGES), which
	// carries each transition's consequences to the stream function.
	Stream bool
}

// Logical table names.
const (
	// TasksTable is "tasks2" since its indexes stopped projecting whole
	// tasks: DynamoDB cannot change an index's projection or keys in place,
	// so the new indexes came with a new table, and `checkout-server
	// migrate` copies a table of the earlier schema ("tasks") into it.
	TasksTable = "tasks2"
	// TasksTableV1 is the tasks table of the earlier schema, which
	// `checkout-server migrate` copies from.
	TasksTableV1    = "tasks"
	AgentsTable     = "agents"
	HeartbeatsTable = "heartbeats"
	EventsTable     = "events"
	InboxTable      = "inbox"
	// WebhookDeadLettersTable keeps, in AWS, the webhook deliveries that
	// failed for good (the local server keeps them in a file instead).
	WebhookDeadLettersTable = "deadletters"
)

// Index names.
const (
	TasksByStatus      = "by_status"
	TasksByLeaseExpiry = "by_lease_expiry"
	TasksByClaim       = "by_claim"
	AgentsAll          = "all_agents"
	HeartbeatsByExpiry = "by_expiry"
	// EventsByFeed is the fleet feed: every archived event by time, across
	// tasks (GET /api/events).
	EventsByFeed = "by_feed"
)

// FeedShards is the number of partitions each hour of the fleet feed
// (EventsByFeed) is spread over: an event's feed_shard is its hour bucket
// and a shard chosen by its task, so no one partition takes every write of
// the fleet, and a reader Queries each shard of each hour it reads. A cycle
// (checkout and completion) archives two events: with 16 shards the
// busiest feed partition takes about 0.125 write units a cycle, so the feed
// caps a fleet at about 8,000 cycles a second.
const FeedShards = 16

// Shards is the number of partitions that the sweep indexes
// (TasksByLeaseExpiry, HeartbeatsByExpiry) spread their items over, so that no
// single index partition takes every lease write. The sweep queries each. A
// cycle puts a lease's entry and deletes it: with 16 shards about 0.125
// write units a cycle on the busiest partition.
//
// Shard counts may grow between deploys, never shrink: readers query every
// shard below the count, and items keep the shard they were written with
// (a task's claim shard is its hash modulo ClaimShards, which 16 keeps equal
// to what 8 gave).
const Shards = 16

// StatusShards is the number of partitions each status group of
// TasksByStatus is spread over ("open#<shard>" for todo and in_progress,
// "done#<shard>", "cancelled#<shard>"), so that the fleet's checkouts and
// completions do not all meet on one partition. A checkout or a release
// leaves the entry's key where it is (the task stays open) and updates its
// status; a completion moves it to done: two writes a cycle on the task's
// open shard, about 0.125 write units a cycle on the busiest with 16.
const StatusShards = 16

// ClaimShards is the number of partitions each queue's entries in
// TasksByClaim spread over ("<queue>#<shard>"), so that a hot queue does not
// put every create, grant and release on one index partition. A claim
// queries the head of each and merges them.
const ClaimShards = 4

// DefaultPrefix is prepended to logical table names unless configured.
const DefaultPrefix = "checkout-"

// Tables returns every table of the service.
func Tables() []Table {
	return []Table{
		{
			Name:         TasksTable,
			PartitionKey: Key{"task_id", String},
			Stream:       true,
			Indexes: []Index{
				{
					Name:         TasksByStatus,
					PartitionKey: Key{"status_shard", String},
					SortKey:      &Key{"created_key", String},
					Include:      []string{"queue", "status"},
					Purpose:      "list tasks by status in creation order: open (todo and in_progress, told apart by a filter), done and cancelled, each over StatusShards partitions (a queue's by a filter)",
				},
				{
					Name:         TasksByLeaseExpiry,
					PartitionKey: Key{"lease_shard", String},
					SortKey:      &Key{"lease_expires", Number},
					Sparse:       true,
					Include:      []string{"holder", "fence", "locked_at"},
					Purpose:      "live leases by expiry: list every checkout (one agent's by a filter); the sweep finds expired leases and dead agents' leases",
				},
				{
					Name:         TasksByClaim,
					PartitionKey: Key{"claim_shard", String},
					SortKey:      &Key{"claim_key", String},
					Sparse:       true,
					Include:      []string{"queue", "priority", "created_at"},
					Purpose:      "claimable tasks (todo, no lease) by queue and shard, highest priority then oldest first: claim's candidates",
				},
			},
		},
		{
			Name:         AgentsTable,
			PartitionKey: Key{"agent_id", String},
			Indexes: []Index{
				{
					Name:         AgentsAll,
					PartitionKey: Key{"kind", String},
					SortKey:      &Key{"agent_id", String},
					All:          true,
					Purpose:      "list every agent",
				},
			},
		},
		{
			Name:         HeartbeatsTable,
			PartitionKey: Key{"agent_id", String},
			TTLAttribute: "ttl",
			Indexes: []Index{
				{
					Name:         HeartbeatsByExpiry,
					PartitionKey: Key{"hb_shard", String},
					SortKey:      &Key{"hb_expires", Number},
					Sparse:       true,
					All:          true,
					Purpose:      "the sweep finds agents whose latest heartbeat has expired",
				},
			},
		},
		{
			Name:         EventsTable,
			PartitionKey: Key{"task_id", String},
			SortKey:      &Key{"seq", Number},
			TTLAttribute: "ttl",
			Indexes: []Index{
				{
					Name:         EventsByFeed,
					PartitionKey: Key{"feed_shard", String},
					SortKey:      &Key{"feed_key", String},
					Sparse:       true,
					All:          true,
					Purpose:      "the fleet feed: every transition across tasks by time, an hour bucket and shard a partition",
				},
			},
		},
		{
			Name:         InboxTable,
			PartitionKey: Key{"agent_id", String},
			SortKey:      &Key{"message_id", String},
			TTLAttribute: "ttl",
		},
		{
			Name:         WebhookDeadLettersTable,
			PartitionKey: Key{"event_id", String},
			SortKey:      &Key{"url", String},
			TTLAttribute: "ttl",
		},
	}
}

// Names maps logical table names to deployed names.
type Names struct {
	Prefix string
}

// Table returns the deployed name of a logical table.
func (n Names) Table(logical string) string {
	p := n.Prefix
	if p == "" {
		p = DefaultPrefix
	}
	return p + logical
}

// Env variables through which functions learn their table names. The CDK app
// sets them; the local server and tests leave them unset and use a prefix.
const (
	EnvTablePrefix = "CHECKOUT_TABLE_PREFIX"
)
