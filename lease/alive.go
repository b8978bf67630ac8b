package lease

import (
	"sync"
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
// is exact: no heartbeat sent after the read can make the agent dead sooner.
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

// aliveCache remembers, for a moment, that an agent is alive, so that a
// storm of conflicts over one task reads its holder's heartbeat once rather
// than once per loser.
//
// It is exact, not a guess. An entry says "alive" (or "never sent a
// heartbeat", which also counts as alive), read by a consistent GetItem at
// fetched, and is used only before min(fetched + MinHeartbeatTTL, the
// heartbeat's expires_at). Within that window no fresh read could say
// otherwise: the agent cannot die before the heartbeat read expires, nor
// before fetched + MinHeartbeatTTL, because any heartbeat sent after the
// read expires at least MinHeartbeatTTL after it was sent, even one that
// shortens the ttl; and alive_since only moves when a dead agent returns.
// Deaths are never cached: a dead agent may come back at any moment.
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
// was forgotten meanwhile (its read may predate a removal).
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
		if hb.ExpiresAt <= now {
			return // dead: it may come back at any moment
		}
		until = min(until, hb.ExpiresAt)
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
// is exact for ever: an agent dead at r has ended every lease locked at or
// before r, and those stay ended whether or not it comes back (its return
// moves alive_since past r). So a storm of checkouts over a dead agent's
// leases reads its heartbeat once. Leases locked after r are judged afresh.
type deathCache struct {
	mu sync.Mutex
	m  map[string]int64 // agent -> ms at or before which its leases have ended
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
