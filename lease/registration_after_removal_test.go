package lease_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
)

// duringDB runs hook before every write it is given: a request of another
// process landing at each step of an operation.
type duringDB struct {
	lease.DB
	hook func()
}

func (d *duringDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	d.hook()
	return d.DB.PutItem(ctx, in, opts...)
}

func (d *duringDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	d.hook()
	return d.DB.UpdateItem(ctx, in, opts...)
}

func (d *duringDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	d.hook()
	return d.DB.DeleteItem(ctx, in, opts...)
}

func (d *duringDB) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	d.hook()
	return d.DB.BatchWriteItem(ctx, in, opts...)
}

// An id registered again starts clean (API.md). A registration of the id
// is tried before every write of a removal of it: one refused (the agent
// still exists) is fine, but one that answers 201 must leave a working
// agent. Before, the removal deleted the agent item and then wrote its
// tombstone unconditionally: a registration landing in between answered
// 201 with a working key, and the tombstone then overwrote the heartbeat
// item restart had just made a fresh agent's, so the new agent was dead for
// ever (every heartbeat refused, every lease dead at once).
func TestARegistrationDuringARemovalStartsClean(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t0", "t1")
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "x", Name: "x"}))
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "x", time.Minute))
	e.checkout(t, "t0", "x", time.Hour) // so that the removal has a lease to end
	e.clock.Advance(time.Second)

	var reg lease.Registration
	remover := lease.New(lease.Config{DB: &duringDB{DB: e.db, hook: func() {
		if reg.APIKey != "" {
			return
		}
		e.clock.Advance(time.Millisecond)
		r, err := e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "x", Name: "x again"})
		if err != nil && !errors.Is(err, lease.ErrAgentExists) {
			t.Fatalf("register x during its removal: %v", err)
		}
		reg = r
	}}, Tables: e.names, Now: e.clock.Now})
	if err := remover.RemoveAgent(c, "x"); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if reg.APIKey == "" {
		t.Log("every registration during the removal was refused; registering after it")
		reg = must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "x", Name: "x again"}))
	}
	if _, err := e.store.GetAgent(c, "x"); err != nil {
		t.Fatalf("get x: %v", err)
	}
	p, err := e.store.Authenticate(c, reg.APIKey)
	if err != nil || p.AgentID != "x" {
		t.Fatalf("the new key: %+v, %v", p, err)
	}
	e.clock.Advance(time.Second)
	if _, err := e.store.Heartbeat(c, "x", time.Minute); err != nil {
		t.Errorf("the registered agent's heartbeat: %v, want accepted", err)
	}
	co := e.checkout(t, "t1", "x", time.Hour)
	if got := must[*lease.Checkout](t)(e.store.LockStatus(c, "t1")); got == nil || got.Fence != co.Fence {
		t.Errorf("the registered agent's fresh lease is not live: %+v", got)
	}
	if got := must[*lease.Checkout](t)(e.store.LockStatus(c, "t0")); got != nil {
		t.Errorf("the removed agent's lease on t0 is live: %+v", got)
	}
}

// mint-admin's EnsureAgent on an id that was removed (an admin minted under
// another --agent-id is "an ordinary, removable agent") leaves the removal's
// tombstone in place: the agent authenticates, but its heartbeat is refused
// and each lease it takes is dead at once.
func TestEnsureAgentAfterARemovalStartsClean(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t1")
	const key = "ck_ops-bot-key-0123456789"
	if err := e.store.EnsureAgent(c, "ops", "ops", true, key); err != nil {
		t.Fatal(err)
	}
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "ops", time.Minute))
	e.clock.Advance(time.Second)
	if err := e.store.RemoveAgent(c, "ops"); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	if err := e.store.EnsureAgent(c, "ops", "ops", true, key); err != nil { // mint-admin again
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	if _, err := e.store.Heartbeat(c, "ops", time.Minute); err != nil {
		t.Errorf("heartbeat of the re-minted agent: %v, want accepted", err)
	}
	co := e.checkout(t, "t1", "ops", time.Hour)
	if got := must[*lease.Checkout](t)(e.store.LockStatus(c, "t1")); got == nil || got.Fence != co.Fence {
		t.Errorf("the re-minted agent's fresh lease is not live: %+v", got)
	}
}
