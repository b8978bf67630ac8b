package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/internal/testenv/testserver"
	"github.com/checkout-dev/checkout/localserver"
)

// The CLI is tested as a built binary against an in-process local server
// whose clock the test holds, so the printed times are exact.

var (
	update = flag.Bool("update", false, "rewrite testdata/*.golden")
	binary string
	home   string // an empty home folder: no profile file unless a test writes one elsewhere
)

func TestMain(m *testing.M) {
	flag.Parse()
	var err error
	if binary, err = testenv.Build("", "github.com/checkout-dev/checkout/cmd/checkout"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir, err := os.MkdirTemp("", "checkout-cli")
	if err != nil {
		panic(err)
	}
	home = filepath.Join(dir, "home")
	code := testenv.Run(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

type env struct {
	srv   *localserver.Server
	clock *testclock.Clock
	admin *client.Client
	keys  map[string]string // agent id -> key; "admin" too
}

func newEnv(t *testing.T, opts ...testserver.Option) *env {
	t.Helper()
	clock := testclock.New(time.Date(2026, 3, 20, 14, 30, 0, 0, time.UTC))
	srv := testserver.Start(t, append([]testserver.Option{testserver.WithClock(clock.Now)}, opts...)...)
	e := &env{srv: srv, clock: clock, admin: client.New(srv.URL(), srv.AdminKey()), keys: map[string]string{"admin": srv.AdminKey()}}
	for id, name := range map[string]string{"agent-a1b2": "researcher", "agent-c3d4": "writer"} {
		reg, err := e.admin.CreateAgent(context.Background(), client.CreateAgentRequest{AgentID: id, Name: name})
		if err != nil {
			t.Fatal(err)
		}
		e.keys[id] = reg.APIKey
	}
	return e
}

func (e *env) task(t *testing.T, id, title string) {
	t.Helper()
	if _, err := e.admin.CreateTask(context.Background(), client.CreateTaskRequest{TaskID: id, Title: title}); err != nil {
		t.Fatal(err)
	}
}

type result struct {
	stdout, stderr string
	code           int
}

func runCLI(t *testing.T, url, key string, args ...string) result {
	t.Helper()
	return runCLIEnv(t, []string{"CHECKOUT_URL=" + url, "CHECKOUT_API_KEY=" + key}, args...)
}

// cleanEnv is the test process's environment without anything that
// changes what the CLI does (CHECKOUT_*, TZ, a profile file), with a home
// and config folder of its own, and env added.
func cleanEnv(env ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "CHECKOUT_") || k == "TZ" || k == "HOME" || k == "XDG_CONFIG_HOME" {
			continue
		}
		out = append(out, kv)
	}
	return append(append(out, "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config")), env...)
}

// runCLIEnv runs the binary with env added to a clean environment.
func runCLIEnv(t *testing.T, env []string, args ...string) result {
	t.Helper()
	cmd := exec.Command(binary, args...)
	cmd.Env = cleanEnv(env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{out.String(), errb.String(), code}
}

var normalizers = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`run-[0-9a-f]{16}`), "run-RANDOM"},
	{regexp.MustCompile(`ck_[A-Za-z0-9_\-]+`), "ck_KEY"},
	{regexp.MustCompile(`127\.0\.0\.1:\d+`), "127.0.0.1:PORT"},
}

func normalize(s string) string {
	for _, n := range normalizers {
		s = n.re.ReplaceAllString(s, n.with)
	}
	return s
}

// transcript runs commands and records them as a shell session would show
// them, with the exit status of each.
type transcript struct {
	t *testing.T
	e *env
	b strings.Builder
}

