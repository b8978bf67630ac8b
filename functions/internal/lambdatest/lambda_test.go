//go:build lambdatest

package lambdatest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

var (
	binDir string // <function>/bootstrap for every function
	rie    string // the emulator
	root   string // the repository
)

func TestMain(m *testing.M) {
	var err error
	if root, err = filepath.Abs("../../.."); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tmp, err := os.MkdirTemp("", "lambdatest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if binDir, rie, err = binaries(tmp); err != nil {
		fmt.Fprintln(os.Stderr, "lambdatest:", err)
		os.RemoveAll(tmp)
		os.Exit(1)
	}
	code := testenv.Run(m)
	os.RemoveAll(tmp)
	printReport()
	os.Exit(code)
}

// binaries returns the bootstraps and the emulator named by
// CHECKOUT_LAMBDA_BIN and CHECKOUT_RIE, or builds them the way the Makefile
// does and links each bootstrap into dir/<function>/.
func binaries(dir string) (bins, emulator string, err error) {
	bins, emulator = os.Getenv("CHECKOUT_LAMBDA_BIN"), os.Getenv("CHECKOUT_RIE")
	if bins == "" {
		bins = filepath.Join(dir, "functions")
		for _, fn := range deploy.Functions {
			bin, err := testenv.BuildStatic(root, "github.com/checkout-dev/checkout/functions/"+fn, "-tags", "lambda.norpc", "-trimpath", "-ldflags=-s -w")
			if err != nil {
				return "", "", err
			}
			if err := os.MkdirAll(filepath.Join(bins, fn), 0o755); err != nil {
				return "", "", err
			}
			if err := os.Symlink(bin, filepath.Join(bins, fn, "bootstrap")); err != nil {
				return "", "", err
			}
		}
	}
	if emulator == "" {
		if emulator, err = testenv.BuildStatic(filepath.Join(root, "functions/internal/lambdatest/tools"),
			"github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie", "-trimpath"); err != nil {
			return "", "", err
		}
	}
	for _, fn := range deploy.Functions {
		if _, err := os.Stat(filepath.Join(bins, fn, "bootstrap")); err != nil {
			return "", "", err
		}
	}
	_, err = os.Stat(emulator)
	return bins, emulator, err
}

// lines returns the JSON objects among the lines written.
func lines(o *testenv.Buffer) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(o.String()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// function is one bootstrap under its own emulator.
type function struct {
	name string
	// unlisted functions stay out of the printed figures.
	unlisted bool
	url      string
	cmd      *exec.Cmd
	out      *testenv.Buffer
	mu       sync.Mutex
	invokes  []time.Duration
}

// nextPort is the last port freePort handed out. Ports come from below
// Linux's ephemeral range (32768 and up), one after another: a port the
// kernel picked for ":0" and freed again was once taken, before the
// emulator bound it, by an outgoing connection's source port or by
// another function's emulator, and that emulator panicked
// ("address already in use").
var nextPort atomic.Int32

func init() { nextPort.Store(int32(20000 + rand.IntN(10000))) }

func freePort(t *testing.T) string {
	t.Helper()
	for range 100 {
		p := nextPort.Add(1)
		if p >= 32768 {
			nextPort.CompareAndSwap(p, 20000)
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(int(p)))
		if err != nil {
			continue // taken: the next one
		}
		l.Close()
		return strconv.Itoa(int(p))
	}
	t.Fatal("no free port below 32768")
	return ""
}

// env is the environment Lambda gives a function: region, the execution
// role's keys, the function's own variables from the stack, and here the
// endpoints of the local servers. Nothing comes from the machine's own AWS
// configuration.
func env(name, prefix, dynamo, aws string) []string {
	timeout := "10"
	var own []string
	if name == deploy.Sweeper {
		timeout = "60"
		// A short stay: each run waits at most 3 s for what falls due.
		own = append(own, "CHECKOUT_SWEEP_STAY=3s")
	}
	return append([]string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + os.TempDir(),
		"AWS_REGION=us-east-1",
		"AWS_ACCESS_KEY_ID=AKIDLAMBDATEST",
		"AWS_SECRET_ACCESS_KEY=lambda-test-secret",
		"AWS_SESSION_TOKEN=lambda-test-token",
		"AWS_CONFIG_FILE=" + os.DevNull,
		"AWS_SHARED_CREDENTIALS_FILE=" + os.DevNull,
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_ENDPOINT_URL_DYNAMODB=" + dynamo,
		"AWS_ENDPOINT_URL=" + aws,
		"AWS_LAMBDA_FUNCTION_NAME=checkout-" + name,
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE=256",
		"AWS_LAMBDA_FUNCTION_TIMEOUT=" + timeout,
		schema.EnvTablePrefix + "=" + prefix,
		"CHECKOUT_EVENT_BUS=checkout-test-bus",
		"LOG_LEVEL=info",
	}, own...)
}

