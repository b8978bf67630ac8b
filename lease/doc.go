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
// # Where to read
//
// A lease's whole state is its task item (item.go: the live lease, the
// last one an ending ended, the one the latest checkout took over, and
// what is read from them). The writes that move it are built in store.go
// (update, holderCond, clearLease, endUpdate); each operation's file
// (checkout.go, claim.go, update.go for PATCH, sweep.go) decides which
// condition and which update to send. Every operation checks its input
// by the rules in validate.go (a *ValidationError: field, code, sentence).
//
// The design of each part is written beside its code: heartbeats, death
// and the caches that remember them in alive.go; removed agents in
// agents.go; the sweep in sweep.go; queues, claims (waiting and named)
// and delays in claim.go; PATCH in update.go; watches in watch.go;
// dependencies and attempts in deps.go; a task's body and a failed
// release's error in body.go; the queue counts in queuecounts.go; the
// fleet feed in feed.go; listings in list.go; the operators' commands,
// the only Scans, in recount.go, migrate.go and stray_bodies.go; every
// operation's requests, and the batch and Query helpers, in dynamo.go.
// This page holds what every part relies on.
//
// # Tables
//
// The tables are defined once, in package schema, and built from there by
// EnsureTables (locally) and by the CDK app (in AWS). All are on-demand.
//
//	tasks2      task_id                 the task, its lease and fence; its body "<id>#body#<token>",
//	                                    a failed release's error "<id>#error#<n>"
//	  by_status        status_shard / created_key   sparse: list blocked ("open"), done, cancelled
//	                                                and failed tasks (todo and in_progress: list.go)
//	  by_lease_expiry  lease_shard / lease_expires  sparse: live leases by expiry, and
//	                                                delayed tasks by not_before
//	  by_claim         claim_shard / claim_key      sparse: claimable tasks by queue, priority, age
//	agents      agent_id                agents, and "#key#<sha256>" key items
//	  all_agents       kind / agent_id           list agents
//	heartbeats  agent_id                latest heartbeat; TTL "ttl"; also claim
//	                                    receipts "#claim#…", queue counters
//	                                    "#queue#<queue>", the queue registry
//	                                    "#queues", "#queues#<n>" (registry.go), and the
//	                                    graph's lock "#graph" (deps.go)
//	  by_expiry        hb_shard / hb_expires     sparse: agents the sweep must judge
//	events      task_id / seq           the audit trail; TTL "ttl"
//	  by_feed          feed_shard / feed_key     sparse: the fleet feed by time (feed.go)
//	deadletters event_id / url          webhook deliveries that failed for good (AWS); TTL "ttl"
//	inbox       agent_id / message_id   task_available and lease_lost messages, and deleted ones'
//	                                    tombstones "~<message_id>" (after them); watches under
//	                                    "#watch#<task_id>" / agent, beside the stream's records
//	                                    of the task's freeings ("#freed#<seq>"); dependency edges under
//	                                    "#deps#<blocker>" / dependent; TTL "ttl"
//
// The lease lives on the task item (holder, run_id, locked_at,
// lease_expires, timeout_ms, reason). The sparse indexes hold a task only
// while those attributes are present: ending a lease REMOVEs them, which takes
// the task out of both lease indexes in the same write. lease_shard spreads
// the expiry index over the lease shard count's partitions (hb_shard the
// heartbeats index likewise), status_shard ("open#<shard>" for blocked,
// "done#<shard>" and so on; none for todo and in_progress, which list.go
// lists from by_claim and by_lease_expiry) each status over
// the status count, claim_shard each queue over the claim count and
// feed_shard each hour of the feed over the feed count, so that no one
// partition takes every transition of the fleet; readers Query each shard.
// A shard is FNV-1a of the id modulo the count. The counts are deploy-time
// settings (Config.Shards, schema.ShardCounts; defaults 16, 16, 4 and 16):
// an item keeps the shard it was written with and readers query every shard
// below the count, so a count may grow between deploys but must never
// shrink, which would hide the items in the shards above it (shards.go
// keeps the largest counts used, and refuses a start below them).
//
// No index projects the whole task. Each projects its keys and the few
// attributes its readers use (schema.Index.Include): by_status the status
// and queue (its filters), by_lease_expiry the holder, fence and lock time
// (the sweep's conditions, and the filter that finds one agent's leases),
// by_claim the queue, priority and creation time (the claim's order). An
// index is written only when a write changes an entry's keys or those
// attributes, and an entry costs one write unit whatever the task's body
// (its own item, body.go). So a checkout writes the task item, puts its
// lease's expiry entry and deletes its claim entry: 3 write units (a todo
// or in_progress task has no status entry: list.go); its consequences add
// the archived event, its feed entry and the queue counter: 6 in all,
// whatever the body, while the item is under 1 KB (long ids, a long title
// and a history pass it: README, "What it costs"). A release or a sweep's ending likewise: 3, and 6 in all (the
// sweep's also writes the lease_lost message and reads its tombstone: 7
// write units and a read unit, less the counter write it shares with the
// batch's other endings). TestUnitBudget (units_test.go) holds these
// figures and the other operations', each with what it is made of, on the
// local DynamoDB's meter, which bills as DynamoDB does. No index is keyed
// by holder: one agent's leases are found by a filter on the expiry index
// (removal, the sweep's deaths, a listing by agent), which reads every
// live lease of the fleet but keeps each grant and ending to one lease
// index write.
//
// # No decision trusts an index read
//
// DynamoDB's global secondary indexes are eventually consistent: an item
// written now may reach its index later, and an index may still show what
// the item no longer is. So an index result is only ever a candidate; a
// consistent read of the base item, or the conditional write itself,
// decides. What each index read is trusted for:
//
//	by_claim         claim candidates only; the grant's write re-checks
//	                 status, lease and queue, so an entry that lags a grant,
//	                 an ending or a PATCH that moved the task is skipped
//	by_status        listing (by_claim and by_lease_expiry too, for todo
//	                 and in_progress); a page is confirmed by one consistent
//	                 BatchGetItem and shows each task as it is (one whose
//	                 entry lags is missing from it, never shown wrongly)
//	by_lease_expiry  candidates for the sweep's timeout and death passes,
//	                 removal and listing: each ending is conditioned on the
//	                 lease (holder, fence, and expiry or locked_at) as read,
//	                 and a listing confirms with BatchGetItem. It is never
//	                 used to find a claim's earlier grant: a named claim
//	                 keeps a receipt instead (claim.go)
//	hb by_expiry     agents the sweep must judge, if it finds them holding
//	                 a lease; each by a consistent GetItem of its heartbeat
//	all_agents       the agent listing only
//
// A lag can make the sweep miss a lease for one run (the next run finds it)
// and a listing omit a task for a moment; it can never make a decision
// wrong. The tests run with the local DynamoDB's index lag on.
//
// ReturnValuesOnConditionCheckFailure spares a conflict a read of the task:
// the failed write itself says who holds it (an emulator that ignores it
// costs a GetItem more, counted by FallbackReads for the tests).
//
// # Checkout
//
// The grant is an UpdateItem whose condition reads like the rule:
//
//	the task exists AND its not_before has passed
//	AND no lease is on it AND status IN expected_statuses
//
// (of expected_statuses, todo and in_progress: a blocked task is never
// granted, and a finished one expected is reopened by a grant pinned to its
// version, its attempts counted anew), and which sets the lease, status
// in_progress, fence + 1, eseq + 2, lease_seq, last_op = checkout,
// started_at if not set, attempts + 1 (deps.go: attempts, failures, the
// failed status), and copies the lease it replaces, if any, into prev_*
// (SET prev_agent = holder ...: DynamoDB evaluates every operand on the
// item as it was; a grant that finds the task free removes them instead). When the condition fails, the
// item returned with the failure decides the answer, in API order: no
// item is task_not_found; an unexpired lease whose holder is alive is the
// caller's own (same agent and run id: the same checkout is returned,
// idempotently) or a conflict naming the holder, with the heartbeat the
// holder was judged alive by (the alive cache's or the one GetItem's; no
// further read) and so when the lease can end without it
// (ConflictError.EndsBy, the API's Retry-After); one that has expired, or
// whose holder is dead, has ended whatever the sweep has done, and is
// taken over by a second UpdateItem conditioned on that exact lease
// (holder, fence, and eseq, so that not even a renewal can slip in
// between) and on its attempt not being the task's last, which records
// both events (the old lease's timeout or agent_death, and the checkout)
// and counts the failed attempt; otherwise the status was not expected. If
// the lease vanished between the write and the read, the write is tried again.
//
// Renew, release and complete condition on holder = the agent the request
// acts as (the caller, or the agent an admin names, whose event then has
// the admin as by), lease_expires > now, locked_at > that agent's
// alive_since, and the run id and fence when given.
//
// # Fencing
//
// The fence is a counter on the task item, incremented by every grant's
// write. Task items are never deleted (no TTL), so it strictly increases
// across leases and takeovers; a same-run retry returns the live lease and
// its fence unchanged.
//
// # One write per transition
//
// Every write that moves a lease (checkout, takeover, renew, release,
// force release, complete, timeout, agent death) is one conditional write
// on the task item, and it records the transition on the item itself:
// last_op and last_at say what it was, eseq is the seq of its latest
// event, an ending moves the lease into end_* (SET end_agent = holder ...
// REMOVE holder), and a checkout copies the lease it took over into prev_*.
// From the item alone, latestEvents rebuilds that write's events: a
// checkout (and the end of the lease it took over), a renewal, an ending
// (and failed, when it was the task's last attempt), or an unblocking.
// The item stays bounded: one lease, one last ending and one replaced lease
// (the body and the watches are items of their own); under 1 KB a
// transition's write, and a conflict's failed one, bill one write unit on
// the table (see "Tables"). So what can be told without it is not stored
// (holderName, replacedLease, rank; writeID's ids are 11 bytes):
// TestUnitBudgetLongIDs holds a task with UUID ids and a history to that.
//
// The tasks table's stream (NEW_AND_OLD_IMAGES) carries every change, once
// or more, in order per item, for 24 hours. Two readers of it, each with
// its own position (in AWS functions/stream and functions/notices, each
// behind an event source mapping; locally two pollers), ApplyConsequences
// and PublishNotices, so that a slow webhook receiver holds up only
// notices, take each change whose eseq grew and:
//
//   - archives the write's events under (task_id, seq), so a replay rewrites
//     the same items, each keyed into the fleet feed (by_feed) by values
//     the change record alone determines, so the feed holds it once (an
//     event archived late is keyed at its archive and written only if
//     absent, and its task's later events no earlier: feed.go, "Events
//     archived late");
//   - for a freeing (an ending that leaves the task todo or failed, a
//     cancel that ends a lease, an unblocking; not a completion, not a
//     takeover), writes a task_available message to each watch placed
//     before it (watch.go), with an id derived from the freeing, only if
//     no message with that id exists; a message its agent deleted leaves a
//     tombstone, which the batch reads after all its puts, landed or not,
//     and finding it deletes the message again, so a replay cannot bring
//     it back (DeleteMessage, putMessages);
//   - for an ending that took the lease from its holder without its consent
//     (lost in changes.go: a timeout, the death of a holder that still
//     exists, a force release, a cancel by someone else, or a release or
//     completion by an admin for the holder, reason force_release; also
//     the timeout or death a takeover records in prev_*), writes one
//     lease_lost message to the former holder, "lost."+ the ending's
//     message id, only if absent; it keeps the lease's locked_at (less
//     one) as its watched_at, so that Inbox hides it from an id removed,
//     or registered again after the lease. The holder's own release,
//     completion or cancel, and a removed agent's ending, tell nothing;
//   - publishes LeaseEnded (every ending), TaskAvailable (every freeing;
//     TaskFailed for a task that failed) and LeaseLost (every lease_lost
//     message's ending) with a deterministic id, task:seq:kind, for
//     consumers to drop repeats: to EventBridge in AWS, and to the
//     webhooks (package webhook) in both environments, which retry, then
//     dead-letter, within the call (the notices reader's alone: it holds
//     up only the next notices).
//
// The first reader also unblocks, or blocks again, the dependents of a
// blocker completed or reopened (deps.go), and keeps the queue counts from
// every change, once (queuecounts.go).
//
// A batch that fails (the bus is down, a write throttled) fails whole and is
// delivered again; nothing it did is done twice in effect. So a written
// transition's consequences are not lost to a lost answer, a crash of the
// writer or a bus that is down; only a change that fails every time holds
// its shard up (locally, retried at every poll) or, in AWS, is
// dead-lettered after its retries, to be replayed (DEPLOY.md). Events reads
// the archive and merges in the item's latestEvents, up to the trail's
// first hole (see "Time only moves forward"), so a reader never sees an
// event while an older one is missing. Watchers are told within about a
// second: the local server polls every 200 ms; in AWS, the stream's delay.
//
// end_* also makes release and complete idempotent: a retry whose lease has
// ended, naming it by run id or fence, finds that ending its own (on the
// item, or once a later lease has ended too in the trail: checkout.go, "A
// repeat after a later ending") and is answered as the first attempt was,
// writing nothing. A request that names no lease is never taken for one;
// a write the SDK sent again knows its own by its write's id (sends.go).
//
// # Time only moves forward
//
// On each item, every transition's time is at least the item's previous
// transition's: a task's locked_at, lease_expires and events' at, a
// heartbeat's last_at and expires_at. A request reads its time when it
// runs, and its write may wait seconds in a saturated server or database
// while a later one lands first; without the rule a grant could carry a
// higher fence and an earlier locked_at than the one before it, or a
// renewal move an expiry back.
//
// So each transition's write carries its time in its condition (last_at <=
// :now, or no last_at yet). A write that fails it lost to a later write: it
// reads the clock again and is tried again at a time not before that write's
// (the item's last_at when this process's clock reads earlier, so that clock
// skew between processes cannot send an item's time back either). That retry
// is the only second write the rule adds.
//
// A grant whose write took more than half its timeout is renewed before it
// is answered: one more write (with its renew event), so that no lease is
// handed out expired or nearly so (a 503 would leave a lease nobody knows
// of on the task until it expired). A lease that another write ended or
// took over before that renewal is answered as granted: deciding again
// would grant the task twice for one request. Heartbeats and deaths keep
// the rule too: see alive.go ("Time, for heartbeats and deaths").
//
// A trail read may not be whole yet: the stream archives events about a
// second after their transition, and the item holds only the latest. Every
// event names the one before it (prev_seq, and prev_at from the item's
// prior_at; seqs have holes, as a checkout that takes nothing over skips
// one), so Trail shows the trail up to its first hole and counts the events
// held back (Pending). A hole older than the events' retention may be TTL's
// doing and is not waited for.
//
// # What the clock is trusted for
//
// Each decision compares lease_expires and heartbeat expires_at with the
// deciding process's clock (Config.Now), at millisecond precision. Lambda
// hosts keep their clocks synchronised to well under a millisecond, but if
// two deciders disagree by d, a lease may be judged expired up to d early by
// the faster clock. Mutual exclusion among writers still holds, because
// every grant is a conditional write on the one item; what skew can do is
// end a lease up to d before its holder expected (and, for d past
// clockMargin, 50 ms, make a process remember as ended a lease its holder
// took just before that process saw it dead: alive.go). Holders should renew
// well before expiry (the client renews at a third of the timeout), and a
// resource guarded by a lease should check the fence, which no clock can
// make go backwards. TTL is garbage collection only: DynamoDB deletes
// expired items late (hours, up to two days); no decision depends on it.
package lease
