package stream

import (
	"context"
	"slices"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// gappedStream is a closed shard, "parent", and its open child, "child".
// The parent's first page is empty, as DynamoDB Streams may answer for a
// part of a shard that holds no records, and its records follow.
type gappedStream struct{}

func (gappedStream) DescribeStream(context.Context, *dynamodbstreams.DescribeStreamInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	return &dynamodbstreams.DescribeStreamOutput{StreamDescription: &streamtypes.StreamDescription{Shards: []streamtypes.Shard{
		{ShardId: aws.String("parent"), SequenceNumberRange: &streamtypes.SequenceNumberRange{StartingSequenceNumber: aws.String("10"), EndingSequenceNumber: aws.String("12")}},
		{ShardId: aws.String("child"), ParentShardId: aws.String("parent"), SequenceNumberRange: &streamtypes.SequenceNumberRange{StartingSequenceNumber: aws.String("20")}},
	}}}, nil
}

func (gappedStream) GetShardIterator(_ context.Context, in *dynamodbstreams.GetShardIteratorInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	return &dynamodbstreams.GetShardIteratorOutput{ShardIterator: aws.String(aws.ToString(in.ShardId) + ":0")}, nil
}

func (gappedStream) GetRecords(_ context.Context, in *dynamodbstreams.GetRecordsInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	rec := func(seq string) streamtypes.Record {
		return streamtypes.Record{EventName: streamtypes.OperationTypeModify, Dynamodb: &streamtypes.StreamRecord{SequenceNumber: aws.String(seq)}}
	}
	switch aws.ToString(in.ShardIterator) {
	case "parent:0":
		return &dynamodbstreams.GetRecordsOutput{NextShardIterator: aws.String("parent:1")}, nil
	case "parent:1":
		return &dynamodbstreams.GetRecordsOutput{Records: []streamtypes.Record{rec("10"), rec("12")}}, nil // read to its end
	case "child:0":
		return &dynamodbstreams.GetRecordsOutput{Records: []streamtypes.Record{rec("20")}, NextShardIterator: aws.String("child:1")}, nil
	}
	return &dynamodbstreams.GetRecordsOutput{NextShardIterator: in.ShardIterator}, nil // the open child, caught up
}

// An empty page of a closed shard is not its end: DynamoDB Streams may
// answer none for a part of a shard that holds no records, with the
// iterator to read on from, and a closed shard ends where it gives no next
// iterator. A poll took the empty page for the end, went on to the child
// shard before its parent's records (out of order), and, starting the
// parent again at the same place on every poll, never applied them
// (`checkout-server migrate -aws` polls the earlier table's stream once).
func TestAPollReadsAClosedShardPastAnEmptyPage(t *testing.T) {
	var got []string
	p := &Poller{
		Streams: gappedStream{}, StreamARN: "arn:stream", Saved: MemoryCheckpoints{},
		Handle: func(_ context.Context, e events.DynamoDBEvent) error {
			for _, r := range e.Records {
				got = append(got, r.Change.SequenceNumber)
			}
			return nil
		},
	}
	n, err := p.Poll(context.Background())
	if want := []string{"10", "12", "20"}; err != nil || n != len(want) || !slices.Equal(got, want) {
		t.Fatalf("poll: %d records %v, %v; want %v", n, got, err, want)
	}
}
