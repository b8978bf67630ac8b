package lease

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Heartbeats and death.
//
// A heartbeat item holds expires_at, last_at and alive_since. An agent with
// no heartbeat item is not watched: its leases end by time alone. An agent is
// dead once expires_at <= now; a lease is ended by death when its holder is
// dead or when it was locked at or before the holder's alive_since, the
// moment the agent last came back from the dead. So a lease held when its holder died
// stays ended after the holder returns, and a lease an agent took while dead
// can be taken over at once. A heartbeat is one conditional UpdateItem that
// keeps alive_since while the agent is alive; if the condition fails the
// agent was dead, and a second write moves alive_since to now.
//
// "At or before" matters when a dead agent takes a lease and comes back in
// the same millisecond: another checkout may have read it dead and be taking
// that lease over, so the lease must stay ended rather than come back to
// life under it. The takeover's condition also pins the lease's expiry as it
// was read: a holder that came back and renewed in between makes the
// takeover fail and the lease be judged again. The price is that an agent
// returning from the dead and checking out within that same millisecond gets
// a lease that is already ended; its first renewal tells it so.
//
// A read that finds an agent alive is remembered for at most
// MinHeartbeatTTL and never past the heartbeat's expiry (aliveCache), which
// is exact: no heartbeat that lands after the read can make the agent dead
// sooner, as one that moves the expiry earlier is armed first.
// So a storm of conflicts over one task costs each loser its failed write
// alone, after the first has read the holder's heartbeat. Deaths are never
// remembered.
//
// Renew, release and complete read the caller's heartbeat (through the
// alive cache) and condition their write on locked_at > alive_since: a lease
// ended by its holder's death is ended exactly like an expired one, whether
// or not a sweep has run and whether or not the holder has come back, so
// its holder gets not_checked_out (or not_holder when another lease is
// live). A force release judges the lease, holder's heartbeat included,
// before its write, which is pinned to that lease.
//
// The time rule (doc.go, "Time only moves forward") for heartbeats and
// deaths:
//
// A heartbeat's time is the time it was read, but it matters from when its
// write lands: one that lands after the expiry it replaced may land after
// the agent was seen dead and its leases ended. The clock is read again
// after the write; if it is past that expiry, the heartbeat is made a
// return from the dead at that time (a second write: alive_since and
// dead_at), so the leases that death ended stay ended and no death seen
// before falls inside the life the answer states. The expiry it replaced
// comes from the write's old image, or, when the SDK sent the write again
// because the first answer was lost, from prior_expires on the item: the
// write is conditioned on not being there already, so the second sending
// fails and finds the first's own record of what it replaced, where its
// old image would be the first sending's result, alive. The price is that a
// heartbeat landing within its own latency of the expiry ends the agent's
// leases, as one landing late would; clients heartbeat at a third of the
// ttl. One landing within clockMargin of the expiry is made a return too,
// so that a process whose clock is that far ahead, and saw the agent
// dead, is not contradicted for ever (deathCache). Until the second write
// lands (one request's time) a reader may see the agent alive and its
// unswept leases live. A return from the dead is,
// for the same reason, made once more at the clock read after its write
// when the clock has moved on by then (returns only: one more write).
// The first write marks the return pending (return_pending) and the last
// removes the mark (a write more when the clock had not moved on after
// all). Another heartbeat of the agent may land between the two writes:
// it finds the agent alive by the first, keeps its alive_since and the
// mark, by which no alive cache keeps that alive_since while it may move,
// however many heartbeats land. The second write then fails its pin, and
// alive_since alone is moved to the clock read just after the first write
// landed (no death seen before is later), then the heartbeat starts again
// as an ordinary one (up to two more writes). Either way, a move of
// alive_since made after a sweep settled the death (the first answer slow
// past settleAfter) marks the death pending again (dead_at, hb_expires), so
// the sweep ends the leases the move ended. The price, as for a late
// write's return (landed): a lease the agent took after that other
// heartbeat's answer but before that clock was read ends. A
// return's write that the SDK sent again (sends.go) fails its condition on
// its first sending's result; when it was sent more than once and the item
// is that write's (its last_at, expiry and alive_since, no prior_expires),
// it is judged as applied, so the return is still made once more.
//
// Deaths are stamped when the agent died, not when their write lands: the
// expiry of the heartbeat that ran out, as the consistent read that found
// the holder dead (or back from the dead, dead_at) shows it
// (heartbeatItem.diedAt); for a lease taken while dead, its lock. When
// that read does not say (a return whose death was settled, or a read made
// before the lease was locked, which the death cache may still remember),
// the time the death was seen stands in. The sweep's ending, a cancel's and a
// takeover's agent_death event (prev_end_at) carry that time, raised to
// the lease's latest transition where needed, so held_seconds runs to the
// death.

