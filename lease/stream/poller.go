package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"
)

// StreamsAPI lists the DynamoDB Streams calls the poller makes;
// *dynamodbstreams.Client satisfies it.
type StreamsAPI interface {
	DescribeStream(ctx context.Context, in *dynamodbstreams.DescribeStreamInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.DescribeStreamOutput, error)
	GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error)
	GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error)
}

// Checkpoints keep, per shard, the sequence number of the last record the
// handler applied, so a restarted poller resumes after it.
type Checkpoints interface {
	Load(ctx context.Context) (map[string]string, error)
	Save(ctx context.Context, shard, seq string) error
}

// BatchSize is the most records one handler call gets, as an event source
// mapping's BatchSize.
const BatchSize = 100

// Poller reads a table's change stream and hands the records to Handle in
// order, a batch at a time, as Lambda's event source mapping does. A batch
// that fails is handed again on the next poll, bisected (see limit).
type Poller struct {
	Streams   StreamsAPI
	StreamARN string
	Handle    func(context.Context, events.DynamoDBEvent) error
	Saved     Checkpoints
	Log       *slog.Logger
	// ReadOn reads an open shard on past a page of fewer records than
	// asked for, to its empty pages (see pollShard): for a poll of a
	// stream whose table takes no more writes (migrate), which must
	// apply all it holds. Without it such a page ends the poll, so that
	// under a steady trickle of writes a poll ends, and what arrived
	// meanwhile is handed over at the next poll in one batch.
	ReadOn bool

	pos map[string]string // shard -> last applied sequence number
	// tips hold, per open shard, the iterator a poll stopped at, where
	// the next poll goes on from (see pollShard).
	tips map[string]tip
	now  func() time.Time // time.Now when nil
	// limit is how many records a shard's next batch may have, when
	// fewer than BatchSize: a failed batch halves it (down to 1), and each
	// batch applied doubles it back. So a failure that strikes large
	// batches (one request failing among many, under a fault rate that
	// fails most of them) does not fail every retry of the same batch for
	// ever, and the records before one that always fails are applied, as
	// an event source mapping with BisectBatchOnFunctionError does.
	limit map[string]int
}

// tip is where a poll of an open shard stopped: the next iterator of the
// last, empty, page it read, got at at.
type tip struct {
	arn, iter string
	at        time.Time
}

const (
	// emptyPages is how many empty pages in a row of an open shard a poll from its
	// checkpoint reads before it takes the shard as caught up. DynamoDB
	// Streams may answer empty pages, each with a next iterator, for a
	// part of an open shard before the records that follow it, and at its
	// end alike: the two cannot be told apart.
	emptyPages = 5
	// tipAge is how long a poll may go on from the iterator the last poll
	// stopped at: DynamoDB Streams refuses an iterator 15 minutes after it
	// was given.
	tipAge = 10 * time.Minute
)

