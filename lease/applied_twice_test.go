package lease_test

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
)

// sentTwiceDB sends the first UpdateItem that sets attribute name twice,
// and answers with the second answer: what the SDK does when its first
// attempt applied but the answer was lost (a timeout, a stalled server),
// and it retries.
type sentTwiceDB struct {
	lease.DB
	name string
	sent atomic.Bool
}

func (d *sentTwiceDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if slices.Contains(mapValues(in.ExpressionAttributeNames), d.name) && d.sent.CompareAndSwap(false, true) {
		if _, err := d.DB.UpdateItem(ctx, in, opts...); err != nil {
			return nil, err
		}
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}

func mapValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// A claim whose grant applied but whose answer was lost, and whose retry
// then failed its condition (the task is taken: by this very claim),
// answers with that lease. It used to take the task for another claimer's
// and grant the next one too: two live leases under one run id, one of
// which nobody was told of, held until it timed out (a failed attempt,
// and a lease_lost for a lease the agent never knew).
func TestAClaimWhoseGrantWasSentTwiceHoldsOneLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	for _, id := range []string{"c1", "c2", "c3"} {
		e.create(t, lease.CreateTaskParams{TaskID: id, Queue: "q"})
	}
	db := &sentTwiceDB{DB: e.db, name: "prev_agent"} // set by every grant
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	got, err := s.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "r1", Queues: []string{"q"}, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if !db.sent.Load() {
		t.Fatal("no grant was sent twice")
	}
	held := must[[]lease.Checkout](t)(e.store.ListCheckouts(c, "a"))
	if len(held) != 1 || held[0].TaskID != got.TaskID || held[0].RunID != "r1" || held[0].Fence != got.Fence {
		t.Fatalf("the claim answered %s (fence %d); a holds %d leases: %+v; want that one alone", got.TaskID, got.Fence, len(held), held)
	}
	if got.Attempt != 1 {
		t.Errorf("attempt %d, want 1", got.Attempt)
	}
}

// sentTwicePutDB sends the first PutItem whose item has attribute name
// twice, as sentTwiceDB does for UpdateItem.
type sentTwicePutDB struct {
	lease.DB
	name string
	sent atomic.Bool
}

func (d *sentTwicePutDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if _, ok := in.Item[d.name]; ok && d.sent.CompareAndSwap(false, true) {
		if _, err := d.DB.PutItem(ctx, in, opts...); err != nil {
			return nil, err
		}
	}
	return d.DB.PutItem(ctx, in, opts...)
}

// Registering an agent whose put applied but whose answer was lost, the
// SDK's retry then failing its condition, answers with the agent and its
// key, which works. It used to answer agent_exists, leaving the agent
// registered with no key item: its only key was lost, and every retry
// answered agent_exists.
func TestARegistrationSentTwiceAnswersWithAWorkingKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	db := &sentTwicePutDB{DB: e.db, name: "kind"} // the agent's item, not its key's
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	reg, err := s.RegisterAgent(c, lease.RegisterParams{AgentID: "newag", Name: "n"})
	if err != nil {
		t.Fatalf("a registration sent twice: %v, want the agent and its key", err)
	}
	if !db.sent.Load() {
		t.Fatal("no put was sent twice")
	}
	p, err := e.store.Authenticate(c, reg.APIKey)
	if err != nil || p.AgentID != "newag" {
		t.Fatalf("its key: %+v, %v; want it to name newag", p, err)
	}
	// Another registration of the id is still refused.
	if _, err := e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "newag", Name: "other"}); !errors.Is(err, lease.ErrAgentExists) {
		t.Fatalf("a second registration: %v, want agent_exists", err)
	}
}
