package setup

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

// emf checks that every line of out is a JSON object and that those with an
// "_aws" member are valid embedded metric format documents: each metric
// and dimension they declare is a member of the line, of the right type,
// in the service's namespace with the Deployment dimension. It returns the
// lines and the sum of each metric.
func emf(t *testing.T, out, deployment string) ([]map[string]any, map[string]float64) {
	t.Helper()
	var lines []map[string]any
	sums := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("not a JSON line: %q", sc.Text())
		}
		lines = append(lines, line)
		meta, ok := line["_aws"].(map[string]any)
		if !ok {
			continue
		}
		if ts, _ := meta["Timestamp"].(float64); ts < 1e12 {
			t.Errorf("Timestamp %v is not milliseconds since the epoch: %s", meta["Timestamp"], sc.Text())
		}
		dirs, _ := meta["CloudWatchMetrics"].([]any)
		if len(dirs) != 1 {
			t.Fatalf("want one metric directive: %s", sc.Text())
		}
		dir := dirs[0].(map[string]any)
		if dir["Namespace"] != deploy.MetricNamespace {
			t.Errorf("namespace %v", dir["Namespace"])
		}
		if !reflect.DeepEqual(dir["Dimensions"], []any{[]any{deploy.DimensionDeployment}}) {
			t.Errorf("dimensions %v", dir["Dimensions"])
		}
		if line[deploy.DimensionDeployment] != deployment {
			t.Errorf("Deployment = %v, want %q", line[deploy.DimensionDeployment], deployment)
		}
		for _, m := range dir["Metrics"].([]any) {
			name := m.(map[string]any)["Name"].(string)
			v, ok := line[name].(float64)
			if !ok {
				t.Errorf("metric %s declared but not a number in %s", name, sc.Text())
			}
			known := false
			for _, k := range deploy.Metrics {
				known = known || k == name
			}
			if !known {
				t.Errorf("metric %s is not in deploy.Metrics", name)
			}
			sums[name] += v
		}
	}
	return lines, sums
}

func request(route, path, agentID, body string) events.APIGatewayV2HTTPRequest {
	method, _, _ := strings.Cut(route, " ")
	ev := events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: route, RawPath: path, Body: body,
		Headers: map[string]string{"content-type": "application/json"},
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey: route, RequestID: "req-" + agentID, Stage: "$default",
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path, Protocol: "HTTP/1.1"},
		},
	}
	if agentID != "" {
		ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			Lambda: map[string]any{"agent_id": agentID, "agent_name": agentID, "admin": "false"},
		}
	}
	return ev
}