// aliveCache remembers, for a moment, that an agent is alive, so that a
// storm of conflicts over one task reads its holder's heartbeat once rather
// than once per loser.
//
// It is exact, not a guess. An entry says "alive" (or "never sent a
// heartbeat", which also counts as alive), read by a consistent GetItem at
// fetched, and is used only before min(fetched + MinHeartbeatTTL, the
// heartbeat's expires_at). Within that window no fresh read could say
// otherwise, because no heartbeat write that lands after the read moves the
// expiry below both:
//
//   - an ordinary heartbeat is conditioned on not moving expires_at
//     earlier, so it leaves the agent alive at least until the expiry read;
//   - a heartbeat that would move it earlier (a shorter ttl), or an agent's
//     first (from "never sent one"), first arms the lowering: a write that
//     changes no expiry and sets lowering. Only then, at a time read after
//     that write landed, is the expiry stamped, in a write pinned to the
//     arming. A read before the arming landed was made before that time,
//     so the new expiry, at least MinHeartbeatTTL after it, is not before
//     its window ends; a read after it sees lowering and is not cached.
//
// A heartbeat whose time was read long before it lands is the case this
// guards: stamped when read, it could otherwise land after a read and
// expire before that read's window ends. alive_since only moves when a dead
// agent returns. Deaths are never cached: a dead agent may come back at
// any moment. The price is two more writes (the ordinary one fails, then
// the arming and the stamp) for an agent's first heartbeat and for one that
// shortens the ttl, which agents rarely do.
type aliveCache struct {
	mu sync.Mutex
	m  map[string]aliveEntry
	// forgets counts, per agent, the forgets so far: a read that began
	// before a forget (a heartbeat read racing a removal) is not put back.
	forgets map[string]uint64
}

type aliveEntry struct {
	hb    *heartbeatItem // nil: never sent a heartbeat
	until int64          // ms: usable while now < until
}

// clockMargin is the clock skew between processes the death cache allows
// for (deathCache): a heartbeat landing within it of the agent's expiry is
// made a return from the dead, as one landing after it is. Lambda hosts
// keep their clocks well within it.
const clockMargin = 50 * time.Millisecond

// returnMayFollow says whether hb may have been written by a heartbeat that
// landed within clockMargin of the expiry it replaced, or after it, before
// by (Unix ms): its return from the dead (a second write, moving
// alive_since) may still be on its way. A heartbeat's own time is read
// before it is sent, so when it landed is known only to be before the
// read that found it. A return's own write (alive_since = last_at) makes
// no return follow, but may itself be made once more (aliveCache.put).
func (hb *heartbeatItem) returnMayFollow(by int64) bool {
	return hb != nil && hb.PriorExpires != 0 && hb.AliveSince < hb.LastAt &&
		hb.PriorExpires-clockMargin.Milliseconds() <= by
}

// returnMayBeMadeAgain says whether hb is a return's write, or an ordinary
// heartbeat's that replaced one (prior_last) or followed one still marked
// pending (return_pending: any number of heartbeats may land in between),
// while the return may still be made once more, later (Heartbeat), moving
// alive_since. Not judged by dead_at: a sweep may settle the death
// (removing it) before the return is made once more.
func (hb *heartbeatItem) returnMayBeMadeAgain() bool {
	return hb != nil && hb.AliveSince > 0 &&
		(hb.AliveSince == hb.LastAt || hb.AliveSince == hb.PriorLast || hb.ReturnPending)
}

// aliveCacheMax bounds the entries; the cache is emptied when it is full.
const aliveCacheMax = 10_000

func (c *aliveCache) get(agentID string, now int64) (*heartbeatItem, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[agentID]
	if !ok || now >= e.until {
		return nil, false
	}
	return e.hb, true
}

// epoch is what put needs to know that no forget came in between: take it
// before the read.
func (c *aliveCache) epoch(agentID string) uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.forgets[agentID]
}

// putRead remembers hb, read at now after epoch was taken, unless the agent
// was forgotten meanwhile (its read may predate a removal). A heartbeat's
// own answer is such a read, and is put back the same way.
func (c *aliveCache) putRead(agentID string, hb *heartbeatItem, now int64, epoch uint64) {
	c.mu.Lock()
	stale := c.forgets[agentID] != epoch
	c.mu.Unlock()
	if !stale {
		c.put(agentID, hb, now)
	}
}

// put remembers hb, read at now, if it says the agent is alive.
func (c *aliveCache) put(agentID string, hb *heartbeatItem, now int64) {
	until := now + MinHeartbeatTTL.Milliseconds()
	if hb != nil {
		margin := clockMargin.Milliseconds()
		if hb.ExpiresAt-margin <= now {
			// Dead, or within clockMargin of its expiry, where a heartbeat
			// landing is made a return from the dead (Heartbeat): it may
			// come back at any moment, ending the leases it holds.
			return
		}
		if hb.Lowering {
			return // its expiry may be moved earlier at any moment
		}
		if hb.returnMayFollow(until) {
			// Its alive_since may be about to move. (Judged up to until:
			// a read that ended later than that found an entry it would
			// not use anyway.)
			return
		}
		if hb.returnMayBeMadeAgain() {
			// Not kept while the return may still be made once more:
			// until its last write removes the pending mark, or an
			// ordinary heartbeat replaces an item no mark is on.
			return
		}
		until = min(until, hb.ExpiresAt-margin)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= aliveCacheMax {
		c.m = make(map[string]aliveEntry)
	}
	c.m[agentID] = aliveEntry{hb: hb, until: until}
}

func (c *aliveCache) forget(agentID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, agentID)
	if c.forgets == nil || len(c.forgets) >= aliveCacheMax {
		c.forgets = make(map[string]uint64)
	}
	c.forgets[agentID]++
}

