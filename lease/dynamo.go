package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Access patterns: GetItem, conditional write or Query, never Scan (but
// in the operators' commands, migrate.go, recount.go and stray_bodies.go).
//
// One DynamoDB request per transition on the request path; what a
// transition causes follows from the tasks table's change stream (see
// "One write per transition").
//
//	checkout, claim     UpdateItem on tasks (the decision; it takes over an
//	                    expired lease in the same write)
//	  dead holder       + GetItem of its heartbeat (once: a death is
//	                    remembered) + UpdateItem pinned to the ended lease
//	  blocked           the failed UpdateItem + BatchGetItem of its blockers
//	                    (+ when all it waits on are done, the UpdateItem that
//	                    unblocks and grants it, checkout.go)
//	  conflict          the failed UpdateItem, which returns the holder (ALL_OLD);
//	                    its heartbeat comes from the alive cache once read
//	renew, release,     UpdateItem, after the caller's heartbeat, which the alive
//	  complete          cache holds for a second after any read or heartbeat
//	  retried           the failed UpdateItem, which returns the ending it repeats
//	force release       GetItem task + holder's heartbeat (cached) + UpdateItem
//	task, lock status   GetItem task (+ holder's heartbeat, cached)
//	list tasks          Query per shard, at once (todo: by_claim, each queue
//	                    walked, + GetItem of the queue registry when no queue
//	                    is named; in_progress: by_lease_expiry; the others:
//	                    by_status) + BatchGetItem of the tasks (+ holders'
//	                    heartbeats); list.go
//	list checkouts      Query by_lease_expiry per shard (one agent's: filtered) + BatchGetItem
//	                    of the tasks (+ holders' heartbeats)
//	claim candidates    at once: Query by_claim per shard of each queue (its
//	                    head); expired and dead holders' leases reach
//	                    by_claim when the sweep ends them
//	claim, waiting      per look after the first: Query by_claim per shard of
//	                    each queue only
//	create (batch)      PutItem (one per task, concurrently; the failed
//	                    condition returns the existing task); a queue new to
//	                    this process: + GetItem of the queue registry, and an
//	                    UpdateItem of it when the queue is new to it too
//	PATCH               GetItem + UpdateItem pinned to the version read
//	                    (+ holder's heartbeat, cached, when a lease is on it;
//	                    + PutItem and DeleteItem of the graph's lock when it
//	                    names blockers)
//	claim with run_id   + GetItem of its receipt, UpdateItem of it per try
//	                    (a retry whose receipt lost its grant: + the tried
//	                    tasks' trails; a 404 after a try: + an UpdateItem
//	                    that removes the attempt's entries)
//	heartbeat           UpdateItem (two or three when the agent returns from the
//	                    dead: alive.go)
//	watch               GetItem of the task (a conflict has it already), a Query
//	                    of its watches, an UpdateItem of the watch, a Query of
//	                    the freeings since its place (a task's first: + the
//	                    watched flag's UpdateItem, and Queries of the archive
//	                    for a freeing hidden behind a later transition)
//	authenticate        GetItem of the key item "#key#<sha256(key)>"
//	events, inbox       Query on the table's own key (+ GetItem of the task, for
//	                    its latest events; of the agent's heartbeat, when
//	                    its inbox has messages, for removals)
//	fleet feed          Query by_feed per shard of each hour read (the feed count,
//	                    a bucket, at most 6 hours a call), merged by feed_key
//	sweep               Query by_lease_expiry and heartbeats by_expiry per shard,
//	                    then UpdateItem per lease it ends
//	create with         + per blocker a PutItem of its edge, an UpdateItem of
//	  blocked_by        its has_dependents (once per blocker), one
//	                    BatchGetItem of the blockers before the task's
//	                    write and one after (settle: those waited on;
//	                    recheck: those read done)
//	release, failed     + GetItem of the task (the ending depends on its
//	                    attempts and failures) + PutItem of the error
//	unblocking          (stream) a Query of the blocker's edges, then one
//	                    UpdateItem per dependent
//	stream function     per batch of changes: BatchWriteItem of the events (25 a
//	                    request), a BatchGetItem of the watchers' heartbeats and
//	                    a conditional PutItem per message, when a task is freed;
//	                    for the queue counters a BatchGetItem of the counters of
//	                    the queues the batch touches, an UpdateItem of the
//	                    registry when a queue is new, and one conditional
//	                    UpdateItem per queue touched
//	queues              GetItem of the registry, a BatchGetItem of the counters
//	                    per 100 queues of the page, and per queue with todo
//	                    tasks one Query of by_claim, Limit 1, per claim shard
//	                    (4) per priority that has todo tasks: 2 + 4·p requests
//	                    for p such priorities over a page's 100 queues, 42 for
//	                    one queue with todo tasks at every priority; at most
//	                    1,000 Queries a page (MaxQueueListingReads)

// DynamoDB helpers that more than one part of the store uses: batch reads
// and writes that retry what DynamoDB leaves unprocessed, and Queries
// that read every page. Nothing else in the package loops over
// UnprocessedKeys or UnprocessedItems.

// getItem reads the item of table at key, consistently, and decodes it
// into T; nil when there is none.
func getItem[T any](ctx context.Context, db DB, table string, key map[string]types.AttributeValue) (*T, error) {
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	var v T
	if err := attributevalue.UnmarshalMap(out.Item, &v); err != nil {
		return nil, fmt.Errorf("decode %s: %w", table, err)
	}
	return &v, nil
}

// batchGet reads the items of table at keys, consistently, and decodes
// each into T (see batchGetItems).
func batchGet[T any](ctx context.Context, db DB, table string, keys []map[string]types.AttributeValue, proj string, names map[string]string) ([]T, error) {
	items, err := batchGetItems(ctx, db, table, keys, proj, names)
	if err != nil {
		return nil, err
	}
	var out []T
	if err := attributevalue.UnmarshalListOfMaps(items, &out); err != nil {
		return nil, fmt.Errorf("decode %s: %w", table, err)
	}
	return out, nil
}

// maxBatchGet is the most keys one BatchGetItem may ask for.
const maxBatchGet = 100

// batchGetItems reads the items of table at keys, consistently, 100 a
// request (BatchGetItem's limit), retrying the keys DynamoDB leaves
// unprocessed with a growing back-off. Keys with no item are left out;
// each key must appear once (uniqueKeys). proj, when not empty, is a
// projection expression with its names.
func batchGetItems(ctx context.Context, db interface {
	BatchGetItem(context.Context, *dynamodb.BatchGetItemInput, ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}, table string, keys []map[string]types.AttributeValue, proj string, names map[string]string) ([]map[string]types.AttributeValue, error) {
	var out []map[string]types.AttributeValue
	for start := 0; start < len(keys); start += maxBatchGet {
		ka := types.KeysAndAttributes{Keys: keys[start:min(start+maxBatchGet, len(keys))], ConsistentRead: aws.Bool(true)}
		if proj != "" {
			ka.ProjectionExpression, ka.ExpressionAttributeNames = &proj, names
		}
		req := map[string]types.KeysAndAttributes{table: ka}
		for attempt := 0; len(req) > 0; attempt++ {
			if attempt > 0 {
				if err := backoff(ctx, attempt); err != nil {
					return nil, err
				}
			}
			res, err := db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", table, err)
			}
			out = append(out, res.Responses[table]...)
			req = res.UnprocessedKeys
		}
	}
	return out, nil
}

// uniqueKeys is the keys of ids (by key, a function of an id), each once.
func uniqueKeys(ids []string, key func(string) map[string]types.AttributeValue) []map[string]types.AttributeValue {
	seen := map[string]bool{}
	var out []map[string]types.AttributeValue
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, key(id))
		}
	}
	return out
}

