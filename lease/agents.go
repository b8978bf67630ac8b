package lease

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Removed agents.
//
// Removing an agent replaces its heartbeat with a tombstone (removed, dead
// since the removal), so that from the answer on none of its leases is live
// for anyone, including a lease granted while the removal ran or, in AWS,
// while the authorizer still caches the key; the sweep ends them all. Its
// inbox is emptied. Registering the id again turns the tombstone into the
// heartbeat item of an agent not watched yet, alive since the registration,
// so the removed agent's leases stay ended, and watches placed before the
// registration are not delivered to the new agent. A lease the new agent
// takes in the very millisecond of its registration counts as ended, as
// with any return from the dead.
//
// The removal forgets the agent in its own process's alive cache. Another
// process (another Lambda container) may have read it alive just before,
// and trusts that read for up to MinHeartbeatTTL (1 s): there, for at most
// 1 s after the removal's answer, a checkout of a task the agent holds can
// still be 409 naming it, and the agent's own renew, release and complete
// (its key still cached by the authorizer) can still succeed. Closing that
// would cost a consistent read of the holder's heartbeat on every conflict
// and holder operation; the local server is one process and has no such
// window.

// heartbeatRetention is how long a heartbeat item outlives its expiry before
// TTL may delete it. An agent silent for longer is treated as one that never
// sent a heartbeat: its leases then end by time alone (24h at most).
const heartbeatRetention = 7 * 24 * time.Hour

// NewAPIKey returns a fresh random API key.
func NewAPIKey() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return "ck_" + base64.RawURLEncoding.EncodeToString(b[:])
}

// HashKey is the stored form of an API key. Keys carry 256 random bits, so a
// plain SHA-256 is enough: there is nothing to brute-force.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

func keyItemID(hash string) string { return "#key#" + hash }

// checkAgentID checks the id of an agent to be made: an id, and not the
// name the audit trail gives the service's own acts, in any case.
func checkAgentID(id string) error {
	if err := CheckID("agent_id", id); err != nil {
		return err
	}
	if strings.EqualFold(id, BySystem) {
		return invalidField("agent_id", CodeInvalidID, "agent_id %s is reserved: the audit trail names the service's own acts by %s", id, BySystem)
	}
	return nil
}

// RegisterAgent creates an agent and returns its API key, which is stored
// only as a hash.
func (s *Store) RegisterAgent(ctx context.Context, p RegisterParams) (Registration, error) {
	if p.AgentID == "" {
		p.AgentID = newID("agent-")
	}
	if err := checkAgentID(p.AgentID); err != nil {
		return Registration{}, err
	}
	if err := CheckName(p.Name); err != nil {
		return Registration{}, err
	}
	key := NewAPIKey()
	a := agentItem{AgentID: p.AgentID, Kind: "agent", Name: p.Name, Admin: p.Admin, KeyHash: HashKey(key), CreatedAt: ms(s.clock())}
	item, err := attributevalue.MarshalMap(a)
	if err != nil {
		return Registration{}, err
	}
	cond := expression.AttributeNotExists(expression.Name("agent_id"))
	expr, _ := expression.NewBuilder().WithCondition(cond).Build()
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.agents, Item: item,
		ConditionExpression:                 expr.Condition(),
		ExpressionAttributeNames:            expr.Names(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if old, failed := conditionFailed(err); failed {
		// The agent there may be this very put, whose first attempt
		// applied and whose answer was lost (the SDK's retry then fails
		// the condition): its key's hash is this key's, which nobody
		// else has. Then it is ours, and its key item is still to write.
		var there agentItem
		if attributevalue.UnmarshalMap(old, &there) != nil || there.KeyHash != a.KeyHash {
			return Registration{}, ErrAgentExists
		}
		err = nil
	}
	if err != nil {
		return Registration{}, fmt.Errorf("register agent %s: %w", p.AgentID, err)
	}
	if err := s.putKey(ctx, a); err != nil {
		return Registration{}, err
	}
	if until, err := s.restart(ctx, a.AgentID, fromMS(a.CreatedAt), s.reRegisterAfter); err != nil {
		return Registration{}, err
	} else if !until.IsZero() {
		// Removed too recently: the agent and its key, which nobody has
		// seen, are taken back.
		if err := s.unregister(ctx, a); err != nil {
			return Registration{}, err
		}
		return Registration{}, &RemovedRecentlyError{AgentID: a.AgentID, Until: until}
	}
	return Registration{Agent: a.agent(), APIKey: key}, nil
}

// unregister deletes agent a and its key, as RegisterAgent had just put
// them.
func (s *Store) unregister(ctx context.Context, a agentItem) error {
	if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.agents, Key: agentKey(keyItemID(a.KeyHash))}); err != nil {
		return fmt.Errorf("take back the key of %s: %w", a.AgentID, err)
	}
	cond := expression.Name("key_hash").Equal(expression.Value(a.KeyHash))
	expr, _ := expression.NewBuilder().WithCondition(cond).Build()
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.agents, Key: agentKey(a.AgentID),
		ConditionExpression:       expr.Condition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	})
	if _, failed := conditionFailed(err); failed {
		return nil // no longer ours
	}
	if err != nil {
		return fmt.Errorf("take back agent %s: %w", a.AgentID, err)
	}
	return nil
}

