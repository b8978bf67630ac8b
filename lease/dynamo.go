package lease

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// DynamoDB helpers that more than one part of the store uses.

// batchGet reads the items of table at keys, consistently, 100 a request
// (BatchGetItem's limit), retrying the keys DynamoDB leaves unprocessed
// with a growing back-off, and decodes each into T. Repeated keys are read
// once; keys with no item are left out. proj, when not empty, is a
// projection expression with its names.
func batchGet[T any](ctx context.Context, db DB, table string, keys []map[string]types.AttributeValue, proj string, names map[string]string) ([]T, error) {
	var out []T
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
			var got []T
			if err := attributevalue.UnmarshalListOfMaps(res.Responses[table], &got); err != nil {
				return nil, fmt.Errorf("decode %s: %w", table, err)
			}
			out = append(out, got...)
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
