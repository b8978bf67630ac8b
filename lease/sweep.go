package lease

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease/schema"
)

// sweepWorkers bounds the leases one sweep ends at once.
const sweepWorkers = 16

// Sweep ends the leases that have expired and the leases whose holder is dead
// by heartbeat, and that nobody has taken over yet. Each lease is ended by a
// conditional write on its exact holder and fence, so however many sweeps
// run at once, each lease ends once, with one event, and each watcher gets
// one message. Both passes Query sparse indexes; nothing is scanned.
func (s *Store) Sweep(ctx context.Context) (SweepResult, error) {
	var res SweepResult
	now := s.clock()
	// Expired leases are independent of one another: end them sweepWorkers
	// at a time, so that a backlog fits in one run.
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(sweepWorkers)
	for shard := range schema.Shards {
		keyCond := expression.Key("lease_shard").Equal(expression.Value(strconv.Itoa(shard))).
			And(expression.Key("lease_expires").LessThanEqual(expression.Value(ms(now))))
		items, err := s.queryTasks(gctx, schema.TasksByLeaseExpiry, keyCond)
		if err != nil {
			_ = g.Wait()
			return res, err
		}
		for i := range items {
			it := &items[i]
			g.Go(func() error {
				cond := nameHolder.Equal(expression.Value(it.Holder)).
					And(nameFence.Equal(expression.Value(it.Fence)),
						nameExpires.LessThanEqual(expression.Value(ms(now))))
				n, err := s.sweepEnd(gctx, it, cond, EventTimeout, "lease expired", now)
				if err != nil || n < 0 {
					return err
				}
				mu.Lock()
				res.Timeouts++
				res.Notified += n
				mu.Unlock()
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	for shard := range schema.Shards {
		keyCond := expression.Key("hb_shard").Equal(expression.Value(strconv.Itoa(shard))).
			And(expression.Key("hb_expires").LessThanEqual(expression.Value(ms(now))))
		dead, err := queryAll[heartbeatItem](ctx, s.db, s.heartbeats, schema.HeartbeatsByExpiry, keyCond)
		if err != nil {
			return res, fmt.Errorf("sweep heartbeats: %w", err)
		}
		for _, hb := range dead {
			ended, notified, err := s.endLeasesOf(ctx, hb.AgentID, now, "holder's heartbeat expired", hb.ExpiresAt)
			if err != nil {
				return res, err
			}
			res.AgentDeaths += ended
			res.Notified += notified
			if err := s.forgetDead(ctx, hb); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// sweepEnd ends one lease found by the sweep and frees its task. It returns
// the number of watchers told, or -1 when another writer got there first.
func (s *Store) sweepEnd(ctx context.Context, it *taskItem, cond expression.ConditionBuilder, typ EventType, reason string, now time.Time) (int, error) {
	after, applied, err := s.endLease(ctx, it.TaskID, cond, ending{typ: typ, by: BySystem, reason: reason, status: StatusTodo}, now)
	if err != nil || !applied {
		return -1, err
	}
	return len(after.EndWatchers), nil
}

// endLeasesOf ends every lease agentID holds that was taken at or before
// diedAt (0: every lease, for a removed agent), recording agent_death. A lease
// the agent took after coming back to life is left alone by the condition on
// locked_at.
func (s *Store) endLeasesOf(ctx context.Context, agentID string, now time.Time, reason string, diedAt int64) (ended, notified int, err error) {
	items, err := s.queryTasks(ctx, schema.TasksByHolder, expression.Key("holder").Equal(expression.Value(agentID)))
	if err != nil {
		return 0, 0, err
	}
	for i := range items {
		it := &items[i]
		cond := nameHolder.Equal(expression.Value(agentID)).And(nameFence.Equal(expression.Value(it.Fence)))
		if diedAt > 0 {
			cond = cond.And(expression.Name("locked_at").LessThanEqual(expression.Value(ms(now))))
		}
		n, err := s.sweepEnd(ctx, it, cond, EventAgentDeath, reason, now)
		if err != nil {
			return ended, notified, err
		}
		if n >= 0 {
			ended++
			notified += n
		}
	}
	return ended, notified, nil
}

// forgetDead takes a dead agent out of the sweep's index once its leases are
// ended, unless it has sent a heartbeat since (which puts it back in).
func (s *Store) forgetDead(ctx context.Context, hb heartbeatItem) error {
	cond := expression.Name("expires_at").Equal(expression.Value(hb.ExpiresAt))
	upd := expression.Remove(expression.Name("hb_shard")).Remove(expression.Name("hb_expires"))
	expr, _ := expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.heartbeats, Key: agentKey(hb.AgentID),
		ConditionExpression:       expr.Condition(),
		UpdateExpression:          expr.Update(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	})
	if _, failed := conditionFailed(err); failed {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sweep heartbeat of %s: %w", hb.AgentID, err)
	}
	return nil
}
