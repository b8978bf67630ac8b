package lease_test

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/stream"
)

// lostMessages is agentID's lease_lost messages once the stream has been
// drained.
func (e *env) lostMessages(t *testing.T, agentID string) []lease.Message {
	t.Helper()
	var out []lease.Message
	for _, m := range e.inbox(t, agentID) {
		if m.Type == lease.MessageLeaseLost {
			out = append(out, m)
		}
	}
	return out
}

// A lease that ends without its holder's consent tells the former holder,
// once, in its inbox and by a LeaseLost notice; one the holder ends itself
// tells it nothing. A release or completion an admin makes for the holder
// is not the holder's own: it is told, as for a force release.
func TestFormerHolderIsToldOfALostLease(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// end ends holder's lease on task t, locked with a 1 m timeout
		// and a 1 h heartbeat ttl.
		end    func(t *testing.T, e *env, co lease.Checkout)
		reason lease.EventType // "": the holder is told nothing
	}{
		{"timeout by the sweep", func(t *testing.T, e *env, co lease.Checkout) {
			e.clock.Advance(time.Minute)
			e.caughtUp(t) // the sweep finds the lease through an index
			must[lease.SweepResult](t)(e.store.Sweep(ctx(t)))
		}, lease.EventTimeout},
		{"timeout by a takeover", func(t *testing.T, e *env, co lease.Checkout) {
			e.clock.Advance(time.Minute)
			e.checkout(t, "t", "other", time.Minute)
		}, lease.EventTimeout},
		{"death by the sweep", func(t *testing.T, e *env, co lease.Checkout) {
			must[lease.Heartbeat](t)(e.store.Heartbeat(ctx(t), "holder", time.Second))
			e.clock.Advance(2 * time.Second)
			e.caughtUp(t) // the sweep finds the death through an index
			must[lease.SweepResult](t)(e.store.Sweep(ctx(t)))
		}, lease.EventAgentDeath},
		{"death by a takeover", func(t *testing.T, e *env, co lease.Checkout) {
			must[lease.Heartbeat](t)(e.store.Heartbeat(ctx(t), "holder", time.Second))
			e.clock.Advance(2 * time.Second)
			e.checkout(t, "t", "other", time.Minute)
		}, lease.EventAgentDeath},
		{"force release", func(t *testing.T, e *env, co lease.Checkout) {
			must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true}))
		}, lease.EventForceRelease},
		{"cancel by an admin", func(t *testing.T, e *env, co lease.Checkout) {
			must[lease.Task](t)(e.store.UpdateTask(ctx(t), lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Status: new(lease.StatusCancelled)}))
		}, lease.EventCancel},
		{"cancel by an admin naming no agent", func(t *testing.T, e *env, co lease.Checkout) {
			must[lease.Task](t)(e.store.UpdateTask(ctx(t), lease.UpdateTaskParams{TaskID: "t", Admin: true, Status: new(lease.StatusCancelled)}))
		}, lease.EventCancel},
		{"release by an admin for the holder", func(t *testing.T, e *env, co lease.Checkout) {
			must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "holder", By: "admin"}))
		}, lease.EventRelease},
		{"failed release by an admin for the holder", func(t *testing.T, e *env, co lease.Checkout) {
			must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "holder", By: "admin", Outcome: lease.OutcomeFailed}))
		}, lease.EventRelease},
		{"completion by an admin for the holder", func(t *testing.T, e *env, co lease.Checkout) {
			must[lease.Task](t)(e.store.Complete(ctx(t), lease.CompleteParams{TaskID: "t", AgentID: "holder", By: "admin"}))
		}, lease.EventComplete},
		{"own release", func(t *testing.T, e *env, co lease.Checkout) {
			must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "holder"}))
		}, ""},
		{"own completion", func(t *testing.T, e *env, co lease.Checkout) {
			must[lease.Task](t)(e.store.Complete(ctx(t), lease.CompleteParams{TaskID: "t", AgentID: "holder"}))
		}, ""},
		{"own release naming itself as by", func(t *testing.T, e *env, co lease.Checkout) {
			must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "holder", By: "holder"}))
		}, ""},
		{"own cancel", func(t *testing.T, e *env, co lease.Checkout) {
			must[lease.Task](t)(e.store.UpdateTask(ctx(t), lease.UpdateTaskParams{TaskID: "t", AgentID: "holder", Status: new(lease.StatusCancelled)}))
		}, ""},
		{"own force release", func(t *testing.T, e *env, co lease.Checkout) {
			must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "holder", Force: true}))
		}, ""},
		{"removal of the holder", func(t *testing.T, e *env, co lease.Checkout) {
			e.caughtUp(t) // the removal finds the lease through an index
			if err := e.store.RemoveAgent(ctx(t), "holder"); err != nil {
				t.Fatal(err)
			}
			must[lease.SweepResult](t)(e.store.Sweep(ctx(t)))
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "holder", Name: "holder"}))
			e.task(t, "t")
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "holder", time.Hour))
			co := e.checkout(t, "t", "holder", time.Minute)
			tc.end(t, e, co)

			evs := e.events(t, "t")
			if len(evs) < 2 {
				t.Fatalf("trail %v, want the checkout, then its ending", kinds(evs))
			}
			ended := evs[1]
			msgs := e.lostMessages(t, "holder")
			notices := e.notes.Count(lease.NoticeLeaseLost, "t")
			if tc.reason == "" {
				if len(msgs) != 0 || notices != 0 {
					t.Fatalf("%d lease_lost messages %+v and %d notices, want none (trail %v)", len(msgs), msgs, notices, kinds(evs))
				}
				return
			}
			if ended.Type != tc.reason {
				t.Fatalf("trail %v, want the lease ended by %s", kinds(evs), tc.reason)
			}
			if len(msgs) != 1 || notices != 1 {
				t.Fatalf("%d lease_lost messages %+v and %d LeaseLost notices, want one each", len(msgs), msgs, notices)
			}
			m := msgs[0]
			// The message gives one of API.md's four reasons: an admin's
			// release or completion for the holder is a force_release
			// to it (the trail keeps the event's type).
			reason := tc.reason
			if reason == lease.EventRelease || reason == lease.EventComplete {
				reason = lease.EventForceRelease
			}
			if m.TaskID != "t" || m.Fence != co.Fence || m.RunID != co.RunID || m.Reason != string(reason) || !m.At.Equal(ended.At) {
				t.Fatalf("message %+v, want task t, fence %d, run %s, reason %s at %v", m, co.Fence, co.RunID, reason, ended.At)
			}
			for _, n := range e.notes.Notices() {
				if n.Kind == lease.NoticeLeaseLost && (n.Event.Seq != ended.Seq || n.ID != "t:"+itoa(ended.Seq)+":LeaseLost") {
					t.Fatalf("notice %+v, want the ending's (seq %d)", n, ended.Seq)
				}
			}
			// The message is the holder's to delete, like any other.
			if err := e.store.DeleteMessage(c, "holder", m.MessageID); err != nil {
				t.Fatalf("delete %s: %v", m.MessageID, err)
			}
			if n := len(e.lostMessages(t, "holder")); n != 0 {
				t.Fatalf("%d lease_lost messages after the delete", n)
			}
		})
	}
}

