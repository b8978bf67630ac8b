package main

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/localserver"
)

// checkout events --follow prints every transition across the fleet once,
// in order, as it happens, and ends cleanly when interrupted; without
// --follow it shows a page of the feed.
func TestEventsFollow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *localserver.Config) { c.FeedSettle = -1 })
	ctx := context.Background()
	agent := client.New(e.srv.URL(), e.keys["agent-a1b2"])
	e.task(t, "feed-1", "one")
	e.task(t, "feed-2", "two")
	if _, err := agent.Checkout(ctx, "feed-1", client.CheckoutRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Millisecond) // the feed shows whole milliseconds
	cmd := exec.Command(binary, "events", "--follow", "--json", "--interval", "50ms")
	cmd.Env = cleanEnv("CHECKOUT_URL="+e.srv.URL(), "CHECKOUT_API_KEY="+e.keys["agent-a1b2"])
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan client.Event, 10)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var ev client.Event
			if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
				t.Errorf("not a JSON line: %q", sc.Text())
				return
			}
			lines <- ev
		}
	}()
	next := func() client.Event {
		t.Helper()
		select {
		case ev, ok := <-lines:
			if !ok {
				t.Fatalf("the follow ended: %s", stderr.String())
			}
			return ev
		case <-time.After(15 * time.Second):
			t.Fatalf("no event followed: %s", stderr.String())
		}
		return client.Event{}
	}
	if ev := next(); ev.Type != "checkout" || ev.TaskID != "feed-1" {
		t.Fatalf("first event %+v", ev)
	}
	// What happens while it follows arrives in order.
	if _, err := agent.Release(ctx, "feed-1", client.ReleaseRequest{Reason: "later"}); err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Checkout(ctx, "feed-2", client.CheckoutRequest{}); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Millisecond)
	if ev := next(); ev.Type != "release" || ev.TaskID != "feed-1" || ev.Reason != "later" {
		t.Fatalf("second event %+v", ev)
	}
	if ev := next(); ev.Type != "checkout" || ev.TaskID != "feed-2" {
		t.Fatalf("third event %+v", ev)
	}
	select {
	case ev := <-lines:
		t.Fatalf("an event more: %+v", ev)
	case <-time.After(300 * time.Millisecond):
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	for range lines {
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("interrupted follow: %v: %s", err, stderr.String())
	}

	r := runCLI(t, e.srv.URL(), e.keys["agent-a1b2"], "events", "--type", "release")
	if r.code != 0 || !strings.Contains(r.stdout, "feed-1") || strings.Contains(r.stdout, "feed-2") || !strings.Contains(r.stdout, "later") {
		t.Fatalf("events --type release: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, e.srv.URL(), e.keys["agent-a1b2"], "events", "feed-1", "--follow"); r.code == 0 {
		t.Fatalf("a task id with --follow: %+v", r)
	}

	// The page's footer is a command that goes on from where it ended.
	r = runCLI(t, e.srv.URL(), e.keys["agent-a1b2"], "events")
	m := regexp.MustCompile(`\nMore: checkout events --cursor (\S+) \(add --follow to keep following\)\n$`).FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil {
		t.Fatalf("events: %d, no --cursor footer:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r = runCLI(t, e.srv.URL(), e.keys["agent-a1b2"], "events", "--cursor", m[1]); r.code != 0 || !strings.Contains(r.stdout, "No events.") {
		t.Fatalf("events --cursor at the end: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if _, err := agent.Release(ctx, "feed-2", client.ReleaseRequest{Reason: "after the cursor"}); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Millisecond)
	r = runCLI(t, e.srv.URL(), e.keys["agent-a1b2"], "events", "--cursor", m[1])
	if r.code != 0 || !strings.Contains(r.stdout, "after the cursor") || strings.Contains(r.stdout, "feed-1") {
		t.Fatalf("events --cursor after a release: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// events --cursor asks for the feed from the cursor, keeps --type in the
// footer's next command, and is for the fleet feed only.
func TestEventsCursor(t *testing.T) {
	s := newScriptedCLI(t, func(sent) (int, string) {
		return 200, `{"events":[{"type":"release","task_id":"t","agent_id":"a","run_id":"r","fence":1,"at":"2026-03-20T14:30:00.000Z"}],"next_cursor":"f1.Next"}`
	})
	r := s.run("events", "--cursor", "f1.Prev", "--type", "release, timeout")
	if r.code != 0 || !strings.HasSuffix(r.stdout, "\nMore: checkout events --cursor f1.Next --type release,timeout (add --follow to keep following)\n") {
		t.Errorf("events --cursor: exit %d:\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := s.requests(); len(got) != 1 || got[0].Path != "/api/events?cursor=f1.Prev&type=release%2Ctimeout" {
		t.Errorf("events --cursor asked %v", got)
	}
	// --type repeated keeps every value (it used to keep the last).
	if r := s.run("events", "--cursor", "f1.Prev", "--type", "release", "--type", "timeout"); r.code != 0 {
		t.Errorf("events --type twice: exit %d: %s", r.code, r.stderr)
	}
	if got := s.requests(); len(got) != 2 || got[1].Path != "/api/events?cursor=f1.Prev&type=release%2Ctimeout" {
		t.Errorf("events --type release --type timeout asked %v", got)
	}
	for _, args := range [][]string{{"events", "--cursor", "f1.Prev", "--since", "1h"}, {"events", "t", "--cursor", "f1.Prev"}} {
		if r := s.run(args...); r.code != exitUsage || !strings.Contains(r.stderr, "--cursor") {
			t.Errorf("checkout %s: exit %d: %s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
	if n := len(s.requests()); n != 2 {
		t.Errorf("%d requests, want none for the bad flags", n-1)
	}
}

// A task's trail read before the change stream has archived its newest
// events says how many are still being recorded, rather than only "No
// events."; once they are archived it shows them.
func TestTaskEventsSayWhatIsStillBeingRecorded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *localserver.Config) { c.StreamPollInterval = -1 })
	ctx := context.Background()
	agent := client.New(e.srv.URL(), e.keys["agent-a1b2"])
	e.task(t, "rec", "recorded")
	co, err := agent.Checkout(ctx, "rec", client.CheckoutRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := agent.Release(ctx, "rec", client.ReleaseRequest{RunID: co.RunID}); err != nil {
		t.Fatal(err)
	}
	res := runCLI(t, e.srv.URL(), e.keys["agent-a1b2"], "events", "rec")
	if res.code != 0 || !strings.Contains(res.stdout, "More events are being recorded; ask again in a second.\n") {
		t.Fatalf("events before the stream ran: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if err := e.srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	res = runCLI(t, e.srv.URL(), e.keys["agent-a1b2"], "events", "rec")
	if res.code != 0 || strings.Contains(res.stdout, "being recorded") || !strings.Contains(res.stdout, "| release |") {
		t.Fatalf("events once archived: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
}

// An event of the service's own (unblocked) has no agent, run or fence:
// its cells say "-", as other empty cells do, in the trail and the feed.
func TestSystemEventsShowDashes(t *testing.T) {
	const unblocked = `{"type":"unblocked","task_id":"t","agent_id":"","run_id":"","fence":0,"at":"2026-03-20T14:30:00.000Z","by":"system"}`
	s := newScriptedCLI(t, func(r sent) (int, string) {
		if strings.HasPrefix(r.Path, "/api/events") {
			return 200, `{"events":[` + unblocked + `],"caught_up":true}`
		}
		return 200, `{"events":[` + unblocked + `],"pending":0}`
	})
	r := s.run("events", "t")
	if want := "| 2026-03-20T14:30:00Z | unblocked | - | - | - | - | system | - |\n"; r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Errorf("events t: exit %d\n%s%s\nwant the row %q", r.code, r.stdout, r.stderr, want)
	}
	r = s.run("events")
	if want := "| 2026-03-20T14:30:00Z | unblocked | t | - | - | - | system | - |\n"; r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Errorf("events: exit %d\n%s%s\nwant the row %q", r.code, r.stdout, r.stderr, want)
	}
}

// events --follow --json prints each event as the server sent it, one a
// line: an empty reason keeps its key and at its fixed milliseconds (they
// were encoded again from client.Event, which dropped both).
func TestEventsFollowJSONIsTheServers(t *testing.T) {
	const (
		ev1 = `{"type":"checkout","task_id":"t","agent_id":"a","run_id":"r","fence":1,"at":"2026-03-20T14:30:00.370Z","by":"a","reason":""}`
		ev2 = `{"type":"release","task_id":"t","agent_id":"a","run_id":"r","fence":1,"at":"2026-03-20T14:31:00.000Z","held_seconds":60,"by":"a","reason":"later","outcome":""}`
	)
	s := newScriptedCLI(t, func(r sent) (int, string) {
		if strings.Contains(r.Path, "cursor=f1.Next") {
			return 401, `{"error":"bad key","code":"unauthorized"}` // ends the follow
		}
		return 200, `{"events": [` + ev1 + `, ` + "\n  " + ev2 + `], "next_cursor":"f1.Next","caught_up":false}`
	})
	r := s.run("events", "--follow", "--json")
	if r.stdout != ev1+"\n"+ev2+"\n" {
		t.Errorf("events --follow --json printed\n%s\nwant the server's events\n%s\n%s", r.stdout, ev1, ev2)
	}
	if r.code != exitError {
		t.Errorf("exit %d: %s", r.code, r.stderr)
	}
}
