package stream

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	ddb "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	streamtypes "github.com/aws/aws-sdk-go-v2/service/dynamodbstreams/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/localstack"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Every attribute type survives the trip the local poller makes (Streams
// API record -> Lambda event -> the store's SDK form), and the Lambda
// event's JSON, as the event source mapping delivers it, decodes the same.
func TestImagesKeepEveryAttributeType(t *testing.T) {
	t.Parallel()
	// Each type as the Streams API gives it and as the store reads it.
	type pair struct {
		stream streamtypes.AttributeValue
		store  ddb.AttributeValue
	}
	types := map[string]pair{
		"s":    {&streamtypes.AttributeValueMemberS{Value: "x"}, &ddb.AttributeValueMemberS{Value: "x"}},
		"n":    {&streamtypes.AttributeValueMemberN{Value: "12"}, &ddb.AttributeValueMemberN{Value: "12"}},
		"b":    {&streamtypes.AttributeValueMemberB{Value: []byte{1, 2}}, &ddb.AttributeValueMemberB{Value: []byte{1, 2}}},
		"bool": {&streamtypes.AttributeValueMemberBOOL{Value: true}, &ddb.AttributeValueMemberBOOL{Value: true}},
		"null": {&streamtypes.AttributeValueMemberNULL{Value: true}, &ddb.AttributeValueMemberNULL{Value: true}},
		"ss":   {&streamtypes.AttributeValueMemberSS{Value: []string{"a", "b"}}, &ddb.AttributeValueMemberSS{Value: []string{"a", "b"}}},
		"ns":   {&streamtypes.AttributeValueMemberNS{Value: []string{"1", "2"}}, &ddb.AttributeValueMemberNS{Value: []string{"1", "2"}}},
		"bs":   {&streamtypes.AttributeValueMemberBS{Value: [][]byte{{3}}}, &ddb.AttributeValueMemberBS{Value: [][]byte{{3}}}},
		"l": {
			&streamtypes.AttributeValueMemberL{Value: []streamtypes.AttributeValue{&streamtypes.AttributeValueMemberS{Value: "y"}}},
			&ddb.AttributeValueMemberL{Value: []ddb.AttributeValue{&ddb.AttributeValueMemberS{Value: "y"}}},
		},
		"m": {
			&streamtypes.AttributeValueMemberM{Value: map[string]streamtypes.AttributeValue{"k": &streamtypes.AttributeValueMemberN{Value: "3"}}},
			&ddb.AttributeValueMemberM{Value: map[string]ddb.AttributeValue{"k": &ddb.AttributeValueMemberN{Value: "3"}}},
		},
	}
	newImage, want := map[string]streamtypes.AttributeValue{}, map[string]ddb.AttributeValue{}
	for name, p := range types {
		newImage[name], want[name] = p.stream, p.store
	}
	record := streamtypes.Record{
		EventID: aws.String("1"), EventName: streamtypes.OperationTypeModify,
		Dynamodb: &streamtypes.StreamRecord{SequenceNumber: aws.String("000001"), NewImage: newImage},
	}
	ev := eventRecord(record, "arn:stream")
	got, err := image(ev.Change.NewImage)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("image after the poller's conversion\n got %#v\nwant %#v", got, want)
	}
	// Through JSON, as Lambda hands the function its event.
	b, err := json.Marshal(events.DynamoDBEvent{Records: []events.DynamoDBEventRecord{ev}})
	if err != nil {
		t.Fatal(err)
	}
	var back events.DynamoDBEvent
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got, err := image(back.Records[0].Change.NewImage); err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("image after JSON: %v\n got %#v", err, got)
	}
}

// A poller restarted over the same checkpoints resumes after the last
// record its handler applied, and a failed batch is handed over again.
func TestPollerResumesFromItsCheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := testenv.NewStore(t)
	db, names := store.DB, store.Names
	arn, err := localstack.StreamARN(ctx, db, names.Table(schema.TasksTable))
	if err != nil {
		t.Fatal(err)
	}
	saved := TableCheckpoints{DB: db, Table: names.Table(schema.AgentsTable), KeyName: "agent_id", Key: "#stream#test"}
	var seen []string
	fail := true
	newPoller := func() *Poller {
		return &Poller{Streams: NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: saved,
			Handle: func(_ context.Context, ev events.DynamoDBEvent) error {
				if fail {
					fail = false
					return context.DeadlineExceeded
				}
				for _, r := range ev.Records {
					seen = append(seen, r.Change.NewImage["task_id"].String())
				}
				return nil
			}}
	}
	for _, id := range []string{"a", "b"} {
		if _, err := store.CreateTask(ctx, lease.CreateTaskParams{TaskID: id}); err != nil {
			t.Fatal(err)
		}
	}
	p := newPoller()
	if _, err := p.Poll(ctx); err == nil {
		t.Fatal("a failed batch should fail the poll")
	}
	if n, err := p.Poll(ctx); err != nil || n != 2 {
		t.Fatalf("poll after the failure: %d %v", n, err)
	}
	if _, err := store.CreateTask(ctx, lease.CreateTaskParams{TaskID: "c"}); err != nil {
		t.Fatal(err)
	}
	if n, err := newPoller().Poll(ctx); err != nil || n != 1 {
		t.Fatalf("a new poller over the same checkpoints: %d %v, want the one new change", n, err)
	}
	if !reflect.DeepEqual(seen, []string{"a", "b", "c"}) {
		t.Fatalf("changes handled %v, want a, b, c once each", seen)
	}
}