func (a agentItem) agent() Agent {
	return Agent{AgentID: a.AgentID, Name: a.Name, Admin: a.Admin, CreatedAt: fromMS(a.CreatedAt)}
}

func (s *Store) putKey(ctx context.Context, a agentItem) error {
	k := keyItem{ID: keyItemID(a.KeyHash), Owner: a.AgentID, Name: a.Name, Admin: a.Admin, KeyHash: a.KeyHash}
	item, err := attributevalue.MarshalMap(k)
	if err != nil {
		return err
	}
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.agents, Item: item}); err != nil {
		return fmt.Errorf("store key of %s: %w", a.AgentID, err)
	}
	return nil
}

// EnsureAgent makes agentID exist with exactly this API key, replacing any
// key it had. It is idempotent: the local server runs it at every start for
// the admin key, and mint-admin runs it to create the first admin in AWS.
// An agent that existed goes on as it was (its heartbeat and leases); one
// made anew starts clean, as a registration does. Of two run at once for
// one agent with different keys, one may fail (ErrBusy), its key ended.
func (s *Store) EnsureAgent(ctx context.Context, agentID, name string, admin bool, apiKey string) error {
	if err := checkAgentID(agentID); err != nil {
		return err
	}
	if len(apiKey) < 16 {
		return invalidField("api_key", CodeInvalidRequest, "api key must be at least 16 characters")
	}
	a := agentItem{AgentID: agentID, Kind: "agent", Name: name, Admin: admin, KeyHash: HashKey(apiKey), CreatedAt: ms(s.clock())}
	item, err := attributevalue.MarshalMap(a)
	if err != nil {
		return err
	}
	// The key the agent has is deleted first, while the agent item still
	// names it: a rotation that fails part way and is run again then
	// still finds the old key, which may have leaked, and ends it.
	cur, err := getItem[agentItem](ctx, s.db, s.agents, agentKey(agentID))
	if err != nil {
		return fmt.Errorf("ensure agent %s: %w", agentID, err)
	}
	if cur != nil {
		if err := s.dropKey(ctx, agentID, cur.KeyHash, a.KeyHash); err != nil {
			return err
		}
	}
	out, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.agents, Item: item, ReturnValues: types.ReturnValueAllOld})
	if err != nil {
		return fmt.Errorf("ensure agent %s: %w", agentID, err)
	}
	if err := s.putKey(ctx, a); err != nil {
		return err
	}
	if len(out.Attributes) == 0 {
		// A new agent, as RegisterAgent makes one: an id removed before
		// starts clean (its tombstone would refuse every heartbeat).
		// Not held back after a removal (ReRegisterAfter): the operator
		// who mints a key for a removed id means it.
		if _, err := s.restart(ctx, agentID, fromMS(a.CreatedAt), 0); err != nil {
			return err
		}
	} else {
		// A key given to the agent since the read (another rotation) goes too.
		var old agentItem
		if attributevalue.UnmarshalMap(out.Attributes, &old) == nil {
			if err := s.dropKey(ctx, agentID, old.KeyHash, a.KeyHash); err != nil {
				return err
			}
		}
	}
	// Another rotation (or a removal) that landed after this one's agent
	// item dropped the key it found there, perhaps before this key's item
	// was written: if the agent no longer names this key, it is ended
	// here, or it would stay a working key that no later rotation finds.
	got, err := getItem[agentItem](ctx, s.db, s.agents, agentKey(agentID))
	if err != nil {
		return fmt.Errorf("ensure agent %s: %w", agentID, err)
	}
	if got == nil || got.KeyHash != a.KeyHash {
		if err := s.dropKey(ctx, agentID, a.KeyHash, ""); err != nil {
			return err
		}
		return fmt.Errorf("ensure agent %s: another key was given to it, or it was removed, at the same time: %w", agentID, ErrBusy)
	}
	return nil
}

