package lease

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"golang.org/x/sync/errgroup"

	"github.com/checkout-dev/checkout/lease/schema"
)

// Listing agents in pages.
//
// GET /api/agents lists every registered agent, by agent_id, as one
// answer while it fits: a page ends when the next agent could take the
// answer past pageBytes (the 6 MB a Lambda can return bounds it in AWS;
// by agentWireBound a page holds about 2,000 agents of the longest names
// and ids, and many more of ordinary ones), or at the limit asked for.
// Its cursor is the page's last agent_id; the next page reads the
// agents index from there on, so a page costs reads of its own agents
// and their heartbeats only, however many agents there are. The index
// only proposes the page's agents: each is read consistently, with its
// heartbeat, and one removed meanwhile is left out. An agent
// registered behind the cursor during a walk is on no later page, as
// with the other listings.

// ListAgentsParams selects a page of agents.
type ListAgentsParams struct {
	Cursor string // a page's NextCursor; "" for the first
	Limit  int    // 1 to MaxListLimit; 0: as many as fit in a page
}

// AgentPage is a page of agents; NextCursor is "" on the last.
type AgentPage struct {
	Agents     []Agent
	NextCursor string
}

// agentCursor is where a listing of agents goes on: after agent A.
type agentCursor struct {
	A string `json:"a"`
}

// ListAgents returns every agent with its liveness, reading every page.
func (s *Store) ListAgents(ctx context.Context) ([]Agent, error) {
	var out []Agent
	for p := (ListAgentsParams{}); ; {
		page, err := s.ListAgentsPage(ctx, p)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Agents...)
		if page.NextCursor == "" {
			return out, nil
		}
		p.Cursor = page.NextCursor
	}
}

// ListAgentsPage returns a page of agents, by agent_id, with their
// liveness.
func (s *Store) ListAgentsPage(ctx context.Context, p ListAgentsParams) (AgentPage, error) {
	if p.Limit != 0 {
		if err := CheckLimit(p.Limit); err != nil {
			return AgentPage{}, err
		}
	}
	if err := CheckCursor(p.Cursor); err != nil {
		return AgentPage{}, err
	}
	keyCond := expression.Key("kind").Equal(expression.Value("agent"))
	if p.Cursor != "" {
		c, err := decodeAgentCursor(p.Cursor)
		if err != nil {
			return AgentPage{}, err
		}
		keyCond = keyCond.And(expression.Key("agent_id").GreaterThan(expression.Value(c.A)))
	}
	expr, err := expression.NewBuilder().WithKeyCondition(keyCond).Build()
	if err != nil {
		return AgentPage{}, err
	}
	in := &dynamodb.QueryInput{
		TableName:                 &s.agents,
		IndexName:                 new(schema.AgentsAll),
		KeyConditionExpression:    expr.KeyCondition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	}
	// Read until the page is full and one agent more is known to follow
	// (so that the last page has no cursor), or the agents run out.
	var items []agentItem
	size, full := 0, false
	for pages := dynamodb.NewQueryPaginator(s.db, in); pages.HasMorePages() && !full; {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return AgentPage{}, fmt.Errorf("list agents: %w", err)
		}
		var batch []agentItem
		if err := attributevalue.UnmarshalListOfMaps(out.Items, &batch); err != nil {
			return AgentPage{}, fmt.Errorf("decode agents: %w", err)
		}
		for _, a := range batch {
			size += agentWireBound(a)
			if len(items) > 0 && (p.Limit > 0 && len(items) == p.Limit || size > pageBytes) {
				full = true
				break
			}
			items = append(items, a)
		}
	}
	ids := make([]string, len(items))
	for i, a := range items {
		ids[i] = a.AgentID
	}
	// The index only proposes: each agent is read as it is, with its
	// heartbeat, so that an agent removed (or registered again under
	// another name) while the index lags is listed as it now is.
	var hbs map[string]*heartbeatItem
	var agents []agentItem
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() (err error) {
		hbs, err = s.heartbeatsOf(gctx, ids)
		return err
	})
	g.Go(func() (err error) {
		agents, err = batchGet[agentItem](gctx, s.db, s.agents, uniqueKeys(ids, agentKey), "", nil)
		if err != nil {
			err = fmt.Errorf("read agents: %w", err)
		}
		return err
	})
	if err := g.Wait(); err != nil {
		return AgentPage{}, err
	}
	fresh := make(map[string]agentItem, len(agents))
	for _, a := range agents {
		fresh[a.AgentID] = a
	}
	now := s.clock()
	page := AgentPage{Agents: make([]Agent, 0, len(items))}
	for _, listed := range items {
		a, ok := fresh[listed.AgentID]
		if hb := hbs[listed.AgentID]; !ok || hb != nil && hb.Removed {
			continue // removed, or being removed (its tombstone is written first)
		}
		ag := a.agent()
		if hb := hbs[a.AgentID]; hb != nil && !hb.Fresh {
			last := fromMS(hb.LastAt)
			alive := hb.ExpiresAt > ms(now)
			ag.LastHeartbeatAt, ag.Alive = &last, &alive
		}
		page.Agents = append(page.Agents, ag)
	}
	if full {
		page.NextCursor = encodeAgentCursor(agentCursor{A: items[len(items)-1].AgentID})
	}
	return page, nil
}

func encodeAgentCursor(c agentCursor) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeAgentCursor(s string) (agentCursor, error) {
	var c agentCursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || json.Unmarshal(b, &c) != nil || !ValidID(c.A) {
		return agentCursor{}, notIssued()
	}
	return c, nil
}

// agentWireFixed bounds an agent's field names, punctuation, times and
// booleans in an answer.
const agentWireFixed = 256

// agentWireBound is the most agent a can take in a listing's answer: its
// name 7 bytes a byte (a character JSON escapes), the rest 2.
func agentWireBound(a agentItem) int {
	return 7*len(a.Name) + 2*(agentWireFixed+len(a.AgentID))
}
