package lease_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// conditionalDeleteTwiceDB sends the first conditional DeleteItem of
// table twice and answers with the second answer: it applied, its answer
// was lost, and the SDK sent it again.
type conditionalDeleteTwiceDB struct {
	lease.DB
	table string
	sent  atomic.Bool
}

func (d *conditionalDeleteTwiceDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if in.TableName != nil && *in.TableName == d.table && in.ConditionExpression != nil && d.sent.CompareAndSwap(false, true) {
		if _, err := d.DB.DeleteItem(ctx, in, opts...); err != nil {
			return nil, err
		}
	}
	return d.DB.DeleteItem(ctx, in, opts...)
}

// A removal deletes the agent item last, conditioned on the key it read.
// When that delete applied, its answer was lost and the SDK sent it
// again, the second sending's refusal (no agent item: deleted by the
// first) sent the removal round again, which found no agent: 404
// agent_not_found for a removal that took effect, and the agent's leases
// were left for the sweep to end. Another removal that deleted the agent
// first is still 404.
func TestARemovalWhoseDeleteWasSentTwiceAnswersRemoved(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "gone", Name: "n"}))
	e.checkout(t, "t", "gone", time.Hour)
	e.caughtUp(t) // the removal finds the lease through an index

	db := &conditionalDeleteTwiceDB{DB: e.db, table: e.names.Table(schema.AgentsTable)}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	err := s.RemoveAgent(c, "gone")
	if !db.sent.Load() {
		t.Fatal("no delete was sent twice")
	}
	if err != nil {
		t.Fatalf("a removal whose delete applied: %v; want it removed", err)
	}
	if _, err := e.store.GetAgent(c, "gone"); !errors.Is(err, lease.ErrAgentNotFound) {
		t.Fatalf("the agent after its removal: %v", err)
	}
	if evs := kinds(e.events(t, "t")); !slices.Equal(evs, []lease.EventType{lease.EventCheckout, lease.EventAgentDeath}) {
		t.Fatalf("t's trail %v: want its lease ended by the removal", evs)
	}
	if err := e.store.RemoveAgent(c, "gone"); !errors.Is(err, lease.ErrAgentNotFound) {
		t.Fatalf("a second removal: %v, want agent_not_found", err)
	}
}

// The same delete's first sending lost, never applied, while another
// removal of the agent ran whole in that gap: the second sending's
// refusal is that removal's, and this one answers 404 agent_not_found,
// as it would sent once.
func TestARemovalWhoseDeleteWasSentTwiceAfterAnotherIsNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "gone", Name: "n"}))
	agents := e.names.Table(schema.AgentsTable)
	var raceErr error
	s, doer := lossyTaskStore(e, func(target, body string) bool {
		return strings.HasSuffix(target, ".DeleteItem") && strings.Contains(body, agents) && strings.Contains(body, "ConditionExpression")
	}, func() {
		raceErr = e.store.RemoveAgent(c, "gone")
	})
	err := s.RemoveAgent(c, "gone")
	if !doer.lost.Load() {
		t.Fatal("no delete was lost and sent again")
	}
	if raceErr != nil {
		t.Fatalf("the removal that landed first: %v", raceErr)
	}
	if !errors.Is(err, lease.ErrAgentNotFound) {
		t.Fatalf("a second removal, after the first removed the agent: %v, want agent_not_found", err)
	}
}