// backoff waits before retrying unprocessed batch items.
func backoff(ctx context.Context, attempt int) error {
	return Wait(time.Duration(1<<min(attempt, 6)) * 10 * time.Millisecond)(ctx)
}

// Wait returns a wait of d that ends early, with ctx's error, when ctx is
// done: RecountParams.Settle's, for one.
func Wait(d time.Duration) func(context.Context) error {
	return func(ctx context.Context) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
}

// batchWrite writes every request, 25 at a time, retrying unprocessed items
// and transient errors.
func (s *Store) batchWrite(ctx context.Context, byTable map[string][]types.WriteRequest) error {
	for len(byTable) > 0 {
		chunk := map[string][]types.WriteRequest{}
		n := 0
		for table, reqs := range byTable {
			take := min(len(reqs), 25-n)
			if take == 0 {
				break
			}
			chunk[table] = reqs[:take]
			n += take
			if take == len(reqs) {
				delete(byTable, table)
			} else {
				byTable[table] = reqs[take:]
			}
		}
		var lastErr error
		for attempt := 0; len(chunk) > 0; attempt++ {
			if attempt >= recordAttempts {
				return fmt.Errorf("batch write: %d attempts: %w", attempt, lastErr)
			}
			if attempt > 0 {
				if err := backoff(ctx, attempt); err != nil {
					return err
				}
			}
			out, err := s.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: chunk})
			if err != nil {
				lastErr = err
				continue
			}
			chunk = out.UnprocessedItems
			lastErr = fmt.Errorf("unprocessed items")
		}
	}
	return nil
}

