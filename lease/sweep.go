package lease

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease/schema"
)

// The sweep.
//
// The sweep finds expired leases by querying by_lease_expiry for
// lease_expires <= now in each shard, and agents to judge by querying
// heartbeats by_expiry for hb_expires <= now. hb_expires is when the sweep
// must next look at an agent: its expiry while it is alive, and the moment
// it died (dead_at) from its death until a sweep has ended that death's
// leases, even if it has come back meanwhile. If any agent is due, one
// read of the whole expiry index (every shard, every live lease) finds the
// leases of all of them, read first: only a due agent that holds one of
// them is judged, and one the index shows back from the dead long enough
// for its death to be settled (below). A dead agent that holds nothing has
// nothing to end. Each judged agent is confirmed by a consistent GetItem,
// the clock read before it: a dead agent's leases locked up to that instant
// have ended (every lease the pass shows was locked before it); a returned
// agent's leases locked up to its return (alive_since) have; an agent found
// alive with no death pending was a stale index entry and is left alone.
// Each lease so ended is ended by an UpdateItem conditioned on its exact
// holder, fence and locked_at (for timeouts, on lease_expires <= now), so
// of any number of concurrent sweeps and checkouts exactly one ends it and
// records its event.
//
// A dead agent stays in the index while it is dead, so a lease it takes
// while dead (its key still works) is ended by the sweep whose pass first
// shows it, as is one the pass missed to index lag; until its heartbeat
// item's TTL removes it (7 days) it costs its index entry in each sweep's
// Query, and its presence a read of every live lease per sweep, but no
// GetItem unless it holds a lease. A returned agent's death is settled (the
// index moves to its expiry) once a pass read more than settleAfter (30 s)
// after the return has been looked through, since the expiry index may lag
// that long. Nothing is ever scanned, and the cost of a sweep grows with
// the leases that need ending and the agents that hold them, not with the
// table or the agents that ever died.

// sweepWorkers bounds the leases one sweep ends at once: enough to keep a
// backlog of 10,000 ended in about 9 s on the local DynamoDB (16 left it
// idle between writes, at about 1,000 a second), and far below what a
// table's partitions take.
const sweepWorkers = 32

// Sweep ends the leases that have expired and the leases whose holder is dead
// by heartbeat, and that nobody has taken over yet. Each lease is ended by a
// conditional write on its exact holder and fence, so however many sweeps
// run at once, each lease ends once, with one event, and each watcher gets
// one message. Both passes Query sparse indexes; nothing is scanned.
func (s *Store) Sweep(ctx context.Context) (SweepResult, error) {
	now := s.clock()
	res, err := s.sweepExpired(ctx, now)
	if err != nil {
		return res, err
	}
	return s.sweepDead(ctx, now, res)
}

// SweepExpired is the sweep's first pass alone: it ends the leases that
// have expired and ranks ready the delayed tasks whose not_before has come,
// but judges no agent, so that it never reads the live leases a dead agent
// in the heartbeat index makes the full sweep read. A process that sweeps
// as soon as DueSince says a lease expired uses it.
func (s *Store) SweepExpired(ctx context.Context) (SweepResult, error) {
	return s.sweepExpired(ctx, s.clock())
}

