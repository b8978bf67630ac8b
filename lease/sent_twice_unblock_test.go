package lease_test

import (
	"context"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

// The change stream unblocks a task once its last blocker is done, and
// the write wakes the claims of its process waiting on the task's queue
// (README: woken at once by an unblocking). When that write applied, its
// answer was lost and the SDK sent it again, the second sending's refusal
// (the task no longer blocked: by the first) woke nobody, and the claims
// waited for their next look.
func TestAnUnblockingSentTwiceWakesWaitingClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "blocker", Queue: "elsewhere"})
	e.create(t, lease.CreateTaskParams{TaskID: "t", Queue: "q", BlockedBy: []string{"blocker"}})

	db := &sentTwiceDB{DB: e.db, name: "unblocked_by"} // the unblocking's write
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

	e.complete(t, "blocker", "a")
	// The change stream unblocks t, through s, as the local server runs it.
	arn := must[string](t)(localstack.StreamARN(c, e.db, e.names.Table(schema.TasksTable)))
	p := &stream.Poller{Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Handle: stream.Handler(s), Saved: stream.MemoryCheckpoints{}}
	must[int](t)(p.Poll(c))
	if !db.sent.Load() {
		t.Fatal("no unblocking was sent twice")
	}
	if st := e.get(t, "t").Status; st != lease.StatusTodo && st != lease.StatusInProgress {
		t.Fatalf("t after its blocker's completion: %s", st)
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
