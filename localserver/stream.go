package localserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/smithy-go"
	smithyendpoints "github.com/aws/smithy-go/endpoints"

	"github.com/checkout-dev/checkout/httpapi"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

// DefaultStreamPollInterval is how often the server reads the tasks table's
// change stream: watchers are told within about this long after a
// transition, and notices published as soon as their receivers take them.
const DefaultStreamPollInterval = 200 * time.Millisecond

// changes runs the stream function's handler over the tasks table's change
// stream, as Lambda's event source mapping does in AWS: the local DynamoDB
// serves the Streams API, and the pollers hand the handler the same
// events.DynamoDBEvent batches.
//
// It does so as two consumers of the stream, each with its own checkpoint,
// as two event source mappings on one stream would: consequences (the
// archive, the feed, queue counts, watchers' messages, unblocking) and
// notices (the log, and the webhooks, which retry a receiver that is down
// for half a minute before they dead-letter). A poller reads its next batch
// only once its handler is done with the last, so in one consumer a slow
// receiver would hold up every later transition's messages; in two it
// holds up only the notices. Each consumer keeps its place until its
// handler has succeeded, so a notice is published at least once, across a
// crash or a restart, as before.
type changes struct {
	// writes holds the consequences' polls in flight: they unblock
	// dependents, which are transitions (see writers).
	writes       *writers
	db           *database
	names        schema.Names
	consequences *consumer
	notices      *consumer
}

// consumer is one reader of the stream: a poller and its checkpoint.
type consumer struct {
	// turn is held by the poll in flight: one poll at a time. A channel
	// rather than a mutex, so that a read waiting for its turn behind a
	// long poll (a mass ending's thousands of transitions) gives up with
	// its context (catchUp) and answers with what is applied.
	turn   chan struct{}
	handle *stream.Poller
	arn    string
	// arnGen is the database's generation (database.gen) the ARN was read
	// in: as the only writer (database.sole), it is read again only in a
	// new one, or after a poll failed (-1).
	arnGen int64
	// started counts the polls begun; done is the count a poll had when it
	// began, once it has succeeded (catchUp).
	started, done atomic.Int64
}

// Checkpoint keys in the agents table, which no agent id can take.
const (
	consequencesCheckpoint = "#stream#"         // + the tasks table's name
	noticesCheckpoint      = "#stream-notices#" // + the tasks table's name
)

// checkpoints is where a consumer of the tasks table's stream keeps its
// position: in the agents table, so that a server restarted over the same
// data resumes where it stopped.
func checkpoints(db stream.ItemAPI, names schema.Names, prefix string) stream.TableCheckpoints {
	return stream.TableCheckpoints{DB: db, Table: names.Table(schema.AgentsTable), KeyName: "agent_id", Key: prefix + names.Table(schema.TasksTable)}
}

// ConsequencesCheckpoints is where the server's consumer of the
// consequences (ApplyConsequences) keeps its position in the stream, for a
// command that applies the stream in its stead while the server is
// stopped (`checkout-server recount`).
func ConsequencesCheckpoints(db stream.ItemAPI, names schema.Names) stream.TableCheckpoints {
	return checkpoints(db, names, consequencesCheckpoint)
}

// NoticesCheckpoints is where the server's consumer of the notices
// (PublishNotices) keeps its position in the stream, for a command that
// must keep what the notices still to be published read while the server
// is stopped (`checkout-server bodies`).
func NoticesCheckpoints(db stream.ItemAPI, names schema.Names) stream.TableCheckpoints {
	return checkpoints(db, names, noticesCheckpoint)
}

