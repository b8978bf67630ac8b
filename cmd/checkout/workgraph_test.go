package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/client"
)

// The work graph's flags and reports, run in-process against a scripted
// server: what the commands send, and how they show what comes back.
// cli_test.go runs them against the real local server.

type sent struct {
	Method, Path string
	Body         map[string]any
}

// scriptedCLI runs the CLI in-process against a server answering with
// answer, and returns the requests it got.
type scriptedCLI struct {
	t   *testing.T
	url string
	mu  sync.Mutex
	got []sent
	// date is the server's clock in its answers' Date header: the time
	// the fixtures' not_before is read against.
	date time.Time
}

// scriptedNow is a scripted server's clock unless a test sets another:
// before graphTask's not_before.
var scriptedNow = time.Date(2026, 3, 20, 14, 30, 0, 0, time.UTC)

func newScriptedCLI(t *testing.T, answer func(r sent) (int, string)) *scriptedCLI {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("XDG_CONFIG_HOME", filepath.Join(dir, ".config"))
	t.Setenv("TZ", "")
	for _, k := range []string{"CHECKOUT_URL", "CHECKOUT_API_KEY", "CHECKOUT_PROFILE", "CHECKOUT_AGENT", "CHECKOUT_RUN_ID"} {
		t.Setenv(k, "")
	}
	s := &scriptedCLI{t: t, date: scriptedNow}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rec := sent{Method: r.Method, Path: r.URL.RequestURI()}
		_ = json.Unmarshal(b, &rec.Body)
		s.mu.Lock()
		s.got = append(s.got, rec)
		date := s.date
		s.mu.Unlock()
		status, out := answer(rec)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Date", date.Format(http.TimeFormat))
		w.WriteHeader(status)
		io.WriteString(w, out)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

func (s *scriptedCLI) run(args ...string) result {
	s.t.Helper()
	var out, errb strings.Builder
	code := run(context.Background(), append([]string{"--url", s.url, "--api-key", "ck_test"}, args...), strings.NewReader(""), &out, &errb)
	return result{out.String(), errb.String(), code}
}

func (s *scriptedCLI) requests() []sent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sent(nil), s.got...)
}

const graphTask = `{"task_id":"deploy","title":"Deploy","description":"","queue":"default","priority":5,"metadata":{},` +
	`"version":3,"status":"blocked","created_at":"2026-03-20T14:30:00.000Z","started_at":null,"completed_at":null,` +
	`"duration_seconds":null,"checkout":null,` +
	`"blocked_by":[{"task_id":"build","status":"in_progress"},{"task_id":"test","status":"done"}],"blocks":["announce"],` +
	`"max_attempts":3,"attempts":2,"retry_delay_seconds":30,"not_before":"2026-03-20T14:31:30.000Z","last_error":"exit status 1"}`

