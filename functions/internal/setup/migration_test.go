package setup

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/auth"
	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// markerDB answers the guard's GetItem with whatever state says, and counts
// the reads.
type markerDB struct {
	state string // "none" (no earlier table), "pending", "done", "down"
	reads int
	in    *dynamodb.GetItemInput
}

func (f *markerDB) GetItem(_ context.Context, in *dynamodb.GetItemInput, _ ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	f.reads++
	f.in = in
	switch f.state {
	case "none":
		return nil, &types.ResourceNotFoundException{Message: aws.String("Requested resource not found")}
	case "down":
		return nil, errors.New("connection refused")
	case "done":
		return &dynamodb.GetItemOutput{Item: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: MigratedMarker}}}, nil
	}
	return &dynamodb.GetItemOutput{}, nil
}

func (f *markerDB) DescribeTable(context.Context, *dynamodb.DescribeTableInput, ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error) {
	return &dynamodb.DescribeTableOutput{}, nil
}

// The guard reads the marker of the earlier table consistently, keeps a
// "migrated" (or "no earlier table") for good, a "not migrated" for
// MigrationRecheck, and an error for nothing.
func TestMigrationGuardCachesItsAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 3, 20, 14, 0, 0, 0, time.UTC))
	env := Env{TablePrefix: "prod-", Now: clock.Now}

	none := &markerDB{state: "none"}
	g := NewMigrationGuard(none, env, nil)
	for range 3 {
		if err := g.Check(ctx); err != nil {
			t.Fatalf("no earlier table: %v", err)
		}
	}
	if none.reads != 1 || aws.ToString(none.in.TableName) != "prod-tasks" || !aws.ToBool(none.in.ConsistentRead) ||
		none.in.Key["task_id"].(*types.AttributeValueMemberS).Value != MigratedMarker {
		t.Fatalf("reads %d, last %+v", none.reads, none.in)
	}

	db := &markerDB{state: "pending"}
	g = NewMigrationGuard(db, env, nil)
	if err := g.Check(ctx); !errors.Is(err, ErrNotMigrated) {
		t.Fatalf("earlier table without the marker: %v, want ErrNotMigrated", err)
	}
	db.state = "done" // migrate has run, but the guard trusts its answer a while
	clock.Advance(MigrationRecheck - time.Second)
	if err := g.Check(ctx); !errors.Is(err, ErrNotMigrated) || db.reads != 1 {
		t.Fatalf("within the recheck interval: %v after %d reads, want the cached refusal after 1", err, db.reads)
	}
	clock.Advance(time.Second)
	if err := g.Check(ctx); err != nil || db.reads != 2 {
		t.Fatalf("after the recheck interval: %v after %d reads", err, db.reads)
	}
	db.state = "pending" // never looked at again
	clock.Advance(time.Hour)
	if err := g.Check(ctx); err != nil || db.reads != 2 {
		t.Fatalf("once migrated: %v after %d reads", err, db.reads)
	}

	down := &markerDB{state: "down"}
	g = NewMigrationGuard(down, env, nil)
	if err := g.Check(ctx); err == nil || errors.Is(err, ErrNotMigrated) {
		t.Fatalf("unreachable: %v", err)
	}
	down.state = "none"
	if err := g.Check(ctx); err != nil || down.reads != 2 {
		t.Fatalf("an error is not cached: %v after %d reads", err, down.reads)
	}
}

// agentEvent is a payload 2.0 event of route with the authorizer's context
// for agent id.
func agentEvent(method, path, routeKey, body, id string) events.APIGatewayV2HTTPRequest {
	ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: routeKey, RawPath: path, Body: body,
		Headers: map[string]string{"content-type": "application/json"}}
	ev.RequestContext.RouteKey, ev.RequestContext.RequestID = routeKey, "req-migration"
	ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path = method, path
	ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: map[string]any{
		auth.ContextAgentID: id, auth.ContextAgentName: id, auth.ContextAdmin: false,
	}}
	return ev
}

