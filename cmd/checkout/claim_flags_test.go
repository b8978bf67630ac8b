package main

import (
	"fmt"
	"testing"
)

// claim --queue takes several queues comma-separated as well as repeated
// (it used to send "a,b" as one queue name, which the server refused).
func TestClaimQueuesCommaSeparatedOrRepeated(t *testing.T) {
	s := newScriptedCLI(t, func(sent) (int, string) {
		return 200, `{"task_id":"t","agent_id":"a","agent_name":"a","run_id":"r","fence":1,"locked_at":"2026-03-20T14:30:00.000Z",` +
			`"timeout_seconds":1800,"expires_at":"2026-03-20T15:00:00.000Z","remaining_seconds":1800,"reason":"","title":"","queue":"a","priority":5,"attempt":1}`
	})
	for i, args := range [][]string{{"claim", "--queue", "a,b"}, {"claim", "--queue", "a", "--queue", "b"}} {
		if r := s.run(args...); r.code != 0 {
			t.Fatalf("checkout %v: exit %d: %s", args, r.code, r.stderr)
		}
		got := s.requests()
		if len(got) != i+1 || got[i].Path != "/api/claim" || fmt.Sprint(got[i].Body["queues"]) != "[a b]" {
			t.Errorf("checkout %v sent %+v, want queues [a b]", args, got[len(got)-1])
		}
	}
}
