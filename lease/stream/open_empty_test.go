package stream

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/checkout-dev/checkout/lease"
)

// gapStream is pagedStream's open shard of n records with runs of empty
// pages in it, as DynamoDB Streams may answer for a part of an open shard
// before the records that follow it: gaps[i] empty pages come before
// record i, each with the next iterator. Past the last record every page
// is empty. An iterator is "record.empty pages read@serial"; those with a
// serial below expired are refused, as after 15 minutes.
type gapStream struct {
	n       int
	gaps    map[int]int
	expired int

	serial, iterators, reads int
}

func (f *gapStream) DescribeStream(context.Context, *dynamodbstreams.DescribeStreamInput, ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error) {
	return pagedStream{}.DescribeStream(context.Background(), nil)
}

func (f *gapStream) iterator(at, skipped int) *string {
	f.serial++
	return aws.String(fmt.Sprintf("%d.%d@%d", at, skipped, f.serial))
}

func (f *gapStream) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	f.iterators++
	it, err := pagedStream{}.GetShardIterator(ctx, in)
	if err != nil {
		return nil, err
	}
	at, _ := strconv.Atoi(aws.ToString(it.ShardIterator))
	return &dynamodbstreams.GetShardIteratorOutput{ShardIterator: f.iterator(at, 0)}, nil
}

func (f *gapStream) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, _ ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	f.reads++
	var at, skipped, serial int
	if _, err := fmt.Sscanf(aws.ToString(in.ShardIterator), "%d.%d@%d", &at, &skipped, &serial); err != nil {
		return nil, err
	}
	if serial < f.expired {
		return nil, &streamtypes.ExpiredIteratorException{Message: aws.String("Iterator expired")}
	}
	if at >= f.n || skipped < f.gaps[at] {
		return &dynamodbstreams.GetRecordsOutput{NextShardIterator: f.iterator(at, min(skipped+1, f.gaps[at]))}, nil
	}
	to := min(at+int(aws.ToInt32(in.Limit)), f.n)
	for i := at + 1; i < to; i++ {
		if f.gaps[i] > 0 {
			to = i // a page holds no gap
		}
	}
	out, err := pagedStream{n: to}.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: aws.String(strconv.Itoa(at)), Limit: in.Limit})
	if err != nil {
		return nil, err
	}
	out.NextShardIterator = f.iterator(to, 0)
	return out, nil
}

// collect is a handler that appends each record's index to got.
func collect(got *[]int) func(context.Context, events.DynamoDBEvent) error {
	return func(_ context.Context, e events.DynamoDBEvent) error {
		for _, r := range e.Records {
			i, err := strconv.Atoi(r.Change.SequenceNumber)
			if err != nil {
				return err
			}
			*got = append(*got, i)
		}
		return nil
	}
}

// An empty page of an open shard is not always its end: DynamoDB Streams
// may answer empty pages, each with the next iterator, before more
// records. A poll took the first one for the end, and the next poll began
// again from the same checkpoint, so the records after it were never
// applied (`checkout-server migrate -aws` polls the earlier table's
// stream once).
func TestAPollReadsAnOpenShardPastEmptyPages(t *testing.T) {
	t.Parallel()
	// Four empty pages in all, then the shard's end: a poll from the
	// checkpoint reads past emptyPages-1 of them.
	f := &gapStream{n: 250, gaps: map[int]int{0: 1, 120: emptyPages - 2}}
	var got []int
	p := &Poller{Streams: f, StreamARN: "arn:stream", Saved: MemoryCheckpoints{}, Handle: collect(&got), ReadOn: true}
	n, err := p.Poll(context.Background())
	if err != nil || n != f.n || len(got) != f.n || got[0] != 0 || got[f.n-1] != f.n-1 {
		t.Fatalf("one poll: %d records (%v ... %v), %v; want all %d", n, head(got), tail(got), err, f.n)
	}
}

