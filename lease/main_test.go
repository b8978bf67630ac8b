package lease_test

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

// epoch is where every test clock starts.
var epoch = time.Date(2026, 3, 20, 14, 35, 0, 0, time.UTC)

func TestMain(m *testing.M) { testenv.Main(m) }

type env struct {
	store  *lease.Store
	poller *stream.Poller
	clock  *testclock.Clock
	count  *testenv.Counter
	// streamCount counts the requests of the stream function's handler
	// (poller.Handle as newEnv makes it).
	streamCount *testenv.Counter
	notes       *testenv.Recorder
	db          *dynamodb.Client
	names       schema.Names
}

// newEnv gives a test its own tables on the shared DynamoDB-compatible
// server, a test clock, a request counter and a notice recorder. Every test
// also checks, when it ends, that no request was a Scan.
func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{clock: testclock.New(epoch), count: testenv.NewCounter(), streamCount: testenv.NewCounter(), notes: &testenv.Recorder{}}
	s := testenv.NewStore(t, testenv.WithClock(e.clock.Now), testenv.WithNotifier(e.notes), testenv.WithCounter(e.count))
	e.store, e.db, e.names = s.Store, s.DB, s.Names
	lease.OnPatch(e.store, foresees(t))
	// The change stream's consumer, as the local server runs it: the stream
	// function's handler over the store's own stream.
	arn, err := localstack.StreamARN(ctx(t), e.db, e.names.Table(schema.TasksTable))
	if err != nil {
		t.Fatalf("stream of the tasks table: %v", err)
	}
	e.poller = &stream.Poller{
		Streams:   stream.NewLocalClient(testenv.Endpoint()),
		StreamARN: arn,
		Handle:    stream.Handler(lease.New(lease.Config{DB: e.streamCount.Client(testenv.Endpoint()), Tables: e.names, Now: e.clock.Now, Notifier: e.notes})),
		Saved:     stream.MemoryCheckpoints{},
	}
	e.count.Take()
	t.Cleanup(func() {
		if n := e.count.Count("Scan"); n > 0 {
			t.Errorf("%d Scan requests: no operation may scan", n)
		}
		if n := e.store.FallbackReads(); n > 0 {
			t.Errorf("%d reads after failed conditions: the local DynamoDB must return the item (ALL_OLD), as DynamoDB does", n)
		}
	})
	return e
}

// foresees checks, for every PATCH a test's store makes, that the task
// the PATCH foresaw (its answer when its own answer was lost, once later
// writes have moved the task on) is the task its write left, as a reader
// sees it; the body and the last error are read apart from the item.
func foresees(t testing.TB) func(foreseen, written lease.Task) {
	return func(foreseen, written lease.Task) {
		for _, v := range []*lease.Task{&foreseen, &written} {
			v.Description, v.Metadata, v.LastError = "", nil, ""
		}
		if !reflect.DeepEqual(foreseen, written) {
			t.Errorf("a PATCH foresaw the task as\n%+v\nand its write left it as\n%+v", foreseen, written)
		}
	}
}

// lag puts index lag on tables of this env whose name starts with
// e.names.Prefix+table ("" for all of them), on the project's own dynalite.
func (e *env) lag(t testing.TB, table string, d time.Duration) {
	t.Helper()
	testenv.IndexLag(t, e.names.Prefix+table, d)
}

// caughtUp waits until the indexes of this env's tables show every write
// answered so far, for a step whose index read must find the test's own
// writes (a sweep, a claim or a listing right after them): the local
// DynamoDB counts the index updates its lag still holds, so no sleep is
// guessed at. Index lag itself stays on for the rest of the test.
func (e *env) caughtUp(t testing.TB) {
	t.Helper()
	testenv.CaughtUp(t, e.names.Prefix)
}

// storeCaughtUp is env.caughtUp for a store made without an env
// (newShardEnv).
func storeCaughtUp(t testing.TB, s *lease.Store) {
	t.Helper()
	testenv.CaughtUp(t, lease.TablePrefix(s))
}

// eventually polls cond until it holds, for up to 10 s of real time: index
// lag is the local DynamoDB's real time, not the test clock's.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The project's local DynamoDB returns the item with a failed condition, as
// DynamoDB does, so the tests run the path AWS takes.
func TestLocalDynamoDBReturnsItemOnConditionFailure(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "probe", Name: "probe"}))
	if ok := must[bool](t)(lease.ReturnsItemOnConditionFailure(c, e.db, e.names.Table(schema.AgentsTable), lease.AgentKey("probe"))); !ok {
		t.Fatal("the local DynamoDB ignores ReturnValuesOnConditionCheckFailure")
	}
	if _, err := e.store.GetAgent(c, "probe"); err != nil {
		t.Fatalf("the probe changed the item: %v", err)
	}
}

func ctx(t testing.TB) context.Context { return testenv.Context(t) }

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}

// task creates the tasks ids, each titled "title of <id>".
func (e *env) task(t testing.TB, ids ...string) {
	t.Helper()
	for _, id := range ids {
		if _, err := e.store.CreateTask(ctx(t), lease.CreateTaskParams{TaskID: id, Title: "title of " + id}); err != nil {
			t.Fatalf("create %s: %v", id, err)
		}
	}
}

func (e *env) checkout(t testing.TB, taskID, agentID string, timeout time.Duration) lease.Checkout {
	t.Helper()
	c, err := e.store.Checkout(ctx(t), lease.CheckoutParams{TaskID: taskID, AgentID: agentID, AgentName: "name-" + agentID, Timeout: timeout})
	if err != nil {
		t.Fatalf("checkout %s by %s: %v", taskID, agentID, err)
	}
	return c
}

// drain hands every change the tasks table's stream holds to the stream
// function's handler: after it, every transition so far has its
// consequences (archived events, messages, notices).
func (e *env) drain(t testing.TB) {
	t.Helper()
	if _, err := e.poller.Poll(ctx(t)); err != nil {
		t.Fatalf("drain the change stream: %v", err)
	}
}

// inbox is agentID's inbox once the stream has been drained.
func (e *env) inbox(t testing.TB, agentID string) []lease.Message {
	t.Helper()
	e.drain(t)
	msgs, err := e.store.Inbox(ctx(t), agentID)
	if err != nil {
		t.Fatalf("inbox of %s: %v", agentID, err)
	}
	return msgs
}

// noticeCount is the number of notices of kind about taskID once the stream
// has been drained.
func (e *env) noticeCount(t testing.TB, kind, taskID string) int {
	t.Helper()
	e.drain(t)
	return e.notes.Count(kind, taskID)
}

func (e *env) events(t testing.TB, taskID string) []lease.Event {
	t.Helper()
	e.drain(t)
	evs, err := e.store.Events(ctx(t), taskID)
	if err != nil {
		t.Fatalf("events %s: %v", taskID, err)
	}
	return evs
}

func kinds(evs []lease.Event) []lease.EventType {
	out := make([]lease.EventType, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}
