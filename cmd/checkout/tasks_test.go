package main

import (
	"strings"
	"testing"
)

// --metadata that is not JSON is a usage error naming the flag, as
// metadata that is not an object is, and nothing is sent.
func TestMetadataThatIsNotJSONIsAUsageError(t *testing.T) {
	s := newScriptedCLI(t, func(sent) (int, string) { return 201, graphTask })
	for _, args := range [][]string{
		{"tasks", "add", "md1", "--metadata", "{bad"},
		{"tasks", "edit", "md1", "--metadata", "{bad"},
		{"tasks", "edit", "md1", "--metadata", ""},
	} {
		r := s.run(args...)
		if r.code != exitUsage || !strings.HasPrefix(r.stderr, "checkout: --metadata is not valid JSON: ") ||
			strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stderr, "MarshalJSON") {
			t.Errorf("checkout %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	if n := len(s.requests()); n != 0 {
		t.Errorf("%d requests, want none", n)
	}
}

// --limit outside 1 to 1000 is refused, not taken for the default.
func TestLimitOutOfRangeIsAUsageError(t *testing.T) {
	s := newScriptedCLI(t, func(sent) (int, string) { return 200, `{"tasks":[],"next_cursor":null}` })
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"tasks", "list", "--limit", "0"}, `checkout: invalid value "0" for --limit: want 1 to 1000 (see checkout tasks list --help)`},
		{[]string{"tasks", "list", "--limit", "1001"}, `checkout: invalid value "1001" for --limit: want 1 to 1000 (see checkout tasks list --help)`},
		{[]string{"events", "--limit", "0"}, `checkout: invalid value "0" for --limit: want 1 to 1000 (see checkout events --help)`},
	} {
		r := s.run(tc.args...)
		if r.code != exitUsage || r.stderr != tc.want+"\n" {
			t.Errorf("checkout %s: exit %d, stderr %q, want %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
	if n := len(s.requests()); n != 0 {
		t.Errorf("%d requests, want none", n)
	}
	if r := s.run("tasks", "list", "--limit", "1000"); r.code != 0 {
		t.Errorf("--limit 1000: exit %d: %s", r.code, r.stderr)
	}
}

// Reopening a task that is already todo, or cancelling one already
// cancelled, says that nothing changed.
func TestAReopenOrCancelThatChangesNothingSaysSo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-1", "")
	url, key := e.srv.URL(), e.keys["agent-a1b2"]
	r := runCLI(t, url, key, "tasks", "reopen", "task-1")
	if want := "Task task-1 is already todo: nothing changed\n"; r.code != 0 || r.stdout != want {
		t.Errorf("reopen of a todo task: exit %d\n%s%s\nwant %q", r.code, r.stdout, r.stderr, want)
	}
	if r := runCLI(t, url, key, "tasks", "cancel", "task-1"); r.code != 0 || r.stdout != "Task cancelled: task-1\n" {
		t.Fatalf("cancel: %d %q %s", r.code, r.stdout, r.stderr)
	}
	// Cancelling it again changes nothing, and says so.
	r = runCLI(t, url, key, "tasks", "cancel", "task-1")
	if want := "Task task-1 is already cancelled: nothing changed\n"; r.code != 0 || r.stdout != want {
		t.Errorf("cancel of a cancelled task: exit %d\n%s%s\nwant %q", r.code, r.stdout, r.stderr, want)
	}
	r = runCLI(t, url, key, "tasks", "reopen", "task-1")
	if want := "Task reopened: task-1\n"; r.code != 0 || r.stdout != want {
		t.Errorf("reopen of a cancelled task: exit %d\n%s%s\nwant %q", r.code, r.stdout, r.stderr, want)
	}
	r = runCLI(t, url, key, "tasks", "reopen", "task-1", "--json")
	if r.code != 0 || !strings.HasPrefix(r.stdout, `{"task_id":"task-1"`) || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("reopen --json: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// tasks edit leaves a field whose flag is absent as it is, so no flag of
// its help promises a server default, as tasks add's do for a new task.
func TestTasksEditHelpPromisesNoDefault(t *testing.T) {
	t.Parallel()
	flags := func(args ...string) string {
		t.Helper()
		r := runCLIEnv(t, nil, args...)
		_, fl, ok := strings.Cut(r.stdout, "\nFlags:\n")
		fl, _, _ = strings.Cut(fl, "\nGlobal Flags:\n")
		if r.code != 0 || !ok {
			t.Fatalf("checkout %s: exit %d\n%s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		return fl
	}
	edit := flags("tasks", "edit", "--help")
	for _, line := range strings.Split(edit, "\n") {
		if strings.Contains(line, "default") && !strings.Contains(line, "(default: unchanged)") {
			t.Errorf("tasks edit flag promises a default: %s", strings.TrimSpace(line))
		}
	}
	if !strings.Contains(edit, "--retry-delay") {
		t.Errorf("tasks edit has no --retry-delay:\n%s", edit)
	}
	if add := flags("tasks", "add", "--help"); !strings.Contains(add, "(server default 10s)") || !strings.Contains(add, "(server default 5)") {
		t.Errorf("tasks add lost its defaults:\n%s", add)
	}
}

// --if-version 0 (or less) names no version a task has: it is refused, as
// --fence 0 is, not taken for no condition and the change made whatever
// the task's version.
func TestIfVersionZeroIsAUsageError(t *testing.T) {
	s := newScriptedCLI(t, func(sent) (int, string) { return 200, graphTask })
	for _, v := range []string{"0", "-3"} {
		r := s.run("tasks", "edit", "deploy", "--title", "x", "--if-version", v)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--if-version") || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("--if-version %s: exit %d, stderr %q", v, r.code, r.stderr)
		}
	}
	if n := len(s.requests()); n != 0 {
		t.Errorf("%d requests, want none", n)
	}
}

// A 412 names the flag the user gave, --if-version, and how to see the
// task's version now, not the If-Match header the CLI sent for it.
func TestVersionMismatchNamesTheFlag(t *testing.T) {
	s := newScriptedCLI(t, func(sent) (int, string) {
		return 412, `{"error":"task deploy has changed: its version is not the one If-Match gave","code":"version_mismatch"}`
	})
	r := s.run("tasks", "edit", "deploy", "--title", "x", "--if-version", "3")
	if r.code != exitConflict || strings.Contains(r.stderr, "If-Match") || !strings.Contains(r.stderr, "--if-version 3") ||
		!strings.Contains(r.stderr, "checkout tasks show deploy") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("412: exit %d, stderr %q", r.code, r.stderr)
	}
}

// --max-attempts bounds the times a task is taken, not its failures (every
// grant is an attempt, a plain release's too): the help says so.
func TestMaxAttemptsHelpCountsGrants(t *testing.T) {
	t.Parallel()
	r := runCLIEnv(t, nil, "--help")
	if r.code != 0 {
		t.Fatalf("checkout --help: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	help := strings.Join(strings.Fields(r.stdout), " ")
	if strings.Contains(help, "attempts have failed") || !strings.Contains(help, "Every checkout or claim is an attempt") {
		t.Errorf("checkout --help counts failures for --max-attempts:\n%s", r.stdout)
	}
}

// A watcher of a task that fails gets task_available with reason failed:
// the inbox's help says that task is failed, not free.
func TestInboxHelpSaysAFailedTaskIsNotFree(t *testing.T) {
	t.Parallel()
	r := runCLIEnv(t, nil, "inbox", "--help")
	help := strings.Join(strings.Fields(r.stdout), " ")
	if r.code != 0 || !strings.Contains(help, "Reason failed") || !strings.Contains(help, "checkout tasks reopen") {
		t.Errorf("checkout inbox --help does not say what reason failed means:\n%s", r.stdout)
	}
}
