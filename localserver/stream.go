package localserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
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
// change stream: watchers are told, and notices published, within about
// this long after a transition.
const DefaultStreamPollInterval = 200 * time.Millisecond

// changes runs the stream function's handler over the tasks table's change
// stream, as Lambda's event source mapping does in AWS: the local DynamoDB
// serves the Streams API, and the poller hands the handler the same
// events.DynamoDBEvent batches.
type changes struct {
	mu     sync.Mutex // one poll at a time
	db     *database
	names  schema.Names
	handle *stream.Poller
	arn    string
}

func newChanges(db *database, names schema.Names, store *lease.Store) *changes {
	c := &changes{db: db, names: names}
	streams := dynamodbstreams.New(dynamodbstreams.Options{
		Region:             "us-east-1",
		Credentials:        db.client.Options().Credentials,
		HTTPClient:         db.client.Options().HTTPClient,
		EndpointResolverV2: streamEndpoint{&db.endpoint},
	})
	c.handle = &stream.Poller{
		Streams: streams,
		Handle:  stream.Handler(store),
		// Kept in the agents table, under a key no agent id can take, so a
		// server restarted over the same data resumes where it stopped.
		Saved: stream.TableCheckpoints{DB: db.client, Table: names.Table(schema.AgentsTable), KeyName: "agent_id", Key: "#stream#" + names.Table(schema.TasksTable)},
	}
	return c
}

// poll applies every change the stream holds now. The stream's ARN is read
// each time: an in-memory dynalite restarted after a crash has new tables.
func (c *changes) poll(ctx context.Context) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	arn, err := localstack.StreamARN(ctx, c.db.client, c.names.Table(schema.TasksTable))
	if err != nil {
		return 0, err
	}
	if arn != c.arn {
		p := *c.handle
		p.StreamARN = arn
		c.handle, c.arn = &p, arn
	}
	return c.handle.Poll(ctx)
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
