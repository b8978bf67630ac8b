package lease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// beforeLeaseQuery runs hook once, before any read of the lease index (a
// read of every shard waits for it): requests of another process landing
// just before the reads.
type beforeLeaseQuery struct {
	lease.DB
	once sync.Once
	hook func()
}

func (d *beforeLeaseQuery) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if in.IndexName != nil && *in.IndexName == schema.TasksByLeaseExpiry {
		d.once.Do(d.hook)
	}
	return d.DB.Query(ctx, in, opts...)
}

// A removal ends the removed agent's leases, not those of the agent the id
// was registered to again while it ran. Here the removal's clock is a few
// milliseconds ahead of the other process's (within ClockMargin), and the
// id is registered again, and takes a lease, between the removal's
// deletion of the agent and its read of the agent's leases: the new lease
// is locked after the new agent's registration, so it is live, though
// locked before the removal's time. Before, the removal ended every lease
// locked up to its own time, the new agent's live lease with them.
func TestARemovalLeavesTheLeaseOfTheIdRegisteredAgain(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t0", "t1")
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "x", Name: "x"}))
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Minute))
	e.checkout(t, "t0", "x", time.Hour) // the removed agent's lease
	e.clock.Advance(time.Second)

	const skew = 10 * time.Millisecond
	if skew >= lease.ClockMargin {
		t.Fatal("the skew must be within the clock margin")
	}
	var co lease.Checkout
	db := &beforeLeaseQuery{DB: e.db}
	db.hook = func() {
		must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "x", Name: "x again"}))
		e.clock.Advance(time.Millisecond)
		co = e.checkout(t, "t1", "x", time.Hour)
	}
	remover := lease.New(lease.Config{DB: db, Tables: e.names, Now: func() time.Time { return e.clock.Now().Add(skew) }})
	if err := remover.RemoveAgent(c, "x"); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if co.Fence == 0 {
		t.Fatal("the agent registered again took no lease during the removal")
	}
	if got := must[*lease.Checkout](t)(e.store.LockStatus(c, "t1")); got == nil || got.Fence != co.Fence {
		t.Errorf("the lease the agent registered again took during the removal: %+v, want live (fence %d)", got, co.Fence)
	}
	if got := must[*lease.Checkout](t)(e.store.LockStatus(c, "t0")); got != nil {
		t.Errorf("the removed agent's lease on t0 is live: %+v", got)
	}
}
