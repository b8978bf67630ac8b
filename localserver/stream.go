package localserver

import (
	"context"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	smithyendpoints "github.com/aws/smithy-go/endpoints"

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

type streamEndpoint struct{ p *atomic.Pointer[string] }

func (e streamEndpoint) ResolveEndpoint(context.Context, dynamodbstreams.EndpointParameters) (smithyendpoints.Endpoint, error) {
	u, err := url.Parse(*e.p.Load())
	if err != nil {
		return smithyendpoints.Endpoint{}, err
	}
	return smithyendpoints.Endpoint{URI: *u}, nil
}
