package lease_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// actors is a trail as "type agent/by" for each event.
func actors(evs []lease.Event) string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = fmt.Sprintf("%s %s/%s", ev.Type, ev.AgentID, ev.By)
	}
	return strings.Join(out, ", ")
}

// A renewal, release or completion an admin makes for the holder is by the
// admin in the trail, the lease staying the holder's: it used to be
// recorded as the holder's own act. The admin's release or completion
// repeated by run id is answered as the first was, also after a later
// lease of the task; the holder's own requests stay by the holder, and
// the holder cannot pass off the admin's release as its own repeat.
func TestHolderRequestsForAnotherAgentAreByTheCaller(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "hr", "hc")
	co := e.checkout(t, "hr", "erin", time.Hour)
	e.clock.Advance(time.Second)
	must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "hr", AgentID: "erin", By: "admin"}))
	e.clock.Advance(time.Second)
	must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "hr", AgentID: "erin", By: "erin"}))
	e.clock.Advance(time.Second)
	rel := lease.ReleaseParams{TaskID: "hr", AgentID: "erin", RunID: co.RunID, By: "admin", Reason: "stuck"}
	if r := must[lease.Released](t)(e.store.Release(c, rel)); r.ReleasedBy != "admin" {
		t.Fatalf("released by %s, want admin", r.ReleasedBy)
	}
	want := "checkout erin/erin, renew erin/admin, renew erin/erin, release erin/admin"
	if got := actors(e.events(t, "hr")); got != want {
		t.Fatalf("hr's trail: %s; want %s", got, want)
	}
	if r := must[lease.Released](t)(e.store.Release(c, rel)); r.ReleasedBy != "admin" {
		t.Fatalf("the release repeated: released by %s, want admin", r.ReleasedBy)
	}
	own := lease.ReleaseParams{TaskID: "hr", AgentID: "erin", RunID: co.RunID}
	if _, err := e.store.Release(c, own); !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Fatalf("erin's release of the lease the admin released: %v, want not_checked_out", err)
	}
	e.clock.Advance(time.Second)
	e.checkout(t, "hr", "erin", time.Hour)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "hr", AgentID: "erin"}))
	e.drain(t)
	if r := must[lease.Released](t)(e.store.Release(c, rel)); r.ReleasedBy != "admin" {
		t.Fatalf("the release repeated after a later lease: released by %s, want admin", r.ReleasedBy)
	}

	co = e.checkout(t, "hc", "erin", time.Hour)
	e.clock.Advance(time.Second)
	done := lease.CompleteParams{TaskID: "hc", AgentID: "erin", RunID: co.RunID, By: "admin"}
	must[lease.Task](t)(e.store.Complete(c, done))
	want = "checkout erin/erin, complete erin/admin"
	if got := actors(e.events(t, "hc")); got != want {
		t.Fatalf("hc's trail: %s; want %s", got, want)
	}
	if task := must[lease.Task](t)(e.store.Complete(c, done)); task.Status != lease.StatusDone {
		t.Fatalf("the completion repeated: %s, want done", task.Status)
	}
}