// start runs the bootstrap of name under the emulator, with environ.
func start(t *testing.T, name string, environ []string) *function {
	t.Helper()
	emu, api := freePort(t), freePort(t)
	f := &function{name: name, url: "http://127.0.0.1:" + emu + "/2015-03-31/functions/function/invocations", out: &testenv.Buffer{}}
	dir := filepath.Join(binDir, name)
	f.cmd = exec.Command(rie, "--log-level", "error",
		"--runtime-interface-emulator-address", "127.0.0.1:"+emu, "--runtime-api-address", "127.0.0.1:"+api,
		filepath.Join(dir, "bootstrap"))
	f.cmd.Dir = dir
	f.cmd.Env = environ
	f.cmd.Stdout, f.cmd.Stderr = f.out, f.out
	// Its own process group, so that the bootstrap it starts stops with it.
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		record(f)
		_ = syscall.Kill(-f.cmd.Process.Pid, syscall.SIGKILL)
		_ = f.cmd.Wait()
		if t.Failed() {
			t.Logf("%s wrote:\n%s", name, f.out.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", "127.0.0.1:"+emu)
		if err == nil {
			c.Close()
			return f
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: the emulator did not listen: %v\n%s", name, err, f.out.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// invoke sends payload to the function as Lambda's Invoke API would and
// returns its answer; a function error is a failed test.
func (f *function) invoke(t *testing.T, payload []byte) []byte {
	t.Helper()
	began := time.Now()
	resp, err := http.Post(f.url, "application/json", bytes.NewReader(payload))
	if err != nil {
		t.Fatalf("invoke %s: %v", f.name, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	f.mu.Lock()
	f.invokes = append(f.invokes, time.Since(began))
	f.mu.Unlock()
	var failure struct {
		ErrorMessage string `json:"errorMessage"`
		ErrorType    string `json:"errorType"`
	}
	_ = json.Unmarshal(body, &failure)
	if resp.StatusCode != http.StatusOK || failure.ErrorType != "" {
		t.Fatalf("invoke %s: %d %s", f.name, resp.StatusCode, body)
	}
	return body
}

// invokeUnmeasured is invoke, left out of the printed figures: a run that
// mostly waits (the sweeper's stay) says nothing of the function's cost.
func (f *function) invokeUnmeasured(t *testing.T, payload []byte) []byte {
	t.Helper()
	out := f.invoke(t, payload)
	f.mu.Lock()
	f.invokes = f.invokes[:len(f.invokes)-1]
	f.mu.Unlock()
	return out
}

// bootstrapPID is the process the emulator started: its child.
func (f *function) bootstrapPID() int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		rest := string(stat[bytes.LastIndexByte(stat, ')')+1:])
		fields := strings.Fields(rest)
		if len(fields) > 1 && fields[1] == strconv.Itoa(f.cmd.Process.Pid) {
			return pid
		}
	}
	return 0
}

// peakRSS is the bootstrap's peak resident memory (VmHWM) in KiB. The
// emulator's REPORT line gives the configured memory size as "Max Memory
// Used", so the kernel is asked instead.
func (f *function) peakRSS() int {
	pid := f.bootstrapPID()
	if pid == 0 {
		return 0
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return kb
		}
	}
	return 0
}

type stats struct {
	name          string
	invokes       int
	cold, warm    time.Duration
	peakKiB, size int64
}

var (
	reportMu sync.Mutex
	report   []stats
)

// record keeps a function's figures before it stops: its first invocation
// as the caller saw it (the cold start: process start, Go runtime and
// configuration, the first request), the median of the others, and its peak
// memory. The emulator's own "Init Duration" ends before the runtime has
// asked for its first event, so it is not used.
func record(f *function) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.invokes) == 0 || f.unlisted {
		return
	}
	s := stats{name: f.name, invokes: len(f.invokes), cold: f.invokes[0], peakKiB: int64(f.peakRSS())}
	if rest := slices.Clone(f.invokes[1:]); len(rest) > 0 {
		slices.Sort(rest)
		s.warm = rest[len(rest)/2]
	}
	if st, err := os.Stat(filepath.Join(binDir, f.name, "bootstrap")); err == nil {
		s.size = st.Size()
	}
	reportMu.Lock()
	report = append(report, s)
	reportMu.Unlock()
}

func printReport() {
	reportMu.Lock()
	defer reportMu.Unlock()
	if len(report) == 0 {
		return
	}
	slices.SortFunc(report, func(a, b stats) int { return strings.Compare(a.name, b.name) })
	fmt.Println("\nbootstraps under the Lambda Runtime Interface Emulator (this machine; Lambda on arm64 differs):")
	fmt.Printf("  %-11s %8s %12s %12s %10s %10s\n", "function", "invokes", "cold start", "warm (p50)", "peak RSS", "bootstrap")
	ms := func(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d.Microseconds())/1000) }
	for _, s := range report {
		warm := "-"
		if s.invokes > 1 {
			warm = ms(s.warm)
		}
		fmt.Printf("  %-11s %8d %12s %12s %7.1fMiB %7.1fMiB\n", s.name, s.invokes, ms(s.cold), warm,
			float64(s.peakKiB)/1024, float64(s.size)/(1<<20))
	}
}

