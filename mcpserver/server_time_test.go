package mcpserver

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// The server keeps a task's not_before after it has passed. Whether it
// has is read against the server's clock (its answers' Date header), not
// this machine's: a task whose not_before has passed can be taken now.

// argsOf is what each tool is called with.
func argsOf(tool string) map[string]any {
	if tool == "list_tasks" {
		return map[string]any{}
	}
	return map[string]any{"task_id": "deploy"}
}

// waitingTask is graphTask todo with no blockers, with not_before at.
func waitingTask(at string) string {
	return strings.NewReplacer(`"status":"blocked"`, `"status":"todo"`,
		`"blocked_by":[{"task_id":"build","status":"in_progress"},{"task_id":"test","status":"done"}]`, `"blocked_by":[]`,
		`"not_before":null`, `"not_before":"`+at+`"`).Replace(graphTask)
}

func taskServer(task string) func(*http.Request, map[string]any) (int, string) {
	return func(r *http.Request, _ map[string]any) (int, string) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/checkout"):
			return 200, `{"task_id":"deploy","locked":false,"checkout":null}`
		case r.URL.Path == "/api/tasks":
			return 200, `{"tasks":[` + task + `],"next_cursor":null}`
		}
		return 200, task
	}
}

func TestNotBeforeThatPassedOnTheServersClockIsNotAWait(t *testing.T) {
	t.Parallel()
	// Far ahead of this machine's clock, but passed on the server's.
	cs := sessionAt(t, time.Date(2099, 1, 1, 0, 5, 0, 0, time.UTC), taskServer(waitingTask("2099-01-01T00:00:00.000Z")))
	for _, tool := range []string{"get_task", "task_status", "list_tasks"} {
		res, txt, _ := callTool(t, cs, tool, argsOf(tool))
		if res.IsError || strings.Contains(txt, "2099-01-01T00:00:00Z") {
			t.Errorf("%s says the task waits for a not_before that passed: %s", tool, txt)
		}
	}
	if _, txt, _ := callTool(t, cs, "get_task", map[string]any{"task_id": "deploy"}); !strings.Contains(txt, "It is open: take it with checkout_task.") {
		t.Errorf("get_task: %s", txt)
	}
	if _, txt, _ := callTool(t, cs, "task_status", map[string]any{"task_id": "deploy"}); !strings.Contains(txt, "not checked out: take it with checkout_task") {
		t.Errorf("task_status: %s", txt)
	}
}

func TestNotBeforeAheadOnTheServersClockIsAWait(t *testing.T) {
	t.Parallel()
	// Long passed on this machine's clock, but ahead on the server's.
	cs := sessionAt(t, time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC), taskServer(waitingTask("2001-01-01T00:05:00.000Z")))
	for tool, want := range map[string]string{
		"get_task":    "It is open from 2001-01-01T00:05:00Z",
		"task_status": "It can be taken from 2001-01-01T00:05:00Z, not before.",
		"list_tasks":  "not before 2001-01-01T00:05:00Z",
	} {
		if res, txt, _ := callTool(t, cs, tool, argsOf(tool)); res.IsError || !strings.Contains(txt, want) {
			t.Errorf("%s: %s\nwant %q", tool, txt, want)
		}
	}
}

func inboxWith(at string) func(*http.Request, map[string]any) (int, string) {
	return func(*http.Request, map[string]any) (int, string) {
		return 200, `{"messages":[{"message_id":"m1","type":"task_available","task_id":"deploy","reason":"released","at":"2026-03-20T14:30:00Z","not_before":"` + at + `"}]}`
	}
}

// read_inbox told an agent a freed task may be taken only from its
// not_before even when that had passed on the server's clock: it says so
// only while the not_before is ahead there.
func TestReadInboxReadsNotBeforeAgainstTheServersClock(t *testing.T) {
	t.Parallel()
	cs := sessionAt(t, time.Date(2099, 1, 1, 0, 5, 0, 0, time.UTC), inboxWith("2099-01-01T00:00:00.000Z"))
	if res, txt, _ := callTool(t, cs, "read_inbox", map[string]any{}); res.IsError || !strings.Contains(txt, "task deploy became available") || strings.Contains(txt, "it may be taken from") {
		t.Errorf("read_inbox with a not_before passed on the server's clock: %s", txt)
	}
	cs = sessionAt(t, time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC), inboxWith("2001-01-01T00:05:00.000Z"))
	if res, txt, _ := callTool(t, cs, "read_inbox", map[string]any{}); res.IsError || !strings.Contains(txt, "it may be taken from 2001-01-01T00:05:00Z") {
		t.Errorf("read_inbox with a not_before ahead on the server's clock: %s", txt)
	}
}
