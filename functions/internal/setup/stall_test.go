package setup

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/functions/internal/apigw"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
)

// stalledDB is a DynamoDB that stopped answering (a lost network path):
// every call waits until its context ends.
type stalledDB struct{}

func stall[T any](ctx context.Context) (*T, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (stalledDB) GetItem(ctx context.Context, _ *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return stall[dynamodb.GetItemOutput](ctx)
}

func (stalledDB) PutItem(ctx context.Context, _ *dynamodb.PutItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return stall[dynamodb.PutItemOutput](ctx)
}

func (stalledDB) UpdateItem(ctx context.Context, _ *dynamodb.UpdateItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return stall[dynamodb.UpdateItemOutput](ctx)
}

func (stalledDB) DeleteItem(ctx context.Context, _ *dynamodb.DeleteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return stall[dynamodb.DeleteItemOutput](ctx)
}

func (stalledDB) Query(ctx context.Context, _ *dynamodb.QueryInput, _ ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return stall[dynamodb.QueryOutput](ctx)
}

func (stalledDB) BatchGetItem(ctx context.Context, _ *dynamodb.BatchGetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	return stall[dynamodb.BatchGetItemOutput](ctx)
}

func (stalledDB) BatchWriteItem(ctx context.Context, _ *dynamodb.BatchWriteItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	return stall[dynamodb.BatchWriteItemOutput](ctx)
}

var _ lease.DB = stalledDB{}

// A request whose DynamoDB call stalls is answered 503 unavailable with
// Retry-After, as the local server answers it (localserver's request
// deadline), and before the invocation's own deadline: Lambda ends an
// invocation at its timeout and API Gateway then answers its own 500
// {"message":"Internal Server Error"}, which no client takes for a retry.
func TestStalledDatabaseIsAnswered503BeforeTheInvocationTimesOut(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.DiscardHandler)
	h := HTTP(deploy.Tasks, NewStore(stalledDB{}, nil, Env{}, quiet), nil, Env{}, quiet)

	ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "GET /api/tasks/{task_id}", RawPath: "/api/tasks/t1"}
	ev.RequestContext.RouteKey, ev.RequestContext.Stage = ev.RouteKey, "$default"
	ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path = "GET", ev.RawPath
	ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		Lambda: map[string]any{"agent_id": "alice", "agent_name": "alice", "admin": "false"},
	}

	// The invocation's deadline is what the Lambda runtime puts on the
	// handler's context: its timeout from the start of the invocation.
	deadline := time.Now().Add(apigw.DeadlineMargin + 200*time.Millisecond)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	resp, err := h(ctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	if left := time.Until(deadline); left < apigw.DeadlineMargin/2 {
		t.Fatalf("answered %v before the invocation's deadline; want at least %v (Lambda would have ended it)", left, apigw.DeadlineMargin/2)
	}
	var body struct{ Code string }
	_ = json.Unmarshal([]byte(resp.Body), &body)
	if resp.StatusCode != http.StatusServiceUnavailable || body.Code != errcode.Unavailable || resp.Headers["Retry-After"] == "" {
		t.Fatalf("got %d %v %s; want 503 unavailable with Retry-After", resp.StatusCode, resp.Headers, resp.Body)
	}
}

// A sweep whose DynamoDB calls stall stops SweepDeadlineMargin before the
// invocation's deadline and still writes its run's line (with what it had
// ended), rather than being ended by the function's timeout without one.
func TestStalledSweepWritesItsLineBeforeTheInvocationTimesOut(t *testing.T) {
	t.Parallel()
	out := &testenv.Buffer{}
	env := Env{Function: deploy.Sweeper, TablePrefix: "stall-", Metrics: out}
	sweep := Sweep(NewStore(stalledDB{}, nil, env, slog.New(slog.DiscardHandler)), nil, env)

	deadline := time.Now().Add(SweepDeadlineMargin + 200*time.Millisecond)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	_, err := sweep(ctx)
	if left := time.Until(deadline); left < SweepDeadlineMargin/2 {
		t.Fatalf("the sweep returned %v before the invocation's deadline; want at least %v (Lambda would have ended it)", left, SweepDeadlineMargin/2)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err %v, want the run's deadline", err)
	}
	lines, _ := emf(t, out.Take(), env.TablePrefix)
	if len(lines) != 1 || lines[0]["msg"] != "sweep ran out of time" {
		t.Fatalf("lines %v, want the run's one line", lines)
	}
}