// A batch delivered again writes no second lease_lost message, and a
// message deleted before the redelivery stays deleted.
func TestLeaseLostOnceUnderRedelivery(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t", "u")
	e.checkout(t, "t", "holder", time.Minute)
	e.checkout(t, "u", "holder", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true}))
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "u", AgentID: "admin", Force: true}))
	msgs := e.lostMessages(t, "holder")
	if len(msgs) != 2 {
		t.Fatalf("%d lease_lost messages %+v, want 2", len(msgs), msgs)
	}
	if err := e.store.DeleteMessage(c, "holder", msgs[0].MessageID); err != nil {
		t.Fatal(err)
	}

	// The whole stream again, from its start, as a redelivery would.
	again := &stream.Poller{Streams: e.poller.Streams, StreamARN: e.poller.StreamARN, Handle: e.poller.Handle, Saved: stream.MemoryCheckpoints{}}
	if n, err := again.Poll(c); err != nil || n == 0 {
		t.Fatalf("redelivery: %d records, %v", n, err)
	}
	left := e.lostMessages(t, "holder")
	if len(left) != 1 || left[0].MessageID != msgs[1].MessageID {
		t.Fatalf("after redelivery %+v, want only %s", left, msgs[1].MessageID)
	}
	// Notices may come again, with the same ids: consumers drop them.
	ids := map[string]bool{}
	for _, n := range e.notes.Notices() {
		if n.Kind == lease.NoticeLeaseLost {
			ids[n.ID] = true
		}
	}
	if len(ids) != 2 {
		t.Fatalf("LeaseLost notice ids %v, want one per lost lease", ids)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// An inbox is oldest first whatever its messages' kinds: a lease_lost
// message used to sort after every task_available one, its id starting
// "lost.", so a lease lost before a watched task was freed came last.
func TestInboxIsOldestFirstAcrossKinds(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x", "y")
	e.checkout(t, "x", "other", time.Minute)
	e.checkout(t, "y", "erin", time.Minute)
	if err := e.store.Watch(c, "x", "erin"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "y", AgentID: "admin", Force: true}))
	e.clock.Advance(time.Second)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "other"}))
	msgs := e.inbox(t, "erin")
	var got []string
	for _, m := range msgs {
		got = append(got, string(m.Type)+" "+m.TaskID)
	}
	want := []string{"lease_lost y", "task_available x"}
	if !slices.Equal(got, want) {
		t.Fatalf("erin's inbox: %v, want %v (oldest first)", got, want)
	}
}