// dropKey deletes the key item of hash, agentID's old key, unless it is
// empty or keep, the key the agent is being given.
func (s *Store) dropKey(ctx context.Context, agentID, hash, keep string) error {
	if hash == "" || hash == keep {
		return nil
	}
	if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.agents, Key: agentKey(keyItemID(hash))}); err != nil {
		return fmt.Errorf("drop old key of %s: %w", agentID, err)
	}
	return nil
}

// Authenticate returns the agent that owns apiKey with one GetItem. Callers
// cache the answer (the API Gateway authorizer cache, or auth.Cache locally).
func (s *Store) Authenticate(ctx context.Context, apiKey string) (Principal, error) {
	if apiKey == "" || len(apiKey) > 512 {
		return Principal{}, ErrUnauthorized
	}
	hash := HashKey(apiKey)
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.agents, Key: agentKey(keyItemID(hash)), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return Principal{}, fmt.Errorf("authenticate: %w", err)
	}
	var k keyItem
	if len(out.Item) == 0 || attributevalue.UnmarshalMap(out.Item, &k) != nil ||
		subtle.ConstantTimeCompare([]byte(k.KeyHash), []byte(hash)) != 1 {
		return Principal{}, ErrUnauthorized
	}
	return Principal{AgentID: k.Owner, Name: k.Name, Admin: k.Admin}, nil
}

