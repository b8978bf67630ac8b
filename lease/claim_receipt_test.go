package lease_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
)

// receiptLossDB fails every write that would keep a named claim's grant in
// its receipt, as a throttled or unreachable table would.
type receiptLossDB struct{ lease.DB }

func (d receiptLossDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	for _, name := range in.ExpressionAttributeNames {
		if name == "granted" {
			return nil, errors.New("throttled")
		}
	}
	return d.DB.UpdateItem(ctx, in, opt...)
}

// A named claim whose grant could not be kept in its receipt, retried after
// its task has moved on (its lease force-released, the task checked out and
// released by another), gets the same lease, not a second one under the
// same run id: the task's trail still has the grant.
func TestClaimRetryWithItsReceiptLostGetsTheSameLease(t *testing.T) {
	t.Parallel()
	for _, archived := range []string{"before the retry", "while the retry waits"} {
		t.Run(archived, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "x")
			lossy := lease.New(lease.Config{DB: receiptLossDB{e.db}, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
			first := must[lease.Checkout](t)(lossy.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute}))
			e.clock.Advance(time.Second)
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "admin", Force: true}))
			e.clock.Advance(time.Second)
			e.checkout(t, "x", "b", time.Minute)
			e.clock.Advance(time.Second)
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "b"}))
			polled := make(chan struct{})
			if archived == "before the retry" {
				e.drain(t)
				close(polled)
			} else {
				go func() {
					defer close(polled)
					time.Sleep(300 * time.Millisecond)
					_, _ = e.poller.Poll(context.Background())
				}()
			}
			again, err := e.store.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute})
			<-polled // the poller is one process's: one poll at a time
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			if again.TaskID != first.TaskID || again.Fence != first.Fence || !again.LockedAt.Equal(first.LockedAt) {
				t.Fatalf("retry got %+v, want the first lease %+v", again, first)
			}
			if again.ExpiresAt.After(first.LockedAt.Add(time.Second)) {
				t.Fatalf("retry got the lease as live until %v; it was force-released at %v", again.ExpiresAt, first.LockedAt.Add(time.Second))
			}
			if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, "x")); lock != nil {
				t.Fatalf("the retry was granted a second lease: %+v", lock)
			}
			var runs []int64
			for _, ev := range e.events(t, "x") {
				if ev.Type == lease.EventCheckout && ev.RunID == "run-1" {
					runs = append(runs, ev.Fence)
				}
			}
			if !slices.Equal(runs, []int64{first.Fence}) {
				t.Fatalf("run-1 granted fences %v, want only %d", runs, first.Fence)
			}
		})
	}
}
