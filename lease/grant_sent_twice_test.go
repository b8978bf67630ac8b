package lease_test

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// An agent that checks a task out in the very millisecond it came back
// from the dead is granted a lease already ended (alive.go: a lease locked
// at or before its holder's alive_since stays ended), which its first
// renewal tells it. When the grant's answer was lost, so that the SDK sent
// it again, the second sending failed its condition on the first's own
// lease; the checkout took it for a same-run lease ended by death, took it
// over, and answered a second grant (fence 2): a lease granted that no
// request was answered, one more attempt counted, and its ending recorded
// as a death. A grant sent again now knows its own lease by its write's id.
func TestAGrantSentTwiceAtAReturnFromTheDeadIsAnsweredOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Second))
	e.clock.Advance(2 * time.Second)
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Minute)) // back from the dead, in this millisecond

	tasks := e.names.Table(schema.TasksTable)
	doer := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-a"`)
		},
		race:    func() {},
		applied: true,
	}
	s := lease.New(lease.Config{DB: lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) { o.HTTPClient = doer }), Tables: e.names, Now: e.clock.Now})
	co := must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Hour}))
	if !doer.lost.Load() {
		t.Fatal("no grant was sent twice")
	}
	got := e.get(t, "t")
	if co.Fence != 1 || co.Attempt != 1 || got.Attempts != 1 {
		t.Errorf("a checkout whose grant's answer was lost answered fence %d, attempt %d; the task has had %d attempts; want fence 1, attempt 1, 1 attempt: one grant", co.Fence, co.Attempt, got.Attempts)
	}
	if evs := e.events(t, "t"); len(evs) != 1 || evs[0].Type != lease.EventCheckout || evs[0].Fence != 1 {
		t.Errorf("events after one checkout: %v, want one checkout (fence 1)", kinds(evs))
	}
}

// A checkout by an agent that is dead (its heartbeat ran out) is granted
// a lease that any other checkout may take over at once. When the grant's
// answer was lost and another agent took that lease over before the SDK
// sent the grant again, the second sending failed its condition on the
// other agent's lease and the checkout answered 409 conflict: a lease
// granted (an attempt counted, a checkout and an agent_death in the trail)
// that no request was answered. The grant that took it over records the
// id of the grant it replaced, by which the first is known.
func TestAGrantSentTwiceAfterItsLeaseWasTakenOverIsAnswered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Second))
	e.clock.Advance(2 * time.Second) // a is dead

	tasks := e.names.Table(schema.TasksTable)
	var taken lease.Checkout
	var takeErr error
	doer := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-a"`)
		},
		race: func() {
			// b finds a's lease, its holder dead, and takes it over.
			taken, takeErr = e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r-b", Timeout: time.Hour})
		},
		applied: true,
	}
	s := lease.New(lease.Config{DB: lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) { o.HTTPClient = doer }), Tables: e.names, Now: e.clock.Now})
	co, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Hour})
	if !doer.lost.Load() {
		t.Fatal("no grant was sent twice")
	}
	if takeErr != nil || taken.Fence != 2 {
		t.Fatalf("b's takeover of a's lease: %+v, %v; want fence 2", taken, takeErr)
	}
	if evs := e.events(t, "t"); len(evs) != 3 || evs[0].Type != lease.EventCheckout || evs[0].AgentID != "a" || evs[0].Fence != 1 {
		t.Fatalf("events: %v, want a's checkout (fence 1), its agent_death, b's checkout", kinds(evs))
	}
	if err != nil || co.Fence != 1 || co.AgentID != "a" || co.Attempt != 1 {
		t.Errorf("a's checkout, whose grant (fence 1, attempt 1) applied and was taken over before it was sent again: %+v, %v; want that grant", co, err)
	}
}
