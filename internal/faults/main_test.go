package faults_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func chaos() bool { return os.Getenv("CHECKOUT_CHAOS") != "" }

// lost counts request attempts whose answer never arrived: timeouts (the
// request may have been applied) and every other transport failure.
type lost struct {
	timeouts, transport atomic.Int64
}

func (l *lost) middleware(stack *middleware.Stack) error {
	return stack.Deserialize.Add(middleware.DeserializeMiddlewareFunc("countLostAnswers",
		func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleDeserialize(ctx, in)
			var api smithy.APIError
			if err != nil && !errors.As(err, &api) {
				l.transport.Add(1)
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded) {
					l.timeouts.Add(1)
				}
			}
			return out, md, err
		}), middleware.After)
}

// faultyClient is a DynamoDB client for endpoint with one request per
// connection (so each fault hits one request), a timeout, and the SDK's
// standard retries without the retry quota (which would otherwise run dry
// under deliberate faults). It counts lost answers into l.
func faultyClient(endpoint string, l *lost) *dynamodb.Client {
	return faultyClientAttempts(endpoint, l, 5)
}

// faultyClientAttempts is faultyClient with the SDK making at most
// attempts tries of each request: fewer let more faults through to the
// caller.
func faultyClientAttempts(endpoint string, l *lost, attempts int) *dynamodb.Client {
	return lease.NewLocalClient(endpoint, func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, l.middleware)
		o.HTTPClient = oneRequestPerConn()
		o.Retryer = faultyRetryer(attempts)
	})
}

// oneRequestPerConn is an HTTP client with a timeout that opens a
// connection per request, so that each fault of the proxy hits one.
func oneRequestPerConn() *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().
		WithTimeout(5 * time.Second).
		WithTransportOptions(func(tr *http.Transport) { tr.DisableKeepAlives = true })
}

// faultyRetryer is the SDK's standard retryer with at most attempts tries,
// short backoffs and no retry quota.
func faultyRetryer(attempts int) aws.Retryer {
	return retry.NewStandard(func(so *retry.StandardOptions) {
		so.MaxAttempts = attempts
		so.MaxBackoff = 100 * time.Millisecond
		so.RateLimiter = ratelimit.None
	})
}

// drain applies every change of the tasks table's stream with the stream
// function's handler, over a client without faults, retrying the batch
// while the notifier refuses (as the event source mapping retries), and
// returns how many handler calls failed.
func drain(t *testing.T, ep string, names schema.Names, ns lease.Notifier) int {
	t.Helper()
	ctx := context.Background()
	db := lease.NewLocalClient(ep)
	arn, err := localstack.StreamARN(ctx, db, names.Table(schema.TasksTable))
	if err != nil {
		t.Fatal(err)
	}
	p := &stream.Poller{
		Streams: stream.NewLocalClient(ep), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
		Handle: stream.Handler(lease.New(lease.Config{DB: db, Tables: names, Notifier: ns})),
	}
	failed := 0
	for attempt := 0; ; attempt++ {
		n, err := p.Poll(ctx)
		if err == nil && n == 0 {
			return failed
		}
		if err != nil {
			if !errors.Is(err, testenv.ErrBusDown) || attempt > 1000 {
				t.Fatalf("drain the change stream: %v", err)
			}
			failed++
		}
	}
}
