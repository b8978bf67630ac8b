package lease_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// Writes whose first sending was lost (never applied) while another
// writer's write landed in that gap, in the same millisecond (the test
// clock stands still), so that the second sending is refused: each is
// answered as it would be sent once after that write, never as though
// the other's write were its own, and the trail holds that write's event
// alone.
func TestAWriteSentTwiceRefusedForAnothersIsAnsweredAsSentOnce(t *testing.T) {
	t.Parallel()
	forced := func(t *testing.T, e *env) {
		must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true}))
	}
	var nh *lease.NotHolderError
	for _, tc := range []struct {
		name  string
		race  func(t *testing.T, e *env)
		write func(c context.Context, s *lease.Store, co lease.Checkout) error
		want  func(error) bool
		trail []lease.EventType
	}{
		{"renewal, after a force release", forced, func(c context.Context, s *lease.Store, co lease.Checkout) error {
			_, err := s.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a", RunID: co.RunID})
			return err
		}, func(err error) bool { return errors.Is(err, lease.ErrNotCheckedOut) },
			[]lease.EventType{lease.EventCheckout, lease.EventForceRelease}},
		{"release naming the lease, after a force release", forced, func(c context.Context, s *lease.Store, co lease.Checkout) error {
			_, err := s.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID})
			return err
		}, func(err error) bool { return errors.Is(err, lease.ErrNotCheckedOut) },
			[]lease.EventType{lease.EventCheckout, lease.EventForceRelease}},
		{"completion naming no lease, after the holder's other completion", func(t *testing.T, e *env) {
			must[lease.Task](t)(e.store.Complete(ctx(t), lease.CompleteParams{TaskID: "t", AgentID: "a"}))
		}, func(c context.Context, s *lease.Store, co lease.Checkout) error {
			_, err := s.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "a"})
			return err
		}, func(err error) bool { return errors.Is(err, lease.ErrNotCheckedOut) },
			[]lease.EventType{lease.EventCheckout, lease.EventComplete}},
		{"completion naming the lease, after a release of it", func(t *testing.T, e *env) {
			must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "a"}))
		}, func(c context.Context, s *lease.Store, co lease.Checkout) error {
			_, err := s.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "a", Fence: co.Fence})
			return err
		}, func(err error) bool { return errors.Is(err, lease.ErrNotCheckedOut) },
			[]lease.EventType{lease.EventCheckout, lease.EventRelease}},
		{"force release, after the holder's release and another's checkout", func(t *testing.T, e *env) {
			must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "a"}))
			e.checkout(t, "t", "b", time.Hour)
		}, func(c context.Context, s *lease.Store, co lease.Checkout) error {
			_, err := s.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true})
			return err
		}, func(err error) bool { return errors.Is(err, lease.ErrNotCheckedOut) },
			[]lease.EventType{lease.EventCheckout, lease.EventRelease, lease.EventCheckout}},
		{"cancel by the holder, after a force release and another's checkout", func(t *testing.T, e *env) {
			forced(t, e)
			e.checkout(t, "t", "b", time.Hour)
		}, func(c context.Context, s *lease.Store, co lease.Checkout) error {
			st := lease.StatusCancelled
			_, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "a", Status: &st})
			return err
		}, func(err error) bool { return errors.As(err, &nh) },
			[]lease.EventType{lease.EventCheckout, lease.EventForceRelease, lease.EventCheckout}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.task(t, "t")
			co := e.checkout(t, "t", "a", time.Hour)
			e.clock.Advance(time.Minute)
			s, doer := lossyTaskStore(e, taskUpdate(e), func() { tc.race(t, e) })
			err := tc.write(ctx(t), s, co)
			if !doer.lost.Load() {
				t.Fatal("no write was lost and sent again")
			}
			if !tc.want(err) {
				t.Fatalf("answered %v", err)
			}
			if evs := kinds(e.events(t, "t")); !slices.Equal(evs, tc.trail) {
				t.Fatalf("t's trail %v, want %v", evs, tc.trail)
			}
		})
	}
}