// eventBridge stands in for EventBridge's PutEvents: it records every
// entry, and whether the request was signed with the function's keys.
// event loads a captured event from testdata/.
func event(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var ev map[string]any
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return ev
}

func marshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// gateway plays API Gateway's part between captured events and the
// functions: it puts the caller's key in the event, asks the authorizer
// bootstrap about it on every route that has the authorizer, passes the
// context the authorizer answered on to the route's function, and reads the
// function's answer.
type gateway struct {
	fns map[string]*function
}

type answer struct {
	status int
	body   map[string]any
	raw    string
}

func route(key string) deploy.Route {
	for _, r := range deploy.Routes {
		if r.Key() == key {
			return r
		}
	}
	return deploy.Route{Access: deploy.Public, Function: deploy.Health} // $default
}

// authorize invokes the authorizer with the captured authorizer request for
// ev's route and the given Authorization header.
func (g *gateway) authorize(t *testing.T, ev map[string]any, authorization string) map[string]any {
	t.Helper()
	req := event(t, "authorizer-request.json")
	rc := ev["requestContext"].(map[string]any)
	req["routeKey"] = ev["routeKey"]
	req["rawPath"] = ev["rawPath"]
	req["rawQueryString"] = ev["rawQueryString"]
	req["routeArn"] = "arn:aws:execute-api:us-east-1:123456789012:abcdef1234/$default/" + rc["http"].(map[string]any)["method"].(string) + ev["rawPath"].(string)
	req["identitySource"] = []string{authorization}
	req["headers"].(map[string]any)["authorization"] = authorization
	reqRC := req["requestContext"].(map[string]any)
	reqRC["routeKey"], reqRC["http"] = rc["routeKey"], rc["http"]
	var resp map[string]any
	if err := json.Unmarshal(g.fns[deploy.Authorizer].invoke(t, marshal(t, req)), &resp); err != nil {
		t.Fatal(err)
	}
	return resp
}

