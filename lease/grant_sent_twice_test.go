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