// deathCache remembers, per agent, the latest moment it was read dead. That
// is exact for ever, up to clockMargin: an agent dead at r has ended every
// lease locked at or before r - clockMargin, and those stay ended whether
// or not it comes back. Its return moves alive_since past them: a
// heartbeat landing after the read, by a clock at most clockMargin behind
// this one, finds the agent dead, or within clockMargin of its expiry, and
// is made a return. (Without the margin a clock behind could take it as an
// ordinary heartbeat, and a lease the agent then took at or before r would
// be live everywhere but here, for ever.) So a storm of checkouts over a
// dead agent's leases reads its heartbeat once. Leases locked after
// r - clockMargin are judged afresh.
type deathCache struct {
	mu sync.Mutex
	m  map[string]int64 // agent -> ms at or before which its leases have ended
	// seen: agent -> the heartbeat that showed its latest death, and when
	// it was read, which say when that death happened (diedAt).
	seen map[string]deathRead
	// removed: agent -> ms at or before which its leases ended by its
	// removal (the id's tombstone, or its registration again after one), so
	// that their ending is recorded as "agent removed".
	removed map[string]int64
}

// removedUpTo is the lock time up to which agentID's leases are known to
// have ended by its removal (0: none known).
func (c *deathCache) removedUpTo(agentID string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.removed[agentID]
}

// noteRemoval remembers what hb, read at readAt, says of the agent's
// removal. A removal is for ever: what it ended stays ended by it.
func (c *deathCache) noteRemoval(agentID string, hb *heartbeatItem, readAt int64) {
	upTo := hb.removedUpTo(readAt)
	if upTo == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.removed == nil || len(c.removed) >= aliveCacheMax {
		c.removed = make(map[string]int64)
	}
	c.removed[agentID] = max(c.removed[agentID], upTo)
}

// deathRead is a heartbeat read dead, or back from the dead.
type deathRead struct {
	hb     heartbeatItem
	readAt int64
}

// noteDeath remembers hb, read at readAt, as the record of agentID's
// latest death.
func (c *deathCache) noteDeath(agentID string, hb *heartbeatItem, readAt int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil || len(c.seen) >= aliveCacheMax {
		c.seen = make(map[string]deathRead)
	}
	if old, ok := c.seen[agentID]; !ok || old.readAt <= readAt {
		c.seen[agentID] = deathRead{hb: *hb, readAt: readAt}
	}
}

// diedAt is when a death of agentID ended its lease locked at lockedAt, as
// far as this process saw it (heartbeatItem.diedAt); 0 when it does not
// know.
func (c *deathCache) diedAt(agentID string, lockedAt int64) int64 {
	c.mu.Lock()
	d, ok := c.seen[agentID]
	c.mu.Unlock()
	if !ok {
		return 0
	}
	return d.hb.diedAt(lockedAt, d.readAt)
}

// stampOf is when a death of agentID ended its lease locked at lockedAt,
// as far as this process saw it: when the agent died (diedAt), or when it
// was seen dead if that is not known; 0 when no death it saw ended it.
func (c *deathCache) stampOf(agentID string, lockedAt int64) int64 {
	seen := c.endedUpTo(agentID)
	if seen < lockedAt {
		return 0
	}
	if died := c.diedAt(agentID, lockedAt); died != 0 {
		return min(seen, died)
	}
	return seen
}

func (c *deathCache) endedUpTo(agentID string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[agentID]
}

func (c *deathCache) put(agentID string, upTo int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= aliveCacheMax {
		c.m = make(map[string]int64)
	}
	c.m[agentID] = max(c.m[agentID], upTo)
}

