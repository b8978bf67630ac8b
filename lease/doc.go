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
// condition and which update to send. The rules on input are in
// validate.go: every operation checks its params with them, and each
// failure is a *ValidationError with the field, the API's code and its
// sentence.
//
// # Tables
//
// The tables are defined once, in package schema, and built from there by
// EnsureTables (locally) and by the CDK app (in AWS). All are on-demand.
//
//	tasks2      task_id                 the task, its lease and fence; its body "<id>#body#<token>"
//	  by_status        status_shard / created_key   list by status group (open, done,
//	                                                cancelled; status and queue filtered)
//	  by_lease_expiry  lease_shard / lease_expires  sparse: live leases by expiry
//	  by_claim         claim_shard / claim_key      sparse: claimable tasks by queue, priority, age
//	agents      agent_id                agents, and "#key#<sha256>" key items
//	  all_agents       kind / agent_id           list agents
//	heartbeats  agent_id                latest heartbeat; TTL "ttl"; also claim
//	                                    receipts "#claim#…" and queue counters
//	                                    "#queue#<queue>", "#queues"
//	  by_expiry        hb_shard / hb_expires     sparse: agents the sweep must judge
//	events      task_id / seq           the audit trail; TTL "ttl"
//	  by_feed          feed_shard / feed_key     sparse: the fleet feed by time (feed.go)
//	deadletters event_id / url          webhook deliveries that failed for good (AWS); TTL "ttl"
//	inbox       agent_id / message_id   task_available and lease_lost messages; watches under
//	                                    "#watch#<task_id>" / agent; TTL "ttl"
//
// The lease lives on the task item (holder, run_id, locked_at,
// lease_expires, timeout_ms, reason). The sparse indexes hold a task only
// while those attributes are present: ending a lease REMOVEs them, which takes
// the task out of both lease indexes in the same write. lease_shard spreads
// the expiry index over schema.Shards partitions, status_shard
// ("open#<shard>" for todo and in_progress, "done#<shard>",
// "cancelled#<shard>") each status group over schema.StatusShards, and
// claim_shard each queue over schema.ClaimShards, so that no one partition
// takes every transition of the fleet; readers Query each shard.
//
// No index projects the whole task. Each projects its keys and the few
// attributes its readers use (schema.Index.Include): by_status the status
// and queue (its filters), by_lease_expiry the holder, fence and lock time
// (the sweep's conditions, and the filter that finds one agent's leases),
// by_claim the queue, priority and creation time (the claim's order). An
// index is written only when a write changes an entry's keys or those
// attributes, and an entry costs one write unit whatever the task's body
// (its own item, body.go). So a checkout writes the task item, updates
// its by_status entry's status (the task stays in its open partition),
// puts its lease's expiry entry and deletes its claim entry: 4 write
// units; its consequences add the archived event, its feed entry and the
// queue counter: 7 in all, for any task. A completion: the item, the
// expiry entry, the status entry moved from open to done (2): 4, and 7 in
// all; a renewal: the item and the expiry entry moved (2): 3, and 5 with
// its event. A conflict's failed write bills the item: 1. No index is
// keyed by holder: one agent's leases are found by a filter on the expiry
// index (removal, the sweep's deaths, a listing by agent), which reads
// every live lease of the fleet but keeps each grant and ending to one
// lease index write. TestUnitBudget holds these figures on the local
// DynamoDB's meter, which bills as DynamoDB does.
//
// # Access patterns: GetItem, conditional write or Query, never Scan
//
// One DynamoDB request per transition on the request path; what a
// transition causes follows from the tasks table's change stream (see
// "One write per transition").
//
//	checkout, claim     UpdateItem on tasks (the decision; it takes over an
//	                    expired lease in the same write)
//	  dead holder       + GetItem of its heartbeat (once: a death is
//	                    remembered) + UpdateItem pinned to the ended lease
//	  conflict          the failed UpdateItem, which returns the holder (ALL_OLD);
//	                    its heartbeat comes from the alive cache once read
//	renew, release,     UpdateItem, after the caller's heartbeat, which the alive
//	  complete          cache holds for a second after any read or heartbeat
//	  retried           the failed UpdateItem, which returns the ending it repeats
//	force release       GetItem task + holder's heartbeat (cached) + UpdateItem
//	task, lock status   GetItem task (+ holder's heartbeat, cached)
//	list tasks          Query by_status, a shard at a time + BatchGetItem of
//	                    the tasks (+ holders' heartbeats)
//	list checkouts      Query by_lease_expiry per shard (one agent's: filtered) + BatchGetItem
//	                    of the tasks (+ holders' heartbeats)
//	claim candidates    at once: Query by_claim per shard of each queue (its
//	                    head); expired and dead holders' leases reach
//	                    by_claim when the sweep ends them
//	claim, waiting      per look after the first: Query by_claim per shard of
//	                    each queue only
//	create (batch)      PutItem (one per task, concurrently; the failed
//	                    condition returns the existing task)
//	PATCH               GetItem + UpdateItem pinned to the version read
//	                    (+ holder's heartbeat, cached, when a lease is on it)
//	claim with run_id   + GetItem of its receipt, UpdateItem of it per try
//	                    (a retry whose receipt lost its grant: + the tried
//	                    tasks' trails)
//	heartbeat           UpdateItem (a second one when the agent returns from the dead)
//	watch               GetItem of the task (a conflict has it already), a Query
//	                    of its watches, a PutItem of the watch
//	authenticate        GetItem of the key item "#key#<sha256(key)>"
//	events, inbox       Query on the table's own key (+ GetItem of the task, for
//	                    its latest events; of the agent's heartbeat, when
//	                    its inbox has messages, for removals)
//	fleet feed          Query by_feed per shard of each hour read (schema.FeedShards
//	                    a bucket, at most 6 hours a call), merged by feed_key
//	sweep               Query by_lease_expiry and heartbeats by_expiry per shard,
//	                    then UpdateItem per lease it ends
//	stream function     per batch of changes: BatchWriteItem of the events (25 a
//	                    request), a BatchGetItem of the watchers' heartbeats and
//	                    a conditional PutItem per message, when a task is freed;
//	                    for the queue counters a BatchGetItem of the counters of
//	                    the queues the batch touches, an UpdateItem of the
//	                    registry when a queue is new, and one conditional
//	                    UpdateItem per queue touched
//	queues              GetItem of the registry, BatchGetItem of the counters
//	                    (at most 100 queues), and per queue with todo tasks one
//	                    Query of by_claim, Limit 1, per claim shard (4) per
//	                    priority that has todo tasks: 2 + 4·p requests for p
//	                    such priorities over all queues, 42 for one queue with
//	                    todo tasks at every priority
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
//	by_status        listing; a listing page is
//	                 confirmed by one consistent BatchGetItem and shows each
//	                 task as it is, under its current status only (a task
//	                 whose index entry lags is missing from that page, never
//	                 shown wrongly); a claim's grant is a conditional write
//	by_lease_expiry  candidates for the sweep's timeout and death passes,
//	                 removal and listing: each ending is conditioned on the
//	                 lease (holder, fence, and expiry or locked_at) as read,
//	                 and a listing confirms with BatchGetItem. It is never
//	                 used to find a claim's earlier grant: a named claim
//	                 keeps a receipt instead (see Claim)
//	hb by_expiry     agents the sweep (and claim) must judge; each is
//	                 confirmed by a consistent GetItem of its heartbeat
//	all_agents       the agent listing only
//
// A lag can make the sweep miss a lease for one run (the next run finds it)
// and a listing omit a task for a moment; it can never make a decision
// wrong. The tests run with the local DynamoDB's index lag on.
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
//	AND (no lease is on it AND status IN expected_statuses
//	     OR the lease on it has expired, and todo is expected)
//
// and which sets the lease, status in_progress, fence = fence + 1, eseq =
// eseq + 2, lease_seq, last_op = checkout, started_at if it is not set yet,
// and copies the lease it replaces, if any, into prev_* (SET prev_agent =
// if_not_exists(holder, NULL) ...: DynamoDB evaluates every operand on the
// item as it was). So a takeover of an expired lease is the checkout's own
// write, and it records both events: the old lease's timeout and the new
// checkout. When the condition fails, the item returned with the failure
// decides the answer, in API order: no item is task_not_found; an
// unexpired lease whose holder is alive is the caller's own (same agent
// and run id: the same checkout is returned, idempotently) or a conflict
// naming the holder, with the heartbeat the holder was judged alive by (the
// alive cache's or the one GetItem's; no further read) and so when the
// lease can end without it (ConflictError.EndsBy, the API's Retry-After);
// one whose holder is dead has ended whatever the sweep
// has done, and is taken over by a second UpdateItem conditioned on that
// exact lease (holder, fence, and eseq, so that not even a renewal can
// slip in between), recorded as agent_death; otherwise the status was not
// expected. If the lease vanished between the write and the read, the
// write is simply tried again.
//
// Renew, release and complete condition on holder = caller, lease_expires >
// now, locked_at > the caller's alive_since, and the run id and fence when
// the caller gives them. Release and the sweep move the task back to todo
// and REMOVE its watch list in the same write; the change stream's old image
// hands the stream function that list, so each watcher is told once however
// many sweeps overlap.
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
// Renew, release and complete read the caller's heartbeat (through the
// alive cache) and condition their write on locked_at > alive_since: a lease
// ended by its holder's death is ended exactly like an expired one, whether
// or not a sweep has run and whether or not the holder has come back, so
// its holder gets not_checked_out (or not_holder when another lease is
// live). A force release judges the lease, holder's heartbeat included,
// before its write, which is pinned to that lease.
//
// # Removed agents
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
//
// # The sweep
//
// The sweep finds expired leases by querying by_lease_expiry for
// lease_expires <= now in each shard, and agents to judge by querying
// heartbeats by_expiry for hb_expires <= now. hb_expires is when the sweep
// must next look at an agent: its expiry while it is alive, and the moment
// it died (dead_at) from its death until a sweep has ended that death's
// leases, even if it has come back meanwhile. Each candidate is confirmed
// by a consistent GetItem, the clock read before it: a dead agent's leases
// locked up to that instant have ended; a returned agent's leases locked up
// to its return (alive_since) have; an agent found alive with no death
// pending was a stale index entry and is left alone. If any agent is dead,
// one read of the whole expiry index (every shard, every live lease) finds
// the leases of all of them, and each is ended by an UpdateItem conditioned on its
// exact holder, fence and locked_at (for timeouts, on lease_expires <=
// now), so of any number of concurrent sweeps and checkouts exactly one ends
// it and records its event.
//
// A dead agent stays in the index while it is dead, so a lease it takes
// while dead (its key still works) is ended by the next sweep; this costs
// one GetItem per dead agent per sweep, and a read of every live lease per
// sweep while any agent is dead, until its heartbeat
// item's TTL removes it (7 days). A returned agent's death is settled (the
// index moves to its expiry) once the sweep has looked at it more than
// settleAfter (30 s) after the return, since the expiry index may lag that
// long.
// Nothing is ever scanned, and the cost of a sweep grows with the leases
// that need ending and the agents that are dead, not with the table.
//
// # Watchers
//
// A watch is an item of its own (watch.go), in the inbox table under the
// task's watch partition, so that every transition writes the same small
// task item however many agents watch it. A task has at most MaxWatchers
// (100) watchers: past the bound a watch is 409 too_many_watchers, checked
// against a consistent read of the task's watches (concurrent watches can
// pass it by as many as race, a bounded overshoot); watching again only
// refreshes the watch. A watch records the task's eseq; the stream function
// tells, for each freeing, the watches placed before it, then deletes them
// (each conditioned on being the watch it read), and reads the watchers'
// heartbeat items in one batch, so that a removed agent, or an id
// registered again after the watch, is not told. A removal that lands
// between that read and the message's write leaves the message behind its
// emptied inbox; each message keeps when its watch was placed, and Inbox
// hides those of a removed agent (see Store.Inbox). A task item from
// before watch items may still carry a watch list (watchers); its next
// freeing tells those too, and the ending write removes the list.