func (tr *transcript) run(as string, wantCode int, args ...string) result {
	tr.t.Helper()
	// What earlier commands caused (messages, archived events) is there
	// before the next one runs.
	if err := tr.e.srv.Drain(context.Background()); err != nil {
		tr.t.Fatalf("drain the change stream: %v", err)
	}
	r := runCLI(tr.t, tr.e.srv.URL(), tr.e.keys[as], args...)
	fmt.Fprintf(&tr.b, "$ checkout %s    # as %s\n%s", strings.Join(args, " "), as, r.stdout)
	if r.stderr != "" {
		fmt.Fprintf(&tr.b, "[stderr] %s", r.stderr)
	}
	fmt.Fprintf(&tr.b, "[exit %d]\n\n", r.code)
	if r.code != wantCode {
		tr.t.Errorf("checkout %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, wantCode, r.stdout, r.stderr)
	}
	return r
}

func (tr *transcript) note(format string, args ...any) {
	fmt.Fprintf(&tr.b, "# "+format+"\n\n", args...)
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	got = normalize(got)
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}

func TestCheckoutSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-d4e5", "Fix login bug")
	e.task(t, "task-f6a7", "Write release notes")
	tr := &transcript{t: t, e: e}

	tr.note("14:30: the writer takes task-d4e5 for 15 minutes")
	tr.run("agent-c3d4", 0, "task-d4e5", "--timeout", "15m", "--reason", "draft the fix")
	e.clock.Advance(5 * time.Minute)
	tr.note("14:35: the writer checking it out again is told it is already its own")
	tr.run("agent-c3d4", 0, "task-d4e5")
	tr.note("the researcher is denied it, and takes another task")
	tr.run("agent-a1b2", 3, "task-d4e5", "--timeout", "30m")
	tr.run("agent-a1b2", 0, "task-f6a7", "--timeout", "30m")
	tr.run("agent-a1b2", 0, "list")
	tr.run("agent-a1b2", 0, "list", "--agent", "agent-a1b2")
	tr.run("agent-a1b2", 0, "status", "task-d4e5")
	tr.run("agent-a1b2", 0, "watch", "task-d4e5")
	tr.run("agent-a1b2", 3, "renew", "task-d4e5")
	e.clock.Advance(3 * time.Minute)
	tr.note("14:38")
	tr.run("agent-c3d4", 0, "renew", "task-d4e5", "--timeout", "1h30m")
	tr.run("agent-c3d4", 0, "release", "task-d4e5", "--reason", "blocked on review")
	tr.run("agent-a1b2", 0, "inbox")
	tr.run("agent-a1b2", 0, "status", "task-d4e5")
	e.clock.Advance(90 * time.Second)
	tr.note("14:39:30")
	tr.run("agent-a1b2", 0, "complete", "task-f6a7")
	tr.run("agent-a1b2", 0, "events", "task-f6a7")
	tr.run("agent-a1b2", 0, "tasks", "show", "task-f6a7")
	tr.run("agent-a1b2", 0, "list")
	tr.run("agent-a1b2", 3, "task-f6a7")
	tr.note("a 24-hour lease ends on another day, and the date says so")
	e.task(t, "task-long", "")
	tr.run("agent-a1b2", 0, "task-long", "--timeout", "24h")
	golden(t, "session", tr.b.String())
}

func TestCommandsSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := &transcript{t: t, e: e}
	tr.run("agent-a1b2", 0, "tasks", "add", "task-1", "--title", "First | with a pipe")
	tr.run("agent-a1b2", 0, "tasks", "add", "task-2")
	tr.run("agent-a1b2", 3, "tasks", "add", "task-2")
	tr.run("agent-a1b2", 0, "tasks", "list")
	tr.run("agent-a1b2", 0, "tasks", "list", "--status", "done")
	tr.run("agent-a1b2", 0, "heartbeat", "--ttl", "2m")
	tr.run("agent-a1b2", 0, "claim", "--timeout", "10m")
	tr.run("agent-c3d4", 0, "claim")
	tr.run("agent-c3d4", 4, "claim")
	tr.run("admin", 0, "agents", "list")
	tr.run("admin", 0, "agents", "add", "tester", "--id", "agent-t1")
	tr.run("admin", 0, "release", "task-1", "--force", "--reason", "stuck")
	tr.run("admin", 0, "agents", "remove", "agent-t1")
	tr.run("admin", 4, "agents", "remove", "agent-t1")
	tr.run("agent-a1b2", 1, "agents", "list")
	tr.note("a task named like a command")
	tr.run("agent-a1b2", 0, "tasks", "add", "release")
	tr.run("agent-a1b2", 0, "checkout", "release", "--timeout", "90s")
	tr.run("agent-a1b2", 0, "release", "release")
	tr.run("agent-a1b2", 0, "--", "release")
	tr.note("--json prints the server's answer")
	tr.run("agent-c3d4", 0, "status", "task-2", "--json")
	tr.run("agent-a1b2", 3, "task-2", "--json")
	tr.run("agent-a1b2", 4, "status", "nope", "--json")
	golden(t, "commands", tr.b.String())
}