// Heartbeat records that agentID is alive until now+ttl. The first heartbeat
// makes the agent watched. One UpdateItem; two or three when the agent
// comes back from the dead, which moves alive_since so that the leases it
// held stay ended, and keeps the agent in the sweep's index at the moment
// it died until a sweep has ended those leases (three when its first write
// marks it pending: then the return is made once more, or the mark
// removed); three for the first heartbeat and one that moves the expiry
// earlier (aliveCache), whose now is then read after the arming; two for
// one identical to a return's first write, which notes that it found the
// agent alive (markSeenAlive); two more for a return whose second write
// another heartbeat overtook (moveAliveSince, then an ordinary heartbeat).
func (s *Store) Heartbeat(ctx context.Context, agentID string, ttl time.Duration) (Heartbeat, error) {
	if ttl == 0 {
		ttl = DefaultHeartbeatTTL
	}
	if err := TTLRange.Check(ttl); err != nil {
		return Heartbeat{}, err
	}
	if err := CheckID("agent_id", agentID); err != nil {
		return Heartbeat{}, err
	}
	notRemoved := expression.AttributeNotExists(expression.Name("removed"))
	lastAt := expression.Name("last_at")
	var floor int64 // the heartbeat item's latest time seen
	var armed int64 // last_at of the lowering this heartbeat armed (0: none)
	// Before the writes: a removal that forgets the agent while they are
	// on their way must not see it put back in the alive cache.
	epoch := s.alive.epoch(agentID)
	for range retries(ctx) {
		now := s.clockAfter(floor)
		exp := now.Add(ttl)
		// The time rule: no heartbeat is stamped before the latest one.
		forward := expression.Or(expression.AttributeNotExists(lastAt), lastAt.LessThanEqual(expression.Value(ms(now))))
		// A fresh builder each time: the builder's Set adds to shared state.
		beat := func() expression.UpdateBuilder {
			return expression.Set(expression.Name("expires_at"), expression.Value(ms(exp))).
				Set(expression.Name("last_at"), expression.Value(ms(now))).
				Set(expression.Name("hb_shard"), expression.Value(shardOf(agentID, s.shards.Lease))).
				Set(expression.Name("ttl"), expression.Value(exp.Add(heartbeatRetention).Unix())).
				Remove(expression.Name("fresh")).Remove(expression.Name("lowering")).Remove(expression.Name("seen_alive"))
		}
		deadAt := expression.Name("dead_at")
		expiresAt := expression.Name("expires_at")
		// Still alive, and its expiry not moved earlier (a lowering is
		// armed first: see aliveCache): keep alive_since, and stay indexed
		// at a death not swept yet. Not this very write again: one the SDK
		// sends again (its answer lost: sends.go) fails here and finds its
		// own, and prior_expires, the expiry it replaced, says whether it
		// landed late.
		same := lastAt.Equal(expression.Value(ms(now))).And(expiresAt.Equal(expression.Value(ms(exp))))
		cond := expression.And(expiresAt.GreaterThan(expression.Value(ms(now))), expiresAt.LessThanEqual(expression.Value(ms(exp))),
			notRemoved, forward, expression.Not(same))
		if armed != 0 {
			// The lowering this heartbeat armed, stamped after the arming
			// landed: pinned to it, alive or not (a death in between makes
			// it a return, below).
			cond = expression.And(lastAt.Equal(expression.Value(armed)), expression.AttributeExists(expression.Name("lowering")),
				notRemoved, expression.Not(same))
			armed = 0
		}
		upd := beat().Set(expression.Name("alive_since"), expression.IfNotExists(expression.Name("alive_since"), expression.Value(0))).
			Set(expression.Name("hb_expires"), expression.IfNotExists(deadAt, expression.Value(ms(exp)))).
			Set(expression.Name("prior_expires"), expression.IfNotExists(expiresAt, expression.Value(0))).
			Set(expression.Name("prior_last"), expression.IfNotExists(lastAt, expression.Value(0)))
		var diedAt int64 // when the agent died, for a return from the dead
		var was int64    // alive_since before the death: a return moves it
		var landed int64 // when this heartbeat's first write had landed late
		var pin expression.ConditionBuilder
		old, applied, err := s.updateHeartbeatRV(ctx, agentID, cond, upd, types.ReturnValueAllOld)
		if err != nil {
			return Heartbeat{}, err
		}
		cur := old.beaten(agentID, now, exp) // the item as the write left it
		if !applied && old != nil && !old.Removed && old.LastAt == ms(now) && old.ExpiresAt == ms(exp) {
			// This write is there already: its own first sending, or an
			// identical heartbeat, which did all this one would. Judged by
			// the item it replaced, as its first answer would have been.
			cur, old, applied = old, old.replaced(), true
		}
		if applied {
			after := s.clock()
			if old == nil && cur.returnMayBeMadeAgain() {
				// A return's first write, found by an identical heartbeat:
				// the agent is alive, but the return may still be made
				// once more, later (below). It is told it counts from no
				// later than now, when this heartbeat answers alive, and
				// no alive cache keeps its alive_since, which may move.
				since, err := s.markSeenAlive(ctx, agentID, cur, ms(after))
				s.waitPast(since)
				return Heartbeat{AgentID: agentID, ExpiresAt: exp}, err
			}
			if old == nil || old.Fresh || old.ExpiresAt > ms(after.Add(clockMargin)) {
				// The write's own answer is a consistent read of the
				// heartbeat; but not one that replaced a heartbeat whose
				// return from the dead may still follow (aliveCache.put):
				// its alive_since is about to move.
				if !old.returnMayFollow(ms(after)) {
					s.alive.putRead(agentID, cur, ms(now), epoch)
				}
				// After a return this heartbeat found moved (made once
				// more, overtaken), the agent may be alive since a moment
				// ago; else since long before, and this waits for nothing.
				s.waitPast(cur.AliveSince)
				return Heartbeat{AgentID: agentID, ExpiresAt: exp}, nil
			}
			// The write may have landed after the agent's expiry: it was
			// dead in between, and anyone may have seen it so. The heartbeat
			// counts from now, as a return from the dead, so that no death
			// seen before it falls inside it.
			diedAt, was, landed = old.ExpiresAt, old.AliveSince, ms(after)
			pin = expression.Name("expires_at").Equal(expression.Value(ms(exp))).
				And(lastAt.Equal(expression.Value(ms(now))))
			floor = ms(now)
		} else {
			if old != nil && old.Removed {
				return Heartbeat{}, ErrUnauthorized
			}
			if old != nil && old.LastAt > ms(now) {
				floor = old.LastAt // a later heartbeat landed first: again, after it
				continue
			}
			if old == nil || old.Fresh || old.ExpiresAt > ms(exp) {
				// A first heartbeat, or one that moves the expiry earlier:
				// armed first, then stamped after the arming landed.
				ok, err := s.armLowering(ctx, agentID, old, now)
				if err != nil {
					return Heartbeat{}, err
				}
				if ok {
					armed = ms(now)
				}
				floor = max(floor, ms(s.clock()))
				continue
			}
			if old.ExpiresAt > ms(now) {
				continue // moved in between: again
			}
			diedAt, was = old.ExpiresAt, old.AliveSince
			pin = expression.Name("expires_at").Equal(expression.Value(old.ExpiresAt))
		}
		// Back from the dead: leases taken up to now stay ended, and the
		// sweep must still see the death. Pinned to the expiry read, so two
		// returns at once move alive_since once. The agent was dead until
		// the write landed, and may have been seen dead until then: when
		// the clock has moved on by then, the return is made once more at
		// that later time, pinned to the first, so that no death seen in
		// between falls inside the life the answer states. Another
		// heartbeat landing before the return (a retry of the client's, a
		// second process of the agent) found the agent alive, by this
		// heartbeat's own write, and made no return: the return is still
		// this heartbeat's to make, pinned to alive_since as it was.
		again := true
		var first *heartbeatItem // the return's first write, when it is made once more
		var firstAfter int64     // the clock read just after the first write landed
		write := writeID()       // the first write's own id (return_write)
		for range retries(ctx) {
			now = s.clockAfter(floor)
			exp = now.Add(ttl)
			forward = expression.Or(expression.AttributeNotExists(lastAt), lastAt.LessThanEqual(expression.Value(ms(now))))
			cond = pin.And(notRemoved, forward)
			// Alive since the first write landed, when that is what made
			// it alive again (read just after it: no one has seen the
			// agent dead since), however long the return takes; else since
			// this write. Made once more, not later than an identical
			// heartbeat found the first write there and answered alive
			// (seen_alive): a lease the agent took after that answer stays
			// live.
			since := ms(now)
			if landed != 0 {
				since = landed
			}
			if first != nil {
				seen := expression.AttributeNotExists(expression.Name("seen_alive"))
				if first.SeenAlive != 0 {
					seen = expression.Name("seen_alive").Equal(expression.Value(first.SeenAlive))
					since = min(since, first.SeenAlive)
				}
				cond = cond.And(seen)
			}
			// No prior_expires: it is an ordinary heartbeat's record of the
			// expiry it replaced, by which an identical heartbeat (the same
			// millisecond and ttl) that finds its write there already
			// judges it. One that finds this return there finds none: the
			// agent is alive, by the return.
			upd = beat().Set(expression.Name("alive_since"), expression.Value(since)).
				Set(deadAt, expression.IfNotExists(deadAt, expression.Value(diedAt))).
				Set(expression.Name("hb_expires"), expression.IfNotExists(deadAt, expression.Value(diedAt))).
				Remove(expression.Name("prior_expires")).Remove(expression.Name("prior_last"))
			// A first write that may be made once more marks the return
			// pending until its last write (aliveCache.put); ordinary
			// heartbeats keep the mark.
			marks := first == nil && landed == 0
			if marks {
				upd = upd.Set(returnPending, expression.Value(true)).Set(expression.Name("return_write"), expression.Value(write))
			} else {
				upd = upd.Remove(returnPending)
			}
			wctx, sends := countSends(ctx)
			cur, applied, err := s.updateHeartbeat(wctx, agentID, cond, upd)
			if err != nil {
				return Heartbeat{}, err
			}
			if !applied && sends.Load() > 1 && cur != nil && !cur.Removed && cur.PriorExpires == 0 &&
				cur.LastAt == ms(now) && cur.ExpiresAt == ms(exp) && cur.AliveSince == since {
				// Sent again after its answer was lost (sends.go): the
				// first sending applied, and this write is judged as it.
				// One sent once that finds an identical return there is
				// another's, and starts again below (markSeenAlive).
				applied = true
			}
			if !applied {
				if first != nil && first.SeenAlive == 0 && cur != nil && cur.SeenAlive != 0 &&
					cur.LastAt == first.LastAt && cur.ExpiresAt == first.ExpiresAt {
					first = cur // an identical heartbeat found it: again, from then
					continue
				}
				if first != nil && cur != nil && !cur.Removed && cur.AliveSince == first.AliveSince {
					// Another heartbeat of the agent landed on the first
					// write: alive_since is still the first write's. It is
					// moved to when that write had landed (read just after
					// it: every death seen before is no later), or to when
					// an identical heartbeat found it, if earlier; then
					// this heartbeat starts again, an ordinary one.
					since := firstAfter
					if first.SeenAlive != 0 {
						since = min(since, first.SeenAlive)
					}
					if err := s.moveAliveSince(ctx, agentID, first.AliveSince, since, diedAt); err != nil {
						return Heartbeat{}, err
					}
					floor = max(floor, cur.LastAt)
					break
				}
				if marks && sends.Load() > 1 && cur != nil && !cur.Removed && cur.ReturnWrite == write && cur.AliveSince == since {
					// Sent again after its answer was lost (sends.go): the
					// first sending applied, and another heartbeat of the
					// agent landed on it before this one (it found the
					// agent alive, by it). As above, alive_since is moved
					// to when the return's write had landed, as far as
					// this call can tell: now, its answer just in (every
					// death seen before is no later; a lease the other
					// process took meanwhile ends with the return, as one
					// taken while the return is being written does).
					if err := s.moveAliveSince(ctx, agentID, since, max(ms(s.clock()), cur.LastAt), diedAt); err != nil {
						return Heartbeat{}, err
					}
					floor = max(floor, cur.LastAt)
					break
				}
				if cur == nil || cur.Removed || cur.AliveSince != was {
					break // removed, or returned by another heartbeat: start again
				}
				pin = expression.Name("alive_since").Equal(expression.Value(was))
				floor = max(floor, cur.LastAt)
				continue
			}
			if after := s.clock(); again && landed == 0 && after.After(now) {
				again, first, firstAfter = false, cur, ms(after)
				pin = expression.Name("expires_at").Equal(expression.Value(ms(exp))).
					And(lastAt.Equal(expression.Value(ms(now))))
				floor = ms(after)
				continue
			}
			if marks {
				// Not made once more after all (the clock had not moved
				// on): the return is over. The return applied whatever
				// this write does: if it fails, the mark stays (as after
				// a crash) and only the caching of this agent is lost.
				if err := s.clearReturnPending(ctx, agentID, cur.AliveSince); err != nil {
					s.log.WarnContext(ctx, "heartbeat: a return's pending mark was not removed", "agent_id", agentID, "err", err)
				}
			}
			s.alive.putRead(agentID, cur, ms(now), epoch)
			s.waitPast(cur.AliveSince)
			return Heartbeat{AgentID: agentID, ExpiresAt: exp}, nil
		}
	}
	return Heartbeat{}, fmt.Errorf("heartbeat %s: %w", agentID, ErrBusy)
}

