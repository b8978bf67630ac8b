package main

import (
	"context"
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/client"
)

// A force release pinned to a lease (--fence, --run-id) that is not the
// live one is refused, naming the live lease: it said the task "is held by
// agent-a1b2, not by the caller", which a force release never needs to be,
// so the admin could not tell that the fence was the trouble.
func TestForceReleaseOfAnotherFenceNamesTheLiveLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "task-d4e5", "")
	researcher := client.New(e.srv.URL(), e.keys["agent-a1b2"])
	co, err := researcher.Checkout(context.Background(), "task-d4e5", client.CheckoutRequest{})
	if err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, e.srv.URL(), e.keys["admin"], "release", "task-d4e5", "--force", "--fence", "9")
	if r.code != exitConflict || strings.Contains(r.stderr, "not by the caller") || !strings.Contains(r.stderr, "fence 1") || !strings.Contains(r.stderr, co.RunID) {
		t.Errorf("release --force --fence 9 of a lease of fence 1: exit %d, stderr %q", r.code, r.stderr)
	}
	if s, err := e.admin.Status(context.Background(), "task-d4e5"); err != nil || !s.Locked {
		t.Errorf("the lease after a refused force release: %+v, %v", s, err)
	}
}
