package bench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

// Floor is the least that any design with this project's indexes and
// audit trail asks of the server for an acquire-then-release cycle: the
// same writes on a task item that holds nothing but its keys, its holder
// and its fence. Its checkout is one conditional UpdateItem that takes the
// task out of a claim index (KEYS_ONLY) and into an expiry index
// (KEYS_ONLY) and changes the status a status index projects (INCLUDE);
// its release is one conditional UpdateItem that undoes them; the table
// has a change stream with both images, and a stream function polling
// every 200 ms archives one event per transition into an events table
// with a feed index, 25 to a BatchWriteItem. It has no task state beyond
// that (no title, no queue, no attempts, no lease records, no watchers,
// no queue counts), so it is not a product: it is a measure of how much
// of this project's cycle the item's width and its expressions cost, and
// of what the indexes and the trail cost on their own.
type Floor struct {
	Table, Events string
	Count         *Counter
	DB            *dynamodb.Client

	stream *stream.Poller
}

// NewFloor creates the floor's two tables under a random prefix and
// starts its stream function, which runs until ctx ends.
func NewFloor(ctx context.Context, endpoint string) (*Floor, error) {
	prefix := randomPrefix("f")
	f := &Floor{Table: prefix + "tasks", Events: prefix + "events", Count: NewCounter()}
	f.DB = f.Count.Client(endpoint)
	key := func(name string, kt types.KeyType) types.KeySchemaElement {
		return types.KeySchemaElement{AttributeName: aws.String(name), KeyType: kt}
	}
	attr := func(name string, t types.ScalarAttributeType) types.AttributeDefinition {
		return types.AttributeDefinition{AttributeName: aws.String(name), AttributeType: t}
	}
	keysOnly := &types.Projection{ProjectionType: types.ProjectionTypeKeysOnly}
	_, err := f.DB.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: &f.Table, BillingMode: types.BillingModePayPerRequest,
		KeySchema: []types.KeySchemaElement{key("id", types.KeyTypeHash)},
		AttributeDefinitions: []types.AttributeDefinition{
			attr("id", types.ScalarAttributeTypeS),
			attr("claim_shard", types.ScalarAttributeTypeS), attr("claim_key", types.ScalarAttributeTypeS),
			attr("lease_shard", types.ScalarAttributeTypeS), attr("lease_expires", types.ScalarAttributeTypeN),
			attr("status_shard", types.ScalarAttributeTypeS),
		},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{
			{IndexName: aws.String("by_claim"), Projection: keysOnly,
				KeySchema: []types.KeySchemaElement{key("claim_shard", types.KeyTypeHash), key("claim_key", types.KeyTypeRange)}},
			{IndexName: aws.String("by_lease_expiry"), Projection: keysOnly,
				KeySchema: []types.KeySchemaElement{key("lease_shard", types.KeyTypeHash), key("lease_expires", types.KeyTypeRange)}},
			{IndexName: aws.String("by_status"), Projection: &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: []string{"status"}},
				KeySchema: []types.KeySchemaElement{key("status_shard", types.KeyTypeHash), key("id", types.KeyTypeRange)}},
		},
		StreamSpecification: &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages},
	})
	if err != nil {
		return nil, fmt.Errorf("create the floor's table: %w", err)
	}
	_, err = f.DB.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: &f.Events, BillingMode: types.BillingModePayPerRequest,
		KeySchema: []types.KeySchemaElement{key("id", types.KeyTypeHash), key("seq", types.KeyTypeRange)},
		AttributeDefinitions: []types.AttributeDefinition{
			attr("id", types.ScalarAttributeTypeS), attr("seq", types.ScalarAttributeTypeN),
			attr("feed", types.ScalarAttributeTypeS), attr("feed_key", types.ScalarAttributeTypeS),
		},
		GlobalSecondaryIndexes: []types.GlobalSecondaryIndex{
			{IndexName: aws.String("by_feed"), Projection: &types.Projection{ProjectionType: types.ProjectionTypeAll},
				KeySchema: []types.KeySchemaElement{key("feed", types.KeyTypeHash), key("feed_key", types.KeyTypeRange)}},
		},
	})
	if err != nil {
		return nil, fmt.Errorf("create the floor's events table: %w", err)
	}
	arn, err := localstack.StreamARN(ctx, f.DB, f.Table)
	if err != nil {
		return nil, err
	}
	f.stream = &stream.Poller{Streams: stream.NewLocalClient(endpoint), StreamARN: arn, Saved: stream.MemoryCheckpoints{}, Handle: f.archive}
	go f.stream.Run(ctx, 200*time.Millisecond)
	f.Count.Take()
	return f, nil
}

