// Package localstack runs a DynamoDB-compatible server on the local machine
// for development and tests.
//
// The server is dynalite (MIT licensed, pure JavaScript, in memory or on disk
// with LevelDB), pinned to an exact version by package.json and
// package-lock.json in this directory. Start installs it with `npm ci` on
// first use (the install is serialised across processes with a lock file, so
// the parallel test binaries of `go test ./...` can all ask for it at once)
// and runs it as a child process that dies with its parent.
//
// DYNAMODB_ENDPOINT overrides all of this: when it is set, Endpoint returns it
// untouched, so any DynamoDB-compatible server (LocalStack, a shared dynalite
// started by `make test`, or a user's own) can be used instead.
// CHECKOUT_LOCALSTACK_DIR overrides where this directory is found.
//
// # What the shim adds
//
// dynalite runs behind a shim (server.js loads shim/*.js before dynalite's
// CLI; the header of shim/index.js says how it patches dynalite) that makes
// it behave like DynamoDB where this project's correctness depends on it:
//
//   - ReturnValuesOnConditionCheckFailure (ALL_OLD or NONE) on PutItem,
//     UpdateItem and DeleteItem: a failed condition with ALL_OLD returns the
//     existing item in ConditionalCheckFailedException.Item (nil when there
//     is none). Other values are a ValidationException, as on AWS.
//
//   - Expressions parsed in linear time (shim/pegmemo.js). dynalite's
//     expression parsers are PEG.js parsers generated without a results
//     cache, so a condition's parse time doubled with each level of its
//     nesting, and the AWS SDK's expression builder nests: a checkout's
//     condition cost dynalite about 12 ms to parse, more than the rest of
//     the write. The shim memoizes them as PEG.js's --cache would, which
//     changes no result (TestNestedConditions). It also keeps each
//     successful parse (shim/parsecache.js): an expression sent again with
//     the same names and value types gets a copy with its own values, and
//     is judged as a new parse would be (TestParseCache).
//
//   - Index lag. DynamoDB's global secondary indexes are eventually
//     consistent; dynalite's are not, unless a lag is set. Each write's GSI
//     update is then applied that much later, in write order per table
//     (never reordered, even when the lag changes); the table itself, its
//     local secondary indexes, GetItem and base-table Query see the write at
//     once. The lag of a table is its most specific rule set at run time with
//     SetIndexLag (a table-name prefix; the raw action is X-Amz-Target
//     DynamoDBShim.SetIndexLag with {"TablePrefix": "p-", "LagMs": 250} or
//     {"TableName": "t", "LagMs": 250}), else the server's default:
//     Options.IndexLag, `cmd/dynalite --index-lag 500ms`, or
//     $DYNALITE_INDEX_LAG (which localstack/with-dynamodb.sh passes on), else
//     none. DynamoDBShim.IndexLagPending ({"TablePrefix": "p-"}; the Go
//     side is IndexLagPending) counts the entries still queued for a
//     prefix's tables, so that a test can wait for its indexes to catch
//     up rather than sleep. DeleteTable discards a table's queued entries, so a recreated
//     table never gets stale ones. Queued entries live in memory: a graceful
//     stop applies them first, a kill -9 of a --path server loses them, and
//     the next start on that directory rebuilds the indexes (below).
//
//   - DynamoDB Streams. CreateTable and UpdateTable accept
//     StreamSpecification; DescribeTable reports it with LatestStreamArn and
//     LatestStreamLabel (StreamARN reads it). Every successful write to such
//     a table (PutItem, UpdateItem, DeleteItem, BatchWriteItem) adds a record
//     with AWS's shape (eventName INSERT, MODIFY or REMOVE; Keys, NewImage
//     and OldImage as the StreamViewType says; increasing fixed-width
//     SequenceNumber); a put or update that leaves the item as it was adds
//     none, as on AWS. The same endpoint serves ListStreams, DescribeStream,
//     GetShardIterator (TRIM_HORIZON, LATEST, AT_SEQUENCE_NUMBER,
//     AFTER_SEQUENCE_NUMBER) and GetRecords (Limit, NextShardIterator) to
//     github.com/aws/aws-sdk-go-v2/service/dynamodbstreams pointed at it. A
//     stream has one shard, open until the stream is disabled or its table
//     deleted; records are kept 24 hours (at most 100,000 per stream). The
//     stream records the images as written, whatever the index lag. With
//     Options.Path a record is stored in the same LevelDB batch as its item
//     and before the write is answered, so a kill -9 and a restart on the
//     same directory lose no acknowledged write's record and keep the order.
//
//   - Comparisons with a missing attribute. In a ConditionExpression or a
//     FilterExpression, =, <, <=, >, >=, BETWEEN and IN are false when an
//     operand names an attribute the item does not have, so NOT (a >= b) is
//     true on an item with neither (shim/missing.js). dynalite held two
//     missing attributes equal, and a BETWEEN bound or IN list naming one
//     ended the server. <> keeps dynalite's answer: true when one operand is
//     missing, false when both are.
//
//   - Index entries as durable as their items. A write's secondary-index
//     entries are stored in the LevelDB batch of its item (and stream
//     record), so a kill -9 keeps all of them or none. With Options.Path a
//     start first repairs every table's indexes from its items (entries
//     missing, stale or left over, as a kill -9 under an index lag or an
//     older version of the shim leaves them), logging a line per index it
//     changed: 0.5 to 0.7 s for 10,000 items under two global indexes
//     (shim/indexes.js).
//
//   - Capacity, as DynamoDB bills it. dynalite reports the table's units only,
//     sizes items by JavaScript string length and bills nothing for index
//     writes or failed conditions. With the shim, ReturnConsumedCapacity
//     TOTAL and INDEXES (PutItem, UpdateItem, DeleteItem, BatchWriteItem,
//     GetItem, BatchGetItem, Query, Scan) answer what DynamoDB would: item
//     sizes by AWS's rules, 1 KB write units of the larger image, each
//     global secondary index entry put, deleted or updated sized by its
//     projection plus 100 bytes, 4 KB read units (half when eventually
//     consistent, at least one), Query and Scan by what they read before
//     filters and projections. The rules are cited in shim/meter.js. The
//     meter also keeps running totals by table, index and partition-key
//     value, failed conditional writes included (DynamoDB bills them but
//     reports nothing in the error): ReadCapacity and ResetCapacity read and
//     reset them by table-name prefix (X-Amz-Target
//     DynamoDBShim.ReadCapacity and DynamoDBShim.ResetCapacity with
//     {"TablePrefix": "p-"}). Index writes are billed when the table is
//     written, whatever the index lag. Capacity.Busiest names each index's
//     busiest partition, the one that caps a fleet at about 1,000 write
//     units a second.
//
//   - DynamoDBShim.ProcessUsage ({}) answers the CPU time the server's
//     process has used ({"UserMicros", "SystemMicros"}; the Go side is
//     ProcessUsage), so that a benchmark can say what a scenario cost the
//     server apart from its clients.
//
// dynalite still has no transactions and no UpdateTimeToLive; code that must
// run against it avoids them on the hot path.
//
// A test package that needs DynamoDB shares one server per test binary and
// isolates each test with its own table prefix (this module's tests do it
// through internal/testenv):
//
//	var endpoint string
//
//	func TestMain(m *testing.M) {
//		var stop func()
//		endpoint, stop = localstack.MustEndpoint()
//		code := m.Run()
//		stop()
//		os.Exit(code)
//	}
//
// Each test then creates its tables under a random prefix, for example
// schema.Names{Prefix: "t" + rand.Text()[:8] + "-"} with lease.EnsureTables,
// and can make that prefix's indexes lag to prove it trusts no index read:
//
//	if err := localstack.SetIndexLag(ctx, endpoint, prefix, 300*time.Millisecond); err != nil {
//		t.Skipf("no index lag at %s: %v", endpoint, err) // not this package's dynalite
//	}
package localstack