// queryAll runs a Query on table (and index, when not empty) and decodes
// every page into T. Reads of a table's own key are strongly consistent;
// index reads cannot be.
func queryAll[T any](ctx context.Context, db DB, table, index string, keyCond expression.KeyConditionBuilder) ([]T, error) {
	expr, err := expression.NewBuilder().WithKeyCondition(keyCond).Build()
	if err != nil {
		return nil, err
	}
	in := &dynamodb.QueryInput{
		TableName:                 &table,
		KeyConditionExpression:    expr.KeyCondition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	}
	if index != "" {
		in.IndexName = &index
	} else {
		in.ConsistentRead = aws.Bool(true)
	}
	var out []T
	for p := dynamodb.NewQueryPaginator(db, in); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("query %s %s: %w", table, index, err)
		}
		var batch []T
		if err := attributevalue.UnmarshalListOfMaps(page.Items, &batch); err != nil {
			return nil, fmt.Errorf("decode %s: %w", table, err)
		}
		out = append(out, batch...)
	}
	return out, nil
}

// queryNewestFirst runs a consistent Query on table's own key, newest
// sort key first, pageSize items a request, and hands each item to visit
// until visit returns false or the items run out.
func queryNewestFirst[T any](ctx context.Context, db DB, table string, keyCond expression.KeyConditionBuilder, pageSize int32, visit func(*T) bool) error {
	in, err := tableQuery(table, keyCond)
	if err != nil {
		return err
	}
	in.ScanIndexForward, in.Limit = aws.Bool(false), &pageSize
	for p := dynamodb.NewQueryPaginator(db, in); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("query %s: %w", table, err)
		}
		var batch []T
		if err := attributevalue.UnmarshalListOfMaps(page.Items, &batch); err != nil {
			return fmt.Errorf("decode %s: %w", table, err)
		}
		for i := range batch {
			if !visit(&batch[i]) {
				return nil
			}
		}
	}
	return nil
}

// queryCount counts the items of table under keyCond, consistently, up to
// at least limit (it stops counting once it has that many).
func queryCount(ctx context.Context, db DB, table string, keyCond expression.KeyConditionBuilder, limit int) (int, error) {
	in, err := tableQuery(table, keyCond)
	if err != nil {
		return 0, err
	}
	in.Select = types.SelectCount
	n := 0
	for p := dynamodb.NewQueryPaginator(db, in); p.HasMorePages() && n < limit; {
		page, err := p.NextPage(ctx)
		if err != nil {
			return 0, fmt.Errorf("count %s: %w", table, err)
		}
		n += int(page.Count)
	}
	return n, nil
}

// tableQuery is a consistent Query of table's own key under keyCond.
func tableQuery(table string, keyCond expression.KeyConditionBuilder) (*dynamodb.QueryInput, error) {
	expr, err := expression.NewBuilder().WithKeyCondition(keyCond).Build()
	if err != nil {
		return nil, err
	}
	return &dynamodb.QueryInput{
		TableName:                 &table,
		KeyConditionExpression:    expr.KeyCondition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
		ConsistentRead:            aws.Bool(true),
	}, nil
}
