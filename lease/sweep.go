package lease

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"

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
		due, err := queryAll[heartbeatItem](ctx, s.db, s.heartbeats, schema.HeartbeatsByExpiry, keyCond)
		if err != nil {
			return res, fmt.Errorf("sweep heartbeats: %w", err)
		}
		for _, cand := range due {
			ended, notified, err := s.sweepDeath(ctx, cand.AgentID)
			if err != nil {
				return res, err
			}
			res.AgentDeaths += ended
			res.Notified += notified
		}
	}
	return res, nil
}

// sweepEnd ends one lease found by the sweep and frees its task. It returns
// the number of watchers the change stream is to tell, or -1 when another
// writer got there first.
//
// cond must hold at any time after now (it pins the lease, and an expiry at
// or before now): a write that lost to a later transition of the task is
// tried again, under the same cond, at a time not before that transition.
func (s *Store) sweepEnd(ctx context.Context, it *taskItem, cond expression.ConditionBuilder, typ EventType, reason string, now time.Time) (int, error) {
	for range maxAttempts {
		old, _, applied, err := s.endLease(ctx, it.TaskID, cond, ending{typ: typ, by: BySystem, reason: reason, status: StatusTodo}, now)
		switch {
		case err != nil:
			return -1, err
		case applied:
			return len(old.Watchers), nil
		case !lostToLater(old, now):
			return -1, nil
		}
		now = s.clockAfter(old.LastAt)
	}
	return -1, nil
}

// settleAfter is how long after an agent's return from the dead the sweep
// keeps looking for leases it held when it died. The by_holder index it
// reads lags the table; this is far beyond DynamoDB's usual sub-second lag.
const settleAfter = 30 * time.Second

// sweepDeath ends the leases that agentID's death ended, for a candidate
// that the heartbeats index says is due. The index is only a candidate: a
// consistent read decides. If the agent is dead, every lease locked up to
// the moment of that read has ended; if it has come back since it died (a
// death not swept yet), the leases locked up to its return have. A dead
// agent stays in the index while it is dead, so that a lease it takes while
// dead is swept too; a returned one leaves it once its death is settled.
func (s *Store) sweepDeath(ctx context.Context, agentID string) (ended, notified int, err error) {
	readAt := s.clock() // before the read: the agent was dead at least until the read
	hb, err := s.readHeartbeat(ctx, agentID)
	if err != nil || hb == nil {
		return 0, 0, err
	}
	var upTo int64
	switch {
	case hb.dead(readAt):
		upTo = ms(readAt)
	case hb.DeadAt > 0:
		upTo = hb.AliveSince
	default:
		return 0, 0, nil // the index was behind: alive, nothing to end
	}
	// The leases its removal ended (an id registered again keeps the
	// removed agent's leases pending) first, then those its death ended.
	removed := min(upTo, hb.removedUpTo(ms(readAt)))
	if removed > 0 {
		if ended, notified, err = s.endLeasesOf(ctx, agentID, removed, reasonRemoved); err != nil {
			return ended, notified, err
		}
	}
	if removed < upTo {
		more, told, err := s.endLeasesOf(ctx, agentID, upTo, reasonHeartbeat)
		ended, notified = ended+more, notified+told
		if err != nil {
			return ended, notified, err
		}
	}
	if !hb.dead(readAt) && ms(readAt) > hb.AliveSince+settleAfter.Milliseconds() {
		err = s.settleDeath(ctx, hb)
	}
	return ended, notified, err
}

// endLeasesOf ends every lease agentID holds that was locked at or before
// upTo (Unix ms), recording agent_death. The by_holder index only proposes:
// each ending write is conditioned on that exact lease and on locked_at, so
// a lease the agent took after coming back to life is left alone.
func (s *Store) endLeasesOf(ctx context.Context, agentID string, upTo int64, reason string) (ended, notified int, err error) {
	items, err := s.queryTasks(ctx, schema.TasksByHolder, expression.Key("holder").Equal(expression.Value(agentID)))
	if err != nil {
		return 0, 0, err
	}
	for i := range items {
		it := &items[i]
		cond := nameHolder.Equal(expression.Value(agentID)).
			And(nameFence.Equal(expression.Value(it.Fence)),
				expression.Name("locked_at").LessThanEqual(expression.Value(upTo)))
		// Stamped when the death was seen (upTo), or later when the
		// lease's latest transition is later (sweepEnd keeps the time rule).
		n, err := s.sweepEnd(ctx, it, cond, EventAgentDeath, reason, fromMS(upTo))
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

// settleDeath ends the sweep's interest in a death the agent came back
// from: the agent is indexed at its expiry again. It is conditioned on the
// return that was read, so a later death is not forgotten.
func (s *Store) settleDeath(ctx context.Context, hb *heartbeatItem) error {
	cond := expression.Name("alive_since").Equal(expression.Value(hb.AliveSince)).
		And(expression.AttributeExists(expression.Name("dead_at")))
	upd := expression.Set(expression.Name("hb_expires"), expression.Name("expires_at")).Remove(expression.Name("dead_at"))
	_, _, err := s.updateHeartbeat(ctx, hb.AgentID, cond, upd)
	return err
}
