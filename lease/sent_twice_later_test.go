package lease_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// An ending whose write applied, whose answer was lost, and which the SDK
// sent again only after a later transition of the task landed (a claim
// waiting on its queue takes the task it freed at once, while the SDK
// waits to send again): the second sending is refused on that lease, at
// a time after its own, and used to be tried again at that later time,
// refused on the new lease, and answered as a request that ended nothing
// (403 not_holder, or 404 for a force release), though it had ended the
// lease. It is known by its write's id, which the ending keeps: the
// other agent's grant writes no ending.
func TestAnEndingSentTwiceAfterALaterGrantIsAnsweredAsMade(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		end    func(t *testing.T, s *lease.Store, co lease.Checkout) error
		reopen bool // b's checkout reopens the task, done
	}{
		{"release naming the lease", func(t *testing.T, s *lease.Store, co lease.Checkout) error {
			_, err := s.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID})
			return err
		}, false},
		{"completion naming no lease", func(t *testing.T, s *lease.Store, co lease.Checkout) error {
			got, err := s.Complete(ctx(t), lease.CompleteParams{TaskID: "t", AgentID: "a"})
			if err == nil && (got.Status != lease.StatusDone || got.Checkout != nil) {
				t.Errorf("answered %s, lease %+v; want done", got.Status, got.Checkout)
			}
			return err
		}, true},
		{"release naming no lease", func(t *testing.T, s *lease.Store, co lease.Checkout) error {
			r, err := s.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "a"})
			if err == nil && (r.ReleasedBy != "a" || r.Held != time.Minute) {
				t.Errorf("answered %+v, want released by a after a minute held", r)
			}
			return err
		}, false},
		{"failed release naming no lease", func(t *testing.T, s *lease.Store, co lease.Checkout) error {
			_, err := s.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "a", Outcome: lease.OutcomeFailed})
			return err
		}, false},
		{"force release naming no lease", func(t *testing.T, s *lease.Store, co lease.Checkout) error {
			r, err := s.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true})
			if err == nil && (r.ReleasedBy != "admin" || r.Held != time.Minute) {
				t.Errorf("answered %+v, want released by admin after a minute held", r)
			}
			return err
		}, false},
		{"force release naming the lease", func(t *testing.T, s *lease.Store, co lease.Checkout) error {
			r, err := s.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true, Fence: co.Fence})
			if err == nil && (r.ReleasedBy != "admin" || r.Held != time.Minute) {
				t.Errorf("answered %+v, want released by admin after a minute held", r)
			}
			return err
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			noDelay := time.Duration(0) // b takes a failed attempt's task at once
			e.create(t, lease.CreateTaskParams{TaskID: "t", RetryDelay: &noDelay})
			co := e.checkout(t, "t", "a", time.Hour)
			e.clock.Advance(time.Minute)
			var raceErr error
			db := &updateTwiceDB{DB: e.db, name: "end_type", race: func() {
				e.clock.Advance(time.Millisecond)
				p := lease.CheckoutParams{TaskID: "t", AgentID: "b", Timeout: time.Hour}
				if tc.reopen {
					p.ExpectedStatuses = []lease.Status{lease.StatusDone}
				}
				_, raceErr = e.store.Checkout(c, p)
			}}
			s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			err := tc.end(t, s, co)
			if !db.sent.Load() {
				t.Fatal("no ending was sent twice")
			}
			if raceErr != nil {
				t.Fatalf("b's checkout of the freed task: %v", raceErr)
			}
			if err != nil {
				t.Fatalf("an ending that took effect, sent again after b took the task: %v; want it answered as made", err)
			}
			if got := e.get(t, "t"); got.Checkout == nil || got.Checkout.AgentID != "b" {
				t.Fatalf("t after the ending: %+v, want b's lease", got.Checkout)
			}
			if evs := kinds(e.events(t, "t")); len(evs) != 3 || evs[0] != lease.EventCheckout || evs[2] != lease.EventCheckout {
				t.Fatalf("t's trail %v, want checkout, one ending, checkout", evs)
			}
		})
	}
}
