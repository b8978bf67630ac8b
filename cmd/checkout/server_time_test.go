package main

import (
	"strings"
	"testing"
	"time"
)

// The server keeps a task's not_before after it has passed. Whether it
// has is read against the server's clock (its answers' Date header), not
// this machine's: a task whose not_before has passed can be taken now.

// waitingTask is graphTask todo, with not_before at.
func waitingTask(at string) string {
	return strings.NewReplacer(`"status":"blocked"`, `"status":"todo"`, `"blocked_by":[{"task_id":"build","status":"in_progress"},{"task_id":"test","status":"done"}]`, `"blocked_by":[]`,
		`"not_before":"2026-03-20T14:31:30.000Z"`, `"not_before":"`+at+`"`).Replace(graphTask)
}

func answerTask(task string) func(sent) (int, string) {
	return func(r sent) (int, string) {
		switch {
		case strings.HasSuffix(r.Path, "/checkout"):
			return 200, `{"task_id":"deploy","locked":false,"checkout":null}`
		case strings.HasSuffix(r.Path, "/watch"):
			return 200, `{"watching":true}`
		case r.Path == "/api/tasks" || strings.HasPrefix(r.Path, "/api/tasks?"):
			return 200, `{"tasks":[` + task + `],"next_cursor":null}`
		}
		return 200, task
	}
}

func TestNotBeforeThatPassedOnTheServersClockIsShownAsPassed(t *testing.T) {
	// Far ahead of this machine's clock, but passed on the server's.
	s := newScriptedCLI(t, answerTask(waitingTask("2099-01-01T00:00:00.000Z")))
	s.date = time.Date(2099, 1, 1, 0, 5, 0, 0, time.UTC)

	r := s.run("tasks", "show", "deploy")
	if r.code != 0 || strings.Contains(r.stdout, "until then") || !strings.Contains(r.stdout, "  Not before: 2099-01-01 00:00:00 UTC (passed)\n") {
		t.Errorf("tasks show: exit %d:\n%s", r.code, r.stdout)
	}
	r = s.run("status", "deploy")
	if r.code != 0 || strings.Contains(r.stdout, "Not before") {
		t.Errorf("status of a task whose not_before passed: exit %d:\n%s", r.code, r.stdout)
	}
	r = s.run("tasks", "list")
	if r.code != 0 || strings.Contains(r.stdout, "2099") {
		t.Errorf("tasks list shows a passed not_before: exit %d:\n%s", r.code, r.stdout)
	}
}

func TestNotBeforeAheadOnTheServersClockIsShown(t *testing.T) {
	// Long passed on this machine's clock, but ahead on the server's.
	s := newScriptedCLI(t, answerTask(waitingTask("2001-01-01T00:05:00.000Z")))
	s.date = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)

	line := "  Not before: 2001-01-01 00:05:00 UTC (no checkout or claim until then)\n"
	for _, args := range [][]string{{"tasks", "show", "deploy"}, {"status", "deploy"}} {
		if r := s.run(args...); r.code != 0 || !strings.Contains(r.stdout, line) {
			t.Errorf("%v: exit %d:\n%s\nwant %q", args, r.code, r.stdout, line)
		}
	}
	if r := s.run("tasks", "list"); r.code != 0 || !strings.Contains(r.stdout, "2001-01-01") {
		t.Errorf("tasks list lacks the not_before still ahead: exit %d:\n%s", r.code, r.stdout)
	}
	if r := s.run("watch", "deploy"); r.code != 0 || !strings.Contains(r.stdout, line) || strings.Contains(r.stdout, "It is free now") {
		t.Errorf("watch of a task still waiting: exit %d:\n%s", r.code, r.stdout)
	}
}

// inboxWith answers the inbox with one task_available message whose task
// may be taken from at.
func inboxWith(at string) func(sent) (int, string) {
	return func(sent) (int, string) {
		return 200, `{"messages":[{"message_id":"m1","type":"task_available","task_id":"deploy","reason":"released","at":"2026-03-20T14:30:00Z","not_before":"` + at + `"}]}`
	}
}

// The inbox showed a task_available message's not_before as "Ready at"
// whether or not it had passed: it is shown only while it is ahead on the
// server's clock.
func TestInboxReadsNotBeforeAgainstTheServersClock(t *testing.T) {
	passed := newScriptedCLI(t, inboxWith("2099-01-01T00:00:00.000Z"))
	passed.date = time.Date(2099, 1, 1, 0, 5, 0, 0, time.UTC)
	if r := passed.run("inbox"); r.code != 0 || !strings.Contains(r.stdout, "deploy") || strings.Contains(r.stdout, "Ready at") || strings.Contains(r.stdout, "2099-01-01T00:00:00Z") {
		t.Errorf("inbox shows a not_before that passed on the server's clock: exit %d:\n%s", r.code, r.stdout)
	}
	ahead := newScriptedCLI(t, inboxWith("2001-01-01T00:05:00.000Z"))
	ahead.date = time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	if r := ahead.run("inbox"); r.code != 0 || !strings.Contains(r.stdout, "Ready at") || !strings.Contains(r.stdout, "2001-01-01T00:05:00Z") {
		t.Errorf("inbox lacks a not_before still ahead on the server's clock: exit %d:\n%s", r.code, r.stdout)
	}
}