// A consumer added to a stream another consumer has read so far starts
// where that one is, once: a seeded or saved checkpoint is never moved by
// seeding again, so a consumer that has fallen behind never skips ahead.
func TestSeedFromStartsOnceWhereTheOtherIs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := testenv.NewStore(t)
	at := func(key string) TableCheckpoints {
		return TableCheckpoints{DB: store.DB, Table: store.Names.Table(schema.AgentsTable), KeyName: "agent_id", Key: key}
	}
	from, fresh, seeded := at("#stream#t"), at("#stream-empty#t"), at("#stream-notices#t")
	// From a consumer with no checkpoint: the start of the stream.
	if err := fresh.SeedFrom(ctx, from); err != nil {
		t.Fatal(err)
	}
	if got, err := fresh.Load(ctx); err != nil || len(got) != 0 {
		t.Fatalf("seeded from nothing: %v %v", got, err)
	}
	if err := fresh.Save(ctx, "s1", "5"); err != nil {
		t.Fatal(err)
	}
	if err := from.Save(ctx, "s1", "10"); err != nil {
		t.Fatal(err)
	}
	if err := from.Save(ctx, "s2", "20"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []TableCheckpoints{fresh, seeded} {
		if err := c.SeedFrom(ctx, from); err != nil {
			t.Fatal(err)
		}
	}
	if got, _ := fresh.Load(ctx); !reflect.DeepEqual(got, map[string]string{"s1": "5"}) {
		t.Fatalf("a checkpoint saved before was moved by a seed: %v", got)
	}
	if got, _ := seeded.Load(ctx); !reflect.DeepEqual(got, map[string]string{"s1": "10", "s2": "20"}) {
		t.Fatalf("seeded: %v", got)
	}
	if err := from.Save(ctx, "s1", "30"); err != nil {
		t.Fatal(err)
	}
	if err := seeded.SeedFrom(ctx, from); err != nil {
		t.Fatal(err)
	}
	if got, _ := seeded.Load(ctx); !reflect.DeepEqual(got, map[string]string{"s1": "10", "s2": "20"}) {
		t.Fatalf("seeded twice: %v", got)
	}
	if err := seeded.Save(ctx, "s2", "25"); err != nil {
		t.Fatal(err)
	}
	if got, _ := seeded.Load(ctx); !reflect.DeepEqual(got, map[string]string{"s1": "10", "s2": "25"}) {
		t.Fatalf("saved after the seed: %v", got)
	}
}

// countingStreams counts the iterators and pages asked of a StreamsAPI.
type countingStreams struct {
	StreamsAPI
	iterators, reads int
}

func (c *countingStreams) GetShardIterator(ctx context.Context, in *dynamodbstreams.GetShardIteratorInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetShardIteratorOutput, error) {
	c.iterators++
	return c.StreamsAPI.GetShardIterator(ctx, in, optFns...)
}

func (c *countingStreams) GetRecords(ctx context.Context, in *dynamodbstreams.GetRecordsInput, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.GetRecordsOutput, error) {
	c.reads++
	return c.StreamsAPI.GetRecords(ctx, in, optFns...)
}

// A poll that stopped at the stream's end keeps its place: the next poll
// goes on from it, sees the changes written since, and at the end reads
// one page, with no new iterator.
func TestPollerGoesOnFromWhereItStopped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := testenv.NewStore(t)
	arn, err := localstack.StreamARN(ctx, store.DB, store.Names.Table(schema.TasksTable))
	if err != nil {
		t.Fatal(err)
	}
	streams := &countingStreams{StreamsAPI: NewLocalClient(testenv.Endpoint())}
	var seen []string
	p := &Poller{Streams: streams, StreamARN: arn, Saved: MemoryCheckpoints{},
		Handle: func(_ context.Context, ev events.DynamoDBEvent) error {
			for _, r := range ev.Records {
				seen = append(seen, r.Change.NewImage["task_id"].String())
			}
			return nil
		}}
	for _, id := range []string{"a", "b"} {
		if _, err := store.CreateTask(ctx, lease.CreateTaskParams{TaskID: id}); err != nil {
			t.Fatal(err)
		}
		if n, err := p.Poll(ctx); err != nil || n != 1 {
			t.Fatalf("poll after creating %s: %d %v", id, n, err)
		}
	}
	streams.reads = 0
	if n, err := p.Poll(ctx); err != nil || n != 0 || streams.reads != 1 || streams.iterators != 1 {
		t.Fatalf("a poll at the end: %d records, %v, %d pages read, %d iterators in all; want 1 page and no new iterator", n, err, streams.reads, streams.iterators)
	}
	if !reflect.DeepEqual(seen, []string{"a", "b"}) {
		t.Fatalf("changes handled %v", seen)
	}
}
