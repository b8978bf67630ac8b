package lease

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease/schema"
)

// Shard counts may grow between deploys but never shrink (schema.ShardCounts):
// a reader queries every shard below its count, so the items a larger count
// put in the shards above a smaller one would no longer be read. Nothing in
// an item says which count wrote it, so the deployment keeps a record: the
// item "#shards" of the heartbeats table (a key no agent id can take, as
// the queue counters) holds the largest count of each kind any process has
// started with. A process checks its counts against it when it starts
// (RecordShards): below the record, it refuses to start; above it, it
// raises the record. A migration (migrate.go), which writes status shards,
// checks and raises it too.

// shardsRecordID is the key of the record of the shard counts in use.
const shardsRecordID = "#shards"

// shardsRecord is the record's item: each count, 0 when never recorded.
type shardsRecord struct {
	Lease  int `dynamodbav:"lease"`
	Status int `dynamodbav:"status"`
	Claim  int `dynamodbav:"claim"`
	Feed   int `dynamodbav:"feed"`
}

// ShardsDB is what RecordShards asks of DynamoDB.
type ShardsDB interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// RecordShards checks counts (defaults filled in) against the largest
// counts recorded for this deployment's tables: a count below its
// record is a *schema.ShrinkError, and nothing is written; otherwise the
// record is raised to counts where they are larger. One consistent GetItem,
// and an UpdateItem only when a count grows (or on the first start).
func RecordShards(ctx context.Context, db ShardsDB, names schema.Names, counts schema.ShardCounts) error {
	if err := counts.Validate(); err != nil {
		return err
	}
	counts = counts.OrDefault()
	table := names.Table(schema.HeartbeatsTable)
	for range 3 {
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: agentKey(shardsRecordID), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return fmt.Errorf("read the shard counts in use: %w", err)
		}
		var rec shardsRecord
		if err := attributevalue.UnmarshalMap(out.Item, &rec); err != nil {
			return fmt.Errorf("read the shard counts in use: %w", err)
		}
		recorded := schema.ShardCounts{Lease: rec.Lease, Status: rec.Status, Claim: rec.Claim, Feed: rec.Feed}
		if err := counts.Below(recorded); err != nil {
			return err
		}
		if out.Item != nil && recorded == counts {
			return nil
		}
		// Raise the record, unless another process raised it further
		// meanwhile (then read it again).
		var upd expression.UpdateBuilder
		var cond expression.ConditionBuilder
		for i, f := range []struct {
			name string
			n    int
		}{{"lease", counts.Lease}, {"status", counts.Status}, {"claim", counts.Claim}, {"feed", counts.Feed}} {
			name := expression.Name(f.name)
			upd = upd.Set(name, expression.Value(f.n))
			c := expression.AttributeNotExists(name).Or(name.LessThanEqual(expression.Value(f.n)))
			if i == 0 {
				cond = c
			} else {
				cond = cond.And(c)
			}
		}
		expr, _ := expression.NewBuilder().WithUpdate(upd).WithCondition(cond).Build()
		_, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &table, Key: agentKey(shardsRecordID),
			UpdateExpression:          expr.Update(),
			ConditionExpression:       expr.Condition(),
			ExpressionAttributeNames:  expr.Names(),
			ExpressionAttributeValues: expr.Values(),
		})
		if _, failed := conditionFailed(err); failed {
			continue
		}
		if err != nil {
			return fmt.Errorf("record the shard counts in use: %w", err)
		}
		return nil
	}
	return errors.New("record the shard counts in use: the record kept changing")
}