// Before `checkout-server migrate -aws` has copied an earlier tasks table,
// the functions that work on tasks refuse every request with 503
// unavailable naming the command, and the sweeper sweeps nothing: a task
// re-created in the empty new table would make the migration skip the real
// one. Once migrated (and the guard has looked again), they serve the
// copies.
func TestFunctionsWaitForTheMigration(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t)
	clock := testclock.New(time.Date(2026, 3, 20, 14, 0, 0, 0, time.UTC))
	names := testenv.Tables(t)
	db := lease.NewLocalClient(testenv.Endpoint())
	out := &testenv.Buffer{}
	env := Env{TablePrefix: names.Prefix, Now: clock.Now, Metrics: out}
	quiet := slog.New(slog.DiscardHandler)
	store := NewStore(db, nil, env, quiet)

	// A done task, in a tasks table of the earlier schema (the copy of
	// today's item) that has not been migrated; today's table is empty.
	if _, err := store.CreateTask(ctx, lease.CreateTaskParams{TaskID: "shipped"}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Checkout(ctx, lease.CheckoutParams{TaskID: "shipped", AgentID: "alice", AgentName: "alice", Timeout: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Complete(ctx, lease.CompleteParams{TaskID: "shipped", AgentID: "alice"}); err != nil {
		t.Fatal(err)
	}
	old, cur := names.Table(schema.TasksTableV1), names.Table(schema.TasksTable)
	if _, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: &old, BillingMode: types.BillingModePayPerRequest,
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String("task_id"), KeyType: types.KeyTypeHash}},
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String("task_id"), AttributeType: types.ScalarAttributeTypeS}},
	}); err != nil {
		t.Fatal(err)
	}
	if err := dynamodb.NewTableExistsWaiter(db, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay = 50 * time.Millisecond }).
		Wait(ctx, &dynamodb.DescribeTableInput{TableName: &old}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	page, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: &cur, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	for _, item := range page.Items {
		delete(item, "status_shard")
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &old, Item: item}); err != nil {
			t.Fatal(err)
		}
		if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &cur, Key: map[string]types.AttributeValue{"task_id": item["task_id"]}}); err != nil {
			t.Fatal(err)
		}
	}

	fns := map[string]lambdaHandler{}
	for _, fn := range []string{deploy.Agents, deploy.Tasks, deploy.Checkouts, deploy.Claim, deploy.Inbox} {
		fns[fn] = HTTP(fn, NewStore(db, nil, env, quiet), db, env, quiet)
	}
	fns[deploy.Health] = HTTP(deploy.Health, nil, db, env, quiet)
	sweep := Sweep(store, db, env)
	call := func(fn string, ev events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
		t.Helper()
		resp, err := fns[fn](ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}

	create := agentEvent("POST", "/api/tasks", "POST /api/tasks", `{"task_id":"shipped"}`, "bob")
	for _, c := range []struct {
		fn string
		ev events.APIGatewayV2HTTPRequest
	}{
		{deploy.Tasks, create},
		{deploy.Tasks, agentEvent("GET", "/api/tasks/shipped", "GET /api/tasks/{task_id}", "", "bob")},
		{deploy.Checkouts, agentEvent("POST", "/api/tasks/shipped/checkout", "POST "+deploy.TaskCheckoutPath, `{}`, "bob")},
		{deploy.Claim, agentEvent("POST", "/api/claim", "POST /api/claim", `{}`, "bob")},
		{deploy.Agents, agentEvent("POST", "/api/heartbeat", "POST /api/heartbeat", `{}`, "bob")},
	} {
		resp := call(c.fn, c.ev)
		var body struct{ Error, Code string }
		_ = json.Unmarshal([]byte(resp.Body), &body)
		if resp.StatusCode != http.StatusServiceUnavailable || body.Code != errcode.Unavailable ||
			!strings.Contains(body.Error, "checkout-server migrate -aws") || resp.Headers["Retry-After"] == "" {
			t.Fatalf("%s %s before the migration: %d %v %s", c.fn, c.ev.RouteKey, resp.StatusCode, resp.Headers, resp.Body)
		}
	}
	// GET /healthz says so.
	if status, body := healthz(t, fns[deploy.Health]); status != http.StatusServiceUnavailable || body != `{"ok":false}` {
		t.Fatalf("GET /healthz before the migration: %d %s", status, body)
	}
	// The inbox function does not touch tasks: it serves on.
	if resp := call(deploy.Inbox, agentEvent("GET", "/api/inbox", "GET /api/inbox", "", "bob")); resp.StatusCode != http.StatusOK {
		t.Fatalf("inbox before the migration: %d %s", resp.StatusCode, resp.Body)
	}
	out.Take()
	if res, err := sweep(ctx); err != nil || res != (lease.SweepResult{}) {
		t.Fatalf("sweep before the migration: %+v, %v", res, err)
	}
	if line := out.Take(); !strings.Contains(line, "sweep skipped") || !strings.Contains(line, old) {
		t.Fatalf("the skipped sweep's line: %s", line)
	}

	res, err := lease.Migrate(ctx, db, names, schema.ShardCounts{}, nil)
	if err != nil || res.Copied != 1 || res.Present != 0 {
		t.Fatalf("migrate: %+v, %v (a task re-created before it would be Present and the real one lost)", res, err)
	}
	// Still refused until the guard looks again.
	if resp := call(deploy.Tasks, create); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("within the recheck interval: %d %s", resp.StatusCode, resp.Body)
	}
	clock.Advance(MigrationRecheck)
	if resp := call(deploy.Tasks, create); resp.StatusCode != http.StatusConflict || !strings.Contains(resp.Body, errcode.TaskExists) {
		t.Fatalf("re-creating the migrated task: %d %s", resp.StatusCode, resp.Body)
	}
	if status, body := healthz(t, fns[deploy.Health]); status != http.StatusOK {
		t.Fatalf("GET /healthz after the migration: %d %s", status, body)
	}
	resp := call(deploy.Tasks, agentEvent("GET", "/api/tasks/shipped", "GET /api/tasks/{task_id}", "", "bob"))
	if resp.StatusCode != http.StatusOK || !strings.Contains(resp.Body, `"status":"done"`) {
		t.Fatalf("the migrated task: %d %s", resp.StatusCode, resp.Body)
	}
	out.Take()
	if _, err := sweep(ctx); err != nil {
		t.Fatalf("sweep after the migration: %v", err)
	}
	if line := out.Take(); strings.Contains(line, "skipped") || !strings.Contains(line, `"msg":"sweep"`) {
		t.Fatalf("sweep after the migration: %s", line)
	}
}