// RemoveAgent deletes an agent and its key, and makes it dead for ever: a
// tombstone replaces its heartbeat, so that none of its leases blocks anyone
// from the answer on, including one granted while the removal runs (or, in
// AWS, while the authorizer still caches its key); the sweep ends them all.
// Its inbox is emptied, so that an id registered again starts clean.
//
// The agent item goes last: while it exists no registration of the id can
// land (RegisterAgent is conditioned on its absence), so the tombstone and
// the emptied inbox can only ever be the removed agent's, and a
// registration that lands after the delete turns the tombstone into its
// clean start (restart). The tombstone is also conditioned on the id not
// having been registered since the agent was read (registered_at): a
// removal that raced another removal and a registration must not bury the
// new agent. The delete is conditioned on the key read, so that an agent
// registered, or given a new key (EnsureAgent), since the read is judged
// again rather than half removed.
func (s *Store) RemoveAgent(ctx context.Context, agentID string) error {
	if err := CheckID("agent_id", agentID); err != nil {
		return err
	}
	removal := writeID() // names this removal's tombstone
	for range retries(ctx) {
		a, err := getItem[agentItem](ctx, s.db, s.agents, agentKey(agentID))
		if err != nil {
			return fmt.Errorf("read agent %s: %w", agentID, err)
		}
		if a == nil || a.Kind != "agent" {
			return ErrAgentNotFound
		}
		// The key goes first, and the removal's time is read after: the
		// last look-up that found the key (which the authorizer in AWS
		// may cache for ReRegisterAfter) is then no later than the
		// tombstone's time, from which restart holds the id back.
		if a.KeyHash != "" {
			if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.agents, Key: agentKey(keyItemID(a.KeyHash))}); err != nil {
				return fmt.Errorf("remove key of %s: %w", agentID, err)
			}
		}
		now := s.clock()
		before, buried, err := s.bury(ctx, a, now, removal)
		if err != nil {
			return err
		}
		if !buried {
			continue // registered again since the read
		}
		s.alive.forget(agentID)
		if err := s.clearInbox(ctx, agentID); err != nil {
			return err
		}
		cond := expression.Name("key_hash").Equal(expression.Value(a.KeyHash))
		expr, _ := expression.NewBuilder().WithCondition(cond).Build()
		wctx, sends := countSends(ctx)
		_, err = s.db.DeleteItem(wctx, &dynamodb.DeleteItemInput{
			TableName: &s.agents, Key: agentKey(agentID),
			ConditionExpression:                 expr.Condition(),
			ExpressionAttributeNames:            expr.Names(),
			ExpressionAttributeValues:           expr.Values(),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}, sendOpts(wctx)...)
		if returned, failed := conditionFailed(err); failed {
			ours, err := s.deletedHere(ctx, agentID, removal, sends.Load(), returned)
			if err != nil {
				return err
			}
			if !ours {
				continue // its key was replaced, or another removal deleted it
			}
		} else if err != nil {
			return fmt.Errorf("remove agent %s: %w", agentID, err)
		}
		// End what the index already shows; the sweep ends the rest. The
		// removal has taken effect (the tombstone makes every lease of
		// the agent dead), so the endings get half of the time the
		// request has left, and those it does not reach are the sweep's:
		// an agent holding thousands of leases is removed in one answer,
		// not a 503 for a removal that applied.
		ectx := ctx
		if d, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			ectx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(d)/2))
			defer cancel()
		}
		ended, err := s.endLeasesOf(ectx, agentID, ms(now), reasonRemoved, before)
		if err != nil && ectx.Err() != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "agent removal: the sweep ends the leases it had no time for",
				"agent_id", agentID, "ended", ended, "error", err.Error())
			return nil
		}
		return err
	}
	return fmt.Errorf("remove agent %s: %w", agentID, ErrBusy)
}

// deletedHere says whether the delete of agentID's item by removal, sent
// sends times and refused on its condition with returned (the item as
// it is; none when it is gone), was refused on its own first sending: that
// sending applied, its answer was lost, and the SDK sent it again
// (sends.go). The tombstone is still this removal's (another removal
// since would have left its own), and the item is gone, or is an agent
// registered again since: a registration lands only once the item is
// gone, and its clean start (restart) keeps the tombstone's removal id.
// A key given to the agent since the read (EnsureAgent) leaves the
// tombstone as it is: the agent is still to remove.
func (s *Store) deletedHere(ctx context.Context, agentID, removal string, sends int32, returned map[string]types.AttributeValue) (bool, error) {
	if sends < 2 {
		return false, nil
	}
	hb, err := s.readHeartbeat(ctx, agentID)
	if err != nil {
		return false, err
	}
	if hb == nil || hb.Removal != removal {
		return false, nil
	}
	registered := len(returned) > 0 // again, since: the tombstone made its clean start
	return hb.Removed != registered, nil
}

