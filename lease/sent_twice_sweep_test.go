package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A sweep's ending whose write applied, whose answer was lost and which
// the SDK sent again was refused on its own ending (the lease it was
// pinned to gone) and taken for another writer's: the sweep counted no
// timeout (the LeaseTimeouts metric missed it), and the claims of its
// process waiting on the task's queue were not woken (README: woken at
// once by a sweep's ending), waiting for their next look. It is known by
// its write's id.
func TestASweepEndingSentTwiceIsCountedAndWakes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.queued(t, "t", "q", 5)
	e.checkout(t, "t", "a", time.Minute)

	db := &sentTwiceDB{DB: e.db, name: "end_type"} // the ending's write
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	lease.PollClaims(s, time.Hour) // no look but a wake's
	type claimed struct {
		co  lease.Checkout
		err error
	}
	cc, cancel := context.WithCancel(c)
	got := make(chan claimed, 1)
	go func() {
		co, err := s.Claim(cc, lease.ClaimParams{AgentID: "b", Queues: []string{"q"}, Wait: 20 * time.Second, Timeout: time.Hour})
		got <- claimed{co, err}
	}()
	defer func() { cancel(); <-got }()
	asleep(t, s, 1)
	wakes := lease.ClaimWakes(s)

	e.clock.Advance(2 * time.Minute)
	e.caughtUp(t) // the sweep finds its work through an index
	res := must[lease.SweepResult](t)(s.Sweep(c))
	if !db.sent.Load() {
		t.Fatal("no ending was sent twice")
	}
	if res.Timeouts != 1 {
		t.Errorf("sweep %+v, want one timeout: it ended the lease", res)
	}
	if n := lease.ClaimWakes(s) - wakes; n != 1 {
		t.Fatalf("%d wakes sent, want 1: to the claim waiting on the task's queue", n)
	}
	r := <-got
	got <- r // for the deferred wait
	if r.err != nil || r.co.TaskID != "t" {
		t.Fatalf("claimed %+v, %v; want t", r.co, r.err)
	}
	if evs := kinds(e.events(t, "t")); len(evs) != 3 || evs[1] != lease.EventTimeout {
		t.Fatalf("t's trail %v, want checkout, timeout, checkout", evs)
	}
}

// The sweep gives a delayed task whose not_before has come its ready
// claim key back, and wakes the claims waiting on its queue. When that
// write applied, its answer was lost and the SDK sent it again, the
// second sending's refusal (the expiry it was pinned to gone: by the
// first) woke nobody, and the claims waited for their next look.
func TestASweepRankingReadySentTwiceWakes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	ready := e.clock.Now().Add(time.Minute)
	e.create(t, lease.CreateTaskParams{TaskID: "t", Queue: "q", NotBefore: &ready})

	db := &sentTwiceDB{DB: e.db, name: "claim_key"} // the ranking's write
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	lease.PollClaims(s, time.Hour) // no look but a wake's
	type claimed struct {
		co  lease.Checkout
		err error
	}
	cc, cancel := context.WithCancel(c)
	got := make(chan claimed, 1)
	go func() {
		co, err := s.Claim(cc, lease.ClaimParams{AgentID: "b", Queues: []string{"q"}, Wait: 20 * time.Second, Timeout: time.Hour})
		got <- claimed{co, err}
	}()
	defer func() { cancel(); <-got }()
	asleep(t, s, 1)
	wakes := lease.ClaimWakes(s)

	e.clock.Advance(2 * time.Minute)
	e.caughtUp(t) // the sweep finds its work through an index
	res := must[lease.SweepResult](t)(s.Sweep(c))
	if !db.sent.Load() {
		t.Fatal("no ranking was sent twice")
	}
	if res.Ready != 1 {
		t.Errorf("sweep %+v, want one ranked ready", res)
	}
	if n := lease.ClaimWakes(s) - wakes; n != 1 {
		t.Fatalf("%d wakes sent, want 1: to the claim waiting on the task's queue", n)
	}
	r := <-got
	got <- r // for the deferred wait
	if r.err != nil || r.co.TaskID != "t" {
		t.Fatalf("claimed %+v, %v; want t", r.co, r.err)
	}
}