// call sends the captured event name as the caller with key ("" for none),
// changed by edit first when edit is not nil.
func (g *gateway) call(t *testing.T, name, key string, edit func(ev map[string]any)) answer {
	t.Helper()
	ev := event(t, name)
	if edit != nil {
		edit(ev)
	}
	headers := ev["headers"].(map[string]any)
	delete(headers, "authorization")
	if key != "" {
		headers["authorization"] = "Bearer " + key
	}
	r := route(ev["routeKey"].(string))
	rc := ev["requestContext"].(map[string]any)
	delete(rc, "authorizer") // what the capture's authorizer said is not ours
	if r.Access != deploy.Public {
		if key == "" {
			return answer{status: http.StatusUnauthorized} // API Gateway's own 401: no identity source
		}
		resp := g.authorize(t, ev, "Bearer "+key)
		if resp["isAuthorized"] != true {
			return answer{status: http.StatusForbidden}
		}
		ctx, _ := resp["context"].(map[string]any)
		rc["authorizer"] = map[string]any{"lambda": ctx}
	}
	var out struct {
		StatusCode int    `json:"statusCode"`
		Body       string `json:"body"`
		Base64     bool   `json:"isBase64Encoded"`
	}
	if err := json.Unmarshal(g.fns[r.Function].invoke(t, marshal(t, ev)), &out); err != nil {
		t.Fatal(err)
	}
	if out.Base64 {
		t.Fatalf("%s: a base64 answer", name)
	}
	a := answer{status: out.StatusCode, raw: out.Body}
	_ = json.Unmarshal([]byte(out.Body), &a.body)
	return a
}

func expect(t *testing.T, what string, a answer, status int, code string) answer {
	t.Helper()
	if a.status != status || (code != "" && a.body["code"] != code) {
		t.Fatalf("%s: %d %s, want %d %s", what, a.status, a.raw, status, code)
	}
	return a
}

// metricSums adds up the embedded-metric-format values a function wrote.
func metricSums(o *testenv.Buffer) map[string]float64 {
	sums := map[string]float64{}
	for _, line := range lines(o) {
		meta, ok := line["_aws"].(map[string]any)
		if !ok {
			continue
		}
		for _, d := range meta["CloudWatchMetrics"].([]any) {
			for _, m := range d.(map[string]any)["Metrics"].([]any) {
				name := m.(map[string]any)["Name"].(string)
				v, _ := line[name].(float64)
				sums[name] += v
			}
		}
	}
	return sums
}

const adminKey = "ck_lambda-test-admin-key-0123456789"