// waitPast returns once the clock reads past the millisecond at, the time
// a return from the dead (or a registration of a removed id again) counts
// from: a lease is live only when it was locked after its holder's
// alive_since (one locked in that millisecond may have been taken while
// the agent was dead, or be the removed agent's), so a return that
// answered within it would let its agent take leases, on this clock, that
// are granted already ended. It waits about a millisecond at most, and
// gives up after 2 ms of real time (a clock that does not move with real
// time, a test's, or one behind the clock at was read from); sleeps are
// coarse, so that may take up to about 3 ms.
func (s *Store) waitPast(at int64) {
	for deadline := time.Now().Add(2 * time.Millisecond); ms(s.clock()) <= at && time.Now().Before(deadline); {
		time.Sleep(100 * time.Microsecond)
	}
}

// markSeenAlive records on agentID's heartbeat, still the return's first
// write hb, that a heartbeat found it there and answered alive by at
// (seen_alive; the earliest such answer's is kept). A return made once
// more then counts from no later than at. An item moved on since needs
// nothing, but the return may have been made once more before the note
// landed, later than at. It answers the millisecond the heartbeat answers
// past: at, or the alive_since of the item moved on when later.
func (s *Store) markSeenAlive(ctx context.Context, agentID string, hb *heartbeatItem, at int64) (int64, error) {
	cond := expression.Name("last_at").Equal(expression.Value(hb.LastAt)).
		And(expression.Name("expires_at").Equal(expression.Value(hb.ExpiresAt)),
			expression.Name("alive_since").Equal(expression.Value(hb.AliveSince)))
	seen := expression.Name("seen_alive")
	upd := expression.Set(seen, expression.IfNotExists(seen, expression.Value(at)))
	cur, applied, err := s.updateHeartbeat(ctx, agentID, cond, upd)
	if err == nil && !applied && cur != nil && !cur.Removed {
		return max(at, cur.AliveSince), nil
	}
	return at, err
}

