package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// claim --queue takes several queues comma-separated as well as repeated
// (it used to send "a,b" as one queue name, which the server refused).
func TestClaimQueuesCommaSeparatedOrRepeated(t *testing.T) {
	const lease = `{"task_id":"t","agent_id":"a","agent_name":"a","run_id":"r","fence":1,"locked_at":"2026-03-20T14:30:00.000Z",` +
		`"timeout_seconds":1800,"expires_at":"2026-03-20T15:00:00.000Z","remaining_seconds":1800,"reason":"","title":"","queue":"a","priority":5,"attempt":1}`
	s := newScriptedCLI(t, func(r sent) (int, string) {
		if r.Method == "GET" { // the lease's status, read after the grant
			return 200, `{"task_id":"t","locked":true,"checkout":` + lease + `}`
		}
		return 200, lease
	})
	for i, args := range [][]string{{"claim", "--queue", "a,b"}, {"claim", "--queue", "a", "--queue", "b"}} {
		if r := s.run(args...); r.code != 0 {
			t.Fatalf("checkout %v: exit %d: %s", args, r.code, r.stderr)
		}
		var claims []sent
		for _, r := range s.requests() {
			if r.Method == "POST" {
				claims = append(claims, r)
			}
		}
		if len(claims) != i+1 || claims[i].Path != "/api/claim" || fmt.Sprint(claims[i].Body["queues"]) != "[a b]" {
			t.Errorf("checkout %v sent %+v, want queues [a b]", args, claims)
		}
	}
}

// claim --queue "" (an unset variable in a script: --queue "$QUEUE") names
// no queue: it is refused, as the server refuses "queues": [], rather than
// read as no --queue at all, which took a task of the default queue.
func TestClaimEmptyQueueIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "notes", "Release notes")
	for _, args := range [][]string{{"claim", "--queue", ""}, {"claim", "--queue="}, {"claim", "--queue", "", "--wait", "1s"}} {
		r := runCLI(t, e.srv.URL(), e.keys["agent-c3d4"], args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--queue") {
			t.Errorf("checkout %q: exit %d, stdout %q, stderr %q; want exit %d naming --queue", args, r.code, r.stdout, r.stderr, exitUsage)
		}
	}
	s, err := e.admin.Status(context.Background(), "notes")
	if err != nil {
		t.Fatal(err)
	}
	if s.Locked {
		t.Errorf("claim --queue \"\" took %+v", s.Checkout)
	}
}