// The real bootstraps, each under the emulator, serve a session from
// registering agents to the sweep, given the events API Gateway sends.
func TestBootstrapsUnderTheEmulator(t *testing.T) {
	ctx := context.Background()
	store := testenv.NewStore(t)
	client, names, prefix := store.DB, store.Names, store.Names.Prefix
	if err := store.EnsureAgent(ctx, "admin", "admin", true, adminKey); err != nil {
		t.Fatal(err)
	}
	bus := &testenv.EventBridge{}
	fake := httptest.NewServer(bus)
	defer fake.Close()

	g := &gateway{fns: map[string]*function{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range deploy.Functions {
		wg.Go(func() {
			f := start(t, name, env(name, prefix, testenv.Endpoint(), fake.URL))
			mu.Lock()
			g.fns[name] = f
			mu.Unlock()
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// The public routes.
	if a := expect(t, "GET /healthz", g.call(t, "healthz.json", "", nil), 200, ""); a.body["ok"] != true {
		t.Fatalf("healthz %s", a.raw)
	}
	expect(t, "$default", g.call(t, "default-unknown-path.json", "", nil), 404, "not_found")

	// The authorizer: allow with the principal, and let an unknown or
	// malformed key through without one (the route answers the contract's
	// 401); no key at all never reaches it.
	allow := g.authorize(t, event(t, "list-tasks.json"), "Bearer "+adminKey)
	if ctx, _ := allow["context"].(map[string]any); allow["isAuthorized"] != true || ctx["agent_id"] != "admin" || ctx["admin"] != "true" {
		t.Fatalf("authorizer for the admin key: %v", allow)
	}
	for _, header := range []string{"Bearer ck_nobody-has-this-key", "Basic eA=="} {
		deny := g.authorize(t, event(t, "list-tasks.json"), header)
		if ctx, _ := deny["context"].(map[string]any); deny["isAuthorized"] != true || len(ctx) != 0 {
			t.Fatalf("authorizer for %q: %v, want no principal", header, deny)
		}
	}
	expect(t, "unknown key", g.call(t, "list-tasks.json", "ck_nobody-has-this-key", nil), 401, "unauthorized")
	expect(t, "no key", g.call(t, "list-tasks.json", "", nil), 401, "")

	// agents
	researcher := expect(t, "register researcher", g.call(t, "register-agent.json", adminKey, nil), 201, "").body["api_key"].(string)
	reviewer := expect(t, "register reviewer", g.call(t, "register-second-agent.json", adminKey, nil), 201, "").body["api_key"].(string)
	expect(t, "register as an agent", g.call(t, "register-agent.json", researcher, nil), 403, "forbidden")
	expect(t, "heartbeat", g.call(t, "heartbeat.json", researcher, nil), 200, "")
	if a := expect(t, "whoami", g.call(t, "whoami.json", researcher, nil), 200, ""); a.body["agent_id"] != "agent-a1b2" || a.body["name"] != "researcher" || a.body["admin"] != false {
		t.Fatalf("whoami of the researcher: %s", a.raw)
	}
	if a := expect(t, "whoami of the admin", g.call(t, "whoami.json", adminKey, nil), 200, ""); a.body["agent_id"] != "admin" || a.body["admin"] != true {
		t.Fatalf("whoami of the admin: %s", a.raw)
	}

	// tasks
	expect(t, "create task", g.call(t, "create-task.json", researcher, nil), 201, "")
	expect(t, "create it again", g.call(t, "create-task.json", researcher, nil), 409, "")
	if a := expect(t, "get task", g.call(t, "get-task.json", reviewer, nil), 200, ""); a.body["status"] != "todo" {
		t.Fatalf("task %s", a.raw)
	}
	if a := expect(t, "list tasks", g.call(t, "list-tasks.json", reviewer, nil), 200, ""); len(a.body["tasks"].([]any)) != 1 {
		t.Fatalf("tasks %s", a.raw)
	}

	// A scheduled run with nothing due: its sweep and one look.
	var swept lease.SweepResult
	if err := json.Unmarshal(g.fns[deploy.Sweeper].invoke(t, marshal(t, event(t, "sweep-scheduled-event.json"))), &swept); err != nil {
		t.Fatal(err)
	}
	if swept != (lease.SweepResult{}) {
		t.Fatalf("idle sweep %+v", swept)
	}

	// checkouts: a grant, a conflict that watches, expiry and the sweep.
	granted := time.Now()
	grant := expect(t, "checkout", g.call(t, "checkout.json", researcher, nil), 200, "")
	if grant.body["fence"] != float64(1) || grant.body["agent_id"] != "agent-a1b2" {
		t.Fatalf("checkout %s", grant.raw)
	}
	expires, err := time.Parse(time.RFC3339Nano, fmt.Sprint(grant.body["expires_at"]))
	if err != nil {
		t.Fatalf("checkout %s: expires_at: %v", grant.raw, err)
	}
	conflict := expect(t, "checkout held", g.call(t, "checkout-conflict-watch.json", reviewer, nil), 409, "checked_out")
	if holder, _ := conflict.body["holder"].(map[string]any); holder["agent_id"] != "agent-a1b2" {
		t.Fatalf("conflict %s", conflict.raw)
	}
	// A claim, served by the claim function of its own: the only task is
	// held, so there is nothing to grant.
	claim := func(ev map[string]any) {
		ev["routeKey"], ev["rawPath"], ev["body"] = "POST /api/claim", "/api/claim", `{}`
		delete(ev, "pathParameters")
		rc := ev["requestContext"].(map[string]any)
		rc["routeKey"] = "POST /api/claim"
		rc["http"].(map[string]any)["path"] = "/api/claim"
	}
	expect(t, "claim with the only task held", g.call(t, "checkout.json", reviewer, claim), 404, "no_task_available")
	if len(g.fns[deploy.Claim].invokes) != 1 {
		t.Fatalf("the claim function was invoked %d times, want once", len(g.fns[deploy.Claim].invokes))
	}
	// The lease is 2s: the sweeper's run (CHECKOUT_SWEEP_STAY=3s, here)
	// sweeps at once, finds it due within its stay, and ends it as it
	// expires. (Its time, mostly waiting, is left out of the figures.) On
	// a machine so slow that the run's first sweep comes after the expiry,
	// that sweep ends the lease instead: the lines below allow it then.
	invoked := time.Now() // the run starts after this
	if err := json.Unmarshal(g.fns[deploy.Sweeper].invokeUnmeasured(t, marshal(t, event(t, "sweep-scheduled-event.json"))), &swept); err != nil {
		t.Fatal(err)
	}
	if swept != (lease.SweepResult{Timeouts: 1}) {
		t.Fatalf("sweep %+v, want one timeout", swept)
	}
	// It ended the lease no sooner than its expiry, and within its own
	// stay (3 s from its start, which came well before the expiry).
	if after := time.Since(granted); after < 2*time.Second || after > 6*time.Second {
		t.Fatalf("the run returned %v after the 2s lease was granted, want after the expiry and within its stay", after)
	}
	// The next scheduled run finds nothing to do.
	if err := json.Unmarshal(g.fns[deploy.Sweeper].invoke(t, marshal(t, event(t, "sweep-scheduled-event.json"))), &swept); err != nil {
		t.Fatal(err)
	}
	if swept != (lease.SweepResult{}) {
		t.Fatalf("idle sweep %+v", swept)
	}

	// The stream and notices functions, each handed the tasks table's
	// changes as its own event source mapping hands them: DynamoDB stream
	// events, in batches.
	arn, err := localstack.StreamARN(ctx, client, names.Table(schema.TasksTable))
	if err != nil {
		t.Fatal(err)
	}
	for _, fn := range []string{deploy.Stream, deploy.Notices} {
		batches := 0
		mapping := &stream.Poller{Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
			Handle: func(_ context.Context, ev events.DynamoDBEvent) error {
				batches++
				g.fns[fn].invoke(t, marshal(t, ev))
				return nil
			}}
		if n, err := mapping.Poll(ctx); err != nil || n == 0 || batches == 0 {
			t.Fatalf("the %s function was handed %d changes in %d batches: %v", fn, n, batches, err)
		}
	}

	// inbox: the watcher's message, deleted once.
	inbox := expect(t, "inbox", g.call(t, "inbox.json", reviewer, nil), 200, "")
	msgs := inbox.body["messages"].([]any)
	if len(msgs) != 1 || msgs[0].(map[string]any)["task_id"] != "task-d4e5" {
		t.Fatalf("inbox %s", inbox.raw)
	}
	id := msgs[0].(map[string]any)["message_id"].(string)
	onMessage := func(ev map[string]any) {
		ev["rawPath"] = "/api/inbox/" + id
		ev["pathParameters"] = map[string]any{"message_id": id}
		ev["requestContext"].(map[string]any)["http"].(map[string]any)["path"] = "/api/inbox/" + id
	}
	expect(t, "delete message", g.call(t, "inbox-delete.json", reviewer, onMessage), 200, "")
	expect(t, "delete it again", g.call(t, "inbox-delete.json", reviewer, onMessage), 404, "")

	// The notices function's notices of the sweep's ending went to
	// EventBridge, signed with the function's keys, through AWS_ENDPOINT_URL.
	var kinds []string
	for _, e := range bus.Entries() {
		kinds = append(kinds, fmt.Sprint(e["DetailType"]))
		if e["Source"] != "checkout" || e["EventBusName"] != "checkout-test-bus" {
			t.Errorf("entry %v", e)
		}
	}
	slices.Sort(kinds)
	// The timeout: its ending, the task available again, and the lease lost
	// to its holder, each signed with the function's keys.
	requests := bus.Requests()
	signed := len(requests) > 0
	for _, h := range requests {
		signed = signed && strings.HasPrefix(h.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=AKIDLAMBDATEST/") && h.Get("X-Amz-Target") == "AWSEvents.PutEvents"
	}
	if !slices.Equal(kinds, []string{"LeaseEnded", "LeaseLost", "TaskAvailable"}) || !signed {
		t.Errorf("EventBridge got %v (signed PutEvents: %v)", kinds, signed)
	}

	// The metric lines of the real binaries.
	for fn, want := range map[string]map[string]float64{
		deploy.Checkouts:  {deploy.MetricCheckouts: 1, deploy.MetricConflicts: 1},
		deploy.Sweeper:    {deploy.MetricSweepEnded: 1},
		deploy.Notices:    {deploy.MetricLeaseTimeouts: 1, deploy.MetricNoticesPublished: 3},
		deploy.Stream:     {deploy.MetricLeaseTimeouts: 0, deploy.MetricNoticesPublished: 0},
		deploy.Authorizer: {deploy.MetricUnauthorized: 3}, // two asked directly, one on the way to a route
	} {
		got := metricSums(g.fns[fn].out)
		for name, v := range want {
			if got[name] != v {
				t.Errorf("%s wrote %s = %v, want %v (all: %v)", fn, name, got[name], v, got)
			}
		}
	}
	// One line per sweep, with its counts, the idle runs' too: the first
	// run's, the second's sweep and its sweep as the lease expired, the
	// third's.
	// Which of the two the run wrote is judged by the lease's own expiry
	// (expires_at) against the run's first sweep (the second line): its
	// line is stamped as it ends, so a line before the expiry is a sweep
	// that could not end the lease; and a run invoked after the expiry
	// sweeps after it, so its first sweep ends the lease. Only a first
	// sweep that spans the expiry may have done either.
	var runs []float64
	var ends []int64 // each sweep's line's time, Unix ms
	for _, line := range lines(g.fns[deploy.Sweeper].out) {
		if line["msg"] == "sweep" {
			timeouts, _ := line["timeouts"].(float64)
			runs = append(runs, timeouts)
			meta, _ := line["_aws"].(map[string]any)
			stamp, _ := meta["Timestamp"].(float64)
			ends = append(ends, int64(stamp))
		}
	}
	stayed, swept0 := []float64{0, 0, 1, 0}, []float64{0, 1, 0}
	switch {
	case len(ends) < 2:
		t.Errorf("sweep lines with timeouts %v, want %v or %v", runs, stayed, swept0)
	case ends[1] < expires.UnixMilli() && !slices.Equal(runs, stayed):
		t.Errorf("sweep lines with timeouts %v, want one per sweep: %v (the run's first sweep ended %d ms before the lease expired)", runs, stayed, expires.UnixMilli()-ends[1])
	case !invoked.Before(expires) && !slices.Equal(runs, swept0):
		t.Errorf("sweep lines with timeouts %v, want %v: the run was invoked %v after the lease expired", runs, swept0, invoked.Sub(expires))
	case !slices.Equal(runs, stayed) && !slices.Equal(runs, swept0):
		t.Errorf("sweep lines with timeouts %v, want %v or, the run's first sweep having spanned the lease's expiry, %v", runs, stayed, swept0)
	}
}

// The very bootstrap, pointed at a dead DynamoDB testenv.Endpoint(), fails against
// that address instead of reaching AWS.
func TestDeadEndpointFailsLocally(t *testing.T) {
	t.Parallel()
	// An endpoint that hangs up on every connection. The port stays
	// taken for the whole test: a port listened on and closed again was
	// once handed to the emulator's own runtime API, which answered.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	dead := l.Addr().String()
	f := start(t, deploy.Tasks, env(deploy.Tasks, "dead-", "http://"+dead, "http://"+dead))
	f.unlisted = true
	g := &gateway{fns: map[string]*function{deploy.Tasks: f}}
	ev := event(t, "list-tasks.json")
	var out struct {
		StatusCode int    `json:"statusCode"`
		Body       string `json:"body"`
	}
	// As API Gateway would pass it, with the captured authorizer context.
	if err := json.Unmarshal(g.fns[deploy.Tasks].invoke(t, marshal(t, ev)), &out); err != nil {
		t.Fatal(err)
	}
	if out.StatusCode < 500 {
		t.Fatalf("with a dead endpoint: %d %s, want a 5xx", out.StatusCode, out.Body)
	}
	logs := f.out.String()
	if !strings.Contains(logs, dead) || strings.Contains(logs, "amazonaws.com") {
		t.Fatalf("the failure does not name %s (or names AWS):\n%s", dead, logs)
	}
}