// Queues and priorities from the command line: tasks added to queues,
// claimed best first, edited, cancelled and reopened.
func TestQueuesSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	tr := &transcript{t: t, e: e}
	tr.run("agent-a1b2", 0, "tasks", "add", "tidy", "--queue", "backend", "--priority", "2", "--title", "Tidy logs")
	tr.run("agent-a1b2", 0, "tasks", "add", "bug", "--queue", "backend", "--priority", "9", "--title", "Login 500",
		"--description", "Since 2.3", "--metadata", `{"ticket":"OPS-17"}`)
	tr.run("agent-a1b2", 2, "tasks", "add", "bad", "--priority", "10")
	tr.run("agent-a1b2", 0, "tasks", "list", "--queue", "backend")
	tr.run("agent-c3d4", 4, "claim")
	tr.run("agent-c3d4", 0, "claim", "--queue", "backend", "--wait", "1s")
	tr.run("agent-a1b2", 0, "tasks", "edit", "tidy", "--priority", "7", "--if-version", "1")
	tr.run("agent-a1b2", 3, "tasks", "edit", "tidy", "--title", "x", "--if-version", "1")
	tr.run("agent-a1b2", 2, "tasks", "edit", "tidy")
	tr.run("agent-a1b2", 3, "tasks", "cancel", "bug")
	tr.run("agent-c3d4", 0, "tasks", "cancel", "bug")
	tr.run("agent-a1b2", 0, "tasks", "show", "bug")
	tr.run("agent-a1b2", 0, "tasks", "reopen", "bug")
	tr.run("agent-a1b2", 0, "claim", "--queue", "backend", "--queue", "other")
	golden(t, "queues", tr.b.String())
}

