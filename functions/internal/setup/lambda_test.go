package setup

import (
	"github.com/checkout-dev/checkout/deploy"

	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/httpapi"
	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/internal/testenv/testserver"
	"github.com/checkout-dev/checkout/internal/webhook"
	"github.com/checkout-dev/checkout/internal/webhook/webhooktest"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localserver"
	"github.com/checkout-dev/checkout/localstack"
)

func TestMain(m *testing.M) { testenv.Main(m) }

const adminKey = "ck_lambda-path-admin-key"

// backend is one deployment of the service that the same requests run
// against: the local server over HTTP, or the Lambda functions behind a
// simulated API Gateway.
type backend interface {
	do(t *testing.T, method, target, authorization, body string) (int, []byte)
	sweep(t *testing.T) lease.SweepResult
	// drain applies the tasks table's pending changes, as the stream
	// function does.
	drain(t *testing.T)
}

type local struct{ srv *localserver.Server }

func (l local) do(t *testing.T, method, target, authorization, body string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, l.srv.URL()+target, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func (l local) drain(t *testing.T) {
	if err := l.srv.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func (l local) sweep(t *testing.T) lease.SweepResult {
	res, err := l.srv.Sweep(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

type lambdaHandler = func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// gateway plays API Gateway's part: it matches the route key, runs the
// authorizer (on every route but the public one, when the identity source is
// present), serializes the event as JSON the way the service does, and
// invokes the route's function.
type gateway struct {
	authorizer func(context.Context, events.APIGatewayV2CustomAuthorizerV2Request) (events.APIGatewayV2CustomAuthorizerSimpleResponse, error)
	functions  map[string]lambdaHandler
	sweeper    func(context.Context) (lease.SweepResult, error)
	stream     *stream.Poller // the stream function, behind its event source mapping
	notices    *stream.Poller // the notices function, behind its own
	routes     *http.ServeMux
	seq        int
}

// newGateway wires each function to the store storeFor gives it, as each
// Lambda has its own.
// dbFor gives each function the client of its own checks (the migration
// guard, the health check), recorded like its store's.
func newGateway(storeFor func(fn string) *lease.Store, dbFor func(fn string) TablesAPI, env Env, log *slog.Logger) *gateway {
	g := &gateway{
		authorizer: KeyAuthorizer(storeFor(deploy.Authorizer), env, log),
		functions:  map[string]lambdaHandler{},
		sweeper:    Sweep(storeFor(deploy.Sweeper), dbFor(deploy.Sweeper), env),
		routes:     http.NewServeMux(),
	}
	for _, fn := range []string{deploy.Health, deploy.Agents, deploy.Tasks, deploy.Checkouts, deploy.Claim, deploy.Inbox} {
		var svc httpapi.Service = storeFor(fn)
		if fn == deploy.Health {
			svc = nil // as in functions/health
		}
		g.functions[fn] = HTTP(fn, svc, dbFor(fn), env, log)
	}
	for _, r := range deploy.Routes {
		g.routes.Handle(r.Pattern(), http.NotFoundHandler())
	}
	return g
}

// roundTrip passes v through JSON into out, as the Lambda runtime does.
func roundTrip(t *testing.T, v, out any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatal(err)
	}
}

func (g *gateway) do(t *testing.T, method, target, authorization, body string) (int, []byte) {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	probe, _ := http.NewRequest(method, target, nil)
	_, pattern := g.routes.Handler(probe)
	// No route matches: API Gateway's $default route takes the request to
	// the health function, without the authorizer.
	route := deploy.Route{Function: deploy.Health}
	if pattern == "" {
		pattern = "$default"
	}
	for _, r := range deploy.Routes {
		if r.Pattern() == pattern {
			route, pattern = r, r.Key()
			break
		}
	}
	g.seq++
	headers := map[string]string{"host": "abcdef1234.execute-api.us-east-1.amazonaws.com", "user-agent": "test"}
	if authorization != "" {
		headers["authorization"] = authorization
	}
	if body != "" {
		headers["content-type"] = "application/json"
	}
	rc := events.APIGatewayV2HTTPRequestContext{
		RouteKey: pattern, AccountID: "123456789012", Stage: "$default", APIID: "abcdef1234",
		RequestID:  fmt.Sprintf("req-%06d", g.seq),
		DomainName: "abcdef1234.execute-api.us-east-1.amazonaws.com",
		HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
			Method: method, Path: u.Path, Protocol: "HTTP/1.1", SourceIP: "192.0.2.10", UserAgent: "test",
		},
	}
	if route.Function != deploy.Health {
		if authorization == "" {
			// The identity source is missing: API Gateway refuses the
			// request itself, without calling the authorizer.
			return http.StatusUnauthorized, []byte(`{"message":"Unauthorized"}`)
		}
		var areq events.APIGatewayV2CustomAuthorizerV2Request
		roundTrip(t, events.APIGatewayV2CustomAuthorizerV2Request{
			Version: "2.0", Type: "REQUEST",
			RouteArn:       "arn:aws:execute-api:us-east-1:123456789012:abcdef1234/$default/" + method + u.Path,
			IdentitySource: []string{authorization}, RouteKey: pattern, RawPath: u.Path,
			RawQueryString: u.RawQuery, Headers: headers, RequestContext: rc,
		}, &areq)
		aresp, err := g.authorizer(context.Background(), areq)
		if err != nil {
			return http.StatusInternalServerError, []byte(`{"message":"Internal Server Error"}`)
		}
		if !aresp.IsAuthorized {
			return http.StatusForbidden, []byte(`{"message":"Forbidden"}`)
		}
		var ctx map[string]any
		roundTrip(t, aresp.Context, &ctx)
		rc.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: ctx}
	}
	var ev events.APIGatewayV2HTTPRequest
	roundTrip(t, events.APIGatewayV2HTTPRequest{
		Version: "2.0", RouteKey: pattern, RawPath: u.Path, RawQueryString: u.RawQuery, // decoded, as an HTTP API hands it over
		Headers: headers, RequestContext: rc, Body: body,
	}, &ev)
	resp, err := g.functions[route.Function](context.Background(), ev)
	if err != nil {
		t.Fatalf("%s %s: the function failed the invocation: %v", method, target, err)
	}
	var out events.APIGatewayV2HTTPResponse
	roundTrip(t, resp, &out)
	if out.IsBase64Encoded {
		t.Fatalf("%s %s: a JSON answer came back base64 encoded", method, target)
	}
	return out.StatusCode, []byte(out.Body)
}

func (g *gateway) drain(t *testing.T) {
	for _, p := range []*stream.Poller{g.stream, g.notices} {
		if _, err := p.Poll(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func (g *gateway) sweep(t *testing.T) lease.SweepResult {
	res, err := g.sweeper(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// step is one request of the script; who names the caller's key.
type step struct {
	who    string // "admin", an agent registered earlier, "" for none, or a raw Authorization value after "raw:"
	method string
	target string // "{msg}" is replaced by the caller's first inbox message id
	body   string
	status int
	// sameBody false: only the status must match (API Gateway answers a
	// request without an Authorization header with its own body).
	statusOnly bool
	advance    time.Duration // moved before the request
	// feed: the fleet feed, whose cursor differs by design: the local
	// server reads up to the moment asked (it knows its writes in
	// flight), the functions up to the settle time before it. The events
	// and caught_up must match.
	feed  bool
	sweep bool // run a sweep instead of a request
	swept lease.SweepResult
}

// session remembers, per backend, what the script needs to refer back to.
type session struct {
	keys map[string]string
	msg  map[string]string
}

func (s *session) authorization(who string) string {
	switch {
	case who == "":
		return ""
	case strings.HasPrefix(who, "raw:"):
		return strings.TrimPrefix(who, "raw:")
	}
	return "Bearer " + s.keys[who]
}

// normalize replaces what legitimately differs between two deployments
// (secrets and random ids) so the rest can be compared exactly.
func normalize(t *testing.T, b []byte) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("not JSON: %q", b)
	}
	var walk func(v any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				switch k {
				case "api_key", "message_id":
					x[k] = "<" + k + ">"
				default:
					x[k] = walk(e)
				}
			}
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
		}
		return v
	}
	return walk(v)
}

// The Lambda functions, invoked with API Gateway v2 events that carry the
// authorizer's context, give the same answers as the local server for the
// same requests, from registering agents to the sweep.
func TestLambdaPathMatchesLocalServer(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 3, 20, 14, 0, 0, 0, time.UTC)
	quiet := slog.New(slog.DiscardHandler)

	// The same webhook receiver for both: the local server's notifier and
	// the notices function's, each with a second URL whose receiver has
	// another secret and refuses every delivery, so that each dead-letters.
	recvLocal, recvLambda, forged := webhooktest.New("whsec"), webhooktest.New("whsec"), webhooktest.New("not-the-secret")
	defer recvLocal.Close()
	defer recvLambda.Close()
	defer forged.Close()
	deadFile := filepath.Join(t.TempDir(), webhook.DeadLetterFile)
	localHooks, err := webhook.New(webhook.Config{URLs: []string{recvLocal.URL, forged.URL}, Secret: "whsec", DeadLetters: &webhook.FileDeadLetters{Path: deadFile}})
	if err != nil {
		t.Fatal(err)
	}

	localClock := testclock.New(t0)
	srv := testserver.Start(t, testserver.WithClock(localClock.Now), func(c *localserver.Config) {
		c.AdminKey, c.Logger, c.Notifier = adminKey, quiet, localHooks
	})

	lambdaClock := testclock.New(t0)
	client := lease.NewLocalClient(testenv.Endpoint())
	env := Env{TablePrefix: testenv.Tables(t).Prefix, Now: lambdaClock.Now}
	used := &usage{prefix: env.TablePrefix}
	store := NewStore(client, nil, env, quiet)
	if err := store.EnsureAgent(ctx, "admin", "admin", true, adminKey); err != nil {
		t.Fatal(err)
	}

	gw := newGateway(func(fn string) *lease.Store {
		return NewStore(used.client(fn), nil, env, quiet)
	}, func(fn string) TablesAPI { return used.client(fn) }, env, quiet)
	arn, err := localstack.StreamARN(ctx, client, schema.Names{Prefix: env.TablePrefix}.Table(schema.TasksTable))
	if err != nil {
		t.Fatal(err)
	}
	hookEnv := env
	hookEnv.WebhookURLs, hookEnv.WebhookSecret = []string{recvLambda.URL, forged.URL}, "whsec"
	lambdaHooks, err := Webhooks(hookEnv, used.client(deploy.Notices), quiet)
	if err != nil {
		t.Fatal(err)
	}
	gw.stream = &stream.Poller{
		Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
		Handle: stream.ConsequencesHandler(NewStore(used.client(deploy.Stream), nil, env, quiet)),
	}
	gw.notices = &stream.Poller{
		Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
		Handle: stream.NoticesHandler(NewStore(used.client(deploy.Notices), lambdaHooks, env, quiet)),
	}
	backends := []struct {
		name  string
		b     backend
		clock *testclock.Clock
		s     *session
	}{
		{"local", local{srv}, localClock, &session{keys: map[string]string{"admin": adminKey}, msg: map[string]string{}}},
		{"lambda", gw, lambdaClock, &session{keys: map[string]string{"admin": adminKey}, msg: map[string]string{}}},
	}

	big := `{"title":"` + strings.Repeat("x", 70<<10) + `"}`
	script := []step{
		{who: "", method: "GET", target: "/healthz", status: 200},
		{who: "admin", method: "POST", target: "/api/agents", body: `{"name":"alice","agent_id":"alice"}`, status: 201},
		{who: "admin", method: "POST", target: "/api/agents", body: `{"name":"bob","agent_id":"bob"}`, status: 201},
		{who: "admin", method: "POST", target: "/api/agents", body: `{"name":"again","agent_id":"alice"}`, status: 409},
		{who: "admin", method: "POST", target: "/api/agents", body: `{"name":"x","agent_id":"no way"}`, status: 400},
		{who: "alice", method: "POST", target: "/api/agents", body: `{"name":"eve"}`, status: 403},
		{who: "alice", method: "GET", target: "/api/agents", status: 403},
		{who: "alice", method: "POST", target: "/api/heartbeat", body: `{"ttl":"10m"}`, status: 200},
		{who: "alice", method: "POST", target: "/api/heartbeat", body: `{"ttl":"2h"}`, status: 400},
		{who: "admin", method: "GET", target: "/api/agents", status: 200},
		{who: "alice", method: "POST", target: "/api/tasks", body: `{"task_id":"t1","title":"first"}`, status: 201},
		{who: "alice", method: "POST", target: "/api/tasks", body: `{"task_id":"t1"}`, status: 409},
		{who: "alice", method: "POST", target: "/api/tasks", body: `{"task_id":"bad id"}`, status: 400},
		{who: "alice", method: "POST", target: "/api/tasks", body: `{"task_id":"t3","colour":"red"}`, status: 400},
		{who: "alice", method: "POST", target: "/api/tasks", body: big, status: 413},
		{who: "bob", method: "POST", target: "/api/tasks", body: `{"task_id":"t2","title":"second"}`, status: 201, advance: time.Second},
		{who: "alice", method: "POST", target: "/api/tasks/batch", body: `{"tasks":[{"task_id":"r1","queue":"research","priority":9,"metadata":{"k":1}},{"task_id":"t1"}]}`, status: 200},
		{who: "alice", method: "POST", target: "/api/tasks/batch", body: `{"tasks":[]}`, status: 400},
		{who: "alice", method: "PATCH", target: "/api/tasks/r1", body: `{"title":"renamed","priority":2,"description":"more"}`, status: 200},
		{who: "alice", method: "PATCH", target: "/api/tasks/r1", body: `{"status":"done"}`, status: 400},
		{who: "alice", method: "PATCH", target: "/api/tasks/r9", body: `{"title":"x"}`, status: 404},
		{who: "bob", method: "GET", target: "/api/tasks?queue=research", status: 200},
		{who: "bob", method: "POST", target: "/api/claim", body: `{"queues":["research"],"run_id":"rq"}`, status: 200},
		{who: "alice", method: "PATCH", target: "/api/tasks/r1", body: `{"status":"cancelled"}`, status: 403},
		{who: "bob", method: "PATCH", target: "/api/tasks/r1", body: `{"status":"cancelled"}`, status: 200},
		{who: "bob", method: "POST", target: "/api/claim", body: `{"queues":["research"]}`, status: 404},
		{who: "bob", method: "GET", target: "/api/tasks?status=todo&limit=1", status: 200},
		{who: "bob", method: "GET", target: "/api/tasks?limit=0", status: 400},
		{who: "bob", method: "GET", target: "/api/tasks?status=nope", status: 400},
		{who: "bob", method: "GET", target: "/api/tasks/t1", status: 200},
		{who: "bob", method: "GET", target: "/api/tasks/t9", status: 404},
		{who: "alice", method: "POST", target: "/api/tasks/t1/checkout", body: `{"run_id":"r1","timeout":"10m","reason":"work"}`, status: 200},
		{who: "alice", method: "POST", target: "/api/tasks/t1/checkout", body: `{"run_id":"r1","timeout":"10m","reason":"work"}`, status: 200},
		{who: "alice", method: "POST", target: "/api/tasks/t1/checkout", body: `{"run_id":"r2"}`, status: 409},
		{who: "bob", method: "POST", target: "/api/tasks/t1/checkout", body: `{"run_id":"rb","watch":true}`, status: 409, advance: 30 * time.Second},
		{who: "bob", method: "POST", target: "/api/tasks/t1/checkout", body: `{"timeout":"25h"}`, status: 400},
		{who: "bob", method: "POST", target: "/api/tasks/t9/checkout", body: `{}`, status: 404},
		{who: "bob", method: "GET", target: "/api/tasks/t1/checkout", status: 200},
		{who: "bob", method: "GET", target: "/api/checkouts?agent_id=alice", status: 200},
		{who: "bob", method: "GET", target: "/api/checkouts", status: 200},
		{who: "bob", method: "POST", target: "/api/tasks/t1/renew", body: `{}`, status: 403},
		{who: "alice", method: "POST", target: "/api/tasks/t1/renew", body: `{"timeout":"20m","run_id":"r1","fence":1}`, status: 200, advance: time.Minute},
		{who: "alice", method: "POST", target: "/api/tasks/t1/renew", body: `{"fence":99}`, status: 403},
		{who: "bob", method: "POST", target: "/api/tasks/t1/release", body: `{"force":true}`, status: 403},
		{who: "alice", method: "POST", target: "/api/tasks/t1/release", body: `{"reason":"lunch"}`, status: 200, advance: 90 * time.Second},
		{who: "alice", method: "POST", target: "/api/tasks/t1/release", body: `{}`, status: 404},
		{who: "bob", method: "GET", target: "/api/inbox", status: 200},
		{who: "bob", method: "DELETE", target: "/api/inbox/{msg}", status: 200},
		{who: "bob", method: "DELETE", target: "/api/inbox/{msg}", status: 404},
		{who: "bob", method: "GET", target: "/api/inbox", status: 200},
		{who: "bob", method: "POST", target: "/api/claim", body: `{"run_id":"rc","timeout":"5m"}`, status: 200},
		{who: "bob", method: "POST", target: "/api/claim", body: `{"agent_id":"alice"}`, status: 403},
		{who: "alice", method: "POST", target: "/api/tasks/t1/complete", body: `{}`, status: 403},
		{who: "bob", method: "POST", target: "/api/tasks/t1/complete", body: `{"run_id":"rc"}`, status: 200, advance: 10 * time.Second},
		// The same completion again, naming the lease: a retry, answered as the first.
		{who: "bob", method: "POST", target: "/api/tasks/t1/complete", body: `{"run_id":"rc"}`, status: 200},
		{who: "bob", method: "POST", target: "/api/tasks/t1/complete", body: `{}`, status: 404},
		{who: "bob", method: "GET", target: "/api/tasks/t1", status: 200},
		{who: "bob", method: "GET", target: "/api/tasks/t1/events", status: 200},
		{who: "bob", method: "POST", target: "/api/tasks/t2/watch", status: 200},
		{who: "bob", method: "POST", target: "/api/tasks/t9/watch", status: 404},
		{who: "admin", method: "POST", target: "/api/tasks/t2/checkout", body: `{"agent_id":"alice","run_id":"ra","timeout":"1m"}`, status: 200},
		{who: "bob", method: "POST", target: "/api/tasks/t2/checkout", body: `{"agent_id":"alice"}`, status: 403},
		{who: "bob", method: "POST", target: "/api/tasks/t2/checkout", body: `{"agent_id":"bob"}`, status: 403}, // admins only, even naming itself
		{who: "admin", method: "POST", target: "/api/claim", body: `{}`, status: 404},
		// The lease expires; the sweep ends it and tells the watcher.
		{sweep: true, advance: 2 * time.Minute, swept: lease.SweepResult{Timeouts: 1}},
		{who: "bob", method: "GET", target: "/api/tasks/t2/events", status: 200},
		{who: "bob", method: "GET", target: "/api/inbox", status: 200},
		{sweep: true},
		{who: "alice", method: "POST", target: "/api/tasks/t2/checkout", body: `{"run_id":"rd","timeout":"1h"}`, status: 200},
		{who: "admin", method: "POST", target: "/api/tasks/t2/release", body: `{"force":true,"reason":"stuck"}`, status: 200},
		{who: "alice", method: "POST", target: "/api/tasks/t2/checkout", body: `{"run_id":"re","timeout":"1h"}`, status: 200},
		// Holder death: alice's heartbeat (10m) expires long before her lease.
		{who: "bob", method: "GET", target: "/api/tasks/t2", status: 200, advance: 10 * time.Minute},
		{sweep: true, swept: lease.SweepResult{AgentDeaths: 1}},
		{who: "bob", method: "GET", target: "/api/tasks/t2/events", status: 200},
		{who: "admin", method: "POST", target: "/api/tasks/t2/release", body: `{"force":true}`, status: 404},
		// The work graph: a dependent, unblocked by the stream function
		// when its blocker completes; a failed attempt and its wait.
		{who: "alice", method: "POST", target: "/api/tasks", body: `{"task_id":"g1"}`, status: 201},
		{who: "alice", method: "POST", target: "/api/tasks", body: `{"task_id":"g2","blocked_by":["g1"],"max_attempts":2}`, status: 201},
		{who: "alice", method: "POST", target: "/api/tasks", body: `{"task_id":"g3","blocked_by":["nope"]}`, status: 400},
		// A PATCH naming blockers holds the graph's lock.
		{who: "alice", method: "POST", target: "/api/tasks", body: `{"task_id":"g4"}`, status: 201},
		{who: "alice", method: "PATCH", target: "/api/tasks/g4", body: `{"blocked_by":["g1"]}`, status: 200},
		{who: "bob", method: "POST", target: "/api/tasks/g2/checkout", body: `{}`, status: 409},
		{who: "admin", method: "POST", target: "/api/tasks/g1/checkout", body: `{"run_id":"g"}`, status: 200},
		{who: "admin", method: "POST", target: "/api/tasks/g1/complete", body: `{"run_id":"g"}`, status: 200},
		{who: "bob", method: "GET", target: "/api/tasks/g2/events", status: 200},
		{who: "bob", method: "GET", target: "/api/tasks/g2/events", status: 200},
		{who: "bob", method: "GET", target: "/api/tasks/g2", status: 200},
		{who: "bob", method: "GET", target: "/api/tasks/g1", status: 200},
		{who: "bob", method: "POST", target: "/api/tasks/g2/checkout", body: `{"run_id":"gb"}`, status: 200},
		{who: "bob", method: "POST", target: "/api/tasks/g2/release", body: `{"run_id":"gb","outcome":"failed","error":"boom"}`, status: 200},
		{who: "bob", method: "POST", target: "/api/tasks/g2/checkout", body: `{"run_id":"gc"}`, status: 409},
		{who: "bob", method: "GET", target: "/api/tasks/g2/events", status: 200},
		{who: "bob", method: "GET", target: "/api/tasks/g2", status: 200},
		// The fleet feed, once the settle time has passed.
		{who: "bob", method: "GET", target: "/api/events?since=2026-03-20T13:00:00Z&limit=1000", status: 200, advance: FeedSettle + time.Second, feed: true}, // past the functions' settle
		{who: "bob", method: "GET", target: "/api/events?type=timeout,agent_death&since=2026-03-20T13:00:00Z", status: 200, feed: true},
		{who: "bob", method: "GET", target: "/api/events?limit=1001", status: 400},
		{who: "bob", method: "GET", target: "/api/queues", status: 200},
		{who: "admin", method: "DELETE", target: "/api/agents/nobody", status: 404},
		{who: "admin", method: "DELETE", target: "/api/agents/bob", status: 200},
		{who: "bob", method: "GET", target: "/api/inbox", status: 401},
		{who: "raw:Bearer ck_unknown", method: "GET", target: "/api/tasks", status: 401},
		{who: "raw:Basic YWxpY2U6eA==", method: "GET", target: "/api/tasks", status: 401},
		{who: "raw:Bearer", method: "GET", target: "/api/tasks", status: 401},
		{who: "", method: "GET", target: "/api/tasks", status: 401, statusOnly: true},
		{who: "admin", method: "GET", target: "/api/agents", status: 200},
		// Through $default: the contract's bodies, not API Gateway's own.
		{who: "admin", method: "GET", target: "/api/nothing-here", status: 404},
		{who: "", method: "GET", target: "/nope", status: 404},
		{who: "admin", method: "PUT", target: "/api/tasks", status: 405},
		{who: "alice", method: "DELETE", target: "/api/tasks/t2", status: 405},
	}

	for i, st := range script {
		var answers []any
		for _, be := range backends {
			be.clock.Advance(st.advance)
			if strings.Contains(st.target, "/inbox") || strings.Contains(st.target, "/events") || strings.Contains(st.target, "/queues") {
				be.b.drain(t) // what those read comes from the change stream
			}
			if st.sweep {
				res := be.b.sweep(t)
				if res != st.swept {
					t.Fatalf("step %d sweep on %s: %+v, want %+v", i, be.name, res, st.swept)
				}
				answers = append(answers, res)
				continue
			}
			target := strings.ReplaceAll(st.target, "{msg}", be.s.msg[st.who])
			status, body := be.b.do(t, st.method, target, be.s.authorization(st.who), st.body)
			if status != st.status {
				t.Fatalf("step %d %s %s as %q on %s: status %d, want %d: %s", i, st.method, st.target, st.who, be.name, status, st.status, body)
			}
			if status >= 500 {
				t.Fatalf("step %d on %s: %d", i, be.name, status)
			}
			var m map[string]any
			_ = json.Unmarshal(body, &m)
			if k, ok := m["api_key"].(string); ok {
				be.s.keys[m["agent_id"].(string)] = k
			}
			if msgs, ok := m["messages"].([]any); ok && len(msgs) > 0 {
				be.s.msg[st.who] = msgs[0].(map[string]any)["message_id"].(string)
			}
			if st.statusOnly {
				answers = append(answers, status)
				continue
			}
			if st.feed {
				if _, ok := m["next_cursor"].(string); !ok {
					t.Fatalf("step %d on %s: a feed page without its cursor: %s", i, be.name, body)
				}
				m["next_cursor"] = "<feed cursor>"
				body, _ = json.Marshal(m)
			}
			answers = append(answers, normalize(t, body))
		}
		if !reflect.DeepEqual(answers[0], answers[1]) {
			l, _ := json.Marshal(answers[0])
			a, _ := json.Marshal(answers[1])
			t.Fatalf("step %d %s %s as %q: the answers differ\n local: %s\nlambda: %s", i, st.method, st.target, st.who, l, a)
		}
	}
	used.check(t)

	// Both paths delivered the same notices, signed, and dead-lettered
	// what the receiver with the other secret refused.
	local, lambda := recvLocal.Delivered(), recvLambda.Delivered()
	if len(local) == 0 || !reflect.DeepEqual(slices.Sorted(maps.Keys(local)), slices.Sorted(maps.Keys(lambda))) {
		t.Fatalf("webhooks: local delivered %v, lambda %v", local, lambda)
	}
	if recvLocal.Rejected()+recvLambda.Rejected() != 0 || forged.Rejected() != 2*len(local) {
		t.Fatalf("rejected: %d, %d; by the receiver with the other secret %d of %d", recvLocal.Rejected(), recvLambda.Rejected(), forged.Rejected(), 2*len(local))
	}
	if dead, err := webhook.ReadDeadLetters(deadFile); err != nil || len(dead) != len(local) {
		t.Fatalf("local dead letters: %d, %v", len(dead), err)
	}
}

// Each function answers its own routes of the table and refuses every other
// route with 404 or 405, so a misrouted request never reaches another
// group's handler; the health function, which takes $default, knows them all.
func TestFunctionsServeOnlyTheirRoutes(t *testing.T) {
	t.Parallel()
	quiet := slog.New(slog.DiscardHandler)
	for _, fn := range []string{deploy.Health, deploy.Agents, deploy.Tasks, deploy.Checkouts, deploy.Claim, deploy.Inbox} {
		h := HTTP(fn, nil, nil, Env{}, quiet)
		for _, r := range httpapi.Routes() {
			path := strings.NewReplacer("{task_id}", "t1", "{agent_id}", "a1", "{message_id}", "m1").Replace(r.Path)
			var ev events.APIGatewayV2HTTPRequest
			ev.RawPath, ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path = path, r.Method, path
			resp, err := h(context.Background(), ev)
			if err != nil {
				t.Fatal(err)
			}
			// No principal comes with the event: a route the function
			// serves answers 401 (GET /healthz 200), any other 404 or 405.
			served := resp.StatusCode == http.StatusUnauthorized || r.Access == deploy.Public && resp.StatusCode == http.StatusOK
			refused := resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusMethodNotAllowed
			want := r.Function == fn || fn == deploy.Health
			if want && !served || !want && !refused {
				t.Errorf("function %s, %s %s: %d %s", fn, r.Method, path, resp.StatusCode, resp.Body)
			}
		}
	}
}

func TestFromEnv(t *testing.T) {
	t.Setenv(EnvTablePrefix, "prod-")
	t.Setenv(EnvEventBus, "prod-bus")
	t.Setenv(EnvAutoCreateTasks, "true")
	t.Setenv(EnvLogLevel, "debug")
	t.Setenv(EnvSweepStay, "20s")
	e := FromEnv(deploy.Checkouts)
	if e.Function != deploy.Checkouts || e.TablePrefix != "prod-" || e.EventBus != "prod-bus" || !e.AutoCreateTasks ||
		e.LogLevel != slog.LevelDebug || e.Metrics != os.Stdout || e.SweepStay != 20*time.Second {
		t.Fatalf("%+v", e)
	}
	t.Setenv(EnvSweepStay, "")
	if e := FromEnv(deploy.Sweeper); e.SweepStay != DefaultSweepStay {
		t.Fatalf("stay %v with %s unset, want %v", e.SweepStay, EnvSweepStay, DefaultSweepStay)
	}
}
