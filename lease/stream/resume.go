package stream

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/checkout-dev/checkout/lease"
)

// AppliedFunc reports whether a change's consequences were applied by
// whoever read the stream before: known is false when the change cannot
// tell (lease.Store.Archived: a change that recorded no event).
type AppliedFunc func(ctx context.Context, ch lease.Change) (known, applied bool, err error)

// ResumeAfterApplied gives every shard of the stream that has no
// checkpoint in p.Saved one, just before the first change that another
// consumer, now gone, may not have applied, so that the next Poll applies
// what that consumer left and little else. It is for a stream whose
// consumer kept no checkpoint p can read: the event source mapping of a
// stack that no longer exists (`checkout-server migrate -aws`).
//
// Each shard is read from its oldest record, BatchSize records at a time,
// and applied is asked about the last change of each page that can tell.
// Let A be the last change found applied. The consumer applied a shard's
// batches one at a time and in order, each of at most BatchSize records
// (the stack's mapping has BatchSize 100 and ParallelizationFactor 1), so
// A's batch began less than BatchSize records before A, and every batch
// before it was applied whole: the checkpoint is the record BatchSize
// records before A. What follows it, A's batch and everything after, is
// applied again; the handler is idempotent, so a change applied twice
// writes nothing new. A shard with no change found applied gets no
// checkpoint, and is applied from its oldest record.
//
// Reading costs the stream's own read requests and one read of the
// archive per page; nothing is written but the checkpoints.
func (p *Poller) ResumeAfterApplied(ctx context.Context, applied AppliedFunc) error {
	saved, err := p.Saved.Load(ctx)
	if err != nil {
		return fmt.Errorf("load stream checkpoints: %w", err)
	}
	shards, err := p.shards(ctx)
	if err != nil {
		return err
	}
	for _, sh := range shards {
		id := aws.ToString(sh.ShardId)
		if saved[id] != "" {
			continue
		}
		seq, err := p.lastSurelyApplied(ctx, id, closed(sh), applied)
		if err != nil {
			return err
		}
		if seq == "" {
			continue
		}
		if err := p.Saved.Save(ctx, id, seq); err != nil {
			return fmt.Errorf("save stream checkpoint: %w", err)
		}
	}
	p.pos, p.tips = nil, nil // the next Poll starts from the checkpoints
	return nil
}

// lastSurelyApplied returns the sequence number of the last record of
// shard that was applied with its whole batch ("" when none is known):
// the record BatchSize records before the last change applied reports
// applied. It keeps the sequence numbers of the last pages read, enough
// to reach back BatchSize records from any record of the current page.
// It reads the shard as a poll does: a closed one to its end, an open one
// until its emptyPages-th empty page. Stopping short of an open shard's
// end only puts the checkpoint earlier: more changes are applied again.
func (p *Poller) lastSurelyApplied(ctx context.Context, shard string, closed bool, applied AppliedFunc) (string, error) {
	it, err := p.Streams.GetShardIterator(ctx, &dynamodbstreams.GetShardIteratorInput{
		StreamArn: &p.StreamARN, ShardId: &shard, ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon})
	if err != nil {
		return "", fmt.Errorf("shard iterator of %s: %w", shard, err)
	}
	const keep = 2 * BatchSize
	var (
		seqs  []string // the sequence numbers of records read - base ...
		base  int      // ... the index of seqs[0] in the shard
		found string
		empty = emptyPages
	)
	for iter := it.ShardIterator; iter != nil; {
		out, err := p.Streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(BatchSize)})
		if err != nil {
			return "", fmt.Errorf("records of %s: %w", shard, err)
		}
		iter = out.NextShardIterator
		if len(out.Records) == 0 {
			if !closed {
				if empty--; empty == 0 {
					break // caught up, most likely
				}
			}
			continue
		}
		first := base + len(seqs)
		for _, r := range out.Records {
			seqs = append(seqs, aws.ToString(r.Dynamodb.SequenceNumber))
		}
		if at, err := lastApplied(ctx, out.Records, shard, p.StreamARN, applied); err != nil {
			return "", err
		} else if at >= 0 {
			found = ""
			if i := first + at - BatchSize; i >= base {
				found = seqs[i-base]
			}
		}
		if drop := len(seqs) - keep; drop > 0 {
			seqs, base = seqs[drop:], base+drop
		}
	}
	return found, nil
}

// lastApplied returns the index in records of the last change that
// applied knows about, if it was applied; -1 otherwise.
func lastApplied(ctx context.Context, records []streamtypes.Record, shard, arn string, applied AppliedFunc) (int, error) {
	for i := len(records) - 1; i >= 0; i-- {
		changes, err := changesOf([]events.DynamoDBEventRecord{eventRecord(records[i], arn)}, shard)
		if err != nil {
			return -1, err
		}
		known, yes, err := applied(ctx, changes[0])
		if err != nil {
			return -1, err
		}
		if known {
			if yes {
				return i, nil
			}
			return -1, nil
		}
	}
	return -1, nil
}

// shards lists the stream's shards, parents before their children.
func (p *Poller) shards(ctx context.Context) ([]streamtypes.Shard, error) {
	var shards []streamtypes.Shard
	var start *string
	for {
		out, err := p.Streams.DescribeStream(ctx, &dynamodbstreams.DescribeStreamInput{StreamArn: &p.StreamARN, ExclusiveStartShardId: start})
		if err != nil {
			return nil, fmt.Errorf("describe stream: %w", err)
		}
		shards = append(shards, out.StreamDescription.Shards...)
		if start = out.StreamDescription.LastEvaluatedShardId; start == nil {
			return shards, nil
		}
	}
}