func TestErrorsAreOneLineWithExitCodes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-1", "")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	notServer := httptest.NewServer(http.NotFoundHandler())
	defer notServer.Close()
	otherJSON := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"message":"no route"}`)
			return
		}
		io.WriteString(w, `{"status":"green"}`)
	}))
	defer otherJSON.Close()
	key, admin := e.keys["agent-a1b2"], e.keys["admin"]
	cases := []struct {
		name, url, key string
		args           []string
		code           int
		stderr         string
	}{
		{"server down", down, key, []string{"task-1"}, 1, "checkout: cannot reach the server at " + down + ": connection refused\n"},
		{"not a checkout server", notServer.URL, key, []string{"task-1"}, 1, "checkout: not a checkout server at " + notServer.URL + " (GET /healthz answered 404 Not Found)\n"},
		{"not a checkout server, other JSON", otherJSON.URL, key, []string{"list"}, 1, "checkout: not a checkout server at " + otherJSON.URL + " (GET /healthz answered 200 without {\"ok\": true})\n"},
		// A checkout server under a wrong path: its 404s were taken at
		// their word (exit 4, "no such path"), so a claim loop idled.
		{"a wrong path", e.srv.URL() + "/api", key, []string{"claim"}, 1, "checkout: not a checkout server at " + e.srv.URL() + "/api (GET /healthz answered 404 Not Found)\n"},
		{"a dot id", "", key, []string{"status", ".."}, 2, ""},
		{"bad key", "", "ck_wrong", []string{"list"}, 1, "checkout: unauthorized: the server refused the API key from CHECKOUT_API_KEY\n"},
		// A newline in the key read as "cannot reach the server".
		{"key with a newline", "", key + "\n", []string{"list"}, 2, "checkout: invalid API key (from CHECKOUT_API_KEY): it contains a control character, such as a newline copied with it\n"},
		{"no key", "", "", []string{"list"}, 2, "checkout: no API key: set CHECKOUT_API_KEY, pass --api-key, or use a profile (see checkout config --help)\n"},
		{"bad duration", "", key, []string{"task-1", "--timeout", "abc"}, 2, `checkout: invalid duration "abc" for --timeout: want 1s to 24h, such as "90s" or "30m"` + "\n"},
		{"bad ttl", "", key, []string{"heartbeat", "--ttl", "-5s"}, 2, `checkout: invalid duration "-5s" for --ttl: want 1s to 1h, such as "90s" or "30m"` + "\n"},
		// "want 1s to 24h" for a value inside that range.
		{"timeout not whole seconds", "", key, []string{"task-1", "--timeout", "1.5s"}, 2, `checkout: invalid duration "1.5s" for --timeout: want whole seconds, such as "90s" or "30m"` + "\n"},
		{"timeout out of range", "", key, []string{"task-1", "--timeout", "48h"}, 2, `checkout: invalid duration "48h" for --timeout: want 1s to 24h, such as "90s" or "30m"` + "\n"},
		{"renew timeout out of range", "", key, []string{"renew", "task-1", "--timeout", "0s"}, 2, `checkout: invalid duration "0s" for --timeout: want 1s to 24h, such as "90s" or "30m"` + "\n"},
		{"wait out of range", "", key, []string{"claim", "--wait", "25s"}, 2, `checkout: invalid duration "25s" for --wait: want 0s to 20s, such as "5s" or "20s"` + "\n"},
		{"retry delay out of range", "", key, []string{"tasks", "add", "t", "--retry-delay", "2h"}, 2, `checkout: invalid duration "2h" for --retry-delay: want 0s to 1h, such as "90s" or "30m"` + "\n"},
		{"unknown task", "", key, []string{"task-nope"}, 4, ""},
		{"not checked out", "", key, []string{"release", "task-1"}, 4, ""},
		{"bad id", "", key, []string{"status", "bad id!"}, 2, ""},
		// A non-admin naming a malformed agent was answered 403 forbidden.
		{"bad agent id", "", key, []string{"release", "task-1", "--agent", "bad id"}, 2,
			`checkout: invalid agent id "bad id" (from --agent): an id is 1 to 128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit` + "\n"},
		{"unknown flag", "", key, []string{"list", "--nope"}, 2, "checkout: unknown flag: --nope (see checkout list --help)\n"},
		{"unknown flag nested", "", key, []string{"tasks", "add", "--nope"}, 2, "checkout: unknown flag: --nope (see checkout tasks add --help)\n"},
		// The API's release body has outcome; the CLI's failed release is
		// a command of its own, which the plain message did not point to.
		{"release with an outcome", "", key, []string{"release", "task-1", "--outcome", "failed"}, 2,
			"checkout: unknown flag: --outcome: to release as a failed attempt, use checkout fail <task-id> --error TEXT (see checkout fail --help)\n"},
		{"missing arg", "", key, []string{"release"}, 2, "checkout: checkout release needs a task id (see checkout release --help)\n"},
		{"missing arg nested", "", key, []string{"tasks", "show"}, 2, "checkout: checkout tasks show needs a task id (see checkout tasks show --help)\n"},
		// checkout $T --timeout 30m with T unset: a usage error, never exit 0.
		{"flags without a task id", "", key, []string{"--timeout", "30m"}, 2, "checkout: checkout needs a task id (see checkout --help)\n"},
		{"a dash without a task id", "", key, []string{"--"}, 2, "checkout: checkout needs a task id (see checkout --help)\n"},
		{"empty task id", "", key, []string{"", "--timeout", "30m"}, 2, "checkout: checkout needs a task id, got an empty one (see checkout --help)\n"},
		{"empty task id of a command", "", key, []string{"release", ""}, 2, "checkout: checkout release needs a task id, got an empty one (see checkout release --help)\n"},
		{"too many args nested", "", key, []string{"tasks", "add", "a", "b"}, 2, "checkout: checkout tasks add takes at most one task id (see checkout tasks add --help)\n"},
		{"too many args", "", key, []string{"a", "b"}, 2, "checkout: checkout takes at most one task id (see checkout --help)\n"},
		{"near miss", "", key, []string{"lsit"}, 2, "checkout: unknown command \"lsit\": did you mean list? (a task named lsit: checkout -- lsit)\n"},
		{"near miss nested", "", key, []string{"tasks", "lsit"}, 2, "checkout: unknown command \"lsit\" for \"checkout tasks\": did you mean list? (see checkout tasks --help)\n"},
		{"near miss with a task id", "", key, []string{"relase", "task-1"}, 2, "checkout: unknown command \"relase\": did you mean release? (a task named relase: checkout -- relase)\n"},
		{"near miss with its flag", "", key, []string{"relase", "task-1", "--force"}, 2, "checkout: unknown command \"relase\": did you mean release? (a task named relase: checkout -- relase)\n"},
		{"int flag not an integer", "", key, []string{"tasks", "add", "t", "--priority", "x"}, 2,
			`checkout: invalid value "x" for --priority: want an integer (see checkout tasks add --help)` + "\n"},
		{"fence not an integer", "", key, []string{"release", "task-1", "--fence=abc"}, 2,
			`checkout: invalid value "abc" for --fence: want a fence, a whole number 1 or more (see checkout release --help)` + "\n"},
		// A fence of 0 was taken for no fence at all.
		{"fence 0", "", key, []string{"complete", "task-1", "--fence", "0"}, 2,
			`checkout: invalid value "0" for --fence: want a fence, a whole number 1 or more (see checkout complete --help)` + "\n"},
		{"int flag too big", "", key, []string{"events", "--limit", "99999999999999999999"}, 2,
			`checkout: invalid value "99999999999999999999" for --limit: out of range (see checkout events --help)` + "\n"},
		{"duration flag not a duration", "", key, []string{"events", "--follow", "--interval", "soon"}, 2,
			`checkout: invalid value "soon" for --interval: want a duration such as "2s" or "1m" (see checkout events --help)` + "\n"},
		{"bool flag not a bool", "", key, []string{"list", "--json=maybe"}, 2,
			`checkout: invalid value "maybe" for --json: want true or false (see checkout list --help)` + "\n"},
		{"url flag not a URL", "", key, []string{"list", "--url", "notaurl"}, 2,
			`checkout: server URL "notaurl" (from --url) is not an absolute http:// or https:// URL: want http://HOST[:PORT] or https://...` + "\n"},
		{"url flag without a scheme", "", key, []string{"task-1", "--url", "127.0.0.1:3100"}, 2,
			`checkout: server URL "127.0.0.1:3100" (from --url) is not an absolute http:// or https:// URL: want http://HOST[:PORT] or https://...` + "\n"},
		{"CHECKOUT_URL without a scheme", "127.0.0.1:3100", key, []string{"list"}, 2,
			`checkout: server URL "127.0.0.1:3100" (from CHECKOUT_URL) is not an absolute http:// or https:// URL: want http://HOST[:PORT] or https://...` + "\n"},
		{"CHECKOUT_URL not http", "ftp://example.com", key, []string{"list"}, 2,
			`checkout: server URL "ftp://example.com" (from CHECKOUT_URL) is not an absolute http:// or https:// URL: want http://HOST[:PORT] or https://...` + "\n"},
		{"CHECKOUT_URL without a host", "http://:3100", key, []string{"mcp"}, 2,
			`checkout: server URL "http://:3100" (from CHECKOUT_URL) is not an absolute http:// or https:// URL: want http://HOST[:PORT] or https://...` + "\n"},
		{"unknown shell", "", key, []string{"completion", "bogus"}, 2,
			"checkout: unknown shell \"bogus\" for checkout completion: want bash, fish, powershell or zsh (see checkout completion --help)\n"},
		{"near miss shell", "", key, []string{"completion", "bsh"}, 2,
			"checkout: unknown shell \"bsh\" for checkout completion: did you mean bash? (see checkout completion --help)\n"},
		{"another agent by a non-admin", "", key, []string{"task-1", "--agent", "agent-c3d4"}, 1,
			"checkout: forbidden: only an admin may act for another agent: agent_id names agent-c3d4, and the caller is agent-a1b2\n"},
		{"unknown profile", "", key, []string{"list", "--profile", "nope"}, 2, ""},
		{"too many args for one", "", key, []string{"release", "a", "b"}, 2, "checkout: checkout release takes exactly one task id (see checkout release --help)\n"},
		{"args for none", "", key, []string{"list", "a"}, 2, "checkout: checkout list takes no arguments (see checkout list --help)\n"},
		{"task exists", "", key, []string{"tasks", "add", "task-1"}, 3, "checkout: task task-1 already exists\n"},
		{"agent exists", "", admin, []string{"agents", "add", "x", "--id", "agent-a1b2"}, 3, "checkout: an agent with id agent-a1b2 already exists\n"},
		{"no such agent to remove", "", admin, []string{"agents", "remove", "agent-nope"}, 4, "checkout: agent agent-nope does not exist\n"},
		{"no such agent to act as", "", admin, []string{"claim", "--agent", "agent-nope"}, 4, "checkout: agent agent-nope does not exist (from --agent)\n"},
		{"nothing to claim", "", key, []string{"claim", "--queue", "empty"}, 4, "checkout: no task is available to claim in queue empty\n"},
		{"nothing to claim in two queues", "", key, []string{"claim", "--queue", "empty", "--queue", "void", "--wait", "1s"}, 4,
			"checkout: no task became available to claim in queues empty, void within 1s\n"},
		{"force by non-admin", "", key, []string{"release", "task-1", "--force"}, 1, ""},
	}
	t.Cleanup(func() {}) // the servers above outlive the parallel subtests
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			url := tc.url
			if url == "" {
				url = e.srv.URL()
			}
			r := runCLI(t, url, tc.key, tc.args...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", r.code, tc.code, r.stderr)
			}
			if tc.stderr != "" && r.stderr != tc.stderr {
				t.Errorf("stderr %q, want %q", r.stderr, tc.stderr)
			}
			if !strings.HasPrefix(r.stderr, "checkout: ") || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("stderr is not one line: %q", r.stderr)
			}
			if strings.Contains(r.stderr, "goroutine") || strings.Contains(r.stderr, "panic") {
				t.Errorf("stack trace: %q", r.stderr)
			}
		})
	}
}

