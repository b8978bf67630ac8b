package main

import (
	"strings"
	"testing"
)

const pageEvent = `{"type":"renew","task_id":"t","agent_id":"a","run_id":"r","fence":1,"at":"2026-03-20T14:30:00.000Z","by":"a","reason":"%s"}`

// checkout events TASK prints the whole trail, following the trail's
// pages; with --json, as one answer.
func TestTaskEventsFollowPages(t *testing.T) {
	s := newScriptedCLI(t, func(r sent) (int, string) {
		ev := func(reason string) string { return strings.Replace(pageEvent, "%s", reason, 1) }
		switch r.Path {
		case "/api/tasks/t/events":
			return 200, `{"events":[` + ev("page one") + `],"pending":0,"next_cursor":"t1.a"}`
		case "/api/tasks/t/events?cursor=t1.a":
			return 200, `{"events":[` + ev("page two") + `],"pending":1}`
		}
		return 404, `{"error":"no","code":"not_found"}`
	})
	r := s.run("events", "t")
	if r.code != 0 || !strings.Contains(r.stdout, "page one") || !strings.Contains(r.stdout, "page two") || !strings.Contains(r.stdout, "More events are being recorded") {
		t.Fatalf("events t: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := s.requests(); len(got) != 2 || got[1].Path != "/api/tasks/t/events?cursor=t1.a" {
		t.Fatalf("requests %v", got)
	}
	r = s.run("events", "t", "--json")
	want := `{"events":[` + strings.Replace(pageEvent, "%s", "page one", 1) + `,` + strings.Replace(pageEvent, "%s", "page two", 1) + `],"pending":1}` + "\n"
	if r.code != 0 || r.stdout != want {
		t.Fatalf("events t --json: exit %d\n%s%s\nwant %s", r.code, r.stdout, r.stderr, want)
	}
}

// A page of the feed that read its most hours without an event says that
// later ones may follow, and goes on with More; an empty page that is
// caught up says there are no events. --since 0001-01-01T00:00:00Z is a
// since, as 1970 is.
func TestFeedPageNotCaughtUp(t *testing.T) {
	s := newScriptedCLI(t, func(r sent) (int, string) {
		if strings.Contains(r.Path, "cursor=f1.end") {
			return 200, `{"events":[],"next_cursor":"f1.end","caught_up":true}`
		}
		return 200, `{"events":[],"next_cursor":"f1.more","caught_up":false}`
	})
	r := s.run("events", "--since", "0001-01-01T00:00:00Z")
	if r.code != 0 || !strings.Contains(r.stdout, "No events in the hours this page read; later ones may follow") || !strings.Contains(r.stdout, "More: checkout events --cursor f1.more") {
		t.Fatalf("a page not caught up: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := s.requests(); len(got) != 1 || got[0].Path != "/api/events?since=1970-01-01T00%3A00%3A00Z" {
		t.Fatalf("requests %v", got)
	}
	r = s.run("events", "--cursor", "f1.end")
	if r.code != 0 || !strings.Contains(r.stdout, "\nNo events.\n") {
		t.Fatalf("a caught-up page: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
