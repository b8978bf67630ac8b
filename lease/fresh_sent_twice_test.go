package lease_test

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
)

// slowGrantDoer runs after once, after the first request that match
// accepts has been answered: a write that took long (the clock moves).
type slowGrantDoer struct {
	next  *lossyDoer
	match func(target, body string) bool
	after func()
	done  atomic.Bool
}

func (d *slowGrantDoer) Do(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	resp, err := d.next.Do(r)
	if err == nil && d.match(r.Header.Get("X-Amz-Target"), string(body)) && d.done.CompareAndSwap(false, true) {
		d.after()
	}
	return resp, err
}

// A checkout whose grant write took more than half its timeout renews the
// lease before answering (fresh). When that renewal applied and its
// answer was lost, and the lease was force-released before the SDK sent
// it again, fresh's second sending found no lease, did not know its own
// renewal, and handed the checkout the free task to decide again: it
// granted it a second time (fence 2, two attempts, two checkouts in the
// trail) for one checkout. Without the loss the checkout answers fence 1.
func TestASlowGrantsRenewalSentTwiceAfterItsLeaseEndedGrantsOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	updates := taskUpdate(e)
	var raceErr error
	lossy := &lossyDoer{match: func(target, body string) bool {
		return updates(target, body) && strings.Contains(body, `{"S":"renew"}`)
	}, race: func() {
		_, raceErr = e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true})
	}, applied: true}
	doer := &slowGrantDoer{next: lossy, match: func(target, body string) bool {
		return updates(target, body) && strings.Contains(body, `{"S":"checkout"}`)
	}, after: func() { e.clock.Advance(6 * time.Second) }} // over half the 10 s timeout
	client := lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) { o.HTTPClient = doer })
	s := lease.New(lease.Config{DB: client, Tables: e.names, Now: e.clock.Now})

	co, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: 10 * time.Second})
	if !lossy.lost.Load() {
		t.Fatal("fresh's renewal was not sent twice")
	}
	if raceErr != nil {
		t.Fatalf("the force release between the sendings: %v", raceErr)
	}
	grantedOnce(t, e, "t", co, err, "one checkout, its grant renewed once (answer lost) and force-released")
}

// The grant itself sent twice, its lease force-released before the second
// sending (TestAFreeGrantSentTwiceAfterItsLeaseEndedIsMadeOnce), the
// second sending answered more than half the lease's timeout after the
// grant: the grant was known by its id, but fresh then renewed a lease
// that had ended, failed, and the checkout granted the free task again
// (fence 2, two attempts) for one checkout.
func TestAFreeGrantSentTwiceSlowlyAfterItsLeaseEndedIsMadeOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	updates := taskUpdate(e)
	var raceErr error
	s, doer := appliedTaskStore(e, func(target, body string) bool {
		return updates(target, body) && strings.Contains(body, `"r-a"`) && strings.Contains(body, `{"S":"checkout"}`)
	}, func() {
		_, raceErr = e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true})
		e.clock.Advance(6 * time.Second) // over half the 10 s timeout
	})
	co, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: 10 * time.Second})
	if !doer.lost.Load() {
		t.Fatal("no grant was sent twice")
	}
	if raceErr != nil {
		t.Fatalf("the force release between the sendings: %v", raceErr)
	}
	grantedOnce(t, e, "t", co, err, "one checkout, its grant sent twice and force-released in between")
}

// grantedOnce checks that the checkout what describes answered co (err)
// with the task's first lease, and that the task's trail has one grant.
func grantedOnce(t *testing.T, e *env, taskID string, co lease.Checkout, err error, what string) {
	t.Helper()
	evs := kinds(e.events(t, taskID))
	grants := 0
	for _, ev := range evs {
		if ev == lease.EventCheckout {
			grants++
		}
	}
	if grants != 1 || err != nil || co.Fence != 1 {
		t.Errorf("%s: %d grants in the trail %v, answered fence %d attempt %d (%v); want one grant, fence 1",
			what, grants, evs, co.Fence, co.Attempt, err)
	}
}
