package stream

import (
	"context"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// trimmedStream is one shard whose records from "10" on are still held;
// its records before them went past the stream's retention.
type trimmedStream struct {
	iterators []streamtypes.ShardIteratorType
}

func (f *trimmedStream) DescribeStream(context.Context, *dynamodbstreams.DescribeStreamInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	return &dynamodbstreams.DescribeStreamOutput{StreamDescription: &streamtypes.StreamDescription{Shards: []streamtypes.Shard{{ShardId: aws.String("shard-1")}}}}, nil
}

func (f *trimmedStream) GetShardIterator(_ context.Context, in *dynamodbstreams.GetShardIteratorInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	f.iterators = append(f.iterators, in.ShardIteratorType)
	if in.ShardIteratorType == streamtypes.ShardIteratorTypeAfterSequenceNumber && aws.ToString(in.SequenceNumber) < "10" {
		return nil, &streamtypes.TrimmedDataAccessException{Message: aws.String("beyond the trim horizon")}
	}
	return &dynamodbstreams.GetShardIteratorOutput{ShardIterator: aws.String("it")}, nil
}

func (f *trimmedStream) GetRecords(_ context.Context, in *dynamodbstreams.GetRecordsInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	if aws.ToString(in.ShardIterator) != "it" {
		return &dynamodbstreams.GetRecordsOutput{NextShardIterator: aws.String("end")}, nil
	}
	recs := []streamtypes.Record{
		{EventName: streamtypes.OperationTypeModify, Dynamodb: &streamtypes.StreamRecord{SequenceNumber: aws.String("10")}},
		{EventName: streamtypes.OperationTypeModify, Dynamodb: &streamtypes.StreamRecord{SequenceNumber: aws.String("11")}},
	}
	return &dynamodbstreams.GetRecordsOutput{Records: recs, NextShardIterator: aws.String("end")}, nil
}

// A poller whose checkpoint is older than what the stream still holds (a
// local server stopped with changes unapplied, and started again more
// than the stream's 24 hours later) goes on from the oldest record held,
// as an event source mapping does, and says what was lost. It used to
// fail every poll for ever, so that no transition had consequences again.
func TestPollerPastTheTrimHorizonGoesOnFromIt(t *testing.T) {
	f := &trimmedStream{}
	var got []string
	p := &Poller{
		Streams: f, StreamARN: "arn:stream",
		Saved: MemoryCheckpoints{}, pos: map[string]string{"shard-1": "05"},
		Handle: func(_ context.Context, e events.DynamoDBEvent) error {
			for _, r := range e.Records {
				got = append(got, r.Change.SequenceNumber)
			}
			return nil
		},
	}
	n, err := p.Poll(context.Background())
	if err != nil || n != 2 || len(got) != 2 || got[0] != "10" {
		t.Fatalf("poll past the trim horizon: %d records %v, %v; want the 2 held, from 10", n, got, err)
	}
	if want := []streamtypes.ShardIteratorType{streamtypes.ShardIteratorTypeAfterSequenceNumber, streamtypes.ShardIteratorTypeTrimHorizon}; len(f.iterators) != 2 || f.iterators[0] != want[0] || f.iterators[1] != want[1] {
		t.Fatalf("iterators asked for: %v, want %v", f.iterators, want)
	}
}
