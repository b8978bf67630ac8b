package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/localserver"
)

// commandPaths lists every command of the binary by walking the
// "Available Commands" of each help, the root first.
func commandPaths(t *testing.T, env []string) [][]string {
	t.Helper()
	var out [][]string
	var walk func(path []string)
	walk = func(path []string) {
		out = append(out, path)
		r := runCLIEnv(t, env, append(append([]string{}, path...), "--help")...)
		if r.code != 0 {
			t.Fatalf("checkout %s --help: exit %d: %s", strings.Join(path, " "), r.code, r.stderr)
		}
		_, rest, ok := strings.Cut(r.stdout, "Available Commands:\n")
		if !ok {
			return
		}
		for _, line := range strings.Split(rest, "\n") {
			if strings.TrimSpace(line) == "" {
				break
			}
			name := strings.Fields(line)[0]
			walk(append(append([]string{}, path...), name))
		}
	}
	walk(nil)
	return out
}

// No help shows an API key: not the environment's, not a profile's, and
// every command's help has examples.
func TestHelpOfEveryCommandHasExamplesAndNoKey(t *testing.T) {
	t.Parallel()
	const envKey = "ck_ENVKEYfromtheenvironment0123456789"
	const fileKey = "ck_FILEKEYfromthekeyfile9876543210"
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.key"), fileKey+"\n")
	writeFile(t, filepath.Join(dir, "config.toml"), "default_profile = \"a\"\n[profiles.a]\nkey_file = \"a.key\"\nagent = \"agent-a1b2\"\n")
	env := []string{"CHECKOUT_API_KEY=" + envKey, "CHECKOUT_CONFIG=" + filepath.Join(dir, "config.toml")}
	paths := commandPaths(t, env)
	want := map[string]bool{"completion bash": false, "tasks add": false, "version": false, "config": false, "help": false, "mcp": false}
	for _, p := range paths {
		name := strings.Join(p, " ")
		if _, ok := want[name]; ok {
			want[name] = true
		}
		for _, args := range [][]string{append(append([]string{}, p...), "--help"), append([]string{"help"}, p...)} {
			r := runCLIEnv(t, env, args...)
			all := r.stdout + r.stderr
			if strings.Contains(all, "ENVKEY") || strings.Contains(all, "FILEKEY") {
				t.Errorf("checkout %s shows a key:\n%s", strings.Join(args, " "), all)
			}
			if _, ex, _ := strings.Cut(r.stdout, "Examples:\n"); !strings.Contains(ex, "checkout ") {
				t.Errorf("checkout %s has no examples:\n%s", strings.Join(args, " "), r.stdout)
			}
		}
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("command %q not found in the help", name)
		}
	}
	if len(paths) < 25 {
		t.Errorf("only %d commands found: %v", len(paths), paths)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	a := runCLIEnv(t, nil, "--version")
	b := runCLIEnv(t, nil, "version")
	if a.code != 0 || b.code != 0 || a.stdout != b.stdout {
		t.Fatalf("--version (%d) %q and version (%d) %q differ", a.code, a.stdout, b.code, b.stdout)
	}
	if !regexp.MustCompile(`^checkout \S+\n(  commit: .+\n)?  go: go1\.\d+\S* \w+/\w+\n$`).MatchString(a.stdout) {
		t.Fatalf("version output %q", a.stdout)
	}
	// --json, as for every command, is JSON.
	j := runCLIEnv(t, nil, "version", "--json")
	var v struct{ Version, Go, Platform string }
	if err := json.Unmarshal([]byte(j.stdout), &v); j.code != 0 || err != nil || v.Version == "" || !strings.HasPrefix(v.Go, "go1.") || !strings.Contains(a.stdout, v.Platform) {
		t.Fatalf("version --json: %d %q: %v", j.code, j.stdout, err)
	}
}

