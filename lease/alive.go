package lease

import (
	"sync"
)

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