// bury replaces the heartbeat of agent a, read from the agents table, with
// the tombstone of its removal at now, named removal, unless the id was
// registered again since a (then buried is false). It returns the
// heartbeat the tombstone replaced when that was a live agent's: an agent
// already dead by it lost its leases then, not at its removal.
func (s *Store) bury(ctx context.Context, a *agentItem, now time.Time, removal string) (before *heartbeatItem, buried bool, err error) {
	// The tombstone keeps when the agent it buries was registered: a claim
	// receipt made before that is an earlier agent's of the id, not this
	// one's (removedAgentsReceipt).
	tomb := heartbeatItem{
		AgentID: a.AgentID, ExpiresAt: ms(now), AliveSince: ms(now), DeadAt: ms(now), Removed: true, Removal: removal, RegisteredAt: a.CreatedAt,
		Shard: shardOf(a.AgentID, s.shards.Lease), IndexAt: ms(now), TTL: now.Add(heartbeatRetention + MaxTimeout).Unix(),
	}
	item, err := attributevalue.MarshalMap(tomb)
	if err != nil {
		return nil, false, err
	}
	registered := expression.Name("registered_at")
	cond := expression.AttributeNotExists(registered).Or(registered.LessThanEqual(expression.Value(a.CreatedAt)))
	expr, _ := expression.NewBuilder().WithCondition(cond).Build()
	put, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.heartbeats, Item: item,
		ConditionExpression:       expr.Condition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
		ReturnValues:              types.ReturnValueAllOld,
	})
	if _, failed := conditionFailed(err); failed {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("mark %s removed: %w", a.AgentID, err)
	}
	if len(put.Attributes) > 0 {
		var hb heartbeatItem
		if attributevalue.UnmarshalMap(put.Attributes, &hb) == nil && !hb.Removed {
			before = &hb
		}
	}
	return before, true, nil
}

// restart gives an id that was removed before a clean start: its tombstone
// becomes a heartbeat item of an agent that has not sent one yet (so it is
// not watched), alive since now, so that every lease of the removed agent
// stays ended and watches placed before now are not this agent's. The
// tombstone's pending death stays, for the sweep to end those leases.
// Where the tombstone has expired (TTL) there is no item, and nothing is
// written: the agent item then says when the id was registered
// (createdAt), and so does the heartbeat item the agent's first heartbeat
// makes (armLowering).
//
// An id removed less than hold before now is not restarted: it returns
// when it may be (the removal's time plus hold), and writes nothing.
func (s *Store) restart(ctx context.Context, agentID string, now time.Time, hold time.Duration) (time.Time, error) {
	cond := expression.AttributeExists(expression.Name("agent_id"))
	if hold > 0 {
		cond = cond.And(expression.Or(expression.AttributeNotExists(expression.Name("removed")),
			expression.Name("dead_at").LessThanEqual(expression.Value(ms(now.Add(-hold))))))
	}
	upd := expression.Set(expression.Name("expires_at"), expression.Value(int64(math.MaxInt64))).
		Set(expression.Name("alive_since"), expression.Value(ms(now))).
		Set(expression.Name("registered_at"), expression.Value(ms(now))).
		Set(expression.Name("fresh"), expression.Value(true)).
		Remove(expression.Name("removed"))
	hb, applied, err := s.updateHeartbeat(ctx, agentID, cond, upd)
	if applied {
		// Alive since now: a lease locked in this millisecond is the
		// removed agent's, so the registration answers once it has passed.
		s.waitPast(ms(now))
	}
	if err != nil || applied || hb == nil || !hb.Removed {
		return time.Time{}, err
	}
	return fromMS(hb.DeadAt).Add(hold), nil
}