// Reserved words are commands, and a word one slip away from a command is
// never taken for a task id, whether or not the server creates unknown
// tasks; "--" and "checkout checkout" name such a task.
func TestReservedAndNearMissWordsAreNeverTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *localserver.Config) { c.AutoCreateTasks = true })
	url, key := e.srv.URL(), e.keys["agent-a1b2"]
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"version prints the version", []string{"version"}, 0, "checkout "},
		{"completion bash prints the script", []string{"completion", "bash"}, 0, "bash completion"},
		{"config prints the config file", []string{"config"}, 0, "Config file:"},
		{"help prints the exit statuses", []string{"help"}, 0, "Exit status:"},
		{"lsit is a slip for list", []string{"lsit"}, 2, "did you mean list?"},
		{"LIST is a slip for list", []string{"LIST"}, 2, "did you mean list?"},
		{"relase with a task is a usage error", []string{"relase", "task-1"}, 2, ""},
		{"statsu is a slip for status", []string{"statsu"}, 2, "did you mean status?"},
		{"verison is a slip for version", []string{"verison"}, 2, "did you mean version?"},     //nolint:misspell // the typo is the test
		{"compleet is a slip for complete", []string{"compleet"}, 2, "did you mean complete?"}, //nolint:misspell // the typo is the test
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runCLI(t, url, key, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.out) {
				t.Errorf("checkout %s: exit %d, want %d with %q\nstdout %s\nstderr %s", strings.Join(tc.args, " "), r.code, tc.code, tc.out, r.stdout, r.stderr)
			}
		})
	}
	ctx := context.Background()
	for _, id := range []string{"lsit", "LIST", "statsu", "verison", "version", "config", "help", "completion"} { //nolint:misspell // typos are the test
		if _, err := e.admin.GetTask(ctx, id); err == nil {
			t.Errorf("task %q was created", id)
		}
	}
	// A task id is never taken for a slip of a command's name.
	if r := runCLI(t, url, key, "task-1"); r.code != 0 || !strings.Contains(r.stdout, "Checkout acquired: task-1") {
		t.Errorf("task-1: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, url, key, "--", "lsit"); r.code != 0 || !strings.Contains(r.stdout, "Checkout acquired: lsit") {
		t.Errorf("-- lsit: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, url, key, "checkout", "version"); r.code != 0 || !strings.Contains(r.stdout, "Checkout acquired: version") {
		t.Errorf("checkout version: %d %s %s", r.code, r.stdout, r.stderr)
	}
}

func TestCompletion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-d4e5", "Fix login bug")
	e.task(t, "task-f6a7", "")
	e.task(t, "other", "")
	url, key := e.srv.URL(), e.keys["agent-a1b2"]
	if r := runCLI(t, url, key, "task-d4e5"); r.code != 0 {
		t.Fatal(r.stderr)
	}
	for shell, want := range map[string]string{"bash": "bash completion", "zsh": "#compdef checkout", "fish": "fish completion", "powershell": "Register-ArgumentCompleter"} {
		if r := runCLI(t, url, key, "completion", shell); r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("completion %s: exit %d, %.200s", shell, r.code, r.stdout)
		}
	}
	complete := func(args ...string) []string {
		r := runCLI(t, url, key, append([]string{"__complete"}, args...)...)
		if r.code != 0 {
			t.Fatalf("__complete %v: %d %s", args, r.code, r.stderr)
		}
		var names []string
		for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			if !strings.HasPrefix(line, ":") {
				names = append(names, strings.SplitN(line, "\t", 2)[0])
			}
		}
		return names
	}
	if got := strings.Join(complete("status", "task-"), " "); got != "task-d4e5 task-f6a7" {
		t.Errorf("status task-<TAB>: %q", got)
	}
	if got := strings.Join(complete("release", ""), " "); got != "task-d4e5" {
		t.Errorf("release <TAB>: %q", got)
	}
	if got := strings.Join(complete("rel"), " "); !strings.Contains(got, "release") {
		t.Errorf("rel<TAB>: %q", got)
	}
	if got := complete("ta"); !contains(got, "tasks") || !contains(got, "task-d4e5") {
		t.Errorf("ta<TAB>: %q", got)
	}
	// Without a key, no request and no task ids.
	if r := runCLI(t, url, "", "__complete", "status", ""); r.code != 0 || strings.Contains(r.stdout, "task-") {
		t.Errorf("without a key: %d %q", r.code, r.stdout)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// The holder checking a task out again is told it is already its own, with
// CHECKOUT_RUN_ID or without, and the run id printed can be reused.
func TestYourOwnLeaseAndTheRunID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-1", "")
	e.task(t, "task-2", "")
	url, key := e.srv.URL(), e.keys["agent-a1b2"]
	run := func(env []string, args ...string) result {
		t.Helper()
		return runCLIEnv(t, append([]string{"CHECKOUT_URL=" + url, "CHECKOUT_API_KEY=" + key}, env...), args...)
	}
	r := run(nil, "task-1")
	m := regexp.MustCompile(`export CHECKOUT_RUN_ID=(run-[0-9a-f]{16})`).FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil {
		t.Fatalf("first checkout: %d %s %s", r.code, r.stdout, r.stderr)
	}
	runID := m[1]
	e.clock.Advance(5 * time.Minute)
	r = run(nil, "task-1")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "You already hold task-1 (run "+runID+", fence 1, until 2026-03-20 15:00 UTC)\n") || strings.Contains(r.stdout, "DENIED") {
		t.Fatalf("again with a fresh run: %d %q %s", r.code, r.stdout, r.stderr)
	}
	r = run([]string{"CHECKOUT_RUN_ID=" + runID}, "task-1")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "You already hold task-1 (run "+runID+", fence 1,") {
		t.Fatalf("again as the same run: %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r = run([]string{"CHECKOUT_RUN_ID=" + runID}, "task-1", "--json"); r.code != 0 {
		t.Fatalf("--json: %d %s", r.code, r.stderr)
	}
	// The run id from the environment takes the next lease too, and a
	// holder command of another run is refused for it.
	r = run([]string{"CHECKOUT_RUN_ID=run-mine"}, "task-2")
	if r.code != 0 || !strings.Contains(r.stdout, "  Run: run-mine, fence 1\n") {
		t.Fatalf("task-2 as run-mine: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r = run([]string{"CHECKOUT_RUN_ID=run-other"}, "renew", "task-2"); r.code != 3 {
		t.Fatalf("renew by another run: %d %s %s", r.code, r.stdout, r.stderr)
	}
	// The lease of another run is adopted by its fence.
	if r = run([]string{"CHECKOUT_RUN_ID=run-other"}, "renew", "task-2", "--fence", "1"); r.code != 0 {
		t.Fatalf("renew by fence: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r = run([]string{"CHECKOUT_RUN_ID=run-mine"}, "complete", "task-2"); r.code != 0 {
		t.Fatalf("complete as run-mine: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r = run([]string{"CHECKOUT_RUN_ID=" + runID}, "release", "task-1"); r.code != 0 {
		t.Fatalf("release: %d %s %s", r.code, r.stdout, r.stderr)
	}
}

// --agent is the identity of the checkout, as the skill has it: anyone may
// name itself, an admin anyone, on every lease command.
func TestAgentFlag(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-1", "")
	e.task(t, "task-2", "")
	url := e.srv.URL()
	researcher, admin := e.keys["agent-a1b2"], e.keys["admin"]
	for _, tc := range []struct {
		key  string
		args []string
		code int
		want string
	}{
		{researcher, []string{"task-1", "--agent", "agent-a1b2"}, 0, "Agent: researcher (agent-a1b2)"},
		{researcher, []string{"status", "task-1", "--agent", "agent-a1b2"}, 0, "Agent: researcher (agent-a1b2): you"},
		{researcher, []string{"status", "task-1", "--agent", "agent-c3d4"}, 0, "Agent: researcher (agent-a1b2): not you (agent-c3d4)"},
		{researcher, []string{"renew", "task-1", "--agent", "agent-a1b2"}, 0, "Checkout renewed: task-1"},
		{researcher, []string{"release", "task-1", "--agent", "agent-c3d4"}, 1, "forbidden: only an admin may act for another agent"},
		{researcher, []string{"release", "task-1", "--agent", "agent-a1b2"}, 0, "Released by: agent-a1b2"},
		{admin, []string{"task-2", "--agent", "agent-c3d4"}, 0, "Agent: writer (agent-c3d4)"},
		{researcher, []string{"task-2"}, 3, "Held by: writer (agent-c3d4)"},
		{admin, []string{"task-2", "--agent", "agent-c3d4"}, 0, "You already hold task-2"},
		{admin, []string{"renew", "task-2", "--agent", "agent-c3d4", "--timeout", "1h"}, 0, "Timeout: 1h ("},
		{admin, []string{"status", "task-2", "--agent", "agent-c3d4"}, 0, "Agent: writer (agent-c3d4): you"},
		{admin, []string{"complete", "task-2"}, 3, "not by the caller"},
		{admin, []string{"complete", "task-2", "--agent", "agent-c3d4"}, 0, "Task completed: task-2"},
		{admin, []string{"claim", "--agent", "agent-nobody"}, 4, "agent agent-nobody does not exist (from --agent)"},
	} {
		r := runCLI(t, url, tc.key, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
			t.Errorf("checkout %s: exit %d, want %d with %q\nstdout %s\nstderr %s", strings.Join(tc.args, " "), r.code, tc.code, tc.want, r.stdout, r.stderr)
		}
	}
}

// Times are dated and zoned: UTC by default, the local zone when TZ is set.
func TestTimesInTZ(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-1", "")
	env := []string{"CHECKOUT_URL=" + e.srv.URL(), "CHECKOUT_API_KEY=" + e.keys["agent-a1b2"], "TZ=Europe/Berlin"}
	r := runCLIEnv(t, env, "task-1", "--timeout", "30m")
	for _, want := range []string{"  Locked at: 2026-03-20T15:30:00+01:00\n", "  Timeout: 30m (auto-release at 16:00)\n", "  Expires at: 2026-03-20 16:00 CET (in 30m)\n"} {
		if r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("with TZ: %d, %q lacks %q", r.code, r.stdout, want)
		}
	}
}

// A profile file runs many identities on one host; checkout config shows
// it with the key masked.
func TestProfiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-1", "")
	e.task(t, "task-2", "")
	e.task(t, "task-3", "")
	dir := t.TempDir()
	cfgHome := filepath.Join(dir, "xdg")
	writeFile(t, filepath.Join(cfgHome, "checkout", "researcher.key"), e.keys["agent-a1b2"]+"\n")
	writeFile(t, filepath.Join(dir, "secrets", "writer.key"), e.keys["agent-c3d4"])
	writeFile(t, filepath.Join(cfgHome, "checkout", "config.toml"), `default_profile = "researcher"

[profiles.researcher]
url = "`+e.srv.URL()+`"
key_file = "researcher.key"
agent = "agent-a1b2"

[profiles.writer]
url = "`+e.srv.URL()+`"
key_file = "`+filepath.Join(dir, "secrets", "writer.key")+`"
`)
	base := []string{"XDG_CONFIG_HOME=" + cfgHome}
	run := func(env []string, args ...string) result {
		t.Helper()
		return runCLIEnv(t, append(append([]string{}, base...), env...), args...)
	}
	if r := run(nil, "task-1"); r.code != 0 || !strings.Contains(r.stdout, "Agent: researcher (agent-a1b2)") {
		t.Fatalf("default profile: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := run(nil, "--profile", "writer", "task-2"); r.code != 0 || !strings.Contains(r.stdout, "Agent: writer (agent-c3d4)") {
		t.Fatalf("--profile writer: %d %s %s", r.code, r.stdout, r.stderr)
	}
	// A profile chosen by name beats a key in the environment.
	if r := run([]string{"CHECKOUT_PROFILE=writer", "CHECKOUT_API_KEY=" + e.keys["agent-a1b2"]}, "task-3"); r.code != 0 || !strings.Contains(r.stdout, "Agent: writer (agent-c3d4)") {
		t.Fatalf("CHECKOUT_PROFILE=writer: %d %s %s", r.code, r.stdout, r.stderr)
	}
	// The default profile does not: the environment's key is the writer's,
	// and the researcher profile's agent is not sent with it.
	if r := run([]string{"CHECKOUT_API_KEY=" + e.keys["agent-c3d4"]}, "task-3"); r.code != 0 || !strings.HasPrefix(r.stdout, "You already hold task-3") {
		t.Fatalf("environment over default_profile: %d %s %s", r.code, r.stdout, r.stderr)
	}
	r := run(nil, "config")
	if r.code != 0 {
		t.Fatalf("config: %d %s", r.code, r.stderr)
	}
	for _, key := range []string{e.keys["agent-a1b2"], e.keys["agent-c3d4"]} {
		if strings.Contains(r.stdout, key) || strings.Contains(r.stdout, key[3:len(key)-4]) {
			t.Errorf("config shows a key: %s", r.stdout)
		}
	}
	ak := e.keys["agent-a1b2"]
	for _, want := range []string{
		"Config file: " + filepath.Join(cfgHome, "checkout", "config.toml") + "\n",
		"Profile: researcher (default_profile in ",
		"  URL:      " + e.srv.URL() + " (profile researcher)\n",
		"  API key:  ck_…" + ak[len(ak)-4:] + " (key file " + filepath.Join(cfgHome, "checkout", "researcher.key") + ")\n",
		"  Agent:    agent-a1b2 (profile researcher)\n",
		"| * researcher | " + e.srv.URL() + " | agent-a1b2 | researcher.key |\n",
		"| writer | ",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("config output lacks %q:\n%s", want, r.stdout)
		}
	}
	r = run([]string{"CHECKOUT_PROFILE=writer"}, "config", "--json")
	var out map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || r.code != 0 {
		t.Fatalf("config --json: %v %s", err, r.stdout)
	}
	if out["profile"].(map[string]any)["value"] != "writer" || strings.Contains(r.stdout, e.keys["agent-c3d4"]) {
		t.Errorf("config --json: %s", r.stdout)
	}
	if r := run(nil, "--profile", "nope", "list"); r.code != 2 || !strings.Contains(r.stderr, `no profile "nope"`) || !strings.Contains(r.stderr, "researcher, writer") {
		t.Errorf("unknown profile: %d %s", r.code, r.stderr)
	}
	writeFile(t, filepath.Join(dir, "badurl.toml"), "[profiles.x]\nurl = \"localhost:3100\"\nkey_file = \""+filepath.Join(dir, "secrets", "writer.key")+"\"\n")
	if r := run([]string{"CHECKOUT_CONFIG=" + filepath.Join(dir, "badurl.toml")}, "--profile", "x", "list"); r.code != 2 ||
		r.stderr != `checkout: server URL "localhost:3100" (from profile x) is not an absolute http:// or https:// URL: want http://HOST[:PORT] or https://...`+"\n" {
		t.Errorf("profile with a bad url: %d %s", r.code, r.stderr)
	}
	writeFile(t, filepath.Join(dir, "bad.toml"), "[profiles.x]\napi_key = \"ck_inline\"\n")
	if r := run([]string{"CHECKOUT_CONFIG=" + filepath.Join(dir, "bad.toml")}, "list"); r.code != 2 || !strings.Contains(r.stderr, "unknown setting profiles.x.api_key") || strings.Contains(r.stderr, "ck_inline") {
		t.Errorf("bad profile file: %d %s", r.code, r.stderr)
	}
}

// Checkout answers keep the layout of the checkout skill, which agents
// are prompted with and which scripts parse: the Timeout line is
// "Timeout: 30m (auto-release at 15:05)", acquired and denied alike, and
// the date, zone and time left come on a line of their own.
func TestCheckoutKeepsTheSkillsLayout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-1", "")
	acquired := regexp.MustCompile(`^Checkout acquired: task-1\n` +
		`  Agent: .*\(agent-a1b2\)\n` +
		`  Locked at: 2026-03-20T14:30:00Z\n` +
		`  Timeout: 30m \(auto-release at 15:00\)\n` +
		`  Expires at: 2026-03-20 15:00 UTC \(in 30m\)\n`)
	r := runCLI(t, e.srv.URL(), e.keys["agent-a1b2"], "task-1", "--timeout", "30m")
	if r.code != 0 || !acquired.MatchString(r.stdout) {
		t.Errorf("checkout: exit %d, want 0 and the skill's layout:\n%s", r.code, r.stdout)
	}
	denied := regexp.MustCompile(`^Checkout DENIED: task-1\n` +
		`  Held by: .*\(agent-a1b2\)\n` +
		`  Locked at: 2026-03-20T14:30:00Z\n` +
		`  Timeout: 30m \(auto-release at 15:00\)\n` +
		`  Expires at: 2026-03-20 15:00 UTC \(in 30m\)\n` +
		`  Retry after: 30m \(the lease expires\)\n` +
		`  Suggestion: wait or pick another task\n$`)
	r = runCLI(t, e.srv.URL(), e.keys["agent-c3d4"], "task-1")
	if r.code != exitConflict || !denied.MatchString(r.stdout) {
		t.Errorf("denied checkout: exit %d, want %d and the skill's layout:\n%s", r.code, exitConflict, r.stdout)
	}
	// A claim names the task it got after the skill's lines.
	nine := 9
	if _, err := e.admin.CreateTask(context.Background(), client.CreateTaskRequest{TaskID: "task-2", Title: "Login answers 500", Queue: "backend", Priority: &nine}); err != nil {
		t.Fatal(err)
	}
	claimed := regexp.MustCompile(`^Checkout acquired: task-2\n` +
		`  Agent: .*\(agent-c3d4\)\n` +
		`  Locked at: 2026-03-20T14:30:00Z\n` +
		`  Timeout: 30m \(auto-release at 15:00\)\n` +
		`  Expires at: 2026-03-20 15:00 UTC \(in 30m\)\n` +
		`  Title: Login answers 500\n` +
		`  Queue: backend, priority 9\n`)
	r = runCLI(t, e.srv.URL(), e.keys["agent-c3d4"], "claim", "--queue", "backend", "--timeout", "30m")
	if r.code != 0 || !claimed.MatchString(r.stdout) {
		t.Errorf("claim: exit %d, want 0 and the skill's layout:\n%s", r.code, r.stdout)
	}
}