func TestHelpDocumentsExitCodes(t *testing.T) {
	t.Parallel()
	r := runCLI(t, "", "", "--help")
	if r.code != 0 {
		t.Fatalf("exit %d", r.code)
	}
	for _, want := range []string{"CHECKOUT_URL", "CHECKOUT_API_KEY", "3  denied", "4  not found", "release", "mcp"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--help does not mention %q", want)
		}
	}
}

// The help says what each command does and takes: a group's summary names
// its commands, an optional flag is shown in brackets, and the profile
// file's place is given as the CLI finds it.
func TestHelpSaysWhatCommandsTake(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args      []string
		want, not []string
	}{
		{[]string{"--help"},
			[]string{"  checkout fail <task-id> [--error TEXT]   ", "$XDG_CONFIG_HOME/checkout/config.toml", "(default ~/.config/checkout/config.toml", "CHECKOUT_CONFIG"},
			[]string{"fail <task-id> --error TEXT", "a profile of ~/.config", "saying what went wrong"}},
		{[]string{"tasks", "--help"}, []string{"Create, list, show, edit, cancel and reopen tasks\n"}, nil},
		{[]string{"--help"}, []string{"  tasks       Create, list, show, edit, cancel and reopen tasks\n"}, nil},
		{[]string{"fail", "--help"}, []string{"  checkout fail task-d4e5  ", "--error text, if given,"}, nil},
	} {
		r := runCLI(t, "", "", tc.args...)
		if r.code != 0 {
			t.Fatalf("checkout %s: exit %d", strings.Join(tc.args, " "), r.code)
		}
		for _, w := range tc.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("checkout %s does not say %q:\n%s", strings.Join(tc.args, " "), w, r.stdout)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(r.stdout, n) {
				t.Errorf("checkout %s says %q:\n%s", strings.Join(tc.args, " "), n, r.stdout)
			}
		}
	}
}