func TestTasksAddSendsTheWorkGraphFlags(t *testing.T) {
	s := newScriptedCLI(t, func(sent) (int, string) { return 201, graphTask })
	r := s.run("tasks", "add", "deploy", "--blocked-by", "build, test", "--blocked-by", "lint", "--max-attempts", "3",
		"--retry-delay", "0s", "--not-before", "2026-03-21T09:00:00Z")
	if r.code != 0 {
		t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	want := map[string]any{"task_id": "deploy", "blocked_by": []any{"build", "test", "lint"}, "max_attempts": 3.0,
		"retry_delay": "0s", "not_before": "2026-03-21T09:00:00Z"}
	if got := s.requests()[0].Body; !reflect.DeepEqual(got, want) {
		t.Errorf("body %v\nwant %v", got, want)
	}
	for _, line := range []string{"Task created: deploy", "  Blocked by: build (in_progress), test (done)\n", "  Not before: 2026-03-20 14:31:30 UTC"} {
		if !strings.Contains(r.stdout, line) {
			t.Errorf("output lacks %q:\n%s", line, r.stdout)
		}
	}

	before := time.Now()
	if r = s.run("tasks", "add", "later", "--not-before", "10m"); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	nb, err := time.Parse(time.RFC3339, s.requests()[1].Body["not_before"].(string))
	if err != nil || nb.Before(before.Add(10*time.Minute-time.Second)) || nb.After(time.Now().Add(10*time.Minute)) {
		t.Errorf("--not-before 10m sent %v (%v), want ten minutes from %v", nb, err, before)
	}
	if b := s.requests()[1].Body; b["blocked_by"] != nil || b["max_attempts"] != nil || b["retry_delay"] != nil {
		t.Errorf("flags not given were sent: %v", b)
	}

	for _, bad := range [][]string{{"--retry-delay", "-1s"}, {"--retry-delay", "soon"}, {"--not-before", "tomorrow"}, {"--max-attempts", "x"}} {
		if r = s.run(append([]string{"tasks", "add", "x"}, bad...)...); r.code != exitUsage {
			t.Errorf("tasks add %v: exit %d, want %d (%s)", bad, r.code, exitUsage, r.stderr)
		}
	}
	if n := len(s.requests()); n != 2 {
		t.Errorf("%d requests, want none for the bad flags", n)
	}
}

func TestTasksEditSetsAndClearsTheWorkGraph(t *testing.T) {
	s := newScriptedCLI(t, func(sent) (int, string) { return 200, graphTask })
	cases := []struct {
		args []string
		want map[string]any
	}{
		{[]string{"--blocked-by", ""}, map[string]any{"blocked_by": []any{}}},
		{[]string{"--not-before", ""}, map[string]any{"not_before": nil}},
		{[]string{"--blocked-by", "build,test", "--max-attempts", "10", "--retry-delay", "1m"},
			map[string]any{"blocked_by": []any{"build", "test"}, "max_attempts": 10.0, "retry_delay": "1m0s"}},
	}
	for i, tc := range cases {
		r := s.run(append([]string{"tasks", "edit", "deploy"}, tc.args...)...)
		if r.code != 0 {
			t.Fatalf("tasks edit %v: exit %d: %s", tc.args, r.code, r.stderr)
		}
		if got := s.requests()[i]; got.Method != "PATCH" || !reflect.DeepEqual(got.Body, tc.want) {
			t.Errorf("tasks edit %v sent %s %v, want %v", tc.args, got.Method, got.Body, tc.want)
		}
	}
	if r := s.run("tasks", "edit", "deploy"); r.code != exitUsage || !strings.Contains(r.stderr, "--blocked-by") {
		t.Errorf("tasks edit without a change: exit %d: %s", r.code, r.stderr)
	}
}

func TestTasksShowPrintsTheWorkGraph(t *testing.T) {
	s := newScriptedCLI(t, func(sent) (int, string) { return 200, graphTask })
	r := s.run("tasks", "show", "deploy")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, line := range []string{
		"Task deploy: blocked\n",
		"  Blocks: announce\n",
		"  Attempts: 2 of 3 (retry delay 30s)\n",
		"  Blocked by: build (in_progress), test (done)\n",
		"  Not before: 2026-03-20 14:31:30 UTC (no checkout or claim until then)\n",
		"  Last error: exit status 1\n",
	} {
		if !strings.Contains(r.stdout, line) {
			t.Errorf("tasks show lacks %q:\n%s", line, r.stdout)
		}
	}
}

func TestFailReleasesAsAFailedAttempt(t *testing.T) {
	s := newScriptedCLI(t, func(r sent) (int, string) {
		if r.Path == "/api/whoami" { // an admin, acting for agent-a1b2
			return 200, `{"agent_id":"admin","name":"admin","admin":true}`
		}
		if r.Method == "POST" {
			return 200, `{"task_id":"deploy","released_by":"agent-a1b2","held_seconds":75}`
		}
		return 200, strings.Replace(graphTask, `"status":"blocked"`, `"status":"todo"`, 1)
	})
	r := s.run("fail", "deploy", "--error", "tests fail", "--run-id", "run-1", "--fence", "4", "--agent", "agent-a1b2")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	reqs := s.requests()
	want := map[string]any{"outcome": "failed", "error": "tests fail", "run_id": "run-1", "fence": 4.0, "agent_id": "agent-a1b2"}
	if reqs[0].Path != "/api/whoami" || reqs[1].Path != "/api/tasks/deploy/release" || !reflect.DeepEqual(reqs[1].Body, want) {
		t.Errorf("fail sent %s then %s %v, want whoami then the release %v", reqs[0].Path, reqs[1].Path, reqs[1].Body, want)
	}
	for _, line := range []string{"Attempt failed: deploy\n", "  Held: 75s\n", "  Error: tests fail\n", "  Attempts: 2 of 3\n", "  Retry after: 2026-03-20 14:31:30 UTC\n"} {
		if !strings.Contains(r.stdout, line) {
			t.Errorf("fail output lacks %q:\n%s", line, r.stdout)
		}
	}

	// --json prints the release's own answer, and asks nothing more.
	r = s.run("fail", "deploy", "--json")
	if r.code != 0 || strings.TrimSpace(r.stdout) != `{"task_id":"deploy","released_by":"agent-a1b2","held_seconds":75}` {
		t.Errorf("fail --json: exit %d: %q", r.code, r.stdout)
	}
	if n := len(s.requests()); n != 4 {
		t.Errorf("%d requests, want 4", n)
	}
	if r = s.run("fail"); r.code != exitUsage {
		t.Errorf("fail without a task: exit %d", r.code)
	}
}

func TestFailOfTheLastAttemptSaysTheTaskFailed(t *testing.T) {
	for _, tc := range []struct {
		max  string
		want string
	}{
		{"3", "  Task failed: it used its 3 attempts (checkout tasks reopen deploy tries again)\n"},
		{"1", "  Task failed: it used its only attempt (checkout tasks reopen deploy tries again)\n"},
	} {
		s := newScriptedCLI(t, func(r sent) (int, string) {
			if r.Method == "POST" {
				return 200, `{"task_id":"deploy","released_by":"agent-a1b2","held_seconds":5}`
			}
			return 200, strings.NewReplacer(`"status":"blocked"`, `"status":"failed"`, `"attempts":2`, `"attempts":`+tc.max,
				`"max_attempts":3`, `"max_attempts":`+tc.max).Replace(graphTask)
		})
		r := s.run("fail", "deploy", "--error", "again")
		if r.code != 0 || !strings.Contains(r.stdout, tc.want) {
			t.Errorf("max attempts %s: exit %d:\n%s\nwant %q", tc.max, r.code, r.stdout, tc.want)
		}
	}
}

// The attempt line of a lease counts the attempts before it right, one
// or many.
func TestAttemptLineCountsTheEarlierAttempts(t *testing.T) {
	for attempt, want := range map[int]string{
		1: "",
		2: "  Attempt: 2 (an earlier attempt failed or ended without completing it)\n",
		3: "  Attempt: 3 (2 earlier attempts failed or ended without completing it)\n",
	} {
		var b strings.Builder
		printAcquired(&b, client.Checkout{TaskID: "t", Attempt: attempt}, true, "")
		if got := b.String(); want == "" && strings.Contains(got, "Attempt:") || !strings.Contains(got, want) {
			t.Errorf("attempt %d:\n%s\nwant %q", attempt, got, want)
		}
	}
}

func TestCheckoutOfABlockedOrWaitingTaskIsDenied(t *testing.T) {
	s := newScriptedCLI(t, func(r sent) (int, string) {
		if strings.Contains(r.Path, "deploy") {
			return 409, `{"error":"task deploy is blocked","code":"blocked","blocked_by":[{"task_id":"build","status":"todo"},{"task_id":"test","status":"failed"}]}`
		}
		return 409, `{"error":"task flaky is not ready","code":"not_ready","not_before":"2026-03-20T14:35:00.000Z"}`
	})
	r := s.run("deploy")
	want := "Checkout DENIED: deploy\n  Blocked by: build (todo), test (failed)\n"
	if r.code != exitConflict || !strings.HasPrefix(r.stdout, want) || r.stderr != "" {
		t.Errorf("checkout of a blocked task: exit %d\n%s%s\nwant exit %d and %q", r.code, r.stdout, r.stderr, exitConflict, want)
	}
	r = s.run("flaky")
	want = "Checkout DENIED: flaky\n  Not before: 2026-03-20 14:35:00 UTC (no checkout or claim until then)\n  Suggestion: wait or pick another task\n"
	if r.code != exitConflict || r.stdout != want {
		t.Errorf("checkout of a waiting task: exit %d\n%s%s\nwant exit %d and %q", r.code, r.stdout, r.stderr, exitConflict, want)
	}
	// --watch places no watch on a task waiting for its not_before (the
	// service watches only for a freeing), and the denial says so rather
	// than leave the agent waiting for a message that never comes.
	r = s.run("flaky", "--watch")
	want = "Checkout DENIED: flaky\n  Not before: 2026-03-20 14:35:00 UTC (no checkout or claim until then)\n" +
		"  Watching: no, a task waiting for its time is watched by nobody, so no message will come; check out again then\n" +
		"  Suggestion: wait or pick another task\n"
	if r.code != exitConflict || r.stdout != want {
		t.Errorf("checkout --watch of a waiting task: exit %d\n%s%s\nwant exit %d and %q", r.code, r.stdout, r.stderr, exitConflict, want)
	}
	r = s.run("deploy", "--json")
	if r.code != exitConflict || !strings.Contains(r.stdout, `"code":"blocked"`) {
		t.Errorf("checkout --json of a blocked task: exit %d: %s", r.code, r.stdout)
	}
}

func TestEventsShowTheReleaseOutcome(t *testing.T) {
	s := newScriptedCLI(t, func(sent) (int, string) {
		return 200, `{"events":[{"type":"release","task_id":"t","agent_id":"a","run_id":"r","fence":1,"at":"2026-03-20T14:30:00.000Z",` +
			`"held_seconds":5,"by":"a","outcome":"failed","error":"boom"}]}`
	})
	r := s.run("events", "t")
	if r.code != 0 || !strings.Contains(r.stdout, "| outcome failed; error: boom |") {
		t.Errorf("exit %d:\n%s", r.code, r.stdout)
	}
}

// status of a task nobody holds says why it still cannot be taken.
func TestStatusOfAFreeTaskSaysWhatItWaitsFor(t *testing.T) {
	s := newScriptedCLI(t, func(r sent) (int, string) {
		if strings.HasSuffix(r.Path, "/checkout") {
			return 200, `{"task_id":"deploy","locked":false,"checkout":null}`
		}
		return 200, graphTask
	})
	r := s.run("status", "deploy")
	want := "Task deploy: not checked out\n  Status: blocked\n  Blocked by: build (in_progress)\n"
	if r.code != 0 || r.stdout != want {
		t.Errorf("exit %d:\n%s\nwant:\n%s", r.code, r.stdout, want)
	}
	r = s.run("status", "deploy", "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"locked":false`) || len(s.requests()) != 3 {
		t.Errorf("status --json: exit %d: %s (%d requests)", r.code, r.stdout, len(s.requests()))
	}
}

// --not-before as a duration is never earlier than now plus it: the
// service keeps milliseconds and rounds a finer time up, so the CLI does
// not truncate it (it used to drop the fraction of a second, making a
// task ready up to a second before the wait asked for).
func TestNotBeforeDurationIsNeverEarly(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 0, 0, 999_000_000, time.UTC)
	got, err := parseNotBefore("10m", now)
	if err != nil {
		t.Fatal(err)
	}
	if want := now.Add(10 * time.Minute); got.Before(want) {
		t.Errorf("--not-before 10m at %v gave %v, before %v", now, got, want)
	}
}
