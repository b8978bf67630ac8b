package localserver

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/localstack"
)

// waitHealthy polls /healthz until it is 200, or fails the test.
func waitHealthy(t *testing.T, srv *Server, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if st, _ := call(t, "GET", srv.URL()+"/healthz", "", ""); st == 200 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not healthy again within %v", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// kill ends the server's dynalite with SIGKILL and waits until it is gone.
func kill(t *testing.T, srv *Server) int {
	t.Helper()
	d := srv.Dynalite()
	if d == nil {
		t.Fatal("the server runs no dynalite of its own")
	}
	if err := syscall.Kill(d.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("dynalite did not die")
	}
	return d.Pid()
}

// The server's own dynalite, on disk, is killed for real. Until the
// supervisor has restarted it, every route answers 503 unavailable with
// Retry-After (never 500, authentication included) and /healthz 503
// {"ok":false}; the sweep ticker keeps ticking. Then the server recovers by
// itself, with everything on disk intact: the task, its live lease and its
// fence, the agent and its key, and the sweep ends the lease when it
// expires.
func TestDynaliteDeathOnDisk(t *testing.T) {
	t.Parallel()
	var logs testenv.Buffer
	clock := testclock.New(time.Now())
	srv, err := Start(context.Background(), Config{
		Addr: "127.0.0.1:0", DataDir: t.TempDir(), RestartDelay: 2 * time.Second,
		SweepInterval: 20 * time.Millisecond, Now: clock.Now,
		Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	admin, base := srv.AdminKey(), srv.URL()
	st, body := call(t, "POST", base+"/api/agents", admin, `{"name":"worker","agent_id":"worker"}`)
	if st != 201 {
		t.Fatalf("register: %d %v", st, body)
	}
	worker := body["api_key"].(string)
	if st, body := call(t, "POST", base+"/api/tasks", worker, `{"task_id":"t1","title":"kept"}`); st != 201 {
		t.Fatalf("create: %d %v", st, body)
	}
	st, body = call(t, "POST", base+"/api/tasks/t1/checkout", worker, `{"timeout":"1m","run_id":"run-1"}`)
	if st != 200 {
		t.Fatalf("checkout: %d %v", st, body)
	}
	fence := body["fence"]

	old := kill(t, srv)
	for _, c := range []struct{ method, path, key, body string }{
		{"GET", "/api/tasks/t1", worker, ""},
		{"POST", "/api/tasks/t1/checkout", admin, `{"run_id":"run-2"}`},
		{"POST", "/api/tasks", worker, `{"task_id":"t2"}`},
		{"GET", "/api/agents", admin, ""},
		{"GET", "/api/tasks", "ck_a-key-nobody-has-seen-before", ""}, // the look-up itself fails
	} {
		st, retry, body := get(t, c.method, base+c.path, c.key, c.body)
		if st != 503 || body["code"] != "unavailable" || retry == "" {
			t.Fatalf("%s %s while dynalite is dead: %d Retry-After %q %v", c.method, c.path, st, retry, body)
		}
	}
	if st, retry, body := get(t, "GET", base+"/healthz", "", ""); st != 503 || body["ok"] != false || retry == "" {
		t.Fatalf("healthz while dynalite is dead: %d %q %v", st, retry, body)
	}
	time.Sleep(100 * time.Millisecond) // a few sweep ticks into the outage

	waitHealthy(t, srv, 30*time.Second)
	if d := srv.Dynalite(); d.Pid() == old {
		t.Fatalf("the same dynalite (pid %d) after the restart", old)
	}
	st, body = call(t, "GET", base+"/api/tasks/t1", worker, "")
	co, _ := body["checkout"].(map[string]any)
	if st != 200 || body["title"] != "kept" || co == nil || co["run_id"] != "run-1" || co["fence"] != fence {
		t.Fatalf("the task after the restart: %d %v", st, body)
	}
	if st, body := call(t, "POST", base+"/api/tasks/t1/checkout", worker, `{"run_id":"run-1"}`); st != 200 || body["fence"] != fence {
		t.Fatalf("the same run's retry after the restart: %d %v", st, body)
	}
	if st, _ := call(t, "GET", base+"/api/tasks/t2", worker, ""); st != 404 {
		t.Fatalf("a create answered 503 took effect: %d", st)
	}
	// The ticker still sweeps: the lease ends once it has expired.
	clock.Advance(2 * time.Minute)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, b := call(t, "GET", base+"/api/tasks/t1/events", worker, "")
		evs, _ := b["events"].([]any)
		if len(evs) == 2 && evs[1].(map[string]any)["type"] == "timeout" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sweep after the restart: %v", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, want := range []string{`"msg":"dynalite exited; restarting it"`, `"msg":"dynalite restarted"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log lacks %s:\n%s", want, logs.String())
		}
	}
	if strings.Contains(logs.String(), `"status":500`) {
		t.Errorf("a 500 was answered:\n%s", logs.String())
	}
}