// watch says what the watcher will be told: a free task can be taken now,
// and a message comes only when it is next freed; a held task's message
// comes when it becomes available.
func TestWatchSaysWhenTheMessageComes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-free", "")
	e.task(t, "task-held", "")
	url, key := e.srv.URL(), e.keys["agent-a1b2"]
	if r := runCLI(t, url, e.keys["agent-c3d4"], "task-held"); r.code != 0 {
		t.Fatalf("checkout task-held: %d %s", r.code, r.stderr)
	}
	for _, tc := range []struct{ task, want string }{
		{"task-free", "Watching: task-free\n  It is free now: checkout task-free takes it. Your inbox gets a message when it is next freed (see checkout inbox)\n"},
		{"task-held", "Watching: task-held\n  Your inbox gets a message when it becomes available (see checkout inbox)\n"},
	} {
		r := runCLI(t, url, key, "watch", tc.task)
		if r.code != 0 || r.stdout != tc.want {
			t.Errorf("watch %s: exit %d\n%s%s\nwant %q", tc.task, r.code, r.stdout, r.stderr, tc.want)
		}
	}
	if r := runCLI(t, url, key, "watch", "task-free", "--json"); r.code != 0 || r.stdout != `{"watching":true}`+"\n" {
		t.Errorf("watch --json: exit %d %q", r.code, r.stdout)
	}
}

