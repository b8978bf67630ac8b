package main

import (
	"strings"
	"testing"
	"time"
)

// A checkout or claim again under the run that holds the lease is "You
// already hold", not "Checkout acquired". It was judged by the time the
// lease had left (less than its whole timeout), which a renewal resets:
// right after a renewal the lease was reported as just granted. It is
// now judged by when the lease was granted, on the server's clock.
func TestAgainAfterARenewalYouAlreadyHold(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-1", "")
	e.task(t, "task-2", "")
	url, key := e.srv.URL(), e.keys["agent-a1b2"]
	run := func(runID string, args ...string) result {
		t.Helper()
		return runCLIEnv(t, []string{"CHECKOUT_URL=" + url, "CHECKOUT_API_KEY=" + key, "CHECKOUT_RUN_ID=" + runID}, args...)
	}
	if r := run("run-held", "task-1", "--timeout", "10m"); r.code != 0 || !strings.HasPrefix(r.stdout, "Checkout acquired: task-1") {
		t.Fatalf("first checkout: %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r := run("run-claim", "claim", "--timeout", "10m"); r.code != 0 || !strings.HasPrefix(r.stdout, "Checkout acquired: task-2") {
		t.Fatalf("first claim: %d %q %s", r.code, r.stdout, r.stderr)
	}
	e.clock.Advance(2 * time.Minute)
	if r := run("run-held", "renew", "task-1", "--timeout", "20m"); r.code != 0 {
		t.Fatalf("renew: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := run("run-claim", "renew", "task-2"); r.code != 0 {
		t.Fatalf("renew: %d %s %s", r.code, r.stdout, r.stderr)
	}
	if r := run("run-held", "task-1"); r.code != 0 || !strings.HasPrefix(r.stdout, "You already hold task-1 (run run-held, fence 1,") {
		t.Errorf("checkout after the renewal: %d %q %s", r.code, r.stdout, r.stderr)
	}
	if r := run("run-claim", "claim"); r.code != 0 || !strings.HasPrefix(r.stdout, "You already hold task-2 (run run-claim, fence 1,") {
		t.Errorf("claim after the renewal: %d %q %s", r.code, r.stdout, r.stderr)
	}
}