// # Queues, priorities and claim
//
// A task has a queue (an id, default "default") and a priority (0 to 9,
// higher first, default 5). Claim grants the best available task of the
// queues it names: the highest priority, then the oldest by creation,
// among tasks that are todo with no lease, tasks whose lease expired and
// tasks whose holder is dead.
//
// The claimable ones are in one sparse index, by_claim:
//
//	partition  claim_shard = "<queue>#<shard>"       shard = hash(task_id) mod schema.ClaimShards
//	sort       claim_key   = "<9-priority>#<created ms, 13 digits>#<task_id>"
//
// so a Query of a shard returns its tasks best first. A hot queue's writes
// are spread over schema.ClaimShards (4) partitions instead of one; a claim
// queries the head of every shard of every queue it names at once and
// merges them. Each head is ceil(w/4)+1 entries and at least 8 (w the
// claim's spread window, below; 1 for a lone claimer; a Query is billed by
// the 4 KB read, so the longer head costs nothing), with only the attributes ordering
// and the grant need: any task among the best k of the queues is among the
// best k of its shard, so the merge is exact for a lone claimer, and for
// concurrent claimers it is the head they spread over anyway (tasks hash
// evenly over the shards). '#' cannot occur in an id, so no queue's
// partitions meet another's.
//
// The index is sparse by the presence of claim_shard, and the writes that
// change claimability set or remove it, in the same write:
//
//	create                   SET (the item is put with it)
//	grant (checkout, claim)  REMOVE
//	ending to todo           SET claim_shard = claim_home (release, force
//	                         release, timeout, death: a copy of an attribute,
//	                         so the ending needs no read; claim_home and
//	                         claim_key are always on the item and kept up to
//	                         date by create and PATCH)
//	complete, cancel         REMOVE
//	PATCH                    SET to the new home when the task is claimable
//	                         after it (a reopen, a queue or priority change)
//
// Expired and dead holders' leases are not in by_claim (the lease is still
// on the item until a sweep or a takeover ends it), and claim does not look
// for them: the sweep ends them and puts their tasks back in by_claim, so a
// claim reads one partition per shard of each queue, 4 Queries for one
// queue however deep, and such a task is claimable within one sweep
// interval of its expiry (a named checkout takes it at once).
// A task written before queues has no claim_home: it counts as queue
// "default" at priority 5 everywhere, and enters by_claim at its next
// ending to todo (or PATCH).
//
// The grant is Checkout's conditional write, with the queue added to its
// condition, so a candidate that someone took, or that a PATCH moved to
// another queue, since the index was written is skipped, never granted.
//
// Concurrent claimers shuffle the best w candidates before their first
// write. w is 3n for n claims in flight in this process; across processes
// (Lambda containers that each run one claim), which cannot count each
// other, it is what the process's recent claims learned: the window a claim
// won with, three quarters of it for the next claim, shrinking by a tenth a
// claim while nothing is lost. Most claimers win with their first write, and
// a lone claimer that has lost nothing lately takes the best. A write counts
// as lost to a race only when the task changed (last_at, or its lock time)
// after the claim read the indexes; a candidate changed before is an index
// entry that lagged, and says nothing of contention (else a lone claimer
// under index lag would stop taking the best). A claim that loses a race
// reshuffles the candidates left over four times its window before its next
// write, so that claimers who lost the same task do not all go for the next
// one. Priority order is exact for a lone claimer and holds across claimers
// up to that window: n claimers of one process at once take n of the best
// 3n. A claim that names its run id keeps a receipt (a heartbeats-table item
// keyed "#claim#agent#run", TTL 48 h) listing every task it tries, written
// before each try; a retry reads the receipt and those tasks consistently
// and returns the lease the run got, so the same run id always gets the same
// lease. The grant itself is kept in the receipt after the grant's write
// (tried a few times, even if the caller has gone); should that fail, and
// the task have moved on past the lease, a retry finds the grant in the
// tried tasks' trails (waiting up to trailWait for events the change
// stream has not archived yet), and gets it as it was, ended. The one
// window left is a first attempt whose write is still in flight when its
// retry arrives; a client retries only after its first attempt's answer
// is lost.
//
// # Waiting claims
//
// A claim with wait (up to 20 s, inside API Gateway's 30 s) that finds
// nothing waits. In a process (the local server; a Lambda container), any
// write of that process that makes a task claimable (create, batch,
// release, force release, a sweep's ending to todo, a PATCH that reopens or
// moves a task) closes a channel that wakes its waiting claims at once;
// they look again (and, for index lag, 100 ms later, then at doubling
// intervals up to claimPoll). Nothing
// else makes a waiting claim read: with no wake it looks again every
// claimPoll (2 s), which is how a Lambda container learns of tasks freed
// by another. A look after the first queries by_claim alone: one Query per
// shard per queue, 4 for one queue, so a claim waiting the full 20 s on an
// idle queue costs about 10 looks, 40 Queries of an empty partition (0.5
// read units each on demand: 20 read units, a few millionths of a dollar).
// Expired and dead holders' leases are not looked for while waiting; they
// reach by_claim when the sweep ends them.
//
// # Changing a task
//
// PATCH reads the task consistently, decides, and makes one UpdateItem
// conditioned on the version it read. version is ADDed by every write of
// the task item (Store.update adds it to each), so the condition fails if
// anything changed the task in between: a checkout, a renewal, a release,
// another PATCH. Without If-Match the change is decided again on the task
// as it now is; with If-Match it is 412 version_mismatch. Fields (title,
// description, metadata, queue, priority) never touch a lease. Status
// cancelled ends a live lease, for its holder or an admin only: the write
// is an ending (endUpdate, type cancel) with the field changes added, so
// its event rides in it, and it frees the task of its lease: watchers are
// told (reason cancel) through the stream, like any other freeing. A lease
// that has ended but is still on the item (expired, or its holder dead)
// is ended first as the sweep would end it, with its own event, so that
// every ended lease has exactly one ending event. Status todo reopens a
// done or cancelled task (completed_at removed) into the claim index.
// Cancelling a task with no live lease and reopening record no event: they
// move no lease.
//
// A batch create is up to 25 conditional PutItems made concurrently
// (BatchWriteItem takes no conditions); each one that finds the id taken
// returns the existing task from its failed condition (ALL_OLD), so a
// retried batch is answered with the same tasks, now as "exists".
//
// # Queue counts
//
// GET /api/queues gives each queue's tasks by status and its oldest todo
// task without a Scan and without a second write on the request path: the
// stream function keeps the counts. Each queue has a counter item in the
// heartbeats table, "#queue#<queue>" (a key no agent id can take, as the
// claim receipts), with n#<status> for each status and p#<priority> for
// todo tasks by priority; the registry item "#queues" holds the set of
// queue names, ADDed (idempotently) before a queue's first count. A new
// table would have cost a schema entry, CDK, grants and nag rules for items
// this small; the heartbeats table already takes the stream function's
// reads and is keyed by a string.
//
// A change moves its task from (old queue, old status, old priority) to
// the new ones: a create adds one, a PATCH that moves the task to another
// queue takes one from the old queue and adds one to the new. A batch's
// changes are summed per queue and ADDed in one UpdateItem per queue.
//
// The stream delivers each change at least once, and a failed batch is
// delivered again whole, bisected by the event source mapping, or, by the
// local poller, re-read from its checkpoint with later records behind it.
// Records of one shard come in order, one batch at a time. So each counter
// item keeps, per shard, the sequence number of the last record it has
// applied (seq#<shard>, zero-padded to 40 digits so numbers compare as
// strings) and when (at#<shard>). A batch reads the counters of the queues
// it touches (one consistent BatchGetItem), leaves out, per queue, every
// record at or before that queue's position, and writes the rest with the
// new position, conditioned on the position being what it read. Any
// redelivery, in any split, then counts every change once, with no
// transaction (the local DynamoDB has none): a queue written before a
// batch failed has moved past those records; one not written has not. A
// failed condition (only two deliveries of one shard at once could cause
// it) fails the batch, which is delivered again. Positions not moved for
// longer than the stream's retention (24 h) are removed by the next write
// of the item: their shard can deliver nothing again, so the item stays
// small.
//
// This needs each batch's shard. The local poller gives it to the handler
// (stream.WithShard); a Lambda event names its shard only with a tumbling
// window, so the stream function's mapping has one (15 minutes, its state
// unused; stream.WindowHandler). Changes without a shard are not counted,
// rather than counted twice. The mapping must keep ParallelizationFactor
// 1: with several batches of one shard at once, positions are no longer
// in order.
//
// oldest_todo_at comes from by_claim: for each priority that has todo
// tasks (p#<priority> > 0), the first entry of each of the queue's claim
// shards with that priority's claim_key prefix (Limit 1), the oldest of
// them. Only claimable tasks are in by_claim, which is every todo task (a
// todo task has no lease) but one written before queues, until its next
// ending or PATCH (see "Queues, priorities and claim"), which is also
// when it starts to be counted (below). The index may lag a write: for a moment it
// can still show a task just granted (an older oldest_todo_at) or not yet
// show one just created or freed. The counts lag the writes by the
// stream's delay (about a second), and are never read from an index.
//
// Counting starts when the feature is deployed: a task last written before
// that is counted from its next change, so a data dir or table from before
// may show fewer tasks (and a count that would go below zero shows 0)
// until every old task has changed once. Deleting the "#queue#…" and
// "#queues" items and replaying is not possible past the stream's 24 h;
// for exact counts of older data, re-create the tasks.
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
// checkout (and the end of the lease it took over), a renewal, or an
// ending. The item stays small and bounded: one lease, one last ending and
// one replaced lease, under 1 KB with ids and reasons of usual length (the
// body and the watches are items of their own), so the write of a
// transition bills one write unit on the table, and a conflict's failed
// write the same; see "Tables" for its index entries and consequences.
//
// The tasks table's stream (NEW_AND_OLD_IMAGES) carries every change, once
// or more, in order per item, for 24 hours. The stream function
// (ApplyChanges; functions/stream in AWS behind an event source mapping,
// and the local server's poller locally, with the same handler) takes each
// change whose eseq grew and:
//
//   - archives the write's events under (task_id, seq), so a replay rewrites
//     the same items, each keyed into the fleet feed (by_feed) by values
//     the change record alone determines, so the feed holds it once;
//   - for an ending that frees the task (not a completion, not a takeover),
//     writes a task_available message to each watcher in the old image,
//     with an id derived from the freeing, and only if no message with that
//     id exists: a message its agent has deleted is kept, marked, until its
//     TTL, so a replay cannot bring it back;
//   - for an ending that took the lease from its holder without its consent
//     (lost in changes.go: a timeout, the death of a holder that still
//     exists, a force release or a cancel by someone else, including the
//     timeout or death a takeover records in prev_*), writes the former
//     holder one lease_lost message, "lost."+ the ending's message id, only
//     if absent, as for task_available; it keeps the lease's locked_at (less
//     one) as the message's watched_at, so that Inbox hides it from an id
//     removed, or registered again after the lease, as it hides a removed
//     watcher's messages. The holder's own release, completion or cancel,
//     and the ending of a removed agent's lease, tell it nothing;
//   - publishes LeaseEnded (every ending), TaskAvailable (every freeing) and
//     LeaseLost (every lease_lost message's ending)
//     with a deterministic id, task:seq:kind, for consumers to drop repeats:
//     to EventBridge in AWS, and to the webhooks (package webhook) in both
//     environments, which retry, then dead-letter, within the call.
//
// A batch that fails (the bus is down, a write throttled) fails whole and is
// delivered again; nothing it did is done twice in effect. So once a
// transition's write has succeeded its consequences cannot be lost: not to a
// lost answer (the SDK's retry fails its condition, but the write stands
// and so do its events), not to a crash of the writer, not to a bus that is
// down. Events reads the archive and merges in the item's latestEvents, and
// shows the trail up to its first hole (see "Time only moves forward"), so a
// reader never sees an event while an older one is missing. Watchers are
// told within about a second: the local server polls every 200 ms; in AWS,
// the stream's own delay.
//
// end_* also makes release and complete idempotent. A holder whose answer
// was lost retries; the retry's condition fails because the lease has ended,
// and when the item's last ending is that same holder's release (or
// completion) of the lease the retry names by run id or fence, the retry is
// answered as the first attempt was, and nothing is written again. A
// request that names no lease is never taken for a retry.
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
// So each transition's write carries its time in its condition (last_at
// <= :now, or no last_at yet). A write that fails it lost to a later
// write: it reads the clock again and is tried again at a time not before
// that write's (the item's last_at when this process's clock reads earlier,
// so that clock skew between processes cannot send an item's time back
// either). That retry is the only second write on the request path the
// rule adds, and it happens only after losing to a later write.
//
// A grant whose write took more than half its timeout is renewed before it
// is answered: one more write (with its renew event), so that no lease is
// handed out expired or nearly so. Refusing it with a 503 instead would
// leave a lease nobody knows of holding the task until it expired (or cost
// a write to undo it), and the client would retry anyway.
//
// A heartbeat's time is the time it was read, but it matters from when its
// write lands: one that lands after the expiry it replaced may land after
// the agent was seen dead and its leases ended. The clock is read again
// after the write; if it is past that expiry, the heartbeat is made a
// return from the dead at that time (a second write: alive_since and
// dead_at), so the leases that death ended stay ended and no death seen
// before falls inside the life the answer states. The price is that a
// heartbeat landing within its own latency of the expiry ends the agent's
// leases, as one landing late would; clients heartbeat at a third of the
// ttl. Until the second write lands (one request's time) a reader may see
// the agent alive and its unswept leases live.
//
// Deaths are stamped when they were seen (the consistent read that found
// the holder dead), not when their write lands: the sweep's ending and a
// takeover's agent_death event (prev_end_at) carry that time, raised to
// the lease's latest transition where needed.
//
// A trail read may not be whole yet, since the change stream archives
// events about a second after their transition, and the task item holds
// only its latest transition's. Every event names the one before it
// (prev_seq, and its time, prev_at, from the item's prior_at: seqs have
// holes, since a checkout that takes nothing over skips one), so Trail
// shows the trail up to its first hole and counts the events held back
// (Pending); a reader never sees an event while an older one is missing. A
// hole older than the events' retention may be TTL's doing and is not
// waited for.
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