// The functions count grants, conflicts, takeovers, endings, notices,
// refused keys and each sweep in embedded metric format, from their answers
// and notices alone.
func TestFunctionsWriteBusinessMetrics(t *testing.T) {
	ctx := context.Background()
	clock := testclock.New(time.Date(2026, 3, 20, 14, 0, 0, 0, time.UTC))
	out := &testenv.Buffer{}
	client := lease.NewLocalClient(testenv.Endpoint())
	names := testenv.Tables(t)
	env := func(fn string) Env {
		return Env{Function: fn, TablePrefix: names.Prefix, Metrics: out, Now: clock.Now}
	}
	quiet := slog.New(slog.DiscardHandler)
	store := func(fn string) *lease.Store { return NewStore(client, nil, env(fn), quiet) }
	for _, a := range []string{"alice", "bob"} {
		if err := store(deploy.Agents).EnsureAgent(ctx, a, a, false, "ck_metrics-key-of-"+a); err != nil {
			t.Fatal(err)
		}
	}
	for _, task := range []string{"t1", "t2"} {
		if _, err := store(deploy.Tasks).CreateTask(ctx, lease.CreateTaskParams{TaskID: task}); err != nil {
			t.Fatal(err)
		}
	}
	// Each route goes to its function, as API Gateway sends it.
	fns := map[string]func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error){}
	for _, fn := range []string{deploy.Checkouts, deploy.Claim} {
		fns[fn] = HTTP(fn, store(fn), client, env(fn), quiet)
	}
	arn, err := localstack.StreamARN(ctx, client, names.Table(schema.TasksTable))
	if err != nil {
		t.Fatal(err)
	}
	// The stream function carries the consequences; the notices function,
	// on its own reading of the stream, publishes the notices and counts
	// them.
	streamFn := &stream.Poller{Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
		Handle: stream.ConsequencesHandler(store(deploy.Stream))}
	noticesFn := &stream.Poller{Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
		Handle: stream.NoticesHandler(store(deploy.Notices))}
	drain := func() {
		t.Helper()
		for _, p := range []*stream.Poller{streamFn, noticesFn} {
			if _, err := p.Poll(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	do := func(route, path, agent, body string, status int) {
		t.Helper()
		r, _ := deploy.ByKey(route)
		resp, err := fns[r.Function](ctx, request(route, path, agent, body))
		if err != nil || resp.StatusCode != status {
			t.Fatalf("%s as %s: %d %v %s, want %d", path, agent, resp.StatusCode, err, resp.Body, status)
		}
	}
	checkoutKey, claimKey := "POST "+deploy.TaskCheckoutPath, "POST /api/claim"
	got := func(want map[string]float64) []map[string]any {
		t.Helper()
		lines, sums := emf(t, out.Take(), names.Prefix)
		if !reflect.DeepEqual(sums, want) {
			t.Errorf("metrics %v, want %v", sums, want)
		}
		return lines
	}

	do(checkoutKey, "/api/tasks/t1/checkout", "alice", `{"timeout":"1m"}`, 200)
	do(checkoutKey, "/api/tasks/t1/checkout", "bob", `{}`, 409)
	got(map[string]float64{deploy.MetricCheckouts: 1, deploy.MetricConflicts: 1})

	// alice's lease expires; bob's checkout takes it over in its own write.
	clock.Advance(2 * time.Minute)
	do(checkoutKey, "/api/tasks/t1/checkout", "bob", `{"timeout":"1m"}`, 200)
	got(map[string]float64{deploy.MetricCheckouts: 1})
	drain()
	// LeaseEnded, and LeaseLost to alice, whose lease was taken over.
	got(map[string]float64{deploy.MetricTakeovers: 1, deploy.MetricLeaseTimeouts: 1, deploy.MetricNoticesPublished: 2})

	do(claimKey, "/api/claim", "alice", `{"timeout":"1m"}`, 200) // t2
	do(claimKey, "/api/claim", "alice", `{}`, 404)
	got(map[string]float64{deploy.MetricCheckouts: 1})

	// Both leases expire; one sweep ends them and writes one line.
	clock.Advance(2 * time.Minute)
	sweep := Sweep(store(deploy.Sweeper), client, env(deploy.Sweeper))
	if _, err := sweep(ctx); err != nil {
		t.Fatal(err)
	}
	lines := got(map[string]float64{deploy.MetricSweepEnded: 2, deploy.MetricSweepDuration: 0})
	drain()
	// Per lease: LeaseEnded, TaskAvailable, and LeaseLost to its holder.
	got(map[string]float64{deploy.MetricLeaseTimeouts: 2, deploy.MetricNoticesPublished: 6})
	var runs []map[string]any
	for _, l := range lines {
		if l["msg"] == "sweep" {
			runs = append(runs, l)
		}
	}
	if len(runs) != 1 || runs[0]["timeouts"] != float64(2) || runs[0]["agent_deaths"] != float64(0) || runs[0]["level"] != "INFO" {
		t.Errorf("sweep lines %v, want one with its counts", runs)
	}
	// An idle run still writes its line, with a zero backlog.
	if _, err := sweep(ctx); err != nil {
		t.Fatal(err)
	}
	got(map[string]float64{deploy.MetricSweepEnded: 0, deploy.MetricSweepDuration: 0})

	// The authorizer counts the keys it does not know, and logs every
	// decision without the key.
	logs := &testenv.Buffer{}
	authorize := KeyAuthorizer(store(deploy.Authorizer), env(deploy.Authorizer), slog.New(slog.NewJSONHandler(logs, nil)))
	for _, header := range []string{"Bearer ck_metrics-key-of-alice", "Bearer ck_nobody", "Basic eA=="} {
		if _, err := authorize(ctx, events.APIGatewayV2CustomAuthorizerV2Request{
			Version: "2.0", Type: "REQUEST", RouteKey: "GET /api/tasks", IdentitySource: []string{header},
			Headers: map[string]string{"authorization": header},
		}); err != nil {
			t.Fatal(err)
		}
	}
	refused := got(map[string]float64{deploy.MetricUnauthorized: 2})
	if len(refused) != 2 || refused[0]["reason"] != "unknown or revoked key" || refused[1]["reason"] != "malformed Authorization header" {
		t.Errorf("refusals %v", refused)
	}
	accepted, _ := emf(t, logs.Take(), names.Prefix)
	if len(accepted) != 1 || accepted[0]["agent_id"] != "alice" || accepted[0]["msg"] != "key accepted" {
		t.Errorf("accepted %v", accepted)
	}
	if all := out.Take() + logs.Take(); strings.Contains(all, "ck_") {
		t.Errorf("a key was logged: %s", all)
	}
}

// A notice the bus refuses is counted as failed (and still returned to the
// store, which logs it).
func TestFailedNoticesAreCounted(t *testing.T) {
	out := &testenv.Buffer{}
	n := meteredNotifier{next: failing{}, metrics: NewMetrics(out, "p-", nil), function: deploy.Sweeper}
	err := n.Notify(context.Background(), lease.Notice{Kind: lease.NoticeTaskAvailable, Event: lease.Event{TaskID: "t1", Type: lease.EventTimeout}})
	if err == nil {
		t.Fatal("the failure was swallowed")
	}
	lines, sums := emf(t, out.Take(), "p-")
	if !reflect.DeepEqual(sums, map[string]float64{deploy.MetricNoticesFailed: 1}) || lines[0]["level"] != "WARN" {
		t.Errorf("%v %v", sums, lines)
	}
}

type failing struct{}

func (failing) Notify(context.Context, lease.Notice) error { return context.DeadlineExceeded }
