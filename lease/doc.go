// Package lease is the checkout service's engine: agents, heartbeats, tasks
// and the leases on them, as DynamoDB conditional writes.
//
// # The rule
//
// At any instant a task has at most one live lease. A lease is live while it
// has not expired by the deciding server's clock and its holder is not dead
// by heartbeat. Every decision that could break the rule is one conditional
// write on the task item; nothing read before it is trusted.
//
// # Tables
//
// The tables are defined once, in package schema, and built from there by
// EnsureTables (locally) and by the CDK app (in AWS). All are on-demand.
//
//	tasks       task_id                 the task, its lease, fence, watchers
//	  by_status        status / created_key      list by status; claim the oldest todo
//	  by_lease_expiry  lease_shard / lease_expires  sparse: live leases by expiry
//	  by_holder        holder / lease_expires       sparse: one agent's leases
//	agents      agent_id                agents, and "#key#<sha256>" key items
//	  all_agents       kind / agent_id           list agents
//	heartbeats  agent_id                latest heartbeat; TTL "ttl"
//	  by_expiry        hb_shard / hb_expires     sparse: agents the sweep must judge
//	events      task_id / seq           the audit trail; TTL "ttl"
//	inbox       agent_id / message_id   task_available messages; TTL "ttl"
//
// The lease lives on the task item (holder, run_id, locked_at,
// lease_expires, timeout_ms, reason). The sparse indexes hold a task only
// while those attributes are present: ending a lease REMOVEs them, which takes
// the task out of both lease indexes in the same write. lease_shard spreads
// the expiry index over schema.Shards partitions so no one partition takes
// every lease write; readers Query each shard.
//
// # Access patterns: GetItem, conditional write or Query, never Scan
//
//	checkout, claim     UpdateItem on tasks (the decision) + BatchWriteItem (events);
//	  takeover          one more UpdateItem, pinned to the ended lease
//	  conflict          the failed UpdateItem returns the holder (ALL_OLD) + GetItem heartbeat
//	renew               GetItem own heartbeat + UpdateItem + BatchWriteItem
//	release, complete   UpdateItem + BatchWriteItem (events and watchers' messages)
//	  retried           the failed UpdateItem + GetItem of the ending's event
//	task, lock status   GetItem task + GetItem holder's heartbeat
//	list tasks          Query by_status (+ BatchGetItem of holders' heartbeats)
//	list checkouts      Query by_lease_expiry per shard, or by_holder (+ BatchGetItem)
//	claim candidates    Query by_status for todo, oldest first; when none is
//	                    free, Query by_lease_expiry for expired leases
//	heartbeat           UpdateItem (a second one when the agent returns from the dead)
//	authenticate        GetItem of the key item "#key#<sha256(key)>"
//	events, inbox       Query on the table's own key
//	sweep               Query by_lease_expiry and heartbeats by_expiry per shard,
//	                    then UpdateItem + BatchWriteItem per lease it ends
//
// DynamoDB's ReturnValuesOnConditionCheckFailure is what keeps a conflict at
// two requests: the failed write itself says who holds the task. Emulators
// that ignore it (dynalite) cost one consistent GetItem more; the store reads
// the item only when the error came back without it, and counts those reads
// (FallbackReads) so tests can hold DynamoDB's own budget.
//
// # Checkout
//
// The grant is an UpdateItem whose condition reads like the rule:
//
//	the task exists
//	AND no lease is on it
//	AND status IN expected_statuses
//
// and which sets the lease, status in_progress, fence = fence + 1,
// lease_seq and started_at if it is not set yet. When the condition fails,
// the item returned with the failure decides the answer, in API order: no
// item is task_not_found; an unexpired lease whose holder is alive is the
// caller's own (same agent and run id: the same checkout is returned,
// idempotently) or a conflict naming the holder; an expired lease, or one
// whose holder is dead, has ended whatever the sweep has done, and is taken
// over by a second UpdateItem conditioned on that exact lease (holder,
// fence, and eseq, so that not even a renewal can slip in between), which
// sets the new lease and records the old one's end (end_*, timeout or
// agent_death) in the same write; otherwise the status was not expected.
// If the lease vanished between the write and the read, the write is simply
// tried again. A free task costs one write; taking over an ended lease, two.
//
// Renew, release and complete condition on holder = caller, lease_expires >
// now, and the run id and fence when the caller gives them. Release and the
// sweep move the task back to todo and REMOVE its watch list in the same
// write; ALL_OLD hands the writer that list, and only that writer sends the
// messages, so each watcher is told once however many sweeps overlap.
//
// # Fencing
//
// The fence is a counter on the task item, incremented by every grant's
// write. Task items are never deleted (they have no TTL), so the counter
// survives every lease, every TTL deletion of events, heartbeats and
// messages, and every takeover: it strictly increases. A same-run retry
// returns the live lease and its fence unchanged.
//
// # Heartbeats and death
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
// Renew reads the caller's heartbeat, so a dead holder cannot extend a lease
// that has ended; release and complete do not (a dead holder releasing or
// completing only ends what would end anyway, and the conditional write
// still decides against any takeover).
//
// # The sweep
//
// The sweep finds expired leases by querying by_lease_expiry for
// lease_expires <= now in each shard, and dead agents by querying heartbeats
// by_expiry for hb_expires <= now; for each dead agent it queries by_holder
// for its leases. Each lease is ended by an UpdateItem conditioned on its
// exact holder and fence (and, for timeouts, lease_expires <= now), so of any
// number of concurrent sweeps and checkouts exactly one ends it and records
// its event. A dead agent is then taken out of the by_expiry index (REMOVE
// hb_shard, hb_expires, conditioned on the same expires_at); its next
// heartbeat puts it back. Nothing is ever scanned, and the cost of a sweep
// grows with the leases that need ending, not with the table.
//
// A lease taken by an agent that is already dead and already swept is not
// found by the sweep's death pass: it is never reported live and any
// checkout takes it over at once, and the sweep ends it when it expires.
//
// # Audit events
//
// Each transition's events go to the events table in the second request,
// one BatchWriteItem, under keys (task_id, seq) where seq comes from the
// task's eseq counter advanced by the deciding write. Only the deciding
// writer records, so each ended lease has exactly one ending event, and a
// rewrite of the same key is harmless.
//
// The deciding write does not wait on that batch, and the batch can be lost
// (the process dies, or the network loses the write's answer and the SDK's
// retry finds its own condition failed). So the task item carries what it
// needs to rebuild the events that matter: lease_seq, the seq of the live
// lease's checkout event, and the end_* attributes, which every ending write
// fills by moving the lease out of the lease attributes (SET end_agent =
// holder ... REMOVE holder) and recording how it ended. From the item,
// Events rebuilds the live lease's checkout and the last lease's checkout
// and ending, so the trail never misses them; and every ending write
// archives the previous ending and its own lease's checkout again in its
// batch, so the archive catches up before the item forgets. What is not
// rebuilt: a renew event whose batch was lost.
//
// end_* also makes release and complete idempotent. A holder whose answer
// was lost retries; the retry's condition fails because the lease has ended,
// and when the item's last ending is that same holder's release (or
// completion) of the lease the retry names by run id or fence, the retry is
// answered as the first attempt was. If that ending's event is not in the
// archive, the first attempt's batch was lost, and the retry records it and
// tells the watchers (end_watchers); otherwise nothing is written again, so
// no watcher is told twice. A request that names no lease is never taken for
// a retry.
//
// # What the clock is trusted for
//
// Each decision compares lease_expires and heartbeat expires_at with the
// deciding process's clock (Config.Now), at millisecond precision. Lambda
// hosts keep their clocks synchronised to well under a millisecond, but if
// two deciders disagree by d, a lease may be judged expired up to d early by
// the faster clock. Mutual exclusion among writers still holds, because every
// grant is a conditional write on the one item; what skew can do is end a
// lease up to d before its holder expected. Holders should renew well before
// expiry (the client renews at a third of the timeout), and a resource
// guarded by a lease should check the fence, which no clock can make go
// backwards. TTL is garbage collection only: DynamoDB deletes expired items
// late (hours, up to about two days), and no decision depends on whether it
// has.
package lease