// newChanges sets up both consumers. It must run before either polls: a
// notices checkpoint that was never saved (data of a server from before the
// notices had a consumer of their own, which published them with the
// consequences) starts where the consequences checkpoint is.
func newChanges(ctx context.Context, db *database, names schema.Names, store *lease.Store, log *slog.Logger) (*changes, error) {
	streams := dynamodbstreams.New(dynamodbstreams.Options{
		Region:             "us-east-1",
		Credentials:        db.client.Options().Credentials,
		HTTPClient:         db.client.Options().HTTPClient,
		EndpointResolverV2: streamEndpoint{&db.endpoint},
	})
	consequences, notices := checkpoints(db.client, names, consequencesCheckpoint), checkpoints(db.client, names, noticesCheckpoint)
	if err := notices.SeedFrom(ctx, consequences); err != nil {
		return nil, fmt.Errorf("the notices' stream checkpoint: %w", err)
	}
	return &changes{
		db: db, names: names,
		consequences: &consumer{turn: make(chan struct{}, 1), handle: &stream.Poller{Streams: streams, Handle: stream.ConsequencesHandler(store), Saved: consequences, Log: log}},
		notices:      &consumer{turn: make(chan struct{}, 1), handle: &stream.Poller{Streams: streams, Handle: stream.NoticesHandler(store), Saved: notices, Log: log}},
	}, nil
}

// poll applies every change the stream holds now: the consequences, then
// the notices.
func (c *changes) poll(ctx context.Context) error {
	_, errC := c.pollOne(ctx, c.consequences)
	_, errN := c.pollOne(ctx, c.notices)
	return errors.Join(errC, errN)
}

// pollOne hands every change the stream holds now to one consumer. The
// stream's ARN is read each time (another server on the endpoint may have
// made the tables again), but for the only writer (db.sole), which reads
// it again only after a restart of its dynalite (in memory it has new
// tables), a mending of the tables or a poll that failed. A new ARN clears
// the key cache (db.replaced).
func (c *changes) pollOne(ctx context.Context, to *consumer) (int, error) {
	if err := to.lock(ctx); err != nil {
		return 0, err
	}
	defer to.unlock()
	return c.pollLocked(ctx, to)
}