// A run of empty pages longer than a poll reads past does not stop the
// polls for ever: each goes on from where the last stopped, one page
// further, until the records after it, and a poll at the shard's end
// reads one page. The polls used to stop at the same empty page, each
// from the checkpoint, and never reached the records after it.
func TestPollsGoOnThroughARunOfEmptyPages(t *testing.T) {
	t.Parallel()
	const run = 3 * emptyPages
	f := &gapStream{n: 30, gaps: map[int]int{10: run}}
	var got []int
	p := &Poller{Streams: f, StreamARN: "arn:stream", Saved: &memSaved{}, Handle: collect(&got), ReadOn: true}
	ctx := context.Background()
	polls := 0
	for ; len(got) < f.n; polls++ {
		if polls > run {
			t.Fatalf("%d polls applied %d of %d records (%v ... %v)", polls, len(got), f.n, head(got), tail(got))
		}
		if _, err := p.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if got[0] != 0 || got[f.n-1] != f.n-1 {
		t.Fatalf("records applied %v ... %v", head(got), tail(got))
	}
	if f.iterators != 1 {
		t.Errorf("%d polls asked for %d iterators: after the first they go on from where the last stopped", polls, f.iterators)
	}
	f.reads = 0
	if n, err := p.Poll(ctx); err != nil || n != 0 || f.reads != 1 || f.iterators != 1 {
		t.Fatalf("a poll at the end: %d records, %v, %d pages read, %d iterators asked for; want 1 page read", n, err, f.reads, f.iterators)
	}
}

// The place a poll stopped at is given up for the checkpoint when it is
// old, as DynamoDB Streams iterators expire 15 minutes after they are
// given, or when it is refused.
func TestAPollGoesOnFromTheCheckpointWhenItsPlaceIsStale(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, stale := range []string{"old", "refused"} {
		t.Run(stale, func(t *testing.T) {
			t.Parallel()
			f := &gapStream{n: 20, gaps: map[int]int{10: emptyPages + 1}}
			now := time.Now()
			var got []int
			p := &Poller{Streams: f, StreamARN: "arn:stream", Saved: &memSaved{}, Handle: collect(&got), now: func() time.Time { return now }}
			if n, err := p.Poll(ctx); err != nil || n != 10 {
				t.Fatalf("first poll: %d records, %v; want the 10 before the empty pages", n, err)
			}
			if stale == "old" {
				now = now.Add(tipAge + time.Second)
			} else {
				f.expired = f.serial + 1
			}
			// From the checkpoint (record 9): emptyPages empty pages again.
			if n, err := p.Poll(ctx); err != nil || n != 0 || f.iterators != 2 {
				t.Fatalf("a poll after the place went stale: %d records, %v, %d iterators asked for; want 0 records from a new one", n, err, f.iterators)
			}
			for polls := 0; len(got) < f.n; polls++ {
				if _, err := p.Poll(ctx); err != nil || polls == 2 {
					t.Fatalf("%d polls later: records %v, %v; want the 10 after the empty pages", polls, got, err)
				}
			}
			if got[10] != 10 || f.iterators != 2 {
				t.Fatalf("records %v, %d iterators asked for", got, f.iterators)
			}
		})
	}
}

// ResumeAfterApplied reads an open shard past its empty pages, as a poll
// does: it used to stop at the first, and give a checkpoint before the
// last change applied that it could have found.
func TestResumeAfterAppliedReadsPastEmptyPages(t *testing.T) {
	t.Parallel()
	// Pages end at 99, 199, 299, then empty pages, then 399, 499, 519;
	// the last page that ends in a change applied ends at 399.
	f := &gapStream{n: 520, gaps: map[int]int{300: emptyPages - 1}}
	var got []int
	p := &Poller{Streams: f, StreamARN: "arn:stream", Saved: &memSaved{}, Handle: collect(&got)}
	ctx := context.Background()
	applied := func(_ context.Context, ch lease.Change) (bool, bool, error) {
		i, err := strconv.Atoi(ch.Seq)
		return true, err == nil && i < 450, err
	}
	if err := p.ResumeAfterApplied(ctx, applied); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if len(got) != 220 || got[0] != 300 || got[len(got)-1] != 519 {
		t.Fatalf("handed over %d records (%v ... %v), want 300 to 519", len(got), head(got), tail(got))
	}
}
