// Package schema is the single definition of the checkout service's DynamoDB
// tables: their names, keys, sparse global secondary indexes and TTL
// attributes. The lease store creates tables from it locally (EnsureTables)
// and the CDK app in infra/ builds the deployed tables from it, so the two can
// never drift apart.
//
// The package depends on the standard library only, so that the CDK module can import it
// without pulling in the AWS SDK.
package schema

import (
	"fmt"
	"strconv"
	"strings"
)

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

// The shard counts are deploy-time settings (ShardCounts, below); these
// constants are their defaults.

// FeedShards is the default number of partitions each hour of the fleet
// feed (EventsByFeed) is spread over: an event's feed_shard is its hour
// bucket and a shard chosen by its task, so no one partition takes every
// write of the fleet, and a reader Queries each shard of each hour it
// reads. A cycle (checkout and completion) archives two events: with 16
// shards the busiest feed partition takes about 0.125 write units a cycle,
// so the feed caps a fleet at about 8,000 cycles a second.
const FeedShards = 16

// Shards is the default number of partitions that the sweep indexes
// (TasksByLeaseExpiry, HeartbeatsByExpiry) spread their items over, so that
// no single index partition takes every lease write. The sweep queries
// each. A cycle puts a lease's entry and deletes it: with 16 shards about
// 0.125 write units a cycle on the busiest partition.
const Shards = 16

// StatusShards is the default number of partitions each status group of
// TasksByStatus is spread over ("open#<shard>" for blocked,
// "done#<shard>", "cancelled#<shard>", "failed#<shard>"), so that the
// fleet's completions do not all meet on one partition. A todo or
// in_progress task has no entry (they are listed from TasksByClaim and
// TasksByLeaseExpiry), so a checkout, a release and a sweep's ending do
// not write this index; a completion puts the task's done entry: one
// write a cycle, about 0.0625 write units a cycle on the busiest with 16.
const StatusShards = 16

// ClaimShards is the default number of partitions each queue's entries in
// TasksByClaim spread over ("<queue>#<shard>"), so that a hot queue does
// not put every create, grant and release on one index partition. A claim
// queries the head of each and merges them.
const ClaimShards = 4

// Bounds of the shard counts.
const (
	// MaxShards bounds the lease and feed counts: a sweep, a listing of
	// every checkout and a feed read make one Query per shard.
	MaxShards = 256
	// MaxStatusShards bounds the status count: a task listing's cursor
	// holds one position per status shard, and the longest it can be must
	// fit the API's cursor (4096 bytes) with task ids of 128 characters.
	MaxStatusShards = 20
	// MaxClaimShards bounds the claim count: a claim makes one Query per
	// claim shard of each queue it names.
	MaxClaimShards = 16
)

// ShardCounts are how many partitions each sharded index key spreads over.
// They are deploy-time settings (CDK context leaseShards, statusShards,
// claimShards, feedShards; the environment variables EnvLeaseShards and
// the others below); every process of a deployment must use the same.
//
// An item keeps the shard it was written with, and a reader queries every
// shard below the count. So a count may grow between deploys (items
// written before stay found, and new writes spread wider), but must never
// shrink: items in the shards above a smaller count would no longer be
// read (leases not swept, tasks not listed or claimed, events not in the
// feed). A deployment records the largest counts it has used
// (lease.RecordShards), and a process started with a smaller one is
// refused (ShardCounts.Below, *ShrinkError).
//
// What each buys and costs:
//
//   - Lease (default Shards, 16): lease_shard of the lease-expiry index
//     and hb_shard of the heartbeats index. The busiest partition takes
//     about 2/Lease write units per checkout cycle; the sweep (twice per
//     run) and a listing of every checkout make one Query per shard.
//   - Status (default StatusShards, 16, at most MaxStatusShards):
//     status_shard "<group>#<n>" of blocked, done, cancelled and failed
//     tasks. The busiest partition takes about 1/Status write units a
//     cycle; a listing of those statuses reads every shard.
//   - Claim (default ClaimShards, 4, at most MaxClaimShards):
//     claim_shard and claim_home "<queue>#<n>". A claim costs one Query
//     per claim shard of each queue it names, read at once: its budget of
//     5 requests and 3 read units for one queue holds up to 4; a waiting
//     claim repeats them every look, and GET /api/queues makes one per
//     shard per priority that has todo tasks.
//   - Feed (default FeedShards, 16): feed_shard "<hour>#<n>" of the
//     fleet feed. The busiest partition takes about 2/Feed write units a
//     cycle; a feed read makes one Query per shard of each hour it reads.
type ShardCounts struct {
	Lease, Status, Claim, Feed int
}