// sweepExpired is the sweep's first pass, at now.
func (s *Store) sweepExpired(ctx context.Context, now time.Time) (SweepResult, error) {
	var res SweepResult
	// Expired leases are independent of one another: end them sweepWorkers
	// at a time, so that a backlog fits in one run.
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(sweepWorkers)
	for shard := range s.shards.Lease {
		keyCond := expression.Key("lease_shard").Equal(expression.Value(strconv.Itoa(shard))).
			And(expression.Key("lease_expires").LessThanEqual(expression.Value(ms(now))))
		items, err := s.queryTasks(gctx, schema.TasksByLeaseExpiry, keyCond)
		if err != nil {
			// An ending that failed ends gctx, and so this read: the
			// ending's error is the cause.
			if cause := g.Wait(); cause != nil {
				return res, cause
			}
			return res, err
		}
		for i := range items {
			it := &items[i]
			if it.Holder == "" {
				// A delayed task whose not_before has come (claim.go,
				// "Delays"): ranked as ready again.
				g.Go(func() error {
					ok, err := s.rankReady(gctx, it)
					if ok {
						mu.Lock()
						res.Ready++
						mu.Unlock()
					}
					return err
				})
				continue
			}
			g.Go(func() error {
				cond := pinnedTo(it).and(nameExpires.LessThanEqual(expression.Value(ms(now))))
				ended, err := s.sweepEnd(gctx, it, cond, EventTimeout, "lease expired", now, 0)
				if err != nil || !ended {
					return err
				}
				mu.Lock()
				res.Timeouts++
				mu.Unlock()
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	return res, nil
}

// sweepDead is the sweep's second pass, at now: it ends the leases of
// agents dead by heartbeat, adding them to res.
func (s *Store) sweepDead(ctx context.Context, now time.Time, res SweepResult) (SweepResult, error) {
	var mu sync.Mutex
	// The dead. The heartbeats index proposes the agents due: each dead
	// one until its heartbeat item expires (days), and each back from a
	// death not swept yet. Their leases are found in one pass over the live
	// leases, however many agents died, and that pass is read first: a
	// dead agent that holds none of them has nothing to end and is not
	// read. The others are judged by a consistent read of their heartbeat,
	// sweepWorkers at a time, like the expired leases: each due agent that
	// holds a lease, and each the index shows back from the dead long
	// enough for its death to be settled.
	var due []heartbeatItem
	for shard := range s.shards.Lease {
		keyCond := expression.Key("hb_shard").Equal(expression.Value(strconv.Itoa(shard))).
			And(expression.Key("hb_expires").LessThanEqual(expression.Value(ms(now))))
		got, err := queryAll[heartbeatItem](ctx, s.db, s.heartbeats, schema.HeartbeatsByExpiry, keyCond)
		if err != nil {
			return res, fmt.Errorf("sweep heartbeats: %w", err)
		}
		due = append(due, got...)
	}
	if len(due) == 0 {
		return res, nil
	}
	lookedAt := ms(s.clock()) // before the pass: every lease it shows was locked by then
	leases, err := s.liveLeaseEntries(ctx, nil)
	if err != nil {
		return res, err
	}
	holders := make(map[string]bool)
	for i := range leases {
		holders[leases[i].Holder] = true
	}
	deaths := map[string]death{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(sweepWorkers)
	for _, cand := range due {
		settles := cand.DeadAt > 0 && !cand.dead(now) && lookedAt > cand.AliveSince+settleAfter.Milliseconds()
		if !holders[cand.AgentID] && !settles {
			continue
		}
		g.Go(func() error {
			d, ok, err := s.judgeDeath(gctx, cand.AgentID, lookedAt)
			if ok {
				mu.Lock()
				deaths[cand.AgentID] = d
				mu.Unlock()
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	// An agent may die holding hundreds of leases, and a fleet that stops
	// at once leaves thousands: they are ended sweepWorkers at a time, like
	// the expired ones.
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(sweepWorkers)
	for i := range leases {
		it := &leases[i]
		d, ok := deaths[it.Holder]
		if !ok || it.LockedAt > d.upTo {
			continue
		}
		upTo, reason := d.upTo, reasonHeartbeat
		at := upTo
		if died := d.hb.diedAt(it.LockedAt, d.readAt); died != 0 {
			at = min(at, died) // when it died, not when the sweep saw it
		}
		if it.LockedAt <= d.removed {
			// Ended by the removal: stamped when it was removed, or when
			// locked, for a lease granted while the removal ran.
			upTo, at, reason = d.removed, min(d.removed, max(it.LockedAt, d.removedAt)), reasonRemoved
		}
		g.Go(func() error {
			ended, err := s.endDeadLease(gctx, it, upTo, at, reason)
			if ended {
				mu.Lock()
				res.AgentDeaths++
				mu.Unlock()
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return res, err
	}
	for _, d := range deaths {
		if d.settle != nil {
			if err := s.settleDeath(ctx, d.settle); err != nil {
				return res, err
			}
		}
	}
	return res, nil
}

// sweepEnd ends one lease found by the sweep and frees its task; its
// watchers are told through the change stream. ended is false when another
// writer got there first.
//
// cond must hold at any time after now (it pins the lease, and an expiry at
// or before now): a write that lost to a later transition of the task is
// tried again, under the same cond, at a time not before that transition.
// at, when not 0, is the ending's time, earlier than now (ending.at); a
// transition after it makes the ending's time the write's.
func (s *Store) sweepEnd(ctx context.Context, it *taskItem, cond terms, typ EventType, reason string, now time.Time, at int64) (bool, error) {
	// The attempt failed. The index does not say whether it was the
	// task's last: the ending is written for one that was not, and if its
	// condition fails on the limit alone, for one that was (the task
	// fails); one write either way but on a task's last attempt.
	//
	// Nor does it say whether the task waits for a not_before PATCHed
	// while it was held: the ending is written for a task that is ready,
	// and if its condition fails on that alone, it is written again with
	// the delay the item returned names (its delayed claim key and its
	// expiry entry, as a failed release's ending writes them), pinned to
	// that not_before and rank. So such a task ranks after the ready ones
	// from its ending on; one write but for it. Only the write that frees
	// the task is so conditioned (ending.freeIf): a task marked as waiting
	// on a reopened blocker is made blocked by its ending (endLease), whose
	// write takes its delay from the item the first write failed on.
	exhausted := false
	var waits *taskItem // the item read, when it waits for a not_before ahead
	// The ending names its write: one the SDK sent again (its answer lost:
	// sends.go) is refused on its own ending, and knows it, where another
	// sweep's ending of the lease in that millisecond is another's.
	write := writeID()
	for range retries(ctx) {
		e := ending{typ: typ, by: BySystem, reason: reason, status: StatusTodo, failed: true, exhausted: exhausted, at: at, write: write}
		c := cond.and(belowLimitCond())
		switch {
		case exhausted:
			c = cond.and(atLimitCond()) // failed, whatever its delay
		case waits == nil || waits.NotBefore <= ms(now):
			e.freeIf = terms{readyCond(now)}
		default:
			e.notBefore, e.rank = waits.NotBefore, waits.rank()
			e.freeIf = append(terms{nameNotBefore.Equal(expression.Value(waits.NotBefore))}, waits.rankIs()...)
		}
		wctx, sends := countSends(ctx)
		old, _, applied, err := s.endLease(wctx, it.TaskID, c, e, now, types.ReturnValueNone)
		switch {
		case err != nil:
			return false, err
		case applied:
			return true, nil
		case sends.Load() > 1 && old != nil && old.EndWrite == write:
			s.freedUnanswered(old) // this very ending, its answer lost
			return true, nil
		case at != 0 && old != nil && old.LastAt > at:
			at = 0 // a transition after it: the ending is stamped at its write
			now = s.clockAfter(old.LastAt)
		case lostToLater(old, now):
			now = s.clockAfter(old.LastAt)
		case old == nil || old.Holder != it.Holder || old.Fence != it.Fence || exhausted:
			return false, nil // ended by another writer, or decided by more than the limit
		case !old.belowLimit():
			exhausted = true
		case old.NotBefore > ms(now) && (waits == nil || old.NotBefore != waits.NotBefore || !old.rankPinned(waits)):
			waits = old
		case old.NotBefore <= ms(now) && waits != nil:
			waits = nil // its not_before was cleared or moved back in between
		default:
			return false, nil
		}
	}
	return false, nil
}

// settleAfter is how long after an agent's return from the dead the sweep
// keeps looking for leases it held when it died. The lease-expiry index it
// reads lags the table; this is far beyond DynamoDB's usual sub-second lag.
const settleAfter = 30 * time.Second

// death is what the sweep learned of one agent's death: its leases locked
// at or before upTo (Unix ms) have ended; those locked at or before removed
// ended by its removal (an id registered again keeps the removed agent's
// leases pending), at removedAt, the rest by its heartbeat. settle, when set, is the
// heartbeat of an agent whose return is old enough for the sweep to stop
// looking.
type death struct {
	upTo, removed int64
	// removedAt is when the agent was removed, as its tombstone says (or
	// removed, when it does not say).
	removedAt int64
	settle    *heartbeatItem
	// hb is the heartbeat judged, read at readAt: it says when the agent
	// died (heartbeatItem.diedAt).
	hb     *heartbeatItem
	readAt int64
}

// judgeDeath reads agentID's heartbeat consistently, for a candidate that
// the heartbeats index says is due (the index only proposes). If the agent
// is dead, every lease locked up to the moment of that read has ended; if
// it has come back since it died (a death not swept yet), the leases locked
// up to its return have. A dead agent stays in the index while it is dead,
// so that a lease it takes while dead is swept too; a returned one leaves
// it once its death is settled: once the pass over the live leases, read
// at lookedAt (Unix ms), was read more than settleAfter after the return.
func (s *Store) judgeDeath(ctx context.Context, agentID string, lookedAt int64) (death, bool, error) {
	readAt := s.clock() // before the read: the agent was dead at least until the read
	hb, err := s.readHeartbeat(ctx, agentID)
	if err != nil || hb == nil {
		return death{}, false, err
	}
	d := death{hb: hb, readAt: ms(readAt)}
	switch {
	case hb.dead(readAt):
		d.upTo = ms(readAt)
	case hb.DeadAt > 0:
		d.upTo = hb.AliveSince
	default:
		return death{}, false, nil // the index was behind: alive, nothing to end
	}
	d.removed = min(d.upTo, hb.removedUpTo(ms(readAt)))
	d.removedAt = d.removed
	if hb.DeadAt > 0 && (hb.Removed || hb.RegisteredAt > 0 && hb.DeadAt <= hb.RegisteredAt) {
		// The tombstone's time, kept as its pending death when the id
		// was registered again.
		d.removedAt = min(d.removed, hb.DeadAt)
	}
	if !hb.dead(readAt) && lookedAt > hb.AliveSince+settleAfter.Milliseconds() {
		d.settle = hb
	}
	return d, true, nil
}

// liveLeaseEntries reads the lease-expiry index whole, every shard at once:
// every lease on a task, live or not swept yet, with its holder, fence and
// lock time. With holder, only that agent's (a filter). It is how one
// agent's leases are found: no index is keyed by holder, so that a lease's
// grant and end write one lease index, not two.
func (s *Store) liveLeaseEntries(ctx context.Context, holder *string) ([]taskItem, error) {
	out := make([][]taskItem, s.shards.Lease)
	g, gctx := errgroup.WithContext(ctx)
	for shard := range s.shards.Lease {
		g.Go(func() error {
			b := expression.NewBuilder().WithKeyCondition(expression.Key("lease_shard").Equal(expression.Value(strconv.Itoa(shard))))
			if holder != nil {
				b = b.WithFilter(nameHolder.Equal(expression.Value(*holder)))
			} else {
				// Leases only, not delayed tasks (claim.go, "Delays").
				b = b.WithFilter(expression.AttributeExists(nameHolder))
			}
			expr, err := b.Build()
			if err != nil {
				return err
			}
			in := &dynamodb.QueryInput{
				TableName: &s.tasks, IndexName: aws.String(schema.TasksByLeaseExpiry),
				KeyConditionExpression:    expr.KeyCondition(),
				FilterExpression:          expr.Filter(),
				ExpressionAttributeNames:  expr.Names(),
				ExpressionAttributeValues: expr.Values(),
			}
			for p := dynamodb.NewQueryPaginator(s.db, in); p.HasMorePages(); {
				page, err := p.NextPage(gctx)
				if err != nil {
					return fmt.Errorf("read leases: %w", err)
				}
				var batch []taskItem
				if err := attributevalue.UnmarshalListOfMaps(page.Items, &batch); err != nil {
					return err
				}
				out[shard] = append(out[shard], batch...)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return slices.Concat(out...), nil
}

// leasesOf is one agent's leases, as the lease-expiry index proposes them.
func (s *Store) leasesOf(ctx context.Context, agentID string) ([]taskItem, error) {
	return s.liveLeaseEntries(ctx, &agentID)
}

// endDeadLease ends one lease of an agent whose death ended its leases
// locked up to upTo, recording agent_death. The index only proposes: the
// write is conditioned on that exact lease and on locked_at, so a lease the
// agent took after coming back to life is left alone. Its event is
// stamped at `at`: when the agent died (its heartbeat's expiry, not
// after upTo), or when the death was seen if that is not known (upTo: for
// an agent that came back, its return, which the event must not fall
// after); never before the lease was locked, and later when the lease's
// latest transition is later (sweepEnd keeps the time rule); its write is
// made at the sweep's time, which is where the fleet feed lists it
// (feed.go), so that the feed's followers, who have read past upTo, see
// it.
//
// A lease whose own expiry had passed when the death was seen ended by
// that expiry, as a takeover at that moment would have said: it is
// recorded as a timeout, held until it expired. The two writes'
// conditions are disjoint on the expiry, which only a renewal moves, and
// only later: an entry that shows the lease expired may lag a renewal,
// and then the death's write is the one that applies.
func (s *Store) endDeadLease(ctx context.Context, it *taskItem, upTo, at int64, reason string) (bool, error) {
	cond := pinnedTo(it).and(expression.Name("locked_at").LessThanEqual(expression.Value(upTo)))
	now := s.clockAfter(upTo)
	if it.LeaseExpires <= upTo {
		expired := cond.and(nameExpires.LessThanEqual(expression.Value(upTo)))
		if ended, err := s.sweepEnd(ctx, it, expired, EventTimeout, "lease expired", now, 0); ended || err != nil {
			return ended, err
		}
	}
	died := cond.and(nameExpires.GreaterThan(expression.Value(upTo)))
	return s.sweepEnd(ctx, it, died, EventAgentDeath, reason, now, max(at, it.LockedAt))
}

// endLeasesOf ends every lease agentID holds that was locked at or before
// upTo (Unix ms), recording agent_death (or timeout: endDeadLease) by
// reason at upTo; a lease that hb (the agent's heartbeat before, read at
// upTo; nil: none) says ended by an earlier death, by its heartbeat then.
// An id registered again since is the new agent's from its registration
// on: only leases locked up to then are ended (as the sweep does).
func (s *Store) endLeasesOf(ctx context.Context, agentID string, upTo int64, reason string, hb *heartbeatItem) (ended int, err error) {
	items, err := s.leasesOf(ctx, agentID)
	if err != nil || len(items) == 0 {
		return 0, err
	}
	// Read after the leases, the heartbeat shows the registration of any
	// new agent whose lease they show. Its registration's clock, another
	// process's, may read before upTo.
	cur, err := s.readHeartbeat(ctx, agentID)
	if err != nil {
		return 0, err
	}
	if cur != nil && !cur.Removed {
		upTo = min(upTo, cur.AliveSince)
	}
	// An agent may hold hundreds of leases: they are ended sweepWorkers
	// at a time, as the sweep ends them.
	var count atomic.Int64
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(sweepWorkers)
	for i := range items {
		at, why := upTo, reason
		if died := hb.diedAt(items[i].LockedAt, upTo); died != 0 && died <= upTo {
			at, why = died, reasonHeartbeat
		}
		g.Go(func() error {
			ok, err := s.endDeadLease(gctx, &items[i], upTo, at, why)
			if ok {
				count.Add(1)
			}
			return err
		})
	}
	err = g.Wait()
	return int(count.Load()), err
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

// rankReady gives a delayed task whose not_before has come its ready
// claim_key back, and takes it out of the expiry index: one write, pinned
// to the entry read (no lease, the same expiry). ok is false when another
// write moved the task first (a grant: it ranks the task itself). Like
// keepDelay it changes nothing the task shows, so it moves no version: an
// If-Match PATCH of what a client read before still holds.
func (s *Store) rankReady(ctx context.Context, it *taskItem) (bool, error) {
	cond := terms{expression.AttributeNotExists(nameHolder), nameExpires.Equal(expression.Value(it.LeaseExpires))}
	upd := expression.Set(expression.Name("claim_key"), expression.IfNotExists(expression.Name("claim_rank"), expression.Name("claim_key"))).
		Remove(expression.Name("claim_rank")). // ready: its key is its rank
		Remove(nameExpires).Remove(expression.Name("lease_shard"))
	// The item back (no read units), for its queue: the index entry read
	// has none.
	wctx, sends := countSends(ctx)
	after, applied, err := s.write(wctx, it.TaskID, cond, upd, types.ReturnValueAllNew)
	if !applied && err == nil && sends.Load() > 1 && after != nil && !after.hasLease() && after.LeaseExpires == 0 &&
		after.ClaimKey != "" && after.ClaimKey == after.rank() {
		// Sent again (its answer lost: sends.go) and refused on a task
		// ranked ready with no expiry entry: by its own first sending, or
		// by writes just like it (a grant and its release), whose wake
		// costs the claims a look at most.
		applied = true
	}
	if applied {
		s.claims.wake(wokenQueue(after))
	}
	return applied, err
}

// Now is the store's clock: the time its sweeps and leases are judged by.
func (s *Store) Now() time.Time { return s.clock() }

// DueSince says whether a sweep run at now would find something that one
// run at since could not: a lease expiry, a delayed task's not_before or
// an agent's heartbeat expiry in (since, now], and which. It answers the
// now it judged by, and costs one Query of at most one key a shard of each
// expiry index (SELECT COUNT, Limit 1; fewer once both are found),
// whatever the leases and agents: a
// process that sweeps on a long interval can ask it often and sweep at
// once when it says so, so that a lease's timeout, a holder's death or a
// delayed task's readiness is recorded (and its holder and watchers told)
// within the asking's interval, not the sweep's.
func (s *Store) DueSince(ctx context.Context, since time.Time) (now time.Time, due Due, err error) {
	now = s.clock()
	if ms(now) <= ms(since) { // nothing in (since, now] to the millisecond
		return now, due, nil
	}
	from, to := expression.Value(ms(since)+1), expression.Value(ms(now))
	for shard := range s.shards.Lease {
		sh := expression.Value(strconv.Itoa(shard))
		for _, q := range []struct {
			table, index, part, sort string
			found                    *bool
		}{
			{s.tasks, schema.TasksByLeaseExpiry, "lease_shard", "lease_expires", &due.Leases},
			{s.heartbeats, schema.HeartbeatsByExpiry, "hb_shard", "hb_expires", &due.Agents},
		} {
			if *q.found {
				continue // one is enough to sweep for
			}
			keyCond := expression.Key(q.part).Equal(sh).And(expression.Key(q.sort).Between(from, to))
			expr, err := expression.NewBuilder().WithKeyCondition(keyCond).Build()
			if err != nil {
				return now, Due{}, err
			}
			out, err := s.db.Query(ctx, &dynamodb.QueryInput{
				TableName:                 aws.String(q.table),
				IndexName:                 aws.String(q.index),
				KeyConditionExpression:    expr.KeyCondition(),
				ExpressionAttributeNames:  expr.Names(),
				ExpressionAttributeValues: expr.Values(),
				Select:                    types.SelectCount,
				Limit:                     aws.Int32(1),
			})
			if err != nil {
				return now, Due{}, fmt.Errorf("sweep due: query %s %s: %w", q.table, q.index, err)
			}
			*q.found = out.Count > 0
		}
		if due.Leases && due.Agents {
			break
		}
	}
	return now, due, nil
}

// Due is what DueSince found fallen due: a lease's expiry or a delayed
// task's not_before (Leases: SweepExpired ends or ranks it), an agent's
// heartbeat expiry (Agents: the whole Sweep judges it).
type Due struct{ Leases, Agents bool }

// Any says whether anything fell due.
func (d Due) Any() bool { return d.Leases || d.Agents }

// nextDueWorkers bounds the Queries NextDue has in flight at once.
const nextDueWorkers = 8

// NextDue finds the earliest lease expiry or delayed task's not_before in
// (since.Leases, before] and the earliest heartbeat expiry in
// (since.Agents, before]: next.Leases and next.Agents (zero when there is
// none). now is the store's clock it judged by. A moment not after now
// has fallen due already (a since is the start of the last sweep that
// succeeded for that kind, so that what fell due while it ran is not
// missed); a later one is when to sweep next, as far as the indexes know
// now: a lease granted afterwards may expire sooner, and a renewal or a
// heartbeat may move the one found later. Leases are what SweepExpired
// ends or ranks; agents what the whole Sweep judges. The windows are
// apart because a process may sweep one kind more often than the other.
//
// It costs one Query per shard of each expiry index (32 with the default
// shard counts): ascending, Limit 1, projecting the sort key alone, so each
// reads at most one index entry (0.5 read units, eventually consistent),
// whatever the leases and agents; none for an empty window. A process that
// sweeps on a long schedule asks it after each sweep and sleeps until the
// next moment, to record a lease's timeout, a holder's death or a delayed
// task's readiness (and tell its holder and watchers) as it falls due.
func (s *Store) NextDue(ctx context.Context, since Expiries, before time.Time) (now time.Time, next Expiries, err error) {
	now = s.clock()
	indexes := []struct {
		table, index, part, sort string
		since                    time.Time
	}{
		{s.tasks, schema.TasksByLeaseExpiry, "lease_shard", "lease_expires", since.Leases},
		{s.heartbeats, schema.HeartbeatsByExpiry, "hb_shard", "hb_expires", since.Agents},
	}
	// earliest[i][shard] is index i's earliest entry in the window in that
	// shard (0: none).
	earliest := make([][]int64, len(indexes))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(nextDueWorkers)
	for i, q := range indexes {
		earliest[i] = make([]int64, s.shards.Lease)
		from, to := ms(q.since)+1, ms(before)
		if to < from {
			continue // an empty window (a millisecond's part is no window)
		}
		for shard := range s.shards.Lease {
			g.Go(func() error {
				keyCond := expression.Key(q.part).Equal(expression.Value(strconv.Itoa(shard))).And(expression.Key(q.sort).Between(expression.Value(from), expression.Value(to)))
				expr, err := expression.NewBuilder().WithKeyCondition(keyCond).
					WithProjection(expression.NamesList(expression.Name(q.sort))).Build()
				if err != nil {
					return err
				}
				out, err := s.db.Query(gctx, &dynamodb.QueryInput{
					TableName:                 aws.String(q.table),
					IndexName:                 aws.String(q.index),
					KeyConditionExpression:    expr.KeyCondition(),
					ProjectionExpression:      expr.Projection(),
					ExpressionAttributeNames:  expr.Names(),
					ExpressionAttributeValues: expr.Values(),
					ScanIndexForward:          aws.Bool(true),
					Limit:                     aws.Int32(1),
				})
				if err != nil {
					return fmt.Errorf("sweep next due: query %s %s: %w", q.table, q.index, err)
				}
				if len(out.Items) == 0 {
					return nil
				}
				var entry map[string]int64
				if err := attributevalue.UnmarshalMap(out.Items[0], &entry); err != nil {
					return fmt.Errorf("sweep next due: %s %s: %w", q.table, q.index, err)
				}
				earliest[i][shard] = entry[q.sort]
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return now, Expiries{}, err
	}
	first := func(i int) time.Time { // index i's earliest in its window
		var t int64
		for _, at := range earliest[i] {
			if at != 0 && (t == 0 || at < t) {
				t = at
			}
		}
		if t == 0 {
			return time.Time{}
		}
		return time.UnixMilli(t)
	}
	return now, Expiries{Leases: first(0), Agents: first(1)}, nil
}

// Expiries holds a moment for each kind of expiry a sweep looks for: the
// lease expiry index's (leases' timeouts and delayed tasks' not_before)
// and the heartbeat index's (agents' deaths). The zero time stands for
// none.
type Expiries struct{ Leases, Agents time.Time }