// moveAliveSince moves agentID's alive_since from was to since, if it is
// still was and the agent not removed: a return made once more after
// another heartbeat of the agent landed on its first write. Only
// alive_since moves: the other heartbeat's expiry, which its answer
// stated, stays. If alive_since has moved since, another return moved it
// past was, and nothing is needed.
//
// The leases locked between was and since end by the move, so the sweep
// must look at the agent again: a sweep may have settled the death since
// the first write (dead_at removed), and then the death is pending once
// more, at diedAt, as the return's own write would have left it.
func (s *Store) moveAliveSince(ctx context.Context, agentID string, was, since, diedAt int64) error {
	cond := expression.Name("alive_since").Equal(expression.Value(was)).
		And(expression.AttributeNotExists(expression.Name("removed")))
	deadAt := expression.Name("dead_at")
	upd := expression.Set(expression.Name("alive_since"), expression.Value(since)).
		Set(deadAt, expression.IfNotExists(deadAt, expression.Value(diedAt))).
		Set(expression.Name("hb_expires"), expression.IfNotExists(deadAt, expression.Value(diedAt))).
		Remove(returnPending)
	_, _, err := s.updateHeartbeat(ctx, agentID, cond, upd)
	return err
}

// returnPending marks a heartbeat item whose return from the dead may
// still be made once more (Heartbeat): its first write sets it, ordinary
// heartbeats keep it, and the return's last write removes it. No alive
// cache keeps an item that has it (aliveCache.put): however many
// heartbeats land in between, its alive_since may still move. A return
// that stops between its writes (an error, a crash) leaves the mark until
// the agent's next return: only the caching of its heartbeat is lost.
var returnPending = expression.Name("return_pending")