// Poll applies every record the stream holds now, and returns how many.
func (p *Poller) Poll(ctx context.Context) (int, error) {
	if p.pos == nil {
		pos, err := p.Saved.Load(ctx)
		if err != nil {
			return 0, fmt.Errorf("load stream checkpoints: %w", err)
		}
		p.pos = pos
	}
	shards, err := p.shards(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, sh := range shards { // parents are listed before their children
		m, err := p.pollShard(ctx, aws.ToString(sh.ShardId), closed(sh))
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// pollShard applies the records of shard from its checkpoint on. A closed
// shard is read to its end, where it gives no next iterator, before its
// children: an empty page is not its end, as DynamoDB Streams may answer
// none for a part of a shard that holds no records. An open shard always
// has a next iterator, and its empty pages may come before more records
// or be its end: a poll reads on past a few of them (emptyPages), and
// keeps the next iterator of the last one, which the next poll goes on
// from, reading one page further. So polls make their way through a run
// of empty pages of any length, and a poll at an open shard's end reads
// one page, as it did before it kept its place.
func (p *Poller) pollShard(ctx context.Context, shard string, closed bool) (int, error) {
	out, limit, budget, err := p.firstPage(ctx, shard)
	// empty counts the empty pages read in a row: a page with records
	// starts the count again, so that a shard with many short runs of
	// empty pages is read past each of them (a ReadOn poll applies all
	// the shard holds), and only a run of budget ends the poll.
	empty := budget
	n := 0
	for err == nil {
		if len(out.Records) == 0 {
			if out.NextShardIterator == nil {
				return n, nil // a closed shard, read to its end
			}
			if !closed {
				if empty--; empty == 0 {
					p.keep(shard, out.NextShardIterator)
					return n, nil
				}
			}
			out, limit, err = p.read(ctx, shard, out.NextShardIterator)
			continue
		}
		empty = budget
		batch := events.DynamoDBEvent{Records: make([]events.DynamoDBEventRecord, len(out.Records))}
		for i, r := range out.Records {
			batch.Records[i] = eventRecord(r, p.StreamARN)
		}
		if err := p.Handle(WithShard(ctx, shard), batch); err != nil {
			if p.limit == nil {
				p.limit = map[string]int{}
			}
			p.limit[shard] = max(1, len(batch.Records)/2)
			// Named by their sequence numbers: a record that always fails
			// is retried at every poll, alone once the batches are down to
			// one, and this says which.
			first, last := batch.Records[0].Change.SequenceNumber, batch.Records[len(batch.Records)-1].Change.SequenceNumber
			return n, fmt.Errorf("handle %d records of %s, sequence numbers %s to %s: %w", len(batch.Records), shard, first, last, err)
		}
		if limit < BatchSize {
			if grown := 2 * limit; grown >= BatchSize {
				delete(p.limit, shard)
			} else {
				p.limit[shard] = grown
			}
		}
		last := aws.ToString(out.Records[len(out.Records)-1].Dynamodb.SequenceNumber)
		if err := p.Saved.Save(ctx, shard, last); err != nil {
			return n, fmt.Errorf("save stream checkpoint: %w", err)
		}
		p.pos[shard] = last
		n += len(out.Records)
		switch {
		case out.NextShardIterator == nil:
			return n, nil // a closed shard, read to its end
		case closed || p.ReadOn || len(out.Records) >= limit || cutAtMegabyte(out.Records):
			out, limit, err = p.read(ctx, shard, out.NextShardIterator)
		default:
			// A page of fewer records than asked for, small ones, ends at
			// what the open shard held when it was read: what arrived
			// while the handler ran waits for the next poll, which goes on
			// from here, in one batch, rather than being handed over a
			// few records at a time for as long as writes keep coming.
			p.keep(shard, out.NextShardIterator)
			return n, nil
		}
	}
	return n, err
}

// pageCut is how many bytes of records a page holds at least when
// GetRecords cut it at the megabyte it answers at most: a megabyte less
// the record that did not fit, which carries at most an item's two
// images, each under DynamoDB's 400 KB.
const pageCut = 1<<20 - 800<<10

// cutAtMegabyte reports whether a page of fewer records than asked for
// may have been cut at GetRecords' megabyte, with more records behind it
// already, rather than ending at what the shard held: its records come
// to at least pageCut bytes.
func cutAtMegabyte(recs []streamtypes.Record) bool {
	var size int64
	for _, r := range recs {
		if r.Dynamodb != nil {
			size += aws.ToInt64(r.Dynamodb.SizeBytes)
		}
	}
	return size >= pageCut
}

// firstPage reads the first page of a poll of shard, and says how many
// empty pages the poll reads if the shard is open: one from where the
// last poll stopped, if that is recent enough and still works (the poll
// that stopped there read the pages before it), else emptyPages from the
// checkpoint.
func (p *Poller) firstPage(ctx context.Context, shard string) (*dynamodbstreams.GetRecordsOutput, int, int, error) {
	t, ok := p.tips[shard]
	delete(p.tips, shard) // a poll that ends otherwise than at an empty page keeps no place
	if ok && t.arn == p.StreamARN && p.clock().Sub(t.at) <= tipAge {
		if out, limit, err := p.read(ctx, shard, &t.iter); err == nil {
			return out, limit, 1, nil
		}
		// Expired, most likely, or its records went past the retention:
		// the checkpoint says where to go on from.
	}
	iter, err := p.fromCheckpoint(ctx, shard)
	if err != nil {
		return nil, 0, 0, err
	}
	out, limit, err := p.read(ctx, shard, iter)
	return out, limit, emptyPages, err
}

// keep keeps iter as where the next poll of shard goes on from.
func (p *Poller) keep(shard string, iter *string) {
	if p.tips == nil {
		p.tips = map[string]tip{}
	}
	p.tips[shard] = tip{arn: p.StreamARN, iter: *iter, at: p.clock()}
}

// fromCheckpoint returns an iterator of shard after its checkpoint.
func (p *Poller) fromCheckpoint(ctx context.Context, shard string) (*string, error) {
	in := &dynamodbstreams.GetShardIteratorInput{StreamArn: &p.StreamARN, ShardId: &shard, ShardIteratorType: streamtypes.ShardIteratorTypeTrimHorizon}
	if seq := p.pos[shard]; seq != "" {
		in.ShardIteratorType, in.SequenceNumber = streamtypes.ShardIteratorTypeAfterSequenceNumber, &seq
	}
	it, err := p.Streams.GetShardIterator(ctx, in)
	var trimmed *streamtypes.TrimmedDataAccessException
	if errors.As(err, &trimmed) {
		// The records after the checkpoint went past the stream's
		// retention (24 h) before they were applied: they are lost. Go on
		// from the oldest record held, as an event source mapping does,
		// rather than fail every poll for ever.
		p.log().ErrorContext(ctx, "stream records lost: the checkpoint is older than the stream's retention; going on from the oldest record held",
			"shard", shard, "checkpoint", aws.ToString(in.SequenceNumber))
		in.ShardIteratorType, in.SequenceNumber = streamtypes.ShardIteratorTypeTrimHorizon, nil
		it, err = p.Streams.GetShardIterator(ctx, in)
	}
	if err != nil {
		return nil, fmt.Errorf("shard iterator of %s: %w", shard, err)
	}
	return it.ShardIterator, nil
}

func (p *Poller) clock() time.Time {
	if p.now == nil {
		return time.Now()
	}
	return p.now()
}

// closed reports whether sh is closed: it has an ending sequence number.
func closed(sh streamtypes.Shard) bool {
	return sh.SequenceNumberRange != nil && sh.SequenceNumberRange.EndingSequenceNumber != nil
}

// read reads the page of shard at iter: at most its batch limit.
func (p *Poller) read(ctx context.Context, shard string, iter *string) (*dynamodbstreams.GetRecordsOutput, int, error) {
	limit := BatchSize
	if l, ok := p.limit[shard]; ok {
		limit = l
	}
	out, err := p.Streams.GetRecords(ctx, &dynamodbstreams.GetRecordsInput{ShardIterator: iter, Limit: aws.Int32(int32(limit))})
	if err != nil {
		return nil, 0, fmt.Errorf("records of %s: %w", shard, err)
	}
	return out, limit, nil
}

// Run polls every interval until ctx ends. A failed poll is logged and
// retried on the next tick; nothing is skipped.
func (p *Poller) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if _, err := p.Poll(ctx); err != nil && ctx.Err() == nil {
			p.log().WarnContext(ctx, "stream poll failed; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (p *Poller) log() *slog.Logger {
	if p.Log == nil {
		return slog.Default()
	}
	return p.Log
}

func eventRecord(r streamtypes.Record, arn string) events.DynamoDBEventRecord {
	out := events.DynamoDBEventRecord{
		AWSRegion: aws.ToString(r.AwsRegion), EventID: aws.ToString(r.EventID), EventName: string(r.EventName),
		EventSource: aws.ToString(r.EventSource), EventVersion: aws.ToString(r.EventVersion), EventSourceArn: arn,
	}
	if d := r.Dynamodb; d != nil {
		out.Change = events.DynamoDBStreamRecord{
			Keys: eventImage(d.Keys), NewImage: eventImage(d.NewImage), OldImage: eventImage(d.OldImage),
			SequenceNumber: aws.ToString(d.SequenceNumber), SizeBytes: aws.ToInt64(d.SizeBytes), StreamViewType: string(d.StreamViewType),
		}
		if d.ApproximateCreationDateTime != nil {
			out.Change.ApproximateCreationDateTime = events.SecondsEpochTime{Time: *d.ApproximateCreationDateTime}
		}
	}
	return out
}

// NewLocalClient returns a DynamoDB Streams client for a local endpoint
// (the project's dynalite serves the Streams API on its own port), with
// dummy credentials.
func NewLocalClient(endpoint string) *dynamodbstreams.Client {
	return dynamodbstreams.New(dynamodbstreams.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
	})
}

// MemoryCheckpoints keep positions in memory: a new poller starts from the
// oldest record the stream holds.
type MemoryCheckpoints struct{}

func (MemoryCheckpoints) Load(context.Context) (map[string]string, error) {
	return map[string]string{}, nil
}
func (MemoryCheckpoints) Save(context.Context, string, string) error { return nil }

// TableCheckpoints keep positions in one item of a DynamoDB table (key
// attribute KeyName = Key), so that a poller restarted over the same data
// resumes where it stopped. The local server keeps them in its agents table,
// under a key no agent id can take.
type TableCheckpoints struct {
	DB      ItemAPI
	Table   string
	KeyName string
	Key     string
}

// ItemAPI lists the DynamoDB calls TableCheckpoints makes.
type ItemAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

func (c TableCheckpoints) key() map[string]ddb.AttributeValue {
	return map[string]ddb.AttributeValue{c.KeyName: &ddb.AttributeValueMemberS{Value: c.Key}}
}

func (c TableCheckpoints) Load(ctx context.Context) (map[string]string, error) {
	out, err := c.DB.GetItem(ctx, &dynamodb.GetItemInput{TableName: &c.Table, Key: c.key(), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	var item struct {
		Shards map[string]string `dynamodbav:"shards"`
	}
	if err := attributevalue.UnmarshalMap(out.Item, &item); err != nil {
		return nil, err
	}
	if item.Shards == nil {
		item.Shards = map[string]string{}
	}
	return item.Shards, nil
}

func (c TableCheckpoints) Save(ctx context.Context, shard, seq string) error {
	shards := expression.Name("shards")
	// One map attribute: set per shard once it exists, whole before that.
	err := c.update(ctx, expression.AttributeExists(shards), expression.Set(shards.AppendName(expression.NameNoDotSplit(shard)), expression.Value(seq)))
	var ccf *ddb.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return err
	}
	return c.update(ctx, expression.AttributeNotExists(shards), expression.Set(shards, expression.Value(map[string]string{shard: seq})))
}

// update makes one conditional UpdateItem of the checkpoint item.
func (c TableCheckpoints) update(ctx context.Context, cond expression.ConditionBuilder, upd expression.UpdateBuilder) error {
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
	if err != nil {
		return err
	}
	_, err = c.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &c.Table, Key: c.key(),
		ConditionExpression:       expr.Condition(),
		UpdateExpression:          expr.Update(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	})
	return err
}

// SeedFrom makes c start where from is, if c has never been saved: for a
// consumer added to a stream that another consumer has read so far, which
// applied what the new one does up to there (the local server's notices
// consumer, whose notices the one consumer before it published). It must
// run while nothing moves from. It writes c once; a c saved before, or
// seeded before, is kept as it is, so a consumer that has fallen behind
// from never skips ahead.
func (c TableCheckpoints) SeedFrom(ctx context.Context, from TableCheckpoints) error {
	shards, err := from.Load(ctx)
	if err != nil {
		return err
	}
	key := expression.Name(c.KeyName)
	upd := expression.Set(expression.Name("seeded_from"), expression.Value(from.Key))
	if len(shards) > 0 {
		upd = upd.Set(expression.Name("shards"), expression.Value(shards))
	}
	err = c.update(ctx, expression.AttributeNotExists(key), upd)
	if ccf := (*ddb.ConditionalCheckFailedException)(nil); errors.As(err, &ccf) {
		return nil
	}
	return err
}
