package main

import (
	"strings"
	"testing"
	"time"
)

// A claim retried with the run id of a claim whose lease has ended since
// is answered by the server with that lease as it was, expiring when it
// ended. The CLI must not report it as a lease acquired or held: it used
// to print "Checkout acquired" (after a completion) or "You already hold"
// (after an expiry) and exit 0, for a task nobody held.
func TestClaimOfARunWhoseLeaseEndedIsNotReportedAsHeld(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	url, key := e.srv.URL(), e.keys["agent-a1b2"]
	e.task(t, "done-one", "Done one")
	e.task(t, "lapsed-one", "Lapsed one")

	check := func(r result, taskID string) {
		t.Helper()
		if r.code != exitNotFound {
			t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, exitNotFound, r.stdout, r.stderr)
		}
		if strings.Contains(r.stdout, "Checkout acquired") || strings.Contains(r.stdout, "You already hold") {
			t.Errorf("an ended lease reported as held:\n%s", r.stdout)
		}
		if !strings.Contains(r.stderr, "lease on "+taskID+" has ended") {
			t.Errorf("stderr does not say the run's lease on %s ended: %q", taskID, r.stderr)
		}
	}

	// Completed.
	if r := runCLI(t, url, key, "claim", "--run-id", "run-1"); r.code != 0 || !strings.Contains(r.stdout, "Checkout acquired: done-one") {
		t.Fatalf("first claim: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runCLI(t, url, key, "complete", "done-one", "--run-id", "run-1"); r.code != 0 {
		t.Fatalf("complete: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	check(runCLI(t, url, key, "claim", "--run-id", "run-1"), "done-one")
	r := runCLI(t, url, key, "claim", "--run-id", "run-1", "--json")
	check(r, "done-one")
	if !strings.HasPrefix(r.stdout, `{"task_id":"done-one"`) {
		t.Errorf("--json does not print the claim's answer: %q", r.stdout)
	}

	// Expired.
	if r := runCLI(t, url, key, "claim", "--run-id", "run-2", "--timeout", "1m"); r.code != 0 || !strings.Contains(r.stdout, "Checkout acquired: lapsed-one") {
		t.Fatalf("second claim: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	e.clock.Advance(2 * time.Minute)
	check(runCLI(t, url, key, "claim", "--run-id", "run-2"), "lapsed-one")

	// A live lease retried is still the same claim.
	e.task(t, "live-one", "Live one")
	if r := runCLI(t, url, key, "claim", "--run-id", "run-3"); r.code != 0 || !strings.Contains(r.stdout, "live-one") {
		t.Fatalf("third claim: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	e.clock.Advance(10 * time.Second)
	if r := runCLI(t, url, key, "claim", "--run-id", "run-3"); r.code != 0 || !strings.Contains(r.stdout, "You already hold live-one") {
		t.Errorf("retried live claim: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
