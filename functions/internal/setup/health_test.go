package setup

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
)

// describeDB answers DescribeTable with err, and counts the calls.
type describeDB struct {
	markerDB
	err   error
	calls int
	table string
}

func (f *describeDB) DescribeTable(_ context.Context, in *dynamodb.DescribeTableInput, _ ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	f.calls++
	f.table = aws.ToString(in.TableName)
	return &dynamodb.DescribeTableOutput{}, f.err
}

func healthz(t *testing.T, h lambdaHandler) (int, string) {
	t.Helper()
	ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "GET /healthz", RawPath: "/healthz"}
	ev.RequestContext.RouteKey, ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path = "GET /healthz", "GET", "/healthz"
	resp, err := h(context.Background(), ev)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, strings.TrimSpace(resp.Body)
}

// GET /healthz on the health function answers 503 {"ok": false} while
// DynamoDB cannot be reached, as API.md says; a flood of health checks
// costs one DescribeTable per healthEvery.
func TestHealthzChecksTheDatabase(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.DiscardHandler)
	clock := testclock.New(time.Date(2026, 3, 20, 14, 0, 0, 0, time.UTC))
	db := &describeDB{markerDB: markerDB{state: "none"}}
	h := HTTP(deploy.Health, nil, db, Env{TablePrefix: "prod-", Now: clock.Now}, quiet)
	for range 50 {
		if status, body := healthz(t, h); status != http.StatusOK || body != `{"ok":true}` {
			t.Fatalf("reachable: %d %s", status, body)
		}
	}
	if db.calls != 1 || db.table != "prod-tasks2" {
		t.Fatalf("50 health checks made %d DescribeTable calls (of %q), want 1", db.calls, db.table)
	}
	db.err = errors.New("connection refused")
	clock.Advance(healthEvery)
	for range 50 {
		if status, body := healthz(t, h); status != http.StatusServiceUnavailable || body != `{"ok":false}` {
			t.Fatalf("unreachable: %d %s", status, body)
		}
	}
	if db.calls != 2 {
		t.Fatalf("%d DescribeTable calls, want 2", db.calls)
	}
	db.err = nil
	clock.Advance(healthEvery)
	if status, _ := healthz(t, h); status != http.StatusOK {
		t.Fatalf("reachable again: %d", status)
	}

	// Against the local DynamoDB, and against an endpoint nobody serves.
	names := testenv.Tables(t)
	live := HTTP(deploy.Health, nil, lease.NewLocalClient(testenv.Endpoint()), Env{TablePrefix: names.Prefix}, quiet)
	if status, body := healthz(t, live); status != http.StatusOK {
		t.Fatalf("local DynamoDB: %d %s", status, body)
	}
	dead := HTTP(deploy.Health, nil, lease.NewLocalClient("http://127.0.0.1:1"), Env{TablePrefix: names.Prefix}, quiet)
	start := time.Now()
	if status, body := healthz(t, dead); status != http.StatusServiceUnavailable || body != `{"ok":false}` {
		t.Fatalf("dead endpoint: %d %s", status, body)
	}
	if took := time.Since(start); took > healthTimeout+time.Second {
		t.Fatalf("the dead endpoint's check took %v", took)
	}
}