// archive writes one event for each transition of a batch of changes.
func (f *Floor) archive(ctx context.Context, ev events.DynamoDBEvent) error {
	var puts []types.WriteRequest
	for _, r := range ev.Records {
		img := r.Change.NewImage
		if img == nil {
			continue
		}
		id, fence := img["id"].String(), img["fence"].Number()
		typ, seq := "release", "2"
		if h, ok := img["holder"]; ok && !h.IsNull() {
			typ, seq = "checkout", "1"
		}
		at := strconv.FormatInt(r.Change.ApproximateCreationDateTime.UnixMilli(), 10)
		puts = append(puts, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{
			"id":       &types.AttributeValueMemberS{Value: id},
			"seq":      &types.AttributeValueMemberN{Value: fence + seq},
			"type":     &types.AttributeValueMemberS{Value: typ},
			"fence":    &types.AttributeValueMemberN{Value: fence},
			"at":       &types.AttributeValueMemberN{Value: at},
			"feed":     &types.AttributeValueMemberS{Value: at[:7] + "#" + id[len(id)-1:]},
			"feed_key": &types.AttributeValueMemberS{Value: at + "#" + id + "#" + fence + seq},
		}}})
	}
	for len(puts) > 0 {
		n := min(len(puts), 25)
		out, err := f.DB.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: map[string][]types.WriteRequest{f.Events: puts[:n]}})
		if err != nil {
			return err
		}
		puts = append(puts[n:], out.UnprocessedItems[f.Events]...)
	}
	return nil
}

func (*Floor) Name() string { return "floor (the same writes, minimal item)" }

func (f *Floor) Prepare(ctx context.Context, keys []string) error {
	return parallel(ctx, 16, len(keys), func(i int) error {
		home := "default#" + strconv.Itoa(i%4)
		_, err := f.DB.PutItem(ctx, &dynamodb.PutItemInput{TableName: &f.Table, Item: map[string]types.AttributeValue{
			"id":           &types.AttributeValueMemberS{Value: keys[i]},
			"status":       &types.AttributeValueMemberS{Value: "todo"},
			"status_shard": &types.AttributeValueMemberS{Value: "open#" + strconv.Itoa(i%16)},
			"claim_home":   &types.AttributeValueMemberS{Value: home},
			"claim_shard":  &types.AttributeValueMemberS{Value: home},
			"claim_key":    &types.AttributeValueMemberS{Value: "4#" + keys[i]},
			"fence":        &types.AttributeValueMemberN{Value: "0"},
		}, ConditionExpression: aws.String("attribute_not_exists(id)")})
		var cf *types.ConditionalCheckFailedException
		if errors.As(err, &cf) {
			return nil
		}
		return err
	})
}

func (f *Floor) Acquire(ctx context.Context, worker int, key string) (func(context.Context) error, bool, error) {
	agent := "agent-" + strconv.Itoa(worker)
	now := time.Now().UnixMilli()
	out, err := f.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                &f.Table,
		Key:                      map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: key}},
		ConditionExpression:      aws.String("attribute_not_exists(holder) OR lease_expires <= :now"),
		UpdateExpression:         aws.String("SET holder = :agent, lease_expires = :expires, lease_shard = :shard, #status = :held, fence = fence + :one REMOVE claim_shard"),
		ExpressionAttributeNames: map[string]string{"#status": "status"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":agent":   &types.AttributeValueMemberS{Value: agent},
			":now":     &types.AttributeValueMemberN{Value: strconv.FormatInt(now, 10)},
			":expires": &types.AttributeValueMemberN{Value: strconv.FormatInt(now+time.Minute.Milliseconds(), 10)},
			":shard":   &types.AttributeValueMemberS{Value: strconv.Itoa(worker % 16)},
			":held":    &types.AttributeValueMemberS{Value: "in_progress"},
			":one":     &types.AttributeValueMemberN{Value: "1"},
		},
		ReturnValues:                        types.ReturnValueUpdatedNew,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	var cf *types.ConditionalCheckFailedException
	if errors.As(err, &cf) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	fence := out.Attributes["fence"]
	return func(ctx context.Context) error {
		_, err := f.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                &f.Table,
			Key:                      map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: key}},
			ConditionExpression:      aws.String("holder = :agent AND fence = :fence"),
			UpdateExpression:         aws.String("SET #status = :free, claim_shard = claim_home REMOVE holder, lease_expires, lease_shard"),
			ExpressionAttributeNames: map[string]string{"#status": "status"},
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":agent": &types.AttributeValueMemberS{Value: agent},
				":fence": fence,
				":free":  &types.AttributeValueMemberS{Value: "todo"},
			},
		})
		return err
	}, true, nil
}
