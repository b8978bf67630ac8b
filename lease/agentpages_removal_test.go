package lease_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// beforeKeyDeleteDB runs hook once, just before the first DeleteItem of a
// key item ("#key#…") in the agents table: RemoveAgent has written the
// tombstone and emptied the inbox, and is about to delete the key and
// then the agent item (the order a removal writes in).
type beforeKeyDeleteDB struct {
	lease.DB
	table string
	hook  func()
	done  bool
}

func (d *beforeKeyDeleteDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	if !d.done && in.TableName != nil && *in.TableName == d.table {
		if s, ok := in.Key["agent_id"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(s.Value, "#key#") {
			d.done = true
			d.hook()
		}
	}
	return d.DB.DeleteItem(ctx, in, opts...)
}

// The agent listing confirms each listed agent with a consistent read, so that a
// removed agent is no longer listed "alive=false, last heartbeat 1970".
// RemoveAgent writes the tombstone before the agent item goes: for the
// whole of a removal (tombstone, inbox query and deletes, key delete) the
// agent is still there and its heartbeat is the tombstone, which has no
// last_at. GET /api/agents then shows last_heartbeat_at 1970-01-01 (and
// alive=false for an agent that never sent a heartbeat, where API.md says
// null).
func TestAnAgentBeingRemovedIsNotListedWithAHeartbeatIn1970(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	for _, id := range []string{"beating", "silent"} {
		must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: id, Name: id}))
	}
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "beating", time.Minute))
	e.clock.Advance(time.Second)
	for _, id := range []string{"beating", "silent"} {
		var listed []lease.Agent
		db := &beforeKeyDeleteDB{DB: e.db, table: e.names.Table(schema.AgentsTable), hook: func() {
			listed = must[[]lease.Agent](t)(e.store.ListAgents(c))
		}}
		s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
		if err := s.RemoveAgent(c, id); err != nil {
			t.Fatal(err)
		}
		for _, a := range listed {
			if a.AgentID != id {
				continue
			}
			if a.LastHeartbeatAt != nil && a.LastHeartbeatAt.Before(epoch) {
				t.Errorf("%s, listed during its removal: last_heartbeat_at %v, alive %v", id, *a.LastHeartbeatAt, *a.Alive)
			}
			if id == "silent" && a.Alive != nil {
				t.Errorf("silent never sent a heartbeat, listed during its removal with alive=%v (API.md: null)", *a.Alive)
			}
		}
	}
}