func TestCompact(t *testing.T) {
	t.Parallel()
	for d, want := range map[time.Duration]string{
		30 * time.Minute: "30m", 90 * time.Minute: "1h30m", 90 * time.Second: "90s", 2 * time.Hour: "2h",
		0: "0s", 45 * time.Second: "45s", time.Hour + 30*time.Second: "1h30s", 24 * time.Hour: "24h",
		1500 * time.Millisecond: "1s", -time.Second: "0s", 270 * time.Second: "4m30s", time.Minute: "1m",
	} {
		if got := compact(d); got != want {
			t.Errorf("compact(%v) = %q, want %q", d, got, want)
		}
	}
}

// checkout config shows a malformed agent id with where it came from,
// rather than refusing to show the settings; the commands that send
// requests refuse it.
func TestConfigShowsAMalformedAgent(t *testing.T) {
	t.Parallel()
	r := runCLIEnv(t, []string{"CHECKOUT_AGENT=bad id"}, "config")
	if r.code != 0 || !strings.Contains(r.stdout, `bad id`) || !strings.Contains(r.stdout, "CHECKOUT_AGENT") {
		t.Errorf("config with CHECKOUT_AGENT=\"bad id\": exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = runCLIEnv(t, []string{"CHECKOUT_AGENT=bad id", "CHECKOUT_API_KEY=ck_some-key-0000000000"}, "release", "task-1")
	if r.code != 2 || !strings.Contains(r.stderr, `invalid agent id "bad id" (from CHECKOUT_AGENT)`) {
		t.Errorf("release with CHECKOUT_AGENT=\"bad id\": exit %d\n%s", r.code, r.stderr)
	}
}

// A malformed run id is refused before any request, naming where it came
// from: the server's run_id error would not say that CHECKOUT_RUN_ID was
// the culprit.
func TestMalformedRunIDNamesItsSource(t *testing.T) {
	t.Parallel()
	env := []string{"CHECKOUT_RUN_ID=bad run", "CHECKOUT_API_KEY=ck_some-key-0000000000", "CHECKOUT_URL=http://127.0.0.1:9"}
	r := runCLIEnv(t, env, "release", "task-1")
	if r.code != 2 || !strings.Contains(r.stderr, `invalid run id "bad run" (from CHECKOUT_RUN_ID)`) {
		t.Errorf("release with CHECKOUT_RUN_ID=\"bad run\": exit %d\n%s", r.code, r.stderr)
	}
	r = runCLIEnv(t, env[1:], "release", "task-1", "--run-id", "bad/run")
	if r.code != 2 || !strings.Contains(r.stderr, `invalid run id "bad/run" (from --run-id)`) {
		t.Errorf("release --run-id bad/run: exit %d\n%s", r.code, r.stderr)
	}
}

// The inbox shows which lease a lease_lost message is about (its fence and
// run id), as --json does: an agent running several runs on one task over
// time must tell them apart.
func TestInboxShowsTheLostLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-1", "")
	tr := &transcript{t: t, e: e}
	tr.run("agent-c3d4", 0, "task-1", "--run-id", "run-first")
	tr.run("admin", 0, "release", "task-1", "--force", "--reason", "stuck")
	r := tr.run("agent-c3d4", 0, "inbox")
	if !strings.Contains(r.stdout, "lease_lost") || !regexp.MustCompile(`\|\s*1\s*\|\s*run-first\s*\|`).MatchString(r.stdout) {
		t.Errorf("inbox does not show the lost lease's fence 1 and run run-first:\n%s", r.stdout)
	}
}

// A misspelled setting is named on standard error with the one it is
// close to: otherwise it is ignored without a word, and the command acts
// as someone else, or against another server, than the user meant.
func TestMisspelledSettingIsNamed(t *testing.T) {
	t.Parallel()
	r := runCLIEnv(t, []string{"CHECKOUT_AGNT=agent-a1b2", "CHECKOUT_ADDR=127.0.0.1:3100"}, "config")
	want := "checkout: warning: CHECKOUT_AGNT is not a setting and is ignored; did you mean CHECKOUT_AGENT?\n"
	if r.code != 0 || r.stderr != want {
		t.Errorf("config with CHECKOUT_AGNT set: exit %d, stderr %q, want %q", r.code, r.stderr, want)
	}
}