// clearReturnPending removes the mark of a return that was not made once
// more after all, if alive_since is still the return's (another return
// since marks and clears on its own).
func (s *Store) clearReturnPending(ctx context.Context, agentID string, since int64) error {
	cond := expression.Name("alive_since").Equal(expression.Value(since))
	_, _, err := s.updateHeartbeat(ctx, agentID, cond, expression.Remove(returnPending))
	return err
}

// armLowering marks agentID's heartbeat item, read as old (nil: none), as
// about to have its expiry moved earlier (lowering), by a heartbeat at now
// (see aliveCache). It changes no expiry: an agent that never sent a
// heartbeat gets the item of one not watched yet (fresh, the greatest
// expiry). It reports whether the item was still as read.
//
// An item made anew keeps when the agent was registered (created_at, from
// its agent item: one read, at an agent's first heartbeat and at one
// after a week's silence), so that watches of an earlier agent of the id
// are still told apart once the item that said so (a tombstone, or the
// registered_at of an item that expired while the agent was silent) is
// gone (createdAt).
func (s *Store) armLowering(ctx context.Context, agentID string, old *heartbeatItem, now time.Time) (bool, error) {
	lastAt := expression.Name("last_at")
	cond := expression.AttributeNotExists(expression.Name("agent_id"))
	upd := expression.Set(expression.Name("expires_at"), expression.Value(int64(math.MaxInt64))).
		Set(expression.Name("alive_since"), expression.Value(0)).
		Set(expression.Name("fresh"), expression.Value(true)).
		Set(expression.Name("ttl"), expression.Value(now.Add(heartbeatRetention).Unix()))
	if old == nil {
		created, err := s.createdAt(ctx, []string{agentID})
		if err != nil {
			return false, err
		}
		if at, ok := created[agentID]; ok {
			upd = upd.Set(expression.Name("created_at"), expression.Value(at))
		}
	}
	if old != nil {
		forward := expression.Or(expression.AttributeNotExists(lastAt), lastAt.LessThanEqual(expression.Value(ms(now))))
		cond = expression.And(expression.Name("expires_at").Equal(expression.Value(old.ExpiresAt)),
			expression.AttributeNotExists(expression.Name("removed")), forward)
		upd = expression.UpdateBuilder{}
	}
	upd = upd.Set(lastAt, expression.Value(ms(now))).Set(expression.Name("lowering"), expression.Value(true))
	_, applied, err := s.updateHeartbeat(ctx, agentID, cond, upd)
	return applied, err
}

// updateHeartbeat makes one conditional UpdateItem on a heartbeat item. It
// returns the item as the write left it, or, when the condition fails, the
// item as it is (nil if there is none).
func (s *Store) updateHeartbeat(ctx context.Context, agentID string, cond expression.ConditionBuilder, upd expression.UpdateBuilder) (*heartbeatItem, bool, error) {
	return s.updateHeartbeatRV(ctx, agentID, cond, upd, types.ReturnValueAllNew)
}

// beaten is the heartbeat item hb (nil: none) after a heartbeat at now that
// keeps the agent alive until exp.
func (hb *heartbeatItem) beaten(agentID string, now, exp time.Time) *heartbeatItem {
	out := heartbeatItem{AgentID: agentID}
	if hb != nil {
		out = *hb
		out.PriorExpires, out.PriorLast = hb.ExpiresAt, hb.LastAt
	}
	out.ExpiresAt, out.LastAt, out.Fresh, out.Lowering = ms(exp), ms(now), false, false
	return &out
}

// replaced is what the ordinary heartbeat that left hb replaced, as far
// as the late-landing test needs it: nil when there was no heartbeat, or
// when a return from the dead left hb (it has none: the agent is alive by
// it), else its expiry (prior_expires). A tombstone turned into a
// registration (fresh) had the greatest expiry, so it reads as alive.
func (hb *heartbeatItem) replaced() *heartbeatItem {
	if hb.PriorExpires == 0 {
		return nil
	}
	out := *hb
	out.ExpiresAt, out.Fresh = hb.PriorExpires, false
	return &out
}

// updateHeartbeatRV is updateHeartbeat answering, when the write applies,
// with rv (ALL_NEW or ALL_OLD; nil for ALL_OLD when there was no item).
func (s *Store) updateHeartbeatRV(ctx context.Context, agentID string, cond expression.ConditionBuilder, upd expression.UpdateBuilder, rv types.ReturnValue) (*heartbeatItem, bool, error) {
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
	if err != nil {
		return nil, false, fmt.Errorf("build heartbeat update of %s: %w", agentID, err)
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.heartbeats, Key: agentKey(agentID),
		ConditionExpression:                 expr.Condition(),
		UpdateExpression:                    expr.Update(),
		ExpressionAttributeNames:            expr.Names(),
		ExpressionAttributeValues:           expr.Values(),
		ReturnValues:                        rv,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, sendOpts(ctx)...)
	returned, failed := conditionFailed(err)
	if !failed {
		if err != nil {
			return nil, false, fmt.Errorf("heartbeat %s: %w", agentID, err)
		}
		if len(out.Attributes) == 0 {
			return nil, true, nil
		}
		var hb heartbeatItem
		if err := attributevalue.UnmarshalMap(out.Attributes, &hb); err != nil {
			return nil, false, err
		}
		return &hb, true, nil
	}
	if len(returned) == 0 {
		if !s.readAfterFailed {
			return nil, false, nil
		}
		s.fallbackReads.Add(1)
		hb, err := s.readHeartbeat(ctx, agentID)
		return hb, false, err
	}
	var hb heartbeatItem
	if err := attributevalue.UnmarshalMap(returned, &hb); err != nil {
		return nil, false, err
	}
	return &hb, false, nil
}

