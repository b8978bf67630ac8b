package main

import (
	"context"
	"net"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// events --follow against a server that cannot be reached (a mistyped
// URL, a server not running) printed nothing, for ever, and exited 0 on
// Ctrl-C: an empty, healthy-looking stream. Its first request now fails
// as every other command's does.
func TestEventsFollowFailsWhenTheServerCannotBeReached(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := "http://" + ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "events", "--follow")
	cmd.Env = cleanEnv("CHECKOUT_URL="+down, "CHECKOUT_API_KEY=ck_x")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	want := "checkout: cannot reach the server at " + down + ": connection refused\n"
	if ctx.Err() != nil || cmd.ProcessState.ExitCode() != 1 || errb.String() != want || out.String() != "" {
		t.Fatalf("events --follow with the server down: %v (timed out: %v), stdout %q, stderr %q, want exit 1 and %q", err, ctx.Err() != nil, out.String(), errb.String(), want)
	}
}

// Once following, an outage is ridden out, as before, but said on stderr
// when it begins and when the server answers again.
func TestEventsFollowSaysWhenItIsHeldUp(t *testing.T) {
	var n atomic.Int32
	s := newScriptedCLI(t, func(sent) (int, string) {
		switch k := n.Add(1); {
		case k == 1:
			return 200, `{"events":[{"type":"checkout","task_id":"before","agent_id":"a","fence":1,"at":"2026-03-20T14:30:00.000Z"}],"next_cursor":"c1","caught_up":true}`
		case k <= 5:
			return 503, `{"error":"the database cannot be reached","code":"unavailable"}`
		case k == 6:
			return 200, `{"events":[{"type":"release","task_id":"after","agent_id":"a","fence":1,"at":"2026-03-20T14:31:00.000Z"}],"next_cursor":"c2","caught_up":true}`
		}
		return 401, `{"error":"bad key","code":"unauthorized"}`
	})
	r := s.run("events", "--follow", "--interval", "10ms")
	if !strings.Contains(r.stdout, "before") || !strings.Contains(r.stdout, "after") {
		t.Errorf("stdout %q, want both events", r.stdout)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], "the database cannot be reached") || !strings.Contains(lines[0], "still following") ||
		!strings.Contains(lines[1], "answers again") || !strings.Contains(lines[2], "unauthorized") {
		t.Errorf("stderr %q, want the outage, the server answering again, then the 401", r.stderr)
	}
}