// lock takes the consumer's turn, or gives up with ctx's error.
func (to *consumer) lock(ctx context.Context) error {
	select {
	case to.turn <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (to *consumer) unlock() { <-to.turn }

func (c *changes) pollLocked(ctx context.Context, to *consumer) (int, error) {
	if to == c.consequences && c.writes != nil {
		defer c.writes.enter()()
	}
	n := to.started.Add(1)
	arn, gen := to.arn, c.db.gen.Load()
	if !c.db.sole || arn == "" || to.arnGen != gen {
		var err error
		if arn, err = localstack.StreamARN(ctx, c.db.client, c.names.Table(schema.TasksTable)); err != nil {
			return 0, err
		}
		to.arnGen = gen
	}
	if arn != to.arn {
		if to.arn != "" && c.db.replaced != nil {
			// The tasks table was made again since the last poll, perhaps
			// by another server on the endpoint, which found it missing
			// first: this one's cached keys may be of the lost database.
			c.db.replaced()
		}
		p := *to.handle
		p.StreamARN = arn
		to.handle, to.arn = &p, arn
	}
	applied, err := to.handle.Poll(ctx)
	if err == nil {
		to.done.Store(n)
	} else {
		to.arnGen = -1 // the stream may be another: read its ARN again
	}
	return applied, err
}

// catchUp returns once a poll of to that began after catchUp was called
// has succeeded: every change written before the call is then applied.
// Polls coalesce: callers that arrive while one poll runs share the next.
func (c *changes) catchUp(ctx context.Context, to *consumer) error {
	arrived := to.started.Load()
	if err := to.lock(ctx); err != nil {
		return err
	}
	defer to.unlock()
	if to.done.Load() > arrived {
		return nil // a poll that began after we arrived has applied it
	}
	_, err := c.pollLocked(ctx, to)
	return err
}

// ErrNoStreams is why Start refuses an endpoint (DYNAMODB_ENDPOINT) that
// does not serve the DynamoDB Streams API, or does not keep the tasks
// table's stream: the server reads that stream for every transition's
// audit event, watcher messages and notices, and would lose them all.
var ErrNoStreams = errors.New("it does not serve the DynamoDB Streams API, which the server needs for audit events, watcher messages and notices; " +
	"unset DYNAMODB_ENDPOINT to let the server run its own dynalite (which has Streams), or point DYNAMODB_ENDPOINT at one that serves " +
	"Streams: go run ./cmd/dynalite, DynamoDB Local, LocalStack or DynamoDB itself")

// checkStreams makes sure that endpoint serves the Streams API, before any
// table is made or changed there. A server that cannot be reached passes:
// what follows fails on it with its own error.
func checkStreams(ctx context.Context, db *database, endpoint string) error {
	streams := dynamodbstreams.New(dynamodbstreams.Options{
		Region:             "us-east-1",
		Credentials:        db.client.Options().Credentials,
		HTTPClient:         db.client.Options().HTTPClient,
		EndpointResolverV2: streamEndpoint{&db.endpoint},
		RetryMaxAttempts:   1,
	})
	_, err := streams.ListStreams(ctx, &dynamodbstreams.ListStreamsInput{Limit: aws.Int32(1)})
	if err == nil || httpapi.Unavailable(err) || ctx.Err() != nil {
		return nil
	}
	why := err.Error()
	if api := smithy.APIError(nil); errors.As(err, &api) {
		why = api.ErrorCode()
	}
	return fmt.Errorf("the DynamoDB endpoint %s (ListStreams answered %s): %w", endpoint, why, ErrNoStreams)
}

// checkTableStream makes sure that the tasks table at endpoint has its
// stream, as a server with the Streams API may still not keep one.
func checkTableStream(ctx context.Context, db *database, endpoint, table string) error {
	_, err := localstack.StreamARN(ctx, db.client, table)
	if errors.Is(err, localstack.ErrNoStream) {
		return fmt.Errorf("the DynamoDB endpoint %s (table %s has no stream although it was asked for one): %w", endpoint, table, ErrNoStreams)
	}
	return err
}

type streamEndpoint struct{ p *atomic.Pointer[string] }

func (e streamEndpoint) ResolveEndpoint(context.Context, dynamodbstreams.EndpointParameters) (smithyendpoints.Endpoint, error) {
	u, err := url.Parse(*e.p.Load())
	if err != nil {
		return smithyendpoints.Endpoint{}, err
	}
	return smithyendpoints.Endpoint{URI: *u}, nil
}

// catchUpWait bounds how long a read waits for the change stream before it
// answers with what is applied.
const catchUpWait = 2 * time.Second

// readYourWrites is the store as the local server serves it: the reads
// whose answers the change stream writes (a task's events, the queue
// counts, the inbox) first apply every change written before them, so that
// a client sees there what its answered requests did, at once rather than
// within the poll interval. (In AWS they follow the stream function, about
// a second behind.) A poll that fails or takes longer than catchUpWait
// leaves the read to answer with what is applied, as it would between two
// polls.
type readYourWrites struct {
	*lease.Store
	changes *changes
	writes  *writers
	// passed is the latest horizon of a feed read that could not apply
	// the change stream first (lease.Config.FeedPassed).
	passed *atomic.Int64
	// indexesCaughtUp says whether the tables' indexes show every write
	// answered so far (database.indexesCaughtUp).
	indexesCaughtUp func(context.Context) bool
	log             *slog.Logger
}

// feedBarrierWait bounds how long a read of the fleet feed waits for the
// writes in flight (a few milliseconds, but for a claim that waits for a
// task): past it, the read keeps the feed's settle instead.
const feedBarrierWait = 250 * time.Millisecond

// Feed reads the fleet feed up to the moment it was asked for, not a
// settle time before it (lease.FeedParams.Horizon): it waits for the
// transitions in flight and applies the change stream first, so every
// transition before that moment is archived, and reads up to it once the
// feed's index shows what was archived, so a cursor never passes an event
// still on its way. While the index lags (or on an endpoint that cannot
// say whether it does), or the stream cannot be applied first, the feed
// keeps its settle time, as in AWS, recorded before the read: an event of
// that time or earlier archived after it is keyed at its archive, ahead of
// the cursor the read hands out (lease.Config.FeedPassed).
func (s readYourWrites) Feed(ctx context.Context, p lease.FeedParams) (lease.FeedPage, error) {
	wait, cancel := context.WithTimeout(ctx, feedBarrierWait)
	horizon, ok := s.writes.barrier(wait)
	cancel()
	if ok && s.catchUp(ctx) && s.indexesCaughtUp(ctx) {
		p.Horizon = horizon
	} else {
		p.Horizon = s.FeedHorizon()
		for h := p.Horizon.UnixMilli(); ; {
			was := s.passed.Load()
			if was >= h || s.passed.CompareAndSwap(was, h) {
				break
			}
		}
	}
	return s.Store.Feed(ctx, p)
}

// The writes of task items, held in flight for Feed's barrier.

func (s readYourWrites) RemoveAgent(ctx context.Context, agentID string) error {
	defer s.writes.enter()()
	return s.Store.RemoveAgent(ctx, agentID)
}

func (s readYourWrites) CreateTask(ctx context.Context, p lease.CreateTaskParams) (lease.Task, error) {
	defer s.writes.enter()()
	return s.Store.CreateTask(ctx, p)
}

func (s readYourWrites) CreateTasks(ctx context.Context, ps []lease.CreateTaskParams) ([]lease.BatchResult, error) {
	defer s.writes.enter()()
	return s.Store.CreateTasks(ctx, ps)
}

func (s readYourWrites) UpdateTask(ctx context.Context, p lease.UpdateTaskParams) (lease.Task, error) {
	defer s.writes.enter()()
	return s.Store.UpdateTask(ctx, p)
}

func (s readYourWrites) Checkout(ctx context.Context, p lease.CheckoutParams) (lease.Checkout, error) {
	defer s.writes.enter()()
	return s.Store.Checkout(ctx, p)
}

func (s readYourWrites) Renew(ctx context.Context, p lease.RenewParams) (lease.Checkout, error) {
	defer s.writes.enter()()
	return s.Store.Renew(ctx, p)
}

// A release or completion that names its lease and is refused may repeat
// one whose ending the stream has yet to archive (see lease, "A repeat
// after a later ending"): it is asked again once the stream is applied.

func (s readYourWrites) Release(ctx context.Context, p lease.ReleaseParams) (lease.Released, error) {
	return askAgain(s, ctx, p.RunID, p.Fence, func() (lease.Released, error) { return s.Store.Release(ctx, p) })
}

func (s readYourWrites) Complete(ctx context.Context, p lease.CompleteParams) (lease.Task, error) {
	return askAgain(s, ctx, p.RunID, p.Fence, func() (lease.Task, error) { return s.Store.Complete(ctx, p) })
}

// askAgain makes a holder's write (held in flight for Feed's barrier), and,
// when it names its lease (runID, fence) and is refused as not live, makes
// it again once the stream is applied.
func askAgain[T any](s readYourWrites, ctx context.Context, runID string, fence int64, write func() (T, error)) (T, error) {
	once := func() (T, error) {
		defer s.writes.enter()()
		return write()
	}
	v, err := once()
	named := runID != "" || fence != 0
	if named && (errors.Is(err, lease.ErrNotCheckedOut) || errors.Is(err, lease.ErrNotHolder)) && s.catchUp(ctx) {
		return once()
	}
	return v, err
}

func (s readYourWrites) Claim(ctx context.Context, p lease.ClaimParams) (lease.Checkout, error) {
	defer s.writes.enter()()
	return s.Store.Claim(ctx, p)
}

// catchUp applies every change written before it, within catchUpWait, and
// says whether it did; a read that it did not answers with what is
// applied.
func (s readYourWrites) catchUp(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, catchUpWait)
	defer cancel()
	err := s.changes.catchUp(ctx, s.changes.consequences)
	if err != nil && ctx.Err() == nil {
		s.log.WarnContext(ctx, "change stream, before a read", "error", err.Error())
	}
	return err == nil
}

func (s readYourWrites) TrailPage(ctx context.Context, p lease.TrailParams) (lease.Trail, error) {
	s.catchUp(ctx)
	return s.Store.TrailPage(ctx, p)
}

func (s readYourWrites) ListQueuePage(ctx context.Context, p lease.ListQueuesParams) (lease.QueuePage, error) {
	s.catchUp(ctx)
	return s.Store.ListQueuePage(ctx, p)
}

func (s readYourWrites) Inbox(ctx context.Context, agentID string) ([]lease.Message, error) {
	s.catchUp(ctx)
	return s.Store.Inbox(ctx, agentID)
}