// heartbeat reads one agent's heartbeat; nil when it never sent one. A
// recent read that found the agent alive answers without a request (see
// aliveCache).
func (s *Store) heartbeat(ctx context.Context, agentID string) (*heartbeatItem, error) {
	now := ms(s.clock())
	if hb, ok := s.alive.get(agentID, now); ok {
		return hb, nil
	}
	epoch := s.alive.epoch(agentID)
	hb, err := s.readHeartbeat(ctx, agentID)
	if err == nil {
		s.alive.putRead(agentID, hb, now, epoch)
	}
	return hb, err
}

func (s *Store) readHeartbeat(ctx context.Context, agentID string) (*heartbeatItem, error) {
	hb, err := getItem[heartbeatItem](ctx, s.db, s.heartbeats, agentKey(agentID))
	if err != nil {
		return nil, fmt.Errorf("read heartbeat of %s: %w", agentID, err)
	}
	return hb, nil
}

// heartbeatsOf reads many agents' heartbeats with BatchGetItem.
func (s *Store) heartbeatsOf(ctx context.Context, agentIDs []string) (map[string]*heartbeatItem, error) {
	got, err := batchGet[heartbeatItem](ctx, s.db, s.heartbeats, uniqueKeys(agentIDs, agentKey), "", nil)
	if err != nil {
		return nil, fmt.Errorf("read heartbeats: %w", err)
	}
	out := make(map[string]*heartbeatItem, len(got))
	for i := range got {
		out[got[i].AgentID] = &got[i]
	}
	return out, nil
}

// leaseLive judges a lease record: unexpired at now and its holder alive.
func (s *Store) leaseLive(ctx context.Context, it *taskItem, now time.Time) (bool, error) {
	if !it.leaseTimeValid(now) {
		return false, nil
	}
	ended, _, err := s.endedByDeath(ctx, it.Holder, it.LockedAt)
	return !ended, err
}

// endedByDeath reports whether a lease agentID locked at lockedAt has ended
// because its holder died: from the death cache when it knows, otherwise by
// the holder's heartbeat (the alive cache, or a consistent read, whose death
// is then remembered). It returns the heartbeat it judged by (nil when the
// agent never sent one, or when the death cache answered).
//
// The read is judged at the clock read before it, as the death cache
// remembers it: what it shows was so when it was served, between that
// clock and any later one. By a clock read after its answer came, the
// heartbeat's expiry may have passed while a heartbeat that landed after
// the read kept the agent alive (or made it a return, which ended the
// lease then, and a takeover that knows no death time stamps its event
// at its own write, inside the returned agent's life).
func (s *Store) endedByDeath(ctx context.Context, agentID string, lockedAt int64) (bool, *heartbeatItem, error) {
	if lockedAt <= s.deaths.endedUpTo(agentID)-clockMargin.Milliseconds() {
		return true, nil, nil
	}
	readAt := s.clock() // before the read: dead at least until the read
	hb, err := s.heartbeat(ctx, agentID)
	if err != nil {
		return false, nil, err
	}
	switch {
	case hb.dead(readAt):
		s.deaths.put(agentID, ms(readAt))
		s.deaths.noteDeath(agentID, hb, ms(readAt))
	case hb != nil && hb.AliveSince > 0:
		s.deaths.noteDeath(agentID, hb, ms(readAt))
		// Back from the dead: its leases locked up to its return ended
		// with that death, which was over by the return. A takeover
		// stamps the death then, not when it is written, which may fall
		// inside the life the agent's heartbeats have stated since.
		s.deaths.put(agentID, hb.AliveSince)
	}
	s.deaths.noteRemoval(agentID, hb, ms(readAt))
	return !holderAlive(hb, lockedAt, readAt), hb, nil
}

// stillDead reports whether agentID is dead by heartbeat now, not back
// from the dead: by hb when endedByDeath read it, else by a read (the
// alive cache's, or one GetItem).
func (s *Store) stillDead(ctx context.Context, agentID string, hb *heartbeatItem) (bool, error) {
	if hb == nil {
		var err error
		if hb, err = s.heartbeat(ctx, agentID); err != nil {
			return false, err
		}
	}
	return hb.dead(s.clock()), nil
}

// liveLeases filters items to those whose lease is live, reading every
// holder's heartbeat in one batch.
func (s *Store) liveLeases(ctx context.Context, items []taskItem, now time.Time) (map[string]bool, error) {
	var holders []string
	for _, it := range items {
		if it.leaseTimeValid(now) {
			holders = append(holders, it.Holder)
		}
	}
	hbs, err := s.heartbeatsOf(ctx, holders)
	if err != nil {
		return nil, err
	}
	live := make(map[string]bool)
	for _, it := range items {
		if it.leaseTimeValid(now) && holderAlive(hbs[it.Holder], it.LockedAt, now) {
			live[it.TaskID] = true
		}
	}
	return live, nil
}