// A checkout refused for the task's status says so in the layout of a
// denial, in the CLI's words (the user set no expected statuses), with
// what to do.
func TestCheckoutOfAFinishedTaskIsDenied(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url, key := e.srv.URL(), e.keys["agent-a1b2"]
	for _, args := range [][]string{
		{"tasks", "add", "fl1", "--max-attempts", "1"}, {"fl1"}, {"fail", "fl1"},
		{"tasks", "add", "dn1"}, {"dn1"}, {"complete", "dn1"},
	} {
		if r := runCLI(t, url, key, args...); r.code != 0 {
			t.Fatalf("checkout %s: %d %s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	for _, tc := range []struct{ task, want string }{
		{"fl1", "Checkout DENIED: fl1\n  Status: failed (it used all its attempts)\n" +
			"  Suggestion: reopen it with checkout tasks reopen fl1 to try again, or pick another task\n"},
		{"dn1", "Checkout DENIED: dn1\n  Status: done\n" +
			"  Suggestion: pick another task (checkout tasks reopen dn1 would make it todo again)\n"},
	} {
		r := runCLI(t, url, key, tc.task)
		if r.code != exitConflict || r.stdout != tc.want || r.stderr != "" {
			t.Errorf("checkout %s: exit %d\n%s%s\nwant exit %d and %q", tc.task, r.code, r.stdout, r.stderr, exitConflict, tc.want)
		}
	}
}

// An unknown zone in TZ is not taken silently for UTC: a warning says so,
// once, and the command goes on in UTC.
func TestUnknownTZIsWarnedAbout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-1", "")
	env := []string{"CHECKOUT_URL=" + e.srv.URL(), "CHECKOUT_API_KEY=" + e.keys["agent-a1b2"], "TZ=Bogus/Zone"}
	r := runCLIEnv(t, env, "task-1", "--timeout", "30m")
	if want := "checkout: TZ names an unknown time zone \"Bogus/Zone\": times are shown in UTC\n"; r.code != 0 || r.stderr != want ||
		!strings.Contains(r.stdout, "  Expires at: 2026-03-20 15:00 UTC (in 30m)\n") {
		t.Errorf("with TZ=Bogus/Zone: exit %d\n%sstderr %q, want %q", r.code, r.stdout, r.stderr, want)
	}
	for _, tz := range []string{"UTC", ":UTC", "Europe/Berlin", ""} {
		r := runCLIEnv(t, append(env[:2:2], "TZ="+tz), "status", "task-1")
		if r.code != 0 || r.stderr != "" {
			t.Errorf("with TZ=%s: exit %d, stderr %q", tz, r.code, r.stderr)
		}
	}
	if r := runCLIEnv(t, env, "status", "task-1", "--json"); r.code != 0 || r.stderr != "" {
		t.Errorf("--json with TZ=Bogus/Zone: exit %d, stderr %q", r.code, r.stderr)
	}
}