// An in-memory dynalite restarts empty: the server creates the tables and
// the admin agent again, so the admin key works at once; the old agent's key
// is refused (its agent is gone, and the key cache was cleared) and its task
// is gone, as the README says.
func TestDynaliteDeathInMemory(t *testing.T) {
	t.Parallel()
	srv, err := Start(context.Background(), Config{Addr: "127.0.0.1:0", AdminKey: "ck_in-memory-admin-key", RestartDelay: 200 * time.Millisecond, SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base := srv.URL()
	st, body := call(t, "POST", base+"/api/agents", srv.AdminKey(), `{"name":"worker"}`)
	if st != 201 {
		t.Fatalf("register: %d %v", st, body)
	}
	worker := body["api_key"].(string)
	if st, body := call(t, "POST", base+"/api/tasks", worker, `{"task_id":"t1"}`); st != 201 {
		t.Fatalf("create: %d %v", st, body)
	}
	// Cache the worker's key, so that only a cleared cache refuses it.
	if st, _ := call(t, "GET", base+"/api/inbox", worker, ""); st != 200 {
		t.Fatal(st)
	}

	kill(t, srv)
	waitHealthy(t, srv, 30*time.Second)
	st, body = call(t, "GET", base+"/api/agents", srv.AdminKey(), "")
	if agents, _ := body["agents"].([]any); st != 200 || len(agents) != 1 {
		t.Fatalf("agents after an in-memory restart: %d %v", st, body)
	}
	if st, body := call(t, "GET", base+"/api/inbox", worker, ""); st != 401 {
		t.Fatalf("a key of the lost database: %d %v", st, body)
	}
	if st, _ := call(t, "GET", base+"/api/tasks/t1", srv.AdminKey(), ""); st != 404 {
		t.Fatalf("task after an in-memory restart: %d", st)
	}
	if st, body := call(t, "POST", base+"/api/tasks", srv.AdminKey(), `{"task_id":"t1"}`); st != 201 {
		t.Fatalf("the tables were not created again: %d %v", st, body)
	}
}

// Close stops the supervisor and the dynalite: nothing is restarted after.
func TestCloseStopsTheSupervisedDynalite(t *testing.T) {
	t.Parallel()
	srv, err := Start(context.Background(), Config{Addr: "127.0.0.1:0", SweepInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	d := srv.Dynalite()
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.Done():
	default:
		t.Fatal("dynalite still running after Close")
	}
	// Wall time: a supervisor still running would have restarted dynalite
	// within this.
	time.Sleep(2 * DefaultRestartDelay)
	if srv.Dynalite() != d {
		t.Fatal("a dynalite was started after Close")
	}
}

// With an endpoint that is not its own, /healthz probes it (a DescribeTable
// of the tasks table): 503 when nothing answers there or the table is
// missing.
func TestHealthzProbesAGivenEndpoint(t *testing.T) {
	t.Parallel()
	proxy := newCountingProxy(t, testenv.Endpoint())
	// No sweep and no stream poller: only the probes describe the table.
	srv, err := Start(context.Background(), Config{Addr: "127.0.0.1:0", DynamoEndpoint: proxy.url, TablePrefix: testenv.Prefix(), SweepInterval: -1, StreamPollInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if srv.Dynalite() != nil {
		t.Fatal("Dynalite() for a given endpoint")
	}
	before := proxy.count("DescribeTable")
	for range 5 {
		if st, body := call(t, "GET", srv.URL()+"/healthz", "", ""); st != 200 || body["ok"] != true {
			t.Fatalf("healthz: %d %v", st, body)
		}
	}
	if n := proxy.count("DescribeTable") - before; n != 1 {
		t.Fatalf("5 health checks within a second made %d probes, want 1", n)
	}
}

// A DynamoDB-compatible server named by the endpoint that restarts empty
// (in memory, on the same port) is the database being unavailable, not a
// bug: while its tables are missing every route answers 503 unavailable
// with Retry-After, authentication included, and /healthz 503; then the
// server makes sure of the tables and the admin agent again by itself, as
// at start, and the admin key works, without a restart of the server. The
// key cache is cleared, as when its own dynalite restarts: a key of the
// lost database is refused. (The proxy refuses CreateTable for a while,
// so that the outage lasts long enough to be seen.) Before, every request
// answered 500 internal for good while /healthz said 200.
func TestEndpointRestartedEmpty(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := localstack.Start(ctx, localstack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	proxy := newCountingProxy(t, d.Endpoint)
	var logs testenv.Buffer
	srv, err := Start(ctx, Config{Addr: "127.0.0.1:0", DynamoEndpoint: proxy.url, AdminKey: "ck_external-admin-key",
		Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	admin, base := srv.AdminKey(), srv.URL()
	st, body := call(t, "POST", base+"/api/agents", admin, `{"name":"worker"}`)
	if st != 201 {
		t.Fatalf("register: %d %v", st, body)
	}
	worker := body["api_key"].(string)
	if st, body := call(t, "POST", base+"/api/tasks", worker, `{"task_id":"t1"}`); st != 201 {
		t.Fatalf("create: %d %v", st, body)
	}

	proxy.refuse("CreateTable", true)
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	restarted, err := localstack.Start(ctx, localstack.Options{Port: d.Port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = restarted.Stop() })
	for _, c := range []struct{ method, path, key, body string }{
		{"GET", "/api/tasks/t1", worker, ""}, // a cached key
		{"POST", "/api/tasks/t1/checkout", admin, `{"run_id":"run-1"}`},
		{"POST", "/api/tasks", admin, `{"task_id":"t2"}`},
		{"GET", "/api/agents", admin, ""},
		{"GET", "/api/tasks", "ck_a-key-nobody-has-seen-before", ""}, // the look-up itself fails
	} {
		st, retry, body := get(t, c.method, base+c.path, c.key, c.body)
		if st != 503 || body["code"] != "unavailable" || retry == "" {
			t.Fatalf("%s %s while the tables are missing: %d Retry-After %q %v", c.method, c.path, st, retry, body)
		}
	}
	if st, retry, body := get(t, "GET", base+"/healthz", "", ""); st != 503 || body["ok"] != false || retry == "" {
		t.Fatalf("healthz while the tables are missing: %d %q %v", st, retry, body)
	}

	proxy.refuse("CreateTable", false)
	waitHealthy(t, srv, 30*time.Second)
	st, body = call(t, "GET", base+"/api/agents", admin, "")
	if agents, _ := body["agents"].([]any); st != 200 || len(agents) != 1 {
		t.Fatalf("agents once the tables are back: %d %v", st, body)
	}
	if st, body := call(t, "GET", base+"/api/inbox", worker, ""); st != 401 {
		t.Fatalf("a key of the lost database: %d %v", st, body)
	}
	if st, body := call(t, "POST", base+"/api/tasks", admin, `{"task_id":"t1"}`); st != 201 {
		t.Fatalf("create once the tables are back: %d %v", st, body)
	}
	if st, body := call(t, "POST", base+"/api/tasks/t1/checkout", admin, `{"run_id":"run-1"}`); st != 200 {
		t.Fatalf("checkout once the tables are back: %d %v", st, body)
	}
	// The change stream is the new table's: the checkout's event is archived.
	if st, body := call(t, "GET", base+"/api/tasks/t1/events", admin, ""); st != 200 || len(body["events"].([]any)) != 1 {
		t.Fatalf("events once the tables are back: %d %v", st, body)
	}
	if strings.Contains(logs.String(), `"status":500`) {
		t.Errorf("a 500 was answered:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), `"status":500`) {
		t.Errorf("a 500 was answered:\n%s", logs.String())
	}
}

// The tables of a given endpoint deleted in part (here the agents table,
// which holds the keys): while the server makes them again, every route
// answers 503 unavailable, as it says, a route whose own tables are still
// there included. A key the server had cached from the lost table is no
// key any more: it neither reads nor writes the tasks meanwhile, and is
// refused once the tables are back. Before, the cached key read and
// created tasks while the agents table was missing.
func TestEndpointLosingATableAnswers503WhileMending(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := localstack.Start(ctx, localstack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	proxy := newCountingProxy(t, d.Endpoint)
	srv, err := Start(ctx, Config{Addr: "127.0.0.1:0", DynamoEndpoint: proxy.url, AdminKey: "ck_external-admin-key"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	admin, base := srv.AdminKey(), srv.URL()
	st, body := call(t, "POST", base+"/api/agents", admin, `{"name":"worker"}`)
	if st != 201 {
		t.Fatalf("register: %d %v", st, body)
	}
	worker := body["api_key"].(string)
	if st, body := call(t, "POST", base+"/api/tasks", worker, `{"task_id":"t1"}`); st != 201 {
		t.Fatalf("create: %d %v", st, body)
	}

	proxy.refuse("CreateTable", true)
	agents := schema.Names{}.Table(schema.AgentsTable)
	if _, err := lease.NewLocalClient(d.Endpoint).DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &agents}); err != nil {
		t.Fatal(err)
	}
	if st, _, body := get(t, "GET", base+"/api/agents", admin, ""); st != 503 || body["code"] != "unavailable" {
		t.Fatalf("agents once their table is gone: %d %v", st, body)
	}
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/api/tasks/t1", ""},
		{"POST", "/api/tasks", `{"task_id":"t2"}`},
	} {
		if st, retry, body := get(t, c.method, base+c.path, worker, c.body); st != 503 || body["code"] != "unavailable" || retry == "" {
			t.Errorf("%s %s with a key of the lost table while the tables are made again: %d Retry-After %q %v", c.method, c.path, st, retry, body)
		}
	}

	proxy.refuse("CreateTable", false)
	waitHealthy(t, srv, 30*time.Second)
	if st, body := call(t, "GET", base+"/api/tasks/t1", worker, ""); st != 401 {
		t.Fatalf("a key of the lost table once the tables are back: %d %v", st, body)
	}
	if st, body := call(t, "GET", base+"/api/tasks/t2", admin, ""); st != 404 {
		t.Fatalf("the task the lost key asked for: %d %v", st, body)
	}
}

// Several local servers on one endpoint, all finding its tables missing,
// make them again at once: each comes back serving with the admin key, and
// they serve the same tables, made as a single server makes them. A server
// still making them when another has made them and written to them keeps
// what was written: it finds each table there (or made meanwhile) and
// creates nothing over it. The proxies hold each server's CreateTable, so
// that all three are seen mending before any of them makes a table.
func TestSeveralServersRemakeTheTablesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := localstack.Start(ctx, localstack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	const admin = "ck_shared-admin-key"
	type server struct {
		*Server
		proxy *countingProxy
		logs  *testenv.Buffer
	}
	servers := make([]server, 3)
	for i := range servers {
		s := server{proxy: newCountingProxy(t, d.Endpoint), logs: new(testenv.Buffer)}
		if s.Server, err = Start(ctx, Config{Addr: "127.0.0.1:0", DynamoEndpoint: s.proxy.url, AdminKey: admin,
			Logger: slog.New(slog.NewJSONHandler(s.logs, nil))}); err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		servers[i] = s
	}
	a, b, c := servers[0], servers[1], servers[2]
	// mending waits until every server has a CreateTable held, its tables
	// found missing (a request to each makes sure it looks).
	mending := func(servers ...server) {
		t.Helper()
		for _, s := range servers {
			if st, _, body := get(t, "GET", s.URL()+"/api/agents", admin, ""); st != 503 || body["code"] != "unavailable" {
				t.Fatalf("agents while the tables are missing: %d %v", st, body)
			}
		}
		deadline := time.Now().Add(30 * time.Second)
		for _, s := range servers {
			for s.proxy.held("CreateTable") == 0 {
				if time.Now().After(deadline) {
					t.Fatal("a server did not start making the tables again")
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
	}
	checkTables := func(endpoint string) {
		t.Helper()
		fresh := schema.Names{Prefix: "fresh-"}
		if err := lease.EnsureTables(ctx, lease.NewLocalClient(endpoint), fresh); err != nil {
			t.Fatal(err)
		}
		want, got := tableShapes(t, endpoint, fresh), tableShapes(t, endpoint, schema.Names{})
		for name, w := range want {
			if got[name] != w {
				t.Errorf("table %s made again by several servers:\n%s\nmade by one:\n%s", name, got[name], w)
			}
		}
	}

	// The endpoint restarts empty; all three make the tables at once.
	for _, s := range servers {
		s.proxy.hold("CreateTable")
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	restarted, err := localstack.Start(ctx, localstack.Options{Port: d.Port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = restarted.Stop() })
	mending(servers...)
	for _, s := range servers {
		s.proxy.release("CreateTable")
	}
	for _, s := range servers {
		waitHealthy(t, s.Server, 30*time.Second)
		st, body := call(t, "GET", s.URL()+"/api/agents", admin, "")
		if agents, _ := body["agents"].([]any); st != 200 || len(agents) != 1 {
			t.Fatalf("agents once the tables are back: %d %v", st, body)
		}
	}
	if st, body := call(t, "POST", a.URL()+"/api/tasks", admin, `{"task_id":"t1"}`); st != 201 {
		t.Fatalf("create through one server: %d %v", st, body)
	}
	if st, body := call(t, "POST", b.URL()+"/api/tasks/t1/checkout", admin, `{"run_id":"run-1"}`); st != 200 {
		t.Fatalf("checkout through another: %d %v", st, body)
	}
	if st, body := call(t, "POST", c.URL()+"/api/tasks/t1/checkout", admin, `{"run_id":"run-2"}`); st != 409 || body["code"] != "checked_out" {
		t.Fatalf("checkout of another run through the third: %d %v", st, body)
	}
	for _, s := range servers {
		if st, body := call(t, "GET", s.URL()+"/api/tasks/t1/events", admin, ""); st != 200 || len(body["events"].([]any)) != 1 {
			t.Fatalf("events once the tables are back: %d %v", st, body)
		}
	}
	checkTables(restarted.Endpoint)

	// The tables are deleted; a makes them again and is written to while b
	// and c are still at it.
	for _, s := range servers {
		s.proxy.hold("CreateTable")
	}
	direct := lease.NewLocalClient(restarted.Endpoint)
	for _, tb := range schema.Tables() {
		name := schema.Names{}.Table(tb.Name)
		if _, err := direct.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &name}); err != nil {
			t.Fatal(err)
		}
	}
	mending(servers...)
	a.proxy.release("CreateTable")
	waitHealthy(t, a.Server, 30*time.Second)
	st, body := call(t, "POST", a.URL()+"/api/agents", admin, `{"name":"worker"}`)
	if st != 201 {
		t.Fatalf("register: %d %v", st, body)
	}
	worker := body["api_key"].(string)
	if st, body := call(t, "POST", a.URL()+"/api/tasks", worker, `{"task_id":"kept","title":"kept"}`); st != 201 {
		t.Fatalf("create: %d %v", st, body)
	}
	st, body = call(t, "POST", a.URL()+"/api/tasks/kept/checkout", worker, `{"run_id":"run-kept"}`)
	if st != 200 {
		t.Fatalf("checkout: %d %v", st, body)
	}
	fence := body["fence"]
	for _, s := range []server{b, c} {
		if s.proxy.held("CreateTable") != 1 {
			t.Fatal("a server no longer waits to make a table")
		}
		if st, _, body := get(t, "GET", s.URL()+"/api/tasks/kept", worker, ""); st != 503 || body["code"] != "unavailable" {
			t.Fatalf("a server still making the tables: %d %v", st, body)
		}
		s.proxy.release("CreateTable")
	}
	for _, s := range []server{b, c} {
		waitHealthy(t, s.Server, 30*time.Second)
		st, body := call(t, "GET", s.URL()+"/api/tasks/kept", worker, "")
		co, _ := body["checkout"].(map[string]any)
		if st != 200 || body["title"] != "kept" || co == nil || co["run_id"] != "run-kept" || co["fence"] != fence {
			t.Fatalf("the task written while this server made the tables: %d %v", st, body)
		}
		if st, body := call(t, "GET", s.URL()+"/api/agents", admin, ""); st != 200 || len(body["agents"].([]any)) != 2 {
			t.Fatalf("agents: %d %v", st, body)
		}
		if st, body := call(t, "GET", s.URL()+"/api/tasks/kept/events", worker, ""); st != 200 || len(body["events"].([]any)) != 1 {
			t.Fatalf("events of the task: %d %v", st, body)
		}
	}
	checkTables(restarted.Endpoint)
	for _, s := range servers {
		if strings.Contains(s.logs.String(), `"status":500`) {
			t.Errorf("a 500 was answered:\n%s", s.logs.String())
		}
	}
}

// tableShapes describes each table of the schema under names at endpoint,
// keyed by its logical name, leaving out what differs between two tables
// made alike: their names, ARNs, times and sizes.
func tableShapes(t *testing.T, endpoint string, names schema.Names) map[string]string {
	t.Helper()
	ctx := context.Background()
	client := lease.NewLocalClient(endpoint)
	shapes := map[string]string{}
	for _, tb := range schema.Tables() {
		name := names.Table(tb.Name)
		out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &name})
		if err != nil {
			t.Fatal(err)
		}
		desc := out.Table
		type index struct {
			Name       string
			Keys       []types.KeySchemaElement
			Projection types.ProjectionType
			Attributes []string
			Status     types.IndexStatus
		}
		var indexes []index
		for _, g := range desc.GlobalSecondaryIndexes {
			ix := index{Name: aws.ToString(g.IndexName), Keys: g.KeySchema, Status: g.IndexStatus}
			if g.Projection != nil {
				ix.Projection, ix.Attributes = g.Projection.ProjectionType, slices.Sorted(slices.Values(g.Projection.NonKeyAttributes))
			}
			indexes = append(indexes, ix)
		}
		slices.SortFunc(indexes, func(x, y index) int { return strings.Compare(x.Name, y.Name) })
		attrs := slices.Clone(desc.AttributeDefinitions)
		slices.SortFunc(attrs, func(x, y types.AttributeDefinition) int {
			return strings.Compare(aws.ToString(x.AttributeName), aws.ToString(y.AttributeName))
		})
		shape := map[string]any{
			"keys": desc.KeySchema, "attributes": attrs, "indexes": indexes, "status": desc.TableStatus,
			"stream": desc.StreamSpecification, "has_stream": desc.LatestStreamArn != nil,
		}
		if desc.BillingModeSummary != nil {
			shape["billing"] = desc.BillingModeSummary.BillingMode
		}
		// dynalite keeps no TTL: then both answer the same error.
		if ttl, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: &name}); err != nil {
			var api smithy.APIError
			if errors.As(err, &api) {
				shape["ttl"] = api.ErrorCode()
			} else {
				t.Fatal(err)
			}
		} else {
			shape["ttl"] = ttl.TimeToLiveDescription
		}
		b, err := json.Marshal(shape)
		if err != nil {
			t.Fatal(err)
		}
		shapes[tb.Name] = string(b)
	}
	return shapes
}

// A server on an endpoint whose tables another server made again before
// this one found them missing (its stream poll, held here by its proxy,
// comes after) forgets the keys it had cached all the same, once its next
// poll finds the tasks table's stream another: a key of the lost database
// is refused there too, and writes nothing. Before, it kept working there,
// as its agent's, for the cache's 30 s.
func TestServerThatFoundNoTableMissingForgetsTheLostKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d, err := localstack.Start(ctx, localstack.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Stop() })
	const admin = "ck_shared-admin-key"
	var servers [2]*Server
	var proxies [2]*countingProxy
	for i := range servers {
		proxies[i] = newCountingProxy(t, d.Endpoint)
		if servers[i], err = Start(ctx, Config{Addr: "127.0.0.1:0", DynamoEndpoint: proxies[i].url, AdminKey: admin, SweepInterval: -1}); err != nil {
			t.Fatal(err)
		}
		defer servers[i].Close()
	}
	a, b := servers[0], servers[1]
	st, body := call(t, "POST", a.URL()+"/api/agents", admin, `{"name":"worker"}`)
	if st != 201 {
		t.Fatalf("register: %d %v", st, body)
	}
	worker := body["api_key"].(string)
	if st, body := call(t, "GET", b.URL()+"/api/inbox", worker, ""); st != 200 {
		t.Fatalf("the worker's key on the other server: %d %v", st, body)
	}

	// b's stream poller waits at its look-up of the stream.
	proxies[1].hold("DescribeTable")
	for deadline := time.Now().Add(10 * time.Second); proxies[1].held("DescribeTable") == 0; {
		if time.Now().After(deadline) {
			t.Fatal("no stream poll of the other server")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	restarted, err := localstack.Start(ctx, localstack.Options{Port: d.Port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = restarted.Stop() })
	if st, _, body := get(t, "GET", a.URL()+"/api/agents", admin, ""); st != 503 {
		t.Fatalf("agents while the tables are missing: %d %v", st, body)
	}
	waitHealthy(t, a, 30*time.Second)
	proxies[1].release("DescribeTable")

	deadline := time.Now().Add(10 * time.Second)
	for {
		st, body := call(t, "GET", b.URL()+"/api/inbox", worker, "")
		if st == 401 {
			break
		}
		if st != 200 || time.Now().After(deadline) {
			t.Fatalf("a key of the lost database on the server that found nothing missing: %d %v", st, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st, body := call(t, "POST", b.URL()+"/api/tasks", worker, `{"task_id":"ghost"}`); st != 401 {
		t.Fatalf("a create with a key of the lost database: %d %v", st, body)
	}
	if st, body := call(t, "GET", b.URL()+"/api/agents", admin, ""); st != 200 || len(body["agents"].([]any)) != 1 {
		t.Fatalf("agents: %d %v", st, body)
	}
}