// DefaultShards are the shard counts without settings.
func DefaultShards() ShardCounts {
	return ShardCounts{Lease: Shards, Status: StatusShards, Claim: ClaimShards, Feed: FeedShards}
}

// OrDefault is c with each zero count replaced by its default.
func (c ShardCounts) OrDefault() ShardCounts {
	d := DefaultShards()
	if c.Lease == 0 {
		c.Lease = d.Lease
	}
	if c.Status == 0 {
		c.Status = d.Status
	}
	if c.Claim == 0 {
		c.Claim = d.Claim
	}
	if c.Feed == 0 {
		c.Feed = d.Feed
	}
	return c
}

// Validate reports the first count out of its bounds (zero counts are the
// defaults, and valid).
func (c ShardCounts) Validate() error {
	for _, f := range c.fields() {
		if *f.n != 0 && (*f.n < 1 || *f.n > f.max) {
			return fmt.Errorf("%s shard count %d: want 1 to %d", f.name, *f.n, f.max)
		}
	}
	return nil
}

type shardField struct {
	name, env string
	n         *int
	max       int
}

func (c *ShardCounts) fields() []shardField {
	return []shardField{
		{"lease", EnvLeaseShards, &c.Lease, MaxShards},
		{"status", EnvStatusShards, &c.Status, MaxStatusShards},
		{"claim", EnvClaimShards, &c.Claim, MaxClaimShards},
		{"feed", EnvFeedShards, &c.Feed, MaxShards},
	}
}

// ShrinkError says a count is below the one a deployment used before:
// readers would no longer query the shards above it.
type ShrinkError struct {
	Name, Env       string
	Count, Recorded int
}

func (e *ShrinkError) Error() string {
	return fmt.Sprintf("%s shard count %d is below %d, which this deployment has used (%s, CDK context %sShards): "+
		"items in the shards from %d up would no longer be read; counts may grow between deploys, never shrink: set it to %d or more",
		e.Name, e.Count, e.Recorded, e.Env, e.Name, e.Count, e.Recorded)
}

// Below returns a *ShrinkError for the first count of c (defaults filled
// in) below recorded's, and nil when none is.
func (c ShardCounts) Below(recorded ShardCounts) error {
	c = c.OrDefault()
	rf := recorded.fields()
	for i, f := range c.fields() {
		if *f.n < *rf[i].n {
			return &ShrinkError{Name: f.name, Env: f.env, Count: *f.n, Recorded: *rf[i].n}
		}
	}
	return nil
}

// Environment variables of the shard counts, which the CDK app sets on
// every function and the local server reads; unset means the default.
const (
	EnvLeaseShards  = "CHECKOUT_LEASE_SHARDS"
	EnvStatusShards = "CHECKOUT_STATUS_SHARDS"
	EnvClaimShards  = "CHECKOUT_CLAIM_SHARDS"
	EnvFeedShards   = "CHECKOUT_FEED_SHARDS"
)

// ShardsFromEnv reads the shard counts from the environment (getenv is
// os.Getenv, or a test's): each unset variable is its default, and a
// value that is not a whole number within its bounds is an error that
// names the variable.
func ShardsFromEnv(getenv func(string) string) (ShardCounts, error) {
	c := DefaultShards()
	for _, f := range c.fields() {
		v := strings.TrimSpace(getenv(f.env))
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > f.max {
			return ShardCounts{}, fmt.Errorf("%s=%q: want a whole number from 1 to %d (default %d; counts may grow between deploys, never shrink)", f.env, v, f.max, *f.n)
		}
		*f.n = n
	}
	return c, nil
}

// Env is the environment that gives a process these counts (every
// variable, defaults included, so that all processes agree).
func (c ShardCounts) Env() map[string]string {
	c = c.OrDefault()
	out := map[string]string{}
	for _, f := range c.fields() {
		out[f.env] = strconv.Itoa(*f.n)
	}
	return out
}

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
					Sparse:       true,
					Include:      []string{"queue", "status"},
					Purpose:      "list blocked, done, cancelled and failed tasks in creation order, each over the status shard count's partitions (a queue's by a filter); todo and in_progress tasks have no entry",
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
