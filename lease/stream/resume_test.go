package stream

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/checkout-dev/checkout/lease"
)

// pagedStream is one shard of n records, "i" in each new image its index,
// served a page at a time as the Streams API serves them.
type pagedStream struct{ n int }

func seqOf(i int) string { return fmt.Sprintf("%06d", i) }

func (f pagedStream) DescribeStream(context.Context, *dynamodbstreams.DescribeStreamInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	return &dynamodbstreams.DescribeStreamOutput{StreamDescription: &streamtypes.StreamDescription{Shards: []streamtypes.Shard{{ShardId: aws.String("shard-1")}}}}, nil
}

func (f pagedStream) GetShardIterator(_ context.Context, in *dynamodbstreams.GetShardIteratorInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	from := 0
	if in.ShardIteratorType == streamtypes.ShardIteratorTypeAfterSequenceNumber {
		i, err := strconv.Atoi(aws.ToString(in.SequenceNumber))
		if err != nil {
			return nil, err
		}
		from = i + 1
	}
	return &dynamodbstreams.GetShardIteratorOutput{ShardIterator: aws.String(strconv.Itoa(from))}, nil
}

func (f pagedStream) GetRecords(_ context.Context, in *dynamodbstreams.GetRecordsInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	from, err := strconv.Atoi(aws.ToString(in.ShardIterator))
	if err != nil {
		return nil, err
	}
	to := min(from+int(aws.ToInt32(in.Limit)), f.n)
	var recs []streamtypes.Record
	for i := from; i < to; i++ {
		recs = append(recs, streamtypes.Record{EventName: streamtypes.OperationTypeModify, Dynamodb: &streamtypes.StreamRecord{
			SequenceNumber: aws.String(seqOf(i)),
			NewImage:       map[string]streamtypes.AttributeValue{"i": &streamtypes.AttributeValueMemberN{Value: strconv.Itoa(i)}},
		}})
	}
	return &dynamodbstreams.GetRecordsOutput{Records: recs, NextShardIterator: aws.String(strconv.Itoa(max(to, from)))}, nil
}

// A consumer that kept no checkpoint we can read (an event source mapping
// replaced by a deploy) applied a prefix of the shard, in batches of at
// most BatchSize. ResumeAfterApplied starts the next poll BatchSize
// records before the last change found applied, at the latest, so that
// the batch that change was in, which may not have finished, is applied
// again, and everything after it; it skips the rest.
func TestResumeAfterAppliedStartsBeforeTheLastBatch(t *testing.T) {
	t.Parallel()
	index := func(ch lease.Change) int {
		i, err := strconv.Atoi(ch.New["i"].(*ddb.AttributeValueMemberN).Value)
		if err != nil {
			panic(err)
		}
		return i
	}
	cases := []struct {
		name string
		n    int
		// applied reports record i applied; unknown ones tell nothing
		// (a new task, a watch).
		applied, unknown func(i int) bool
		// The first record the next poll hands over.
		from int
	}{
		{name: "nothing applied", n: 250, applied: func(int) bool { return false }, from: 0},
		{name: "less than a batch applied", n: 250, applied: func(i int) bool { return i < 80 }, from: 0},
		// Pages end at 99, 199, 299, 399: 399 is the last found applied.
		{name: "a long prefix applied", n: 520, applied: func(i int) bool { return i < 450 }, from: 300},
		{name: "all applied", n: 520, applied: func(int) bool { return true }, from: 420},
		// The page ending at 399 ends in changes that cannot tell: 389 is
		// the last of it that can.
		{name: "the page ends in changes that cannot tell", n: 520, applied: func(i int) bool { return i < 450 },
			unknown: func(i int) bool { return i >= 390 && i < 400 }, from: 290},
		// A page ends in a change not applied (399), a later one in a
		// change applied (499): the last applied counts.
		{name: "a change applied after one that was not", n: 520, applied: func(i int) bool { return i < 350 || i == 499 }, from: 400},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var asked int
			applied := func(_ context.Context, ch lease.Change) (bool, bool, error) {
				asked++
				i := index(ch)
				if tc.unknown != nil && tc.unknown(i) {
					return false, false, nil
				}
				return true, tc.applied(i), nil
			}
			var got []int
			p := &Poller{
				Streams: pagedStream{n: tc.n}, StreamARN: "arn:stream", Saved: &memSaved{},
				Handle: func(_ context.Context, e events.DynamoDBEvent) error {
					for _, r := range e.Records {
						i, err := strconv.Atoi(r.Change.SequenceNumber)
						if err != nil {
							return err
						}
						got = append(got, i)
					}
					return nil
				},
			}
			ctx := context.Background()
			if err := p.ResumeAfterApplied(ctx, applied); err != nil {
				t.Fatal(err)
			}
			if pages := (tc.n + BatchSize - 1) / BatchSize; asked > tc.n || asked < pages {
				t.Errorf("applied was asked %d times for %d records in %d pages", asked, tc.n, pages)
			}
			if _, err := p.Poll(ctx); err != nil {
				t.Fatal(err)
			}
			if len(got) != tc.n-tc.from || len(got) > 0 && (got[0] != tc.from || got[len(got)-1] != tc.n-1) {
				t.Fatalf("handed over %d records (%v ... %v), want %d to %d", len(got), head(got), tail(got), tc.from, tc.n-1)
			}
		})
	}
}

// A shard that already has a checkpoint keeps it: a migration cut short
// resumes where it saved its place, and a local server's checkpoint is
// its own.
func TestResumeAfterAppliedKeepsACheckpoint(t *testing.T) {
	t.Parallel()
	saved := &memSaved{pos: map[string]string{"shard-1": seqOf(499)}}
	p := &Poller{Streams: pagedStream{n: 520}, StreamARN: "arn:stream", Saved: saved,
		Handle: func(context.Context, events.DynamoDBEvent) error { return nil }}
	ctx := context.Background()
	if err := p.ResumeAfterApplied(ctx, func(context.Context, lease.Change) (bool, bool, error) {
		t.Fatal("applied asked about a shard with a checkpoint")
		return false, false, nil
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := p.Poll(ctx); err != nil || n != 20 {
		t.Fatalf("poll after the checkpoint: %d records, %v; want 20", n, err)
	}
}

// memSaved keeps checkpoints in memory, across pollers.
type memSaved struct{ pos map[string]string }

func (m *memSaved) Load(context.Context) (map[string]string, error) {
	out := map[string]string{}
	for k, v := range m.pos {
		out[k] = v
	}
	return out, nil
}

func (m *memSaved) Save(_ context.Context, shard, seq string) error {
	if m.pos == nil {
		m.pos = map[string]string{}
	}
	m.pos[shard] = seq
	return nil
}

func head(s []int) []int { return s[:min(3, len(s))] }
func tail(s []int) []int { return s[max(0, len(s)-3):] }
