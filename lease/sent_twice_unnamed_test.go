package lease_test

import (
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A release or completion naming no lease, its ending applied and its
// answer lost. In the gap a's other worker takes the task (reopened first,
// after a completion), releases it (naming no lease: its own end_write)
// and takes it again, each a moment later, and the change stream archives
// it all. The SDK's second sending is refused; its own ending's id is no
// longer on the item, but its ending in the trail keeps it: the call is
// answered as that ending was, and a's third lease is left alone (it
// answered 404 not_checked_out, which told the agent its work was lost).
func TestAnEndingNamingNoLeaseSentTwicePastTwoTransitionsIsAnsweredFromTheTrail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		verb  string
		end   func(t *testing.T, s *lease.Store) error
		again func(t *testing.T, e *env)
	}{
		{"release", `"release"`, func(t *testing.T, s *lease.Store) error {
			r, err := s.Release(ctx(t), lease.ReleaseParams{TaskID: "x", AgentID: "a"})
			if err == nil && (r.ReleasedBy != "a" || r.Held != time.Minute) {
				t.Errorf("answered released by %q after %v held, want by a after a minute", r.ReleasedBy, r.Held)
			}
			return err
		}, func(*testing.T, *env) {}},
		{"completion", `"complete"`, func(t *testing.T, s *lease.Store) error {
			done, err := s.Complete(ctx(t), lease.CompleteParams{TaskID: "x", AgentID: "a"})
			if err == nil && (done.Status != lease.StatusDone || done.Version != 3) {
				t.Errorf("answered the task %s at version %d, want done at 3, as the completion left it", done.Status, done.Version)
			}
			return err
		}, func(t *testing.T, e *env) {
			must[lease.Task](t)(e.store.UpdateTask(ctx(t), lease.UpdateTaskParams{TaskID: "x", AgentID: "admin", Status: new(lease.StatusTodo)}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "x")
			e.checkout(t, "x", "a", time.Hour)
			e.clock.Advance(time.Minute)
			tasks := e.names.Table(schema.TasksTable)
			var third lease.Checkout
			s, doer := lossyTaskStore(e, func(target, body string) bool {
				return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, tc.verb)
			}, func() {
				e.clock.Advance(time.Second)
				tc.again(t, e)
				e.checkout(t, "x", "a", time.Hour)
				e.clock.Advance(time.Second)
				must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a"}))
				e.clock.Advance(time.Second)
				third = e.checkout(t, "x", "a", time.Hour)
				e.drain(t)
			})
			doer.applied = true
			err := tc.end(t, s)
			if !doer.lost.Load() {
				t.Fatal("no ending was sent twice")
			}
			if err != nil {
				t.Errorf("a's %s naming no lease, applied, its answer lost and its ending archived: %v, want it answered as it was made", tc.name, err)
			}
			if got := e.get(t, "x"); got.Checkout == nil || got.Checkout.Fence != third.Fence {
				t.Fatalf("a's third lease (fence %d), granted after the %s's ending applied, was ended by its second sending: x is %s, lease %v", third.Fence, tc.name, got.Status, got.Checkout)
			}
		})
	}
}