// clearInbox deletes every message of agentID, and the tombstones of those
// it deleted: all of its partition.
func (s *Store) clearInbox(ctx context.Context, agentID string) error {
	msgs, err := queryAll[messageItem](ctx, s.db, s.inbox, "", expression.Key("agent_id").Equal(expression.Value(agentID)))
	if err != nil {
		return err
	}
	var dels []types.WriteRequest
	for _, m := range msgs {
		dels = append(dels, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: map[string]types.AttributeValue{
			"agent_id":   &types.AttributeValueMemberS{Value: m.AgentID},
			"message_id": &types.AttributeValueMemberS{Value: m.MessageID},
		}}})
	}
	// An inbox keeps its unread messages for days, and may hold tens of
	// thousands: they are deleted 25 a request, sweepWorkers requests at
	// once.
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(sweepWorkers)
	for batch := range slices.Chunk(dels, 25) {
		g.Go(func() error {
			return s.batchWrite(gctx, map[string][]types.WriteRequest{s.inbox: batch})
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("clear inbox of %s: %w", agentID, err)
	}
	return nil
}

// GetAgent returns one agent, without its liveness. One GetItem.
func (s *Store) GetAgent(ctx context.Context, agentID string) (Agent, error) {
	if err := CheckID("agent_id", agentID); err != nil {
		return Agent{}, err
	}
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.agents, Key: agentKey(agentID)})
	if err != nil {
		return Agent{}, fmt.Errorf("get agent %s: %w", agentID, err)
	}
	var a agentItem
	if len(out.Item) == 0 || attributevalue.UnmarshalMap(out.Item, &a) != nil || a.Kind != "agent" {
		return Agent{}, ErrAgentNotFound
	}
	return a.agent(), nil
}

// createdAt is when the agents the ids name now were registered (their
// agent items' created_at), by one consistent BatchGetItem per 100; an id
// with no agent is left out.
//
// Whether a watch, or a message of one, is an earlier agent's of its id
// (placed before the id was registered again) is judged by the id's
// heartbeat item, which keeps its registration (heartbeatItem.registration:
// registered_at, written when a tombstone is turned into a registration,
// or created_at, copied from the agent item when a heartbeat makes the
// item). That item expires (TTL) a week after an agent's last heartbeat,
// or about 8 days after a removal, while a watch is kept 30 days (and
// TTL deletes late); so where the item is gone, the agent item says when
// the id was registered, which lives as long as the agent does. Read only
// then: a watcher that sends heartbeats has its item.
func (s *Store) createdAt(ctx context.Context, ids []string) (map[string]int64, error) {
	out := map[string]int64{}
	if len(ids) == 0 {
		return out, nil
	}
	got, err := batchGet[agentItem](ctx, s.db, s.agents, uniqueKeys(ids, agentKey), "", nil)
	if err != nil {
		return nil, fmt.Errorf("read agents: %w", err)
	}
	for _, a := range got {
		if a.Kind == "agent" {
			out[a.AgentID] = a.CreatedAt
		}
	}
	return out, nil
}

// mayOutliveHeartbeat says whether something an agent placed at at (Unix
// ms: a watch, a message of one) may have outlived, by now, the heartbeat
// item that would say its id was registered again since. An id is
// registered again only after a removal, whose tombstone (a heartbeat
// item, written at the removal, which is at or after at but for a removed
// agent's last requests) expires no sooner than heartbeatRetention after
// it (TTL never deletes early), as does every heartbeat item written after
// the registration again. So an agent with no heartbeat item sooner than
// that after at is the one that placed it, and no agent item need be read
// (createdAt). An hour's margin covers clocks apart.
func mayOutliveHeartbeat(at int64, now time.Time) bool {
	return ms(now)-at >= (heartbeatRetention - time.Hour).Milliseconds()
}

// registeredAfter says whether agentID, whose heartbeat item is hb (nil:
// none), was registered after at (Unix ms): a watch placed at at, or a
// message of it, is then an earlier agent's of the id. Removal is not
// judged here. It reads the agent item only when hb is nil and at is old
// enough for that to matter (mayOutliveHeartbeat).
func (s *Store) registeredAfter(ctx context.Context, agentID string, hb *heartbeatItem, at int64) (bool, error) {
	if hb != nil {
		return hb.registration() > at, nil
	}
	if !mayOutliveHeartbeat(at, s.clock()) {
		return false, nil
	}
	created, err := s.createdAt(ctx, []string{agentID})
	if err != nil {
		return false, err
	}
	return fromCreation(created[agentID]) > at, nil
}
