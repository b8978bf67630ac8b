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

// DynamoDB helpers that more than one part of the store uses: batch reads
// and writes that retry what DynamoDB leaves unprocessed, and Queries
// that read every page. Nothing else in the package loops over
// UnprocessedKeys or UnprocessedItems.

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

// batchGetItems reads the items of table at keys, consistently, 100 a
// request (BatchGetItem's limit), retrying the keys DynamoDB leaves
// unprocessed with a growing back-off. Keys with no item are left out;
// each key must appear once (uniqueKeys). proj, when not empty, is a
// projection expression with its names.
func batchGetItems(ctx context.Context, db DB, table string, keys []map[string]types.AttributeValue, proj string, names map[string]string) ([]map[string]types.AttributeValue, error) {
	var out []map[string]types.AttributeValue
	for start := 0; start < len(keys); start += 100 {
		ka := types.KeysAndAttributes{Keys: keys[start:min(start+100, len(keys))], ConsistentRead: aws.Bool(true)}
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
	d := time.Duration(1<<min(attempt, 6)) * 10 * time.Millisecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
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
