package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/checkout-dev/checkout/lease/schema"
)

// Queues, priorities and claim.
//
// A task has a queue (an id, default "default") and a priority (0 to 9,
// higher first, default 5). Claim grants the best available task of the
// queues it names: the highest priority, then the oldest by creation,
// among tasks that are todo with no lease (a task whose lease expired or
// whose holder died is one again once the sweep has ended that lease).
//
// The claimable ones are in one sparse index, by_claim:
//
//	partition  claim_shard = "<queue>#<shard>"       shard = hash(task_id) mod the claim count
//	sort       claim_key   = "<9-priority>#<created ms, 13 digits>#<task_id>"
//
// so a Query of a shard returns its tasks best first. A hot queue's writes
// are spread over the claim shard count's partitions (n, default 4)
// instead of one; a claim queries the head of every shard of every queue it
// names at once and merges them, one Query per shard (so the claim's
// budget of 5 requests and 3 read units for one queue holds for n up to
// 4). The claims of one process that want a read of the same queues while
// one is in flight share it (claimSpread.look). A claim spread over the
// head (racing claimers of other processes, below) reads one shard of each
// queue instead, chosen at random (claimLook), and the others only when
// that one has nothing for it: 2 requests for one queue (a claim that
// joined such a read, sent by another claim, and finds nothing there for
// it reads every shard next). Each head is
// ceil(k/n)+1 entries and at least 8 (k the claim's spread window, below,
// plus the claims of the process in flight; a Query is billed by the 4 KB
// read, so the longer head costs nothing), with only the attributes
// ordering and the grant need: any task among the best k of the queues is
// among the best k of its shard, so the merge is exact for the claims of
// one process, and for claimers spread by races it is the head they
// spread over anyway (tasks hash evenly over the shards). '#' cannot occur
// in an id, so no queue's partitions meet another's.
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
// The claims of one process never race each other: each takes the best
// candidate that no other claim of the process is writing for (held) or
// has won since the read was sent (the index shows a task for a moment
// after its grant), so n claims at once take the best n tasks, each with
// its first write, and a claim that finds only tasks others of the process
// hold waits for one of those writes to end and reads again. Claims one
// after another do not write for the process's own grants either: for
// grantShown (1 s, a bound on the index's lag) after a grant, unless the
// process has freed the task since (ended its lease to todo, unblocked or
// reopened it), its entry is taken for the one from before the grant and
// passed by (shownBefore) while another candidate is open, so a lone
// claimer under index lag makes one look and one write a grant (before,
// a tenth claim in a row wrote for the nine tasks before it, each
// refused). Nothing in the index tells that entry from one of a freeing
// by another process (the entry is the same: in AWS, releases run in
// another function than claims), so a claim that finds nothing else open
// writes for such entries, best first, as for any candidate (a refused
// write finds the task taken), and never answers none, or waits, while
// one of them may be free. A task another process frees within that
// second of this process's grant is still passed over by this process's
// claims for lower-priority tasks until it has passed (README, "Known
// limits"); the claims of other processes take it at its priority.
// Claimers in
// other processes (Lambda containers that each run one claim), which
// cannot see each other, pick at random among the best w candidates,
// where w is what the process's races with them taught: the window a
// claim won with, three quarters of it for the next claim, shrinking by a
// tenth a claim while nothing is lost, and by half every two seconds. A
// write counts as lost to such a race only when the task changed (last_at,
// or its lock time) after the read was sent, and its lease is not one a
// claim of this process won; a candidate changed before is an index entry
// that lagged, and says nothing of contention (else a lone claimer under
// index lag would stop taking the best). A claim that loses a race picks
// among four times its window before its next write, so that claimers who
// lost the same task do not all go for the next one. So priority order is
// exact for the claims of one process, however many run at once, and
// holds across processes up to that window (each from the best w/n of a
// random shard, once w is at least two a shard: tasks hash evenly over
// the shards, so that is the same random pick for a quarter of the
// Queries). A claim that names its run id keeps a receipt (a heartbeats-table item
// keyed "#claim#agent#run", TTL 48 h) listing every task it tries, written
// before each try (a task whose write was refused, taken by another, is
// dropped by the next: noteClaim); a retry reads the receipt and those
// tasks consistently and returns the lease the run got, so the same run
// id always gets the same lease. The grant itself is kept in the receipt after the grant's write,
// on condition that the receipt keeps no other (tried a few times, even
// if the caller has gone), so attempts of one run sent at once hold one
// lease: an attempt whose grant the receipt does not keep gives its task
// back and answers the one kept (noteGrant; a write that fails with an
// error, which may have applied, is decided by a consistent read of the
// receipt, and tried again for up to grantWait: settleGrant), and an
// attempt that finds a lease of the run on a tried task while no grant is
// kept has the receipt decide the same way (claimedBefore). An attempt that finds no
// task reads the receipt once more before it answers none, and so do
// the tasks it lists (otherAttempt): the grant of an attempt that took
// the last task, kept or not yet, is answered, and a listed task still
// claimable, which another attempt may be writing for, is written for
// too, so that whichever write lands first both answer its lease; one
// that answers none all the same removes its entries (forgetClaim): it
// holds no lease, and the run's next claim with that run id is a fresh
// one, not a retry (its first note stamps the receipt made anew). Should
// the grant's write keep failing while the receipt keeps no grant, the
// claim answers ErrGrantNotKept and the lease stays on its task,
// the tried tasks the only record: a retry answers the lease found on
// them, the earliest granted since the receipt was made (leaseOfRun: a
// checkout by name of the run may show on one too), kept in the receipt
// first, as claimedBefore does, or, once the
// task has moved on past it, in their trails (waiting up to trailWait
// for events the change stream has not archived yet), as it was, ended.
// A trail is read only from the receipt's making on, newest first and at
// most sinceFirst + sinceMore events (two Queries, however long the
// trail): a task with more events since is not searched further, and the
// retry is a fresh claim (the lease it got has ended: the task moved on).
// An attempt whose grant the receipt keeps (or a retry that keeps the
// lease it found) gives back the run's other leases on the tasks the
// receipt lists (giveBackUnkept), those granted by then (or, for a
// retry, by the found lease's grant: a checkout by name of the run, on a
// task a claim of the run tried, may have come since), so such an
// undecided lease is given back when another attempt's grant is kept,
// later or already: the window left is a grant that lands after that
// keeping, by an attempt that can neither keep it nor read the receipt
// for grantWait, and, for a retry, an undecided grant made after the one
// it keeps. A receipt
// outlives its agent's removal: one
// made before the id was registered again is the removed agent's
// (removedAgentsReceipt), and the new agent's claim of that run id is a
// fresh one.

// Delays.
//
// A task may not be granted before its not_before (set on create or
// PATCH, or by a release with outcome failed: the retry delay doubled for
// each failure since the last reopen, at most an hour). The grant's
// condition says so (readyCond), so no index lag can hand one out early.
// For the claim, a task waiting for its not_before stays in by_claim, but
// under a claim_key that ranks it after every ready task of its shard,
// earliest first:
//
//	claim_key = "~<not_before ms, 13 digits>#<its ready key>"   ('~' sorts after the digits)
//
// and claim_rank keeps the ready key. A claim reads each shard's head as
// always, skips the entries whose not_before is still to come, and ranks
// the rest by priority and age whatever their key: a task whose
// not_before has passed competes at its priority as soon as a claim sees
// it. Until the sweep ranks it ready again, only a shard whose head holds
// more ready tasks and passed delays than a claim reads can hide it. A
// waiting claim that saw one still to come looks again at that moment.
//
// The sweep learns of a delayed task from the lease-expiry index: a task
// with no lease that waits keeps its entry there, at its not_before (the
// ending write that delays it leaves lease_expires set to the not_before
// instead of removing it: the entry is updated, not deleted, which costs
// what deleting it would). When the sweep finds an entry without a holder
// due, it gives the task its ready claim_key and removes the entry, one
// write (rankReady). So a delay costs no read of its own, and a task is
// ranked as ready within a sweep interval of its not_before. Readers of
// that index that want leases skip the entries without a holder.
//
// A grant gives the task its ready claim_key too (a claim may take it
// before the sweep has ranked it ready, and its entry is then the
// lease's). A task with a lease has no entry of its own there, so a PATCH
// of not_before while it is held keeps its ready key; the lease's ending
// gives it its delay: a failed release's and the sweep's in their ending
// write (sweep.go, sweepEnd; and a PATCH's or checkout's ending of a
// lease that has ended, update.go, endEnded), a plain release in the
// write it makes again when its first, for a ready task, is refused on
// the not_before (finish), a force release by keepDelay just after it.

// keepDelay gives a task it read with no lease, waiting for a not_before
// still to come under its ready claim_key (one whose not_before was
// PATCHed while it was held, and whose lease has ended since), its
// delayed key and its entry in the expiry index, as a task delayed while
// idle has: else it would rank among the ready tasks until then, and
// fill the head a claim reads. A force release makes it at once; a claim
// that finds such a task not ready at its grant makes it too, for one a
// force release's keepDelay missed (a write of the task came in between,
// or the process stopped) or that an earlier version ended under its
// ready key (its sweep, or its plain release).
// Nothing the task shows changes: it moves no version (an If-Match
// PATCH of what the caller read still holds) and records no event. A
// write of the task in between leaves it to the next.
func (s *Store) keepDelay(ctx context.Context, it *taskItem) {
	if it == nil || it.hasLease() || it.Status != StatusTodo || it.NotBefore <= ms(s.clock()) {
		return
	}
	if _, delayed := delayedUntil(it.ClaimKey); delayed || it.ClaimKey == "" {
		return
	}
	cond := terms{expression.AttributeNotExists(nameHolder), nameNotBefore.Equal(expression.Value(it.NotBefore)),
		expression.Name("claim_key").Equal(expression.Value(it.ClaimKey)), nameStatus.Equal(expression.Value(string(StatusTodo)))}
	upd := expression.Set(expression.Name("claim_key"), expression.Value(delayedKey(it.NotBefore, it.ClaimKey))).
		Set(expression.Name("claim_rank"), expression.Value(it.ClaimKey)).
		Set(nameExpires, expression.Value(it.NotBefore)).
		Set(expression.Name("lease_shard"), expression.Value(shardOf(it.TaskID, s.shards.Lease)))
	_, _, _ = s.write(ctx, it.TaskID, cond, upd, types.ReturnValueNone)
}

// strandedDelay reports whether a task, as written, waits under a delayed
// claim_key with no entry in the expiry index: todo or blocked, with no
// lease. No write of today's makes one (every write that gives a task
// its delayed key gives it the entry in the same write), but versions
// before 2026-12-04 did, on some paths (a PATCH blocking a task with a
// delay, a reopen or a cancel over one); the sweep never sees such a task,
// and a claim reads only the head of each shard, after whose ready tasks
// its key ranks it, so it would wait behind every ready task of its
// shard for good.
func (t *taskItem) strandedDelay() bool {
	if t.TaskID == "" || t.hasLease() || t.LeaseExpires != 0 || t.Status != StatusTodo && t.Status != StatusBlocked {
		return false
	}
	rank, delayed := delayedRank(t.ClaimKey)
	return delayed && rank != ""
}

// mendDelay gives a stranded delayed task (strandedDelay) its entry in
// the expiry index, at the time its key names, so that the sweep ranks it
// ready then (at once, when that has passed). The change stream does it
// for every change that leaves a task so, and `checkout-server migrate`
// for every task a table holds (MendDelays). Like keepDelay it moves no
// version and records no event; a write of the task in between leaves it
// as that write made it.
func mendDelay(ctx context.Context, db interface {
	UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}, table string, it *taskItem, leaseShards int) (bool, error) {
	at, _ := delayedUntil(it.ClaimKey)
	statuses, rest := statusValues([]Status{StatusTodo, StatusBlocked})
	cond := terms{expression.AttributeNotExists(nameHolder), expression.AttributeNotExists(nameExpires),
		nameStatus.In(statuses, rest...), expression.Name("claim_key").Equal(expression.Value(it.ClaimKey))}
	upd := expression.Set(nameExpires, expression.Value(at)).
		Set(expression.Name("lease_shard"), expression.Value(shardOf(it.TaskID, leaseShards)))
	if it.ClaimRank == "" {
		// The ready key the sweep gives back (rankReady) is claim_rank,
		// which every delayed key is written with; should one lack it, it
		// is the delayed key's own tail, "~<not_before>#<ready key>".
		rank, _ := delayedRank(it.ClaimKey)
		upd = upd.Set(expression.Name("claim_rank"), expression.Value(rank))
	}
	expr, err := expression.NewBuilder().WithCondition(cond.cond()).WithUpdate(upd).Build()
	if err != nil {
		return false, err
	}
	_, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &table, Key: taskKey(it.TaskID),
		ConditionExpression: expr.Condition(), UpdateExpression: expr.Update(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values(),
	})
	if _, failed := conditionFailed(err); failed {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("give %s the expiry entry of its delay: %w", it.TaskID, err)
	}
	return true, nil
}

// Waiting claims.
//
// A claim with wait (up to 20 s, inside API Gateway's 30 s) that finds
// nothing waits. In a process (the local server; a Lambda container), any
// write of that process that makes a task claimable (create, batch,
// release, force release, a sweep's ending to todo or ranking of a delayed
// task, an unblocking, a PATCH that reopens or moves a task) wakes at once
// the claims waiting on that task's queue (for a PATCH that moves it, the
// queue it moves to), and only them: a claim waiting on other queues would
// only read them again (before, every release of a local server with 50
// claims waiting on other queues cost each of them a look, and the release
// 273 ms instead of 11). A write that does not know the task's queue
// wakes every waiting claim; each write that frees a task learns it from
// the item it writes (ALL_NEW, or UPDATED_NEW with the claim_shard it
// sets: no read units). Woken, a claim looks again (and, for index lag,
// 100 ms later, then at doubling intervals up to claimPoll, unless woken
// again; wakes that come while it looks make one look more, however many).
// A look passes by the tasks the claim's earlier looks found taken (their
// writes refused: the index lagged the grant) for grantShown after each
// was found, unless this process has freed the task since, rather than
// write for them again at each look (claimOnce). The look at the wait's
// deadline passes none of them by (a look that began before it and passed
// one by is followed by one that does), so a waiting claim answers none
// only once it has written for every candidate the index shows.
// Nothing else makes a waiting claim read: with no wake it looks again every
// claimPoll (2 s), which is how a Lambda container learns of tasks freed
// by another (one that serves a request at a time is never woken: its
// waiting claim is the only request it runs, and the sweep runs in a
// function of its own). A look after the first queries by_claim alone: one Query per
// shard per queue, 4 for one queue, so a claim waiting the full 20 s on an
// idle queue costs about 10 looks, 40 Queries of an empty partition (0.5
// read units each on demand: 20 read units, a few millionths of a dollar).
// Expired and dead holders' leases are not looked for while waiting; they
// reach by_claim when the sweep ends them.

// claimPage is how many claimable tasks one claim reads from the head of
// each shard of each queue.
const claimPage = 50

// claimHead is the fewest claimable tasks one claim reads from the head of
// each shard.
const claimHead = 8

// claimPoll is how often a waiting claim looks again when nothing in this
// process has woken it: the only way to learn of a task freed by another
// process (another Lambda container). Each look is one Query per shard of
// each queue on the claim index.
const claimPoll = 2 * time.Second

// Claim checks out the best available task in the given queues (default
// "default"): the highest priority first, the oldest first within a
// priority, among tasks that are todo with no lease. A task whose lease
// expired or whose holder died becomes one when the sweep ends that lease
// (a named checkout takes it at once). Candidates come from the claim index and
// are only candidates: each is taken with the same conditional write as
// Checkout (with the queue in its condition too), so one that someone else
// took, or moved to another queue, in the meantime is skipped, never
// double-granted.
//
// Concurrent claims of one process take the best tasks between them,
// never writing for the same one (claimSpread.pick). Claimers of other
// processes (other Lambda containers), which no process can see, spread
// over the head of the queue once they have met: a claimer picks at random
// among the best w candidates, where w grows fourfold with each race this
// claim loses to one of them, and starts from what this process's recent
// claims won with (see claimSpread.won). A process whose claims have lost
// nothing to another lately (w = 1) always takes the best.
//
// A claim that names its run id is retried safely: a receipt keyed by agent
// and run id lists every task the run has tried (but those it lost to
// another), before each try, so a retry finds the run's lease with
// consistent reads, never through an index that may lag.
//
// With Wait, a claim that finds nothing waits up to Wait for a task to
// become available: it is woken at once by any write of this process that
// makes a task of one of its queues claimable (create, release, a sweep's
// ending, an unblocking, a reopen or a move into one of them), and
// otherwise looks again every claimPoll, on the claim index alone (expired
// and dead holders' leases reach it when the sweep ends them).
func (s *Store) Claim(ctx context.Context, p ClaimParams) (_ Checkout, err error) {
	cp := CheckoutParams{
		AgentID: p.AgentID, AgentName: p.AgentName, RunID: p.RunID, Timeout: p.Timeout, Reason: p.Reason,
		ExpectedStatuses: []Status{StatusTodo}, TaskID: "claim", By: p.By,
	}
	named := p.RunID != ""
	if err := checkCheckout(&cp); err != nil {
		return Checkout{}, err
	}
	if err := CheckClaimQueues(p.Queues); err != nil {
		return Checkout{}, err
	}
	if err := WaitRange.Check(p.Wait); err != nil {
		return Checkout{}, err
	}
	cp.queues = claimQueues(p.Queues)
	var notes *claimNotes // this attempt's notes in the receipt; nil: unnamed
	if named {
		asOf := ms(s.clock())
		c, ok, afresh, err := s.claimedBefore(ctx, cp.AgentID, cp.RunID, cp.AgentName, cp.Reason)
		if ok || err != nil {
			return c, err
		}
		notes = newClaimNotes()
		if afresh {
			notes.afresh = asOf
		}
	}
	if notes != nil {
		defer func() {
			// An attempt that answers neither a lease nor none (whose
			// notes forgetClaim took back, with the turn) gives the run's
			// turn back, so that a retry need not wait for it to lapse.
			if err != nil && !errors.Is(err, ErrNoTaskAvailable) && !errors.Is(err, ErrStopping) {
				s.giveTurn(context.WithoutCancel(ctx), cp.AgentID, cp.RunID, notes)
			}
		}()
	}
	deadline := time.Now().Add(p.Wait)
	began := ms(s.clock())
	found := map[string]time.Time{} // tasks found taken, kept from look to look: see claimOnce
	next := s.claimPoll
	var woken <-chan struct{} // nil, never ready, for a claim that does not wait
	if p.Wait > 0 {
		w, done := s.claims.waitOn(cp.queues) // before the first look, so no wake is missed
		defer done()
		woken = w
	}
	for waited := false; ; waited = true {
		if waited {
			// The caller was authenticated when the claim began: an agent
			// removed while it waited (its key stopped working at the
			// removal's answer) is granted nothing. One read a wait.
			if err := s.stillRegistered(ctx, cp.AgentID, began); err != nil {
				return Checkout{}, err
			}
		}
		// The tasks this look passes by: found taken within grantShown,
		// and not freed by this process since. The last look passes none
		// by: another process may have freed one, which no wake tells of.
		last := time.Until(deadline) <= 0
		for taskID, at := range found {
			if last || time.Since(at) >= grantShown || s.claims.freedSince(taskID, at) {
				delete(found, taskID)
			}
		}
		passing := len(found) > 0
		c, err := s.claimOnce(ctx, cp, notes, found)
		if errors.Is(err, errTurnHeld) {
			// Another attempt of this run is looking: its answer is this
			// one's (see "Turns").
			if c, ok, err := s.awaitTurn(ctx, cp, notes); ok || err != nil {
				return c, err
			}
			continue
		}
		if !errors.Is(err, ErrNoTaskAvailable) {
			return c, err
		}
		left := time.Until(deadline)
		stopping := p.Wait > 0 && s.claims.stopping.Load()
		if left <= 0 && passing && !stopping {
			continue // this look, begun before the deadline, passed some by
		}
		if left <= 0 || stopping {
			if named {
				// Another attempt of this run, sent at the same time, may
				// have taken the task this one found taken.
				c, ok, err := s.otherAttempt(ctx, cp, notes)
				if errors.Is(err, errTurnHeld) {
					if c, ok, err := s.awaitTurn(ctx, cp, notes); ok || err != nil {
						return c, err
					}
					continue
				}
				if ok || err != nil {
					return c, err
				}
				if err := s.forgetClaim(ctx, cp.AgentID, cp.RunID, notes); err != nil {
					return Checkout{}, err
				}
			}
			if stopping {
				return Checkout{}, ErrStopping
			}
			return Checkout{}, ErrNoTaskAvailable
		}
		if notes != nil {
			// A claim that sleeps writes for nothing: it holds the run's
			// turn no longer (see "Turns"), so that another attempt of the
			// run need not wait out this one's wait.
			s.giveTurn(ctx, cp.AgentID, cp.RunID, notes)
		}
		wait := min(next, left)
		var ny *noneYet
		if errors.As(err, &ny) && ny.next != 0 {
			// A delayed task becomes ready then: look again at once.
			wait = min(wait, max(fromMS(ny.next).Sub(s.clock()), time.Millisecond))
		}
		t := time.NewTimer(wait)
		s.claims.asleep.Add(1)
		select {
		case <-ctx.Done():
			s.claims.asleep.Add(-1)
			t.Stop()
			return Checkout{}, ctx.Err()
		case <-woken:
			// The freed task may reach the index a moment later: if this
			// look misses it, look again soon, then less and less often.
			next = 100 * time.Millisecond
		case <-t.C:
			next = min(2*next, s.claimPoll)
		}
		s.claims.asleep.Add(-1)
		t.Stop()
	}
}

// stillRegistered answers ErrUnauthorized when agentID was removed (or
// removed and registered again) since since (Unix ms).
func (s *Store) stillRegistered(ctx context.Context, agentID string, since int64) error {
	hb, err := s.readHeartbeat(ctx, agentID)
	if err != nil {
		return err
	}
	if hb != nil && (hb.Removed || hb.RegisteredAt >= since) {
		return fmt.Errorf("claim for %s: the agent was removed while the claim waited: %w", agentID, ErrUnauthorized)
	}
	return nil
}

// claimQueues defaults a claim's queues (checked by CheckClaimQueues) and
// drops repeats.
func claimQueues(qs []string) []string {
	if len(qs) == 0 {
		return []string{DefaultQueue}
	}
	var out []string
	for _, q := range qs {
		if !slices.Contains(out, q) {
			out = append(out, q)
		}
	}
	return out
}

// claimOnce is one look at the claim index and the writes it leads to;
// notes, for a named claim, keeps its receipt. found holds the tasks the
// claim's earlier looks found taken that this one passes by, and when
// their writes were sent (on this process's monotonic clock: the index
// lags in real time); claimOnce adds those it finds taken.
func (s *Store) claimOnce(ctx context.Context, cp CheckoutParams, notes *claimNotes, found map[string]time.Time) (Checkout, error) {
	s.claims.inflight.Add(1)
	defer s.claims.inflight.Add(-1)
	// Tasks this claim found taken: an index that lags shows them for a
	// moment more, and trying them again would only fail again. A waiting
	// claim passes them by across its looks (found, kept by Claim): before,
	// each look after a wake, 100 ms, 200 ms ... apart, wrote for them
	// again, each write refused.
	taken := map[string]bool{}
	for taskID := range found {
		taken[taskID] = true
	}
	// The task this claim is writing for, held from the other claims of
	// the process (claimSpread.pick) until the write's answer: let go on
	// every way out, a panic included.
	holding := ""
	letGo := func() {
		if holding != "" {
			s.claims.unhold(holding)
			holding = ""
		}
	}
	defer letGo()
	key := strings.Join(cp.queues, "\x00")
	// A look sent before this claim began may miss a task freed since: it
	// may give this claim a task, never its answer that there is none.
	began := s.claims.lookSeq()
	var fresh uint64 // looks this claim may join: sent after this one (0: any)
	need := 0        // how wide a look this claim needs (0: any)
	// The widest a look reads: claimPage entries of every shard. Past
	// it, a claim that found every task read taken reads on from the
	// look's bound (from): the tasks before it are not for this claim.
	maxWidth := (claimPage - 1) * s.shards.Claim
	from := ""
	// A claim that found nothing for it in a look of one shard, sent by
	// another claim for which that shard held something, reads every
	// shard next (whole), in a look of its own or one that reads them all.
	whole := false
	for range retries(ctx) {
		w := s.claims.width(0, s.clock())
		width := max(need, s.claims.readWidth(s.clock()))
		lookKey := key + "\x00" + from
		if whole {
			lookKey += "\x00whole"
		}
		l := s.claims.look(lookKey, fresh, need, width, s.clock, func() (claimHeads, error) {
			return s.claimLook(ctx, cp.queues, w, width, from, whole, taken)
		})
		if l.err != nil {
			if !l.mine && ctx.Err() == nil {
				fresh = s.claims.lookSeq() // another claim's look, cut short by its caller
				continue
			}
			return Checkout{}, l.err
		}
		readAt := l.at
		retook := map[string]bool{}
		tried := map[string]bool{} // each candidate once a look
		var again *taskItem        // this run's own grant, expired: taken over once
		var left pickLeft          // what pick left when it found nothing
		for raced := 0; ; {
			it := again
			if again != nil {
				again = nil
				s.claims.hold(it.TaskID)
			} else if it, left = s.claims.pick(l, w, taken, tried); it == nil {
				break
			}
			holding = it.TaskID
			tried[it.TaskID] = true
			cp.TaskID = it.TaskID
			var over *taskItem
			if it.hasLease() {
				over = it // ended: taken over like any ended lease
			}
			if notes != nil {
				if err := s.noteClaim(ctx, cp.AgentID, cp.RunID, notes, it.TaskID); err != nil {
					letGo()
					return Checkout{}, err
				}
			}
			sent := time.Now()
			g, _, err := s.grantNow(ctx, cp, over, 0)
			if err != nil {
				letGo()
				return Checkout{}, err
			}
			c, cur := g.lease, g.cur
			if !g.granted && cur != nil && cur.hasLease() && cur.Holder == cp.AgentID && cur.RunID == cp.RunID {
				// Taken by this very run: the grant's first attempt applied
				// and its answer was lost, so the SDK's retry failed its
				// condition (or the same run claimed it at once elsewhere).
				// It is this claim's lease, not a task taken by another,
				// unless it has expired meanwhile (a write slower than the
				// lease's timeout): a lease is never handed out expired, so
				// that one is taken over like any ended lease, once.
				if !cur.leaseTimeValid(s.clock()) {
					letGo()
					if !retook[cur.TaskID] {
						retook[cur.TaskID] = true
						again = cur
					}
					continue
				}
				c, g.granted = cur.checkout(), true
			}
			if g.granted {
				s.claims.won(l, c.TaskID, w, s.clock())
				holding = ""
				if notes != nil {
					if first, superseded, err := s.noteGrant(ctx, c); err != nil || superseded {
						return first, err
					}
				}
				return c, nil
			}
			letGo()
			if notes != nil && g.refused && !cur.showsRun(cp.AgentID, cp.RunID) {
				notes.refused = append(notes.refused, it.TaskID)
			}
			if cur == nil || !cur.claimable() || !slices.Contains(cp.queues, cur.queue()) {
				taken[it.TaskID] = true // or moved to another queue: the index lags
				found[it.TaskID] = sent
			}
			if cur != nil && cur.claimable() && cur.NotBefore > readAt {
				// Not ready, yet ranked so: its delay is given its key.
				s.keepDelay(ctx, cur)
				taken[it.TaskID] = true
			}
			if cur != nil && grantedElsewhere(cur, readAt, s.claims.ours) {
				// Granted after the indexes were read (and maybe already
				// ended) by another process (a claim of this one never
				// writes for a task another is writing for, and the process
				// knows the grants it made): spread wider, and this claim
				// at once four times as wide for each race it lost, since
				// claimers that lost the same task must not all go for the
				// next one. A task granted before is an index entry that
				// lagged, and one changed otherwise (cancelled, moved) lost
				// to no claimer: neither says anything of contention.
				raced++
				w = s.claims.width(raced, s.clock())
			}
		}
		// Nothing in a look of one shard was for this claim (every task
		// there found taken by it), while the claim that sent the look
		// found something: the other shards are read before any answer
		// of none, as claimLook reads them for the claim that sends it.
		whole = l.partial && len(tried) == 0 && !left.others
		if !whole && len(tried) == 0 && !left.others && !left.beyond && l.seq > began {
			return Checkout{}, &noneYet{next: l.next}
		}
		if left.settled != nil {
			// What is left is being written for by other claims of this
			// process: a read now would show the same.
			select {
			case <-left.settled:
			case <-ctx.Done():
				return Checkout{}, ctx.Err()
			}
		}
		switch {
		case !left.beyond || left.settled != nil:
		case l.width < maxWidth:
			// The best of what was read is taken: read further.
			need = min(2*max(l.width, len(l.cands)), maxWidth)
		default:
			// As wide as a look reads, and all taken: read on past it.
			from = l.bound
		}
		// Every candidate taken, by others of this process too, or a look
		// older than the claim: look again.
		fresh = max(began, s.claims.lookSeq())
	}
	return Checkout{}, ErrNoTaskAvailable
}

// noneYet is ErrNoTaskAvailable from a look that saw a task of the queues
// waiting for its not_before: when a waiting claim should look again.
type noneYet struct{ next int64 }

func (e *noneYet) Error() string { return ErrNoTaskAvailable.Error() }
func (e *noneYet) Unwrap() error { return ErrNoTaskAvailable }

// claimLook returns the candidates of a claim that picks among the best w,
// leaving out those it found taken. A claim spread over at least two
// candidates per claim shard reads one shard of each queue, chosen at
// random, and the others only if that one has nothing for it: tasks hash
// evenly over the shards, so a random pick among the best w/n of a random
// shard is a random pick among the best w of the queue, as the claim makes
// anyway, for one Query per queue instead of n. A lone claimer (w = 1),
// or one spread too narrowly for that, reads every shard and takes the
// best exactly, and so does a claim with whole: one that joined a look of
// one shard which held something for the claim that sent it, and nothing
// for this one (claimOnce).
func (s *Store) claimLook(ctx context.Context, queues []string, w, width int, from string, whole bool, taken map[string]bool) (claimHeads, error) {
	n := s.shards.Claim
	all := make([]int, n)
	for i := range all {
		all[i] = i
	}
	if whole || n < 2 || w < 2*n {
		return s.claimCandidates(ctx, queues, all, width, from)
	}
	one := rand.IntN(n)
	h, err := s.claimCandidates(ctx, queues, all[one:one+1], width, from)
	if err != nil {
		return h, err
	}
	if slices.ContainsFunc(h.cands, func(it *taskItem) bool { return !taken[it.TaskID] && !s.claims.shown(it.TaskID) }) {
		h.partial = true
		return h, nil
	}
	// Nothing there the sending claim has not found taken, or that the
	// index shows as it was before a grant of this process. The look is
	// shared: it keeps what it read, and each claim passes by its own
	// taken tasks (pick).
	rest, err := s.claimCandidates(ctx, queues, slices.Delete(all, one, one+1), width, from)
	if rest.next == 0 || h.next != 0 && h.next < rest.next {
		rest.next = h.next
	}
	rest.cands = append(rest.cands, h.cands...)
	slices.SortFunc(rest.cands, func(a, b *taskItem) int { return strings.Compare(a.ClaimKey, b.ClaimKey) })
	if h.bound != "" && (rest.bound == "" || h.bound < rest.bound) {
		rest.bound = h.bound
	}
	return rest, err
}

// claimCandidates returns the tasks in queues that look available, best
// first: the head of each of the given shards of each queue in the claim
// index, read at once. Leases past their expiry and leases of dead
// holders are not looked for: the sweep ends them and puts their tasks
// back in the claim index, so a claim reads one index partition per shard
// it looks at per queue, whatever else the fleet holds.
func (s *Store) claimCandidates(ctx context.Context, queues []string, shards []int, width int, from string) (claimHeads, error) {
	var mu sync.Mutex
	var out []*taskItem
	var next int64 // the earliest not_before of a task not ready yet
	var bound string
	now := ms(s.clock())
	add := func(items []taskItem, full bool) {
		mu.Lock()
		defer mu.Unlock()
		if n := len(items); full && n > 0 {
			// The shard holds more past its last entry read: tasks ranked
			// after it, unless that entry waits for a not_before still to
			// come (all after it wait longer). (Past an entry whose
			// not_before has passed may be others that have passed too,
			// of any priority: the sweep ranks them ready within its
			// interval; see "Delays".)
			last := items[n-1].ClaimKey
			if nb, delayed := delayedUntil(last); !(delayed && nb > now) && (bound == "" || last < bound) {
				bound = last
			}
		}
		for i := range items {
			if nb, ok := delayedUntil(items[i].ClaimKey); ok && nb > now {
				if next == 0 || nb < next {
					next = nb
				}
				continue // waits for its not_before (see "Delays")
			}
			if slices.Contains(queues, items[i].queue()) {
				out = append(out, &items[i])
			}
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	// Each shard's head: as many as the claim may spread over, split among
	// the shards (and one more each), so that the merge holds the best w
	// of the queues exactly, and at least claimHead, so that a claim that
	// loses races has candidates to widen to without reading again (a
	// Query is billed by the 4 KB read, so a longer head costs nothing).
	// Only what ordering and the grant need is read.
	perShard := int32(min(claimPage, max(claimHead, (width+s.shards.Claim-1)/s.shards.Claim+1)))
	proj := expression.NamesList(expression.Name("task_id"), expression.Name("queue"), expression.Name("priority"),
		expression.Name("created_at"), expression.Name("claim_key"))
	for _, q := range queues {
		for _, shard := range shards {
			g.Go(func() error {
				keyCond := expression.Key("claim_shard").Equal(expression.Value(q + "#" + strconv.Itoa(shard)))
				if from != "" {
					keyCond = keyCond.And(expression.Key("claim_key").GreaterThan(expression.Value(from)))
				}
				expr, _ := expression.NewBuilder().WithKeyCondition(keyCond).WithProjection(proj).Build()
				page, err := s.db.Query(gctx, &dynamodb.QueryInput{
					TableName: &s.tasks, IndexName: aws.String(schema.TasksByClaim),
					KeyConditionExpression:    expr.KeyCondition(),
					ProjectionExpression:      expr.Projection(),
					ExpressionAttributeNames:  expr.Names(),
					ExpressionAttributeValues: expr.Values(),
					Limit:                     aws.Int32(perShard),
				})
				if err != nil {
					return fmt.Errorf("claim: %w", err)
				}
				var items []taskItem
				if err := attributevalue.UnmarshalListOfMaps(page.Items, &items); err != nil {
					return err
				}
				add(items, int32(len(items)) == perShard)
				return nil
			})
		}
	}
	if err := g.Wait(); err != nil {
		return claimHeads{}, err
	}
	for _, it := range out {
		// Ranked as ready: a task whose not_before has passed ranks by its
		// priority and age again, wherever its key still puts it.
		it.ClaimKey = claimKey(it.priority(), it.CreatedAt, it.TaskID)
	}
	slices.SortFunc(out, func(a, b *taskItem) int { return strings.Compare(a.ClaimKey, b.ClaimKey) })
	return claimHeads{cands: slices.CompactFunc(out, func(a, b *taskItem) bool { return a.TaskID == b.TaskID }), next: next, bound: bound}, nil
}

// claimHeads is what a look at the heads of claim shards found: the
// candidates, best first; the earliest not_before of a task not ready
// yet (0: none); and bound, the lowest last key of a head that was read
// to its length, past which a shard may hold tasks unread ("": every head
// was read whole). The candidates up to bound are the best of the queues
// exactly; those after it only of what was read. partial says the look
// read one shard of each queue, chosen at random, and not the others: the
// claim that sent it found something there (claimLook), and a claim that
// joined it and finds nothing for it there reads them all (claimOnce).
type claimHeads struct {
	cands   []*taskItem
	next    int64
	bound   string
	partial bool
}

// exact is how many of h's candidates are the best of the queues.
func (h claimHeads) exact() int {
	if h.bound == "" {
		return len(h.cands)
	}
	n, _ := slices.BinarySearchFunc(h.cands, h.bound, func(it *taskItem, b string) int {
		if it.ClaimKey <= b {
			return -1
		}
		return 1
	})
	return n
}

// claimSpread is the state that spreads concurrent claimers, and wakes
// waiting ones.
type claimSpread struct {
	mu       sync.Mutex
	inflight atomic.Int64
	// asleep counts the waiting claims between two looks, and wakes the
	// wakes sent to waiting claims (for tests).
	asleep, wakes atomic.Int64
	// learned is what the lost races of this process say about claimers
	// elsewhere (other processes, which inflight cannot count): the window
	// recent claims won with, shrinking while nothing is lost (see won),
	// and with time (learnedHalfLife) from learnedAt. It is 1 while
	// nothing is lost.
	learned   float64
	learnedAt time.Time
	// held are the tasks this process's claims are writing for: no other
	// claim of it writes for one meanwhile. wins are the grants its
	// claims won lately (task and fence; the latest winsKept), so that a
	// claim that loses a task to one of them knows it lost to no one
	// elsewhere. looks are the reads of the claim index in flight, by
	// the queues they read, which claims of the same queues share.
	held     map[string]bool
	settled  chan struct{} // closed when a held task is let go (see pick)
	wins     map[string]claimWin
	winOrder []string
	// freeings are the tasks this process freed lately, and when, oldest
	// first (each freeing drops those past grantShown): a waiting claim
	// no longer passes by a task it found taken before one of them
	// (freedSince).
	freeings []claimFreeing
	looks    map[string]*claimRead
	// seq counts the looks sent: it orders them against the claims and
	// the grants of the process (a clock's milliseconds could not).
	seq uint64

	// waiting holds the waiting claims of this process by the queues
	// they wait on (see waitOn, wake); stopping ends every wait
	// (EndWaits).
	wmu      sync.Mutex
	waiting  map[string]map[*claimWaiter]struct{}
	stopping atomic.Bool
}

// EndWaits answers every claim of this process that waits, or will wait,
// for a task with ErrStopping as soon as its look in progress ends, so
// that a process asked to stop is not held up for a whole wait (up to
// 20 s) and the agents claim again elsewhere. Claims that do not wait are
// served as before. For a server's shutdown; it cannot be undone.
func (s *Store) EndWaits() {
	s.claims.stopping.Store(true)
	s.claims.wake("")
}

// claimWaiter is a waiting claim: a wake of any of its queues sends on
// woken, which holds one wake, so that one that comes while the claim
// looks is kept for when it next waits, and any number of them make one
// look.
type claimWaiter struct {
	woken chan struct{}
}

// waitOn makes a waiting claim of queues: from now until done is called, a
// wake of any of them (or of all) is sent on woken. Called before the
// claim's first look, so no wake is missed.
func (c *claimSpread) waitOn(queues []string) (woken <-chan struct{}, done func()) {
	w := &claimWaiter{woken: make(chan struct{}, 1)}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.waiting == nil {
		c.waiting = map[string]map[*claimWaiter]struct{}{}
	}
	for _, q := range queues {
		if c.waiting[q] == nil {
			c.waiting[q] = map[*claimWaiter]struct{}{}
		}
		c.waiting[q][w] = struct{}{}
	}
	return w.woken, func() {
		c.wmu.Lock()
		defer c.wmu.Unlock()
		for _, q := range queues {
			delete(c.waiting[q], w)
			if len(c.waiting[q]) == 0 {
				delete(c.waiting, q)
			}
		}
	}
}

// wake tells the claims of this process waiting on queue that a task of
// it may have become claimable; "" (a write that does not know the task's
// queue) tells every waiting claim. A claim waiting on other queues is
// not woken: it would only read them again. It costs nothing when nobody
// waits.
func (c *claimSpread) wake(queue string) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if queue != "" {
		c.wakeAll(c.waiting[queue])
		return
	}
	for _, ws := range c.waiting {
		c.wakeAll(ws)
	}
}

// anyWaiting tells whether a claim of this process waits on any queue.
func (c *claimSpread) anyWaiting() bool {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return len(c.waiting) > 0
}

// wakeAll sends a wake to each of ws that holds none. c.wmu is held.
func (c *claimSpread) wakeAll(ws map[*claimWaiter]struct{}) {
	c.wakes.Add(int64(len(ws)))
	for w := range ws {
		select {
		case w.woken <- struct{}{}:
		default: // woken already: one look follows
		}
	}
}

// wokenQueue is the queue whose waiting claims a write that left it
// claimable wakes: the queue in its claim_shard, which such a write sets
// (returned by UPDATED_NEW as well as ALL_NEW), or of the whole item; ""
// (every queue) when it carries neither.
func wokenQueue(it *taskItem) string {
	switch {
	case it == nil:
		return ""
	case it.ClaimShard != "":
		if i := strings.LastIndexByte(it.ClaimShard, '#'); i > 0 {
			return it.ClaimShard[:i]
		}
		return ""
	case it.TaskID != "":
		return it.queue()
	}
	return ""
}

// learnedHalfLife is how fast what lost races taught fades while no claim
// of the process wins: a burst's lesson is gone within half a minute of
// its end. (One second made the agents of a drain, each with a store of
// its own, lose half as many races again: 3.5 claim requests a grant
// against 3.0.)
const learnedHalfLife = 2 * time.Second

// won records a grant the claim won from look l with window w at now:
// its task is no longer held, l's other claims pass it by, and the
// process knows it as its own. The next claim starts from three quarters
// of w, or nine tenths of the window before, whichever is wider, so that
// claimers that keep meeting claimers elsewhere stay spread, and one left
// alone is back to the best task within a few dozen claims, or a few
// seconds.
func (c *claimSpread) won(l *claimRead, taskID string, w int, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unholdLocked(taskID)
	l.granted[taskID] = true
	c.learned, c.learnedAt = max(1, 0.75*float64(w), 0.9*c.faded(now)), now
}

// granted records a grant of this process (a claim's or a checkout's):
// its task and fence, after the looks sent so far.
func (c *claimSpread) granted(taskID string, fence int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.wins == nil {
		c.wins = map[string]claimWin{}
	}
	if _, ok := c.wins[taskID]; !ok {
		if len(c.winOrder) >= winsKept {
			delete(c.wins, c.winOrder[0])
			c.winOrder = c.winOrder[1:]
		}
		c.winOrder = append(c.winOrder, taskID)
	}
	c.wins[taskID] = claimWin{fence: fence, seq: c.seq, at: time.Now()}
}

// freed records that a write of this process made taskID claimable
// again (ended its lease to todo, unblocked it, reopened it): its claim
// entry from now on may be its freeing's, so that claims no longer pass
// it by as a grant of this process the index lags (shownBefore), nor
// waiting claims as a task they found taken before (freedSince).
func (c *claimSpread) freed(taskID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if win, ok := c.wins[taskID]; ok {
		win.at = time.Time{}
		c.wins[taskID] = win
	}
	now := time.Now()
	old := 0
	for old < len(c.freeings) && now.Sub(c.freeings[old].at) >= grantShown {
		old++
	}
	// Resliced, not shifted: append moves the kept ones only when it
	// grows the array, so a freeing costs O(1) however many are kept.
	c.freeings = append(c.freeings[old:], claimFreeing{taskID: taskID, at: now})
}

// claimFreeing is a task this process freed, and when, on its monotonic
// clock.
type claimFreeing struct {
	taskID string
	at     time.Time
}

// freedSince reports whether this process freed taskID after since, up to
// grantShown ago: the freeings it keeps.
func (c *claimSpread) freedSince(taskID string, since time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range slices.Backward(c.freeings) {
		if !f.at.After(since) {
			return false
		}
		if f.taskID == taskID {
			return true
		}
	}
	return false
}

// grantShown is how long after a grant of this process its claims take
// the task's entry in the claim index for the one from before the grant:
// a bound on the index's lag (DynamoDB's is usually a fraction of a
// second). Past it, or once this process has freed the task, the entry
// is a candidate again.
const grantShown = time.Second

// shownBefore reports whether the claim index's entry of taskID may be
// taken, unread, for the one from before this process's grant of it:
// granted within grantShown, and not freed by this process since. Such an
// entry is one the index has yet to delete (a write for it would only be
// refused), or, should another process have freed the task meanwhile, one
// a claim of this process passes by for other open candidates until
// grantShown has passed (README, "Known limits"); with none, the claim
// writes for it (pick). c.mu is held.
func (c *claimSpread) shownBefore(taskID string) bool {
	win, ok := c.wins[taskID]
	return ok && !win.at.IsZero() && time.Since(win.at) < grantShown
}

// shown is shownBefore, for a caller that does not hold c.mu.
func (c *claimSpread) shown(taskID string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shownBefore(taskID)
}

// recentGrants counts the grants of this process that claims pass by
// (shownBefore), up to the first one older than grantShown: a look reads
// that many candidates more, so that a head shown full of them still
// holds the best task left. A task granted again keeps its first place
// in winOrder, so the count may stop short of one.
func (c *claimSpread) recentGrants() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, taskID := range slices.Backward(c.winOrder) {
		win := c.wins[taskID]
		if win.at.IsZero() {
			continue
		}
		if time.Since(win.at) >= grantShown {
			break
		}
		n++
	}
	return n
}

// lookSeq is the seq of the latest look sent: a look with a greater one
// is sent after now.
func (c *claimSpread) lookSeq() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// grantedElsewhere reports whether cur, as a failed grant found it, was
// granted after readAt (Unix ms) by another process: its lease (or, when
// it has ended, its last one) is not one this process made (ours).
func grantedElsewhere(cur *taskItem, readAt int64, ours func(taskID string, fence int64) bool) bool {
	lockedAt, fence := cur.LockedAt, cur.Fence
	if !cur.hasLease() {
		lockedAt, fence = cur.EndLocked, cur.EndFence
	}
	return lockedAt > readAt && !ours(cur.TaskID, fence)
}

// winsKept bounds the grants a process remembers as its own: a claim
// that loses a task asks about the grant that beat it, made moments ago,
// and a read sent before a grant shows its task for a moment.
const winsKept = 4096

// claimWin is a grant of this process: its fence, the seq of the
// latest look sent before it (a look up to it may show the task), and
// when it was made, on this process's monotonic clock (the index lags in
// real time), zero once this process has freed the task (shownBefore).
type claimWin struct {
	fence int64
	seq   uint64
	at    time.Time
}

// ours reports whether the lease with fence on taskID was granted by a
// claim of this process.
func (c *claimSpread) ours(taskID string, fence int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	win, ok := c.wins[taskID]
	return ok && win.fence == fence
}

// faded is learned as it stands at now: halved for every learnedHalfLife
// since it was learned. c.mu is held.
func (c *claimSpread) faded(now time.Time) float64 {
	d := now.Sub(c.learnedAt)
	if c.learned <= 1 || d <= 0 {
		return max(1, c.learned)
	}
	return max(1, c.learned*math.Exp2(-d.Seconds()/learnedHalfLife.Seconds()))
}

// window is how many of the best candidates not held by another claim of
// this process a claim at now picks among at first: what this process's
// recent races with claimers elsewhere have taught it (see learned), 1
// for a process that has lost none lately. Claims of one process do not
// need it: they never write for the same task.
func (c *claimSpread) window(now time.Time) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int(c.faded(now))
}

// readWidth is how many of the best candidates a look at the claim index
// at now reads: enough for its window, for every claim of this process
// in flight, which pass by each other's tasks, and for this process's
// grants the index may still show (recentGrants).
func (c *claimSpread) readWidth(now time.Time) int {
	return c.window(now) + int(c.inflight.Load()) + c.recentGrants()
}

// width is the window of a claim at now that has lost raced races: four
// times wider for each, since claimers that lost the same task must not
// all go for the next one (doubling left too many of them still meeting).
func (c *claimSpread) width(raced int, now time.Time) int {
	return min(c.window(now)<<min(2*raced, 16), 1<<16)
}

// claimRead is one look at the claim index, shared by the claims of this
// process that wanted one while it was in flight. seq orders it among
// the looks of the process, at is when it was sent (Unix ms, for the
// tasks' own times), width how many candidates it read for, mine whether
// the claim holding it sent it; granted are the tasks its claims have won
// since, which the others pass by (the index may show them for a moment
// more). Its heads are read-only.
type claimRead struct {
	claimHeads
	done    chan struct{}
	seq     uint64
	at      int64
	width   int
	exact   int
	mine    bool
	err     error
	granted map[string]bool
}

// look returns a look at the claim index for the queues key names: the
// one in flight that was sent after since and reads at least need
// candidates, which the claim joins (one read serves every claim of the
// process that arrives while it is out), else a look of its own by read,
// for width candidates, which later claims may join. key names the
// queues and where in them the look starts.
func (c *claimSpread) look(key string, since uint64, need, width int, clock func() time.Time, read func() (claimHeads, error)) *claimRead {
	c.mu.Lock()
	if l := c.looks[key]; l != nil && l.seq > since && l.width >= need {
		c.mu.Unlock()
		<-l.done
		joined := *l
		joined.mine = false
		return &joined
	}
	c.seq++
	l := &claimRead{done: make(chan struct{}), seq: c.seq, at: ms(clock()), width: width, mine: true, granted: map[string]bool{}}
	if c.looks == nil {
		c.looks = map[string]*claimRead{}
	}
	c.looks[key] = l
	c.mu.Unlock()
	h, err := read()
	c.mu.Lock()
	l.claimHeads, l.exact, l.err = h, h.exact(), err
	if c.looks[key] == l {
		delete(c.looks, key)
	}
	c.mu.Unlock()
	close(l.done)
	return l
}

// pickLeft is what a claim's pick left when it found nothing in a look:
// others, candidates that other claims of this process hold or won;
// settled, when one of them is still held, closed once a claim of the
// process lets a task go, when a look is worth sending again; beyond,
// that the look's best were all used, and the queues may hold more past
// what it read.
type pickLeft struct {
	others  bool
	settled <-chan struct{}
	beyond  bool
}

// pick returns the candidate of l a claim with window w tries next, and
// holds it: at random among the best w of those no claim of this process
// holds or has granted since l was sent, and that the claim has not found
// taken or tried from l already, among the candidates l knows to be the
// best of the queues (exact). The entries of this process's own grants of
// the last moment (shownBefore) are passed by while another candidate is
// open; with none, the best of them is tried. When none is left it
// returns nil, and what was left (pickLeft).
func (c *claimSpread) pick(l *claimRead, w int, taken, tried map[string]bool) (*taskItem, pickLeft) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var open, shown []*taskItem
	var left pickLeft
	for _, it := range l.cands[:l.exact] {
		switch {
		case taken[it.TaskID] || tried[it.TaskID]:
		case c.held[it.TaskID]:
			left.others = true
			if c.settled == nil {
				c.settled = make(chan struct{})
			}
			left.settled = c.settled
		case l.granted[it.TaskID] || c.wins[it.TaskID].seq >= l.seq:
			// Granted by this process since l was sent: the index
			// showed it before the grant.
			left.others = true
		case c.shownBefore(it.TaskID):
			// Granted by this process moments before l was sent: the
			// index most likely still shows it as it was before the
			// grant. Passed by while another candidate is open.
			shown = append(shown, it)
		default:
			open = append(open, it)
		}
		if len(open) == w {
			break
		}
	}
	if len(open) == 0 && len(shown) > 0 {
		// Nothing else open: the entry may be a freeing's by another
		// process, which no claim may answer none over. Written for,
		// best first; a write refused finds it taken.
		open = shown[:1]
	}
	if len(open) == 0 {
		left.beyond = l.bound != ""
		return nil, left
	}
	it := open[rand.IntN(len(open))]
	c.holdLocked(it.TaskID)
	return it, pickLeft{}
}

// hold marks a task a claim of this process is writing for, and unhold
// one it has stopped writing for.
func (c *claimSpread) hold(taskID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.holdLocked(taskID)
}

// holdLocked is hold with c.mu held.
func (c *claimSpread) holdLocked(taskID string) {
	if c.held == nil {
		c.held = map[string]bool{}
	}
	c.held[taskID] = true
}

func (c *claimSpread) unhold(taskID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unholdLocked(taskID)
}

// unholdLocked is unhold with c.mu held: it tells the claims waiting for
// a held task to settle (see pick).
func (c *claimSpread) unholdLocked(taskID string) {
	delete(c.held, taskID)
	if c.settled != nil {
		close(c.settled)
		c.settled = nil
	}
}

// receiptID is the heartbeats-table key of a named claim's receipt; '#'
// cannot start an agent id, so it never meets a real heartbeat.
func receiptID(agentID, runID string) string { return "#claim#" + agentID + "#" + runID }

// A receipt lists the tasks its run tried where the run may hold a lease:
// one attribute an attempt and task, "t#<attempt>#<task_id>" (triedName),
// so that each attempt of the run (a Claim call; several may run at once)
// adds and removes its own entries only, and no write replaces the list
// (ids never hold '#'). A task whose grant write was refused (its
// condition failed, and the task showed no lease of the run) is removed
// by the attempt's next note, in the same write: a claim that loses races
// lists only the task it writes for last. An entry whose write failed
// otherwise, or is still in flight, stays. Receipts of an earlier version
// list their tasks in a string set, "tried" (receiptItem reads both).

// claimNotes is one attempt of a named claim, as its receipt's notes know
// it: the id its entries are under, the tasks they list, and the tasks
// whose grant write was refused since its last note, which the next note
// removes. afresh (Unix ms), for an attempt that found the receipt
// listing no task and keeping no grant (or no receipt), is when it read
// it: its first note stamps the receipt made then (see forgetClaim).
type claimNotes struct {
	attempt string
	listed  []string
	refused []string
	afresh  int64
	lapsed  int64 // turn_at of a turn seen unchanged for turnLapse: taken as lapsed (awaitTurn)
	holds   bool  // the attempt's last note took the run's turn, not given back since
}

func newClaimNotes() *claimNotes {
	return &claimNotes{attempt: strconv.FormatUint(rand.Uint64N(1<<31), 36)}
}

// triedPrefix starts the name of a receipt's entry for a tried task.
const triedPrefix = "t#"

func (n *claimNotes) triedName(taskID string) string {
	return triedPrefix + n.attempt + "#" + taskID
}

// noteClaim adds taskID to the receipt of the agent's named claim, before
// the claim tries it, and removes the attempt's refused tasks (but this
// one) from it. The receipt's first note stamps when it was made, and so
// does the first note of an attempt that found it listing nothing
// (afresh): the run's claims before answered none.
//
// The note takes the run's turn (see "Turns" below): it is refused with
// errTurnHeld while another attempt of the run holds it, and nothing is
// noted then.
func (s *Store) noteClaim(ctx context.Context, agentID, runID string, n *claimNotes, taskID string) error {
	now := s.clock()
	var created expression.OperandBuilder = expression.IfNotExists(expression.Name("created"), expression.Value(ms(now)))
	if n.afresh != 0 {
		created = expression.Value(n.afresh)
	}
	upd := expression.Set(expression.NameNoDotSplit(n.triedName(taskID)), expression.Value(true)).
		Set(expression.Name("ttl"), expression.Value(now.Add(2*MaxTimeout).Unix())).
		Set(expression.Name("created"), created)
	for _, id := range n.refused {
		if id != taskID {
			upd = upd.Remove(expression.NameNoDotSplit(n.triedName(id)))
		}
	}
	var cond *expression.ConditionBuilder
	if !s.noTurns {
		upd = upd.Set(nameTurn, expression.Value(n.attempt)).Set(nameTurnAt, expression.Value(ms(now)))
		free := turnFree(n.attempt, now, n.lapsed)
		cond = &free
	}
	switch applied, err := s.updateReceipt(ctx, agentID, runID, upd, cond); {
	case err != nil:
		return err
	case !applied:
		return errTurnHeld
	}
	n.listed = slices.DeleteFunc(n.listed, func(id string) bool { return id != taskID && slices.Contains(n.refused, id) })
	if !slices.Contains(n.listed, taskID) {
		n.listed = append(n.listed, taskID)
	}
	n.refused, n.afresh, n.lapsed, n.holds = nil, 0, 0, !s.noTurns
	return nil
}

// Turns.
//
// Attempts of one named claim sent at the same time (a retry sent while
// the first is still on its way) would each take a task, and all but the
// one whose grant the receipt keeps would give theirs back: each such
// grant counts an attempt of its task, tells its watchers, and holds it
// from other runs' claims meanwhile. So the attempts of a run take turns:
// an attempt's note (noteClaim), which comes before each task it writes
// for, takes the run's turn, on condition that no other attempt holds it
// (the receipt's turn names the attempt, turn_at when it last noted).
// Refused (errTurnHeld), the attempt writes for nothing and waits on the
// receipt (awaitTurn) until the grant is kept there (then it answers
// that lease, as a retry does), the holder has answered none (forgetClaim
// gives the turn back), or the turn lapses, turnLapse after the holder's
// last note (a holder that died, or that waits for a task with nothing
// to note); then it looks for a task itself. A turn is taken with the
// note a claim makes anyway: a claim that meets no other attempt of its
// run makes no request more. Attempts whose looks found their tasks at
// the same moment still note one at a time, so at most one writes for a
// task while the turn holds; the give-back (noteGrant, giveBackUnkept)
// remains for a turn that lapsed, and for attempts of an earlier version.

var (
	nameTurn   = expression.Name("turn")
	nameTurnAt = expression.Name("turn_at")
)

// turnLapse is how long after its holder's last note a run's turn lapses.
const turnLapse = 3 * time.Second

// errTurnHeld is noteClaim's refusal while another attempt of the run
// holds its turn.
var errTurnHeld = errors.New("another attempt of the same claim (run id) holds its turn")

// turnFree says the run's turn is attempt's to take at now: the receipt
// keeps no grant, and no attempt holds the turn, attempt does, or it has
// lapsed, by the clock or, lapsed not 0, as awaitTurn saw it stand still
// (turn_at as then).
func turnFree(attempt string, now time.Time, lapsed int64) expression.ConditionBuilder {
	c := expression.AttributeNotExists(nameTurn).
		Or(nameTurn.Equal(expression.Value(attempt))).
		Or(nameTurnAt.LessThan(expression.Value(ms(now.Add(-turnLapse)))))
	if lapsed != 0 {
		c = c.Or(nameTurnAt.Equal(expression.Value(lapsed)))
	}
	// A receipt that keeps a grant has decided (keepGrant gives the turn
	// back then): an attempt that read it before writes for nothing, and
	// answers that grant (awaitTurn).
	return expression.AttributeNotExists(expression.Name("granted")).And(c)
}

// awaitTurn waits, for an attempt of a named claim refused the run's turn
// (n its notes), until the receipt keeps a grant, which it answers (ok),
// or the turn is free to take: given back, lapsed (by the clock, or
// standing still for turnLapse of this process's time, as a clock that
// another process's runs behind would not show), or the receipt gone.
// Then the run's lease on a task the receipt lists, if any (a holder's
// grant left undecided), is answered as a retry answers it
// (claimedBefore); else ok is false and the attempt looks for a task
// itself. One consistent read of the receipt every 50 ms.
func (s *Store) awaitTurn(ctx context.Context, cp CheckoutParams, n *claimNotes) (Checkout, bool, error) {
	var seen int64
	var since time.Time
	for {
		rec, ok, err := s.receipt(ctx, cp.AgentID, cp.RunID)
		if err != nil {
			return Checkout{}, false, err
		}
		if ok && rec.Granted != nil {
			c, err := s.receiptsGrant(ctx, cp.AgentID, cp.RunID, *rec.Granted)
			return c, err == nil, err
		}
		if rec.TurnAt != seen {
			seen, since = rec.TurnAt, time.Now()
		}
		stood := time.Since(since) >= turnLapse
		if !ok || rec.Turn == "" || rec.Turn == n.attempt || rec.TurnAt < ms(s.clock().Add(-turnLapse)) || stood {
			if stood {
				n.lapsed = rec.TurnAt
			}
			c, ok, afresh, err := s.claimedBefore(ctx, cp.AgentID, cp.RunID, cp.AgentName, cp.Reason)
			if afresh && err == nil && n.afresh == 0 && len(n.listed) == 0 {
				n.afresh = ms(s.clock())
			}
			return c, ok, err
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return Checkout{}, false, ctx.Err()
		case <-t.C:
		}
	}
}

// giveTurn gives the run's turn back, when n's attempt holds it (its last
// note took it): one UpdateItem, on a claim's way out with an error, and
// before a waiting claim sleeps. A failure is logged: the turn lapses all
// the same.
func (s *Store) giveTurn(ctx context.Context, agentID, runID string, n *claimNotes) {
	if !n.holds {
		return
	}
	n.holds = false
	mine := nameTurn.Equal(expression.Value(n.attempt))
	if _, err := s.updateReceipt(ctx, agentID, runID, expression.Remove(nameTurn).Remove(nameTurnAt), &mine); err != nil {
		s.log.WarnContext(ctx, "claim receipt: the run's turn was not given back", "agent_id", agentID, "run_id", runID, "err", err)
	}
}

// updateReceipt makes upd to the run's receipt, on condition cond when
// not nil: applied is false when cond failed.
func (s *Store) updateReceipt(ctx context.Context, agentID, runID string, upd expression.UpdateBuilder, cond *expression.ConditionBuilder) (applied bool, err error) {
	b := expression.NewBuilder().WithUpdate(upd)
	if cond != nil {
		b = b.WithCondition(*cond)
	}
	expr, err := b.Build()
	if err != nil {
		return false, fmt.Errorf("claim receipt of %s: %w", agentID, err)
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.heartbeats, Key: agentKey(receiptID(agentID, runID)),
		UpdateExpression:          expr.Update(),
		ConditionExpression:       expr.Condition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	})
	if _, failed := conditionFailed(err); failed {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("claim receipt of %s: %w", agentID, err)
	}
	return true, nil
}

// forgetClaim removes the entries of an attempt of a named claim that
// answers none from its run's receipt: the attempt holds no lease (it read
// the receipt, and the run's leases on the tasks it lists, just before:
// otherAttempt), so the run's next claim is a fresh one, not a retry of a
// lease this one never got (a task it tried and lost, left listed, would
// have the next claim answer a checkout by name of it as its lease).
// One UpdateItem, only when the attempt listed a task; another attempt's
// entries, which may name a grant still in flight, stay. The next claim
// that finds the receipt listing nothing stamps it made anew (afresh),
// so a retry of that claim finds nothing of the run's from before.
func (s *Store) forgetClaim(ctx context.Context, agentID, runID string, n *claimNotes) error {
	if len(n.listed) == 0 {
		return nil
	}
	var upd expression.UpdateBuilder
	for _, id := range n.listed {
		upd = upd.Remove(expression.NameNoDotSplit(n.triedName(id)))
	}
	// A receipt deleted since (a removed agent's) is not made again. The
	// attempt gives the run's turn back, when it still holds it (see
	// "Turns"), in the same write: one more only when another has taken it.
	exists := expression.AttributeExists(expression.Name("agent_id"))
	mine := exists.And(nameTurn.Equal(expression.Value(n.attempt)))
	type write struct {
		upd  expression.UpdateBuilder
		cond expression.ConditionBuilder
	}
	writes := []write{{upd, exists}}
	if n.holds {
		writes = append([]write{{upd.Remove(nameTurn).Remove(nameTurnAt), mine}}, writes...)
	}
	for _, w := range writes {
		applied, err := s.updateReceipt(ctx, agentID, runID, w.upd, &w.cond)
		if err != nil {
			return err
		}
		if applied {
			break
		}
	}
	n.listed, n.holds = nil, false
	return nil
}

// showsRun reports whether t shows a lease of the run (agentID, runID):
// held, ended, or taken over. A grant whose write was refused while it
// does may have applied (its answer lost, the retry refused), so its task
// stays listed.
func (t *taskItem) showsRun(agentID, runID string) bool {
	return t != nil && (t.Holder == agentID && t.RunID == runID ||
		t.EndAgent == agentID && t.EndRun == runID || t.PrevAgent == agentID && t.PrevRun == runID)
}

// grantRecord is a named claim's grant, as its receipt keeps it.
type grantRecord struct {
	Task     string `dynamodbav:"task"`
	Fence    int64  `dynamodbav:"fence"`
	Locked   int64  `dynamodbav:"locked"`
	Expires  int64  `dynamodbav:"expires"`
	Name     string `dynamodbav:"name,omitempty"`
	Reason   string `dynamodbav:"reason,omitempty"`
	Title    string `dynamodbav:"title,omitempty"`
	Queue    string `dynamodbav:"queue,omitempty"`
	Priority int    `dynamodbav:"priority"`
	Attempt  int    `dynamodbav:"attempt,omitempty"`
}

// noteGrant keeps a named claim's grant in its receipt, so that a retry gets
// this very lease whatever has happened to the task since (renewed,
// released, taken over, claimed again): the retry reads it on its task.
// The receipt keeps one grant (settleGrant). When it keeps another by then
// (another attempt of the same run, sent at the same time, got its own
// kept first: see also claimedBefore), this grant is given back
// (released) and that one answered (superseded): a run holds one lease,
// whichever attempt answers. The grant is kept even if the caller has
// gone. Undecided (the write kept failing), the lease is kept and the
// claim answers ErrGrantNotKept: a retry of the run finds the lease on
// its task, and the receipt decides then (claimedBefore).
func (s *Store) noteGrant(ctx context.Context, c Checkout) (first Checkout, superseded bool, err error) {
	ctx = context.WithoutCancel(ctx)
	kept, err := s.settleGrant(ctx, c, false)
	switch {
	case err != nil:
		return Checkout{}, false, err
	case !kept:
		return s.supersede(ctx, c)
	}
	return Checkout{}, false, nil
}

// settleGrant keeps c as its run's grant in the run's receipt (keepGrant),
// even if the caller has gone: kept is false when the receipt keeps
// another. A write that fails with an error (it timed out, or its answer
// was lost) may or may not have applied, and says nothing of another
// attempt's grant: the receipt, read consistently, decides, and the write
// is tried again until it does, for up to grantWait. Undecided by then,
// err wraps ErrGrantNotKept. found says c is a lease an earlier attempt
// got, found on its task (keepFound), not this attempt's grant: kept, it
// gives back fewer of the run's other leases (giveBackUnkept).
func (s *Store) settleGrant(ctx context.Context, c Checkout, found bool) (kept bool, err error) {
	ctx = context.WithoutCancel(ctx)
	deadline := time.Now().Add(s.grantWait)
	for {
		kept, tried, err := s.keepGrant(ctx, c)
		if err == nil {
			if kept {
				s.giveBackUnkept(ctx, c, tried, found)
			}
			return kept, nil
		}
		rec, ok, rerr := s.receipt(ctx, c.AgentID, c.RunID)
		if rerr == nil && ok && rec.Granted != nil {
			// The write applied, or another's did.
			kept := rec.Granted.Task == c.TaskID && rec.Granted.Fence == c.Fence
			if kept {
				s.giveBackUnkept(ctx, c, rec.Tried, found)
			}
			return kept, nil
		}
		if time.Now().After(deadline) {
			s.log.WarnContext(ctx, "claim receipt: the grant was not kept", "agent_id", c.AgentID, "run_id", c.RunID, "task_id", c.TaskID, "err", err)
			return false, fmt.Errorf("claim %s: %s was granted (fence %d) but %w: %w", c.RunID, c.TaskID, c.Fence, ErrGrantNotKept, err)
		}
	}
}

// grantWait bounds how long settleGrant tries to keep a grant whose write
// fails with an error.
const grantWait = 2 * time.Second

// giveBackUnkept gives back the leases of c's run on the tasks its
// receipt lists (tried) but c's own: c is the grant the receipt keeps, so
// they are grants of other attempts of the run, sent at the same time,
// that it did not keep. An attempt that learns so gives its own back
// (supersede); this is for one that could not learn it, its grant left
// undecided (ErrGrantNotKept), whose lease nothing else would give back
// before its timeout. Each other task listed is read (consistently), so
// a receipt that lists the kept task only, as a claim that meets no
// attempt of its own run leaves it, costs nothing more. A task whose
// grant is still on its way is given back by its own attempt, which finds
// this grant kept. A give-back that fails is logged: c is kept all the
// same.
//
// A lease of the run on a listed task is not always an attempt's grant:
// a run that uses its run id for every call (API.md: one agent run, one
// run id) may check out by name a task one of its claims tried and lost.
// So only a lease granted no later than upTo is given back. An undecided
// grant of another attempt was written before the receipt decided
// (kept, c's attempt): upTo is the decision, now. With found, c is a
// lease an earlier attempt got, kept now by a retry of the run (the
// grant's attempt left it undecided), which a checkout by name of the
// run may have followed: upTo is c's own lock time, and an undecided
// grant made after it stays held until its timeout (a second attempt
// left undecided too, README "Known limits").
func (s *Store) giveBackUnkept(ctx context.Context, c Checkout, tried []string, found bool) {
	upTo := ms(s.clock())
	if found {
		upTo = ms(c.LockedAt)
	}
	for _, taskID := range tried {
		if taskID == c.TaskID {
			continue
		}
		it, err := s.getTask(ctx, taskID)
		if err == nil && (it == nil || it.Holder != c.AgentID || it.RunID != c.RunID || it.LockedAt > upTo || !it.leaseTimeValid(s.clock())) {
			continue
		}
		if err == nil {
			_, err = s.Release(ctx, ReleaseParams{TaskID: taskID, AgentID: c.AgentID, RunID: c.RunID, Fence: it.Fence,
				Reason: "another attempt of the same claim (run id) got a lease first"})
		}
		if err != nil {
			s.log.WarnContext(ctx, "claim receipt: a grant the receipt did not keep was not given back",
				"agent_id", c.AgentID, "run_id", c.RunID, "task_id", taskID, "err", err)
		}
	}
}

// keepGrant writes c as its run's grant in the run's receipt, on
// condition that the receipt keeps no grant, or this one: kept is false
// when it keeps another; tried lists the tasks of the receipt the write
// kept c in. A write that fails otherwise is tried a few times; err is
// the last failure.
func (s *Store) keepGrant(ctx context.Context, c Checkout) (kept bool, tried []string, err error) {
	g := grantRecord{Task: c.TaskID, Fence: c.Fence, Locked: ms(c.LockedAt), Expires: ms(c.ExpiresAt), Name: c.AgentName, Reason: c.Reason,
		Title: c.Title, Queue: c.Queue, Priority: c.Priority, Attempt: c.Attempt}
	// The receipt's note set its ttl; the grant sets one only when that
	// receipt has gone (deleted as a removed agent's while this claim was
	// in flight), so that the receipt it writes again still expires.
	// The receipt decides: the run's turn is over (see "Turns"), so that
	// a fresh claim of the run (the grant moved on past a retry's reach)
	// does not wait for it.
	upd := expression.Set(expression.Name("granted"), expression.Value(g)).
		Set(expression.Name("ttl"), expression.IfNotExists(expression.Name("ttl"), expression.Value(s.clock().Add(2*MaxTimeout).Unix()))).
		Remove(nameTurn).Remove(nameTurnAt)
	mine := expression.Name("granted.task").Equal(expression.Value(c.TaskID)).
		And(expression.Name("granted.fence").Equal(expression.Value(c.Fence)))
	cond := expression.AttributeNotExists(expression.Name("granted")).Or(mine)
	expr, _ := expression.NewBuilder().WithUpdate(upd).WithCondition(cond).Build()
	for attempt := range recordAttempts {
		if attempt > 0 {
			if err := backoff(ctx, attempt); err != nil {
				return false, nil, err
			}
		}
		var out *dynamodb.UpdateItemOutput
		out, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: &s.heartbeats, Key: agentKey(receiptID(c.AgentID, c.RunID)),
			UpdateExpression:          expr.Update(),
			ConditionExpression:       expr.Condition(),
			ExpressionAttributeNames:  expr.Names(),
			ExpressionAttributeValues: expr.Values(),
			ReturnValues:              types.ReturnValueAllNew, // the tasks listed: no read
		})
		if _, failed := conditionFailed(err); failed {
			return false, nil, nil
		}
		if err == nil {
			rec, _ := decodeReceipt(out.Attributes)
			return true, rec.Tried, nil
		}
	}
	return false, nil, err
}

// supersede answers a named claim whose run got another lease first (see
// noteGrant): it gives c back, with a plain release, and answers the
// run's first lease as it is now. A read of that lease that fails gives
// c back all the same (the receipt has decided: c is not the run's), so
// that the run holds one lease whatever the claim answers. A release
// refused because c is no longer live has nothing left to give back: the
// attempt that kept the first lease gave c back already (giveBackUnkept),
// and the task may have moved on before that release reached its trail.
func (s *Store) supersede(ctx context.Context, c Checkout) (Checkout, bool, error) {
	first, ok, _, err := s.runLease(ctx, c.AgentID, c.RunID, c.AgentName, true)
	if err == nil && !ok {
		return Checkout{}, false, nil // no other grant to be found: keep this one
	}
	if _, rerr := s.Release(ctx, ReleaseParams{TaskID: c.TaskID, AgentID: c.AgentID, RunID: c.RunID, Fence: c.Fence,
		Reason: "another attempt of the same claim (run id) got a lease first"}); rerr != nil && !leaseGone(rerr) {
		return Checkout{}, false, fmt.Errorf("give back a second grant of claim %s: %w", c.RunID, rerr)
	}
	if err != nil {
		return Checkout{}, false, err
	}
	return first, true, nil
}

// leaseGone says a holder's release was refused because the lease it
// names is not live: ended, or another's lease is on the task.
func leaseGone(err error) bool {
	var nh *NotHolderError
	return errors.Is(err, ErrNotCheckedOut) || errors.As(err, &nh)
}

// trailWait bounds how long a named claim's retry waits for its tried
// tasks' trails to have no events pending (the change stream archives them
// about a second after their transition).
const trailWait = 3 * time.Second

// receiptSkew is how much earlier than the time a named claim's receipt
// was made its run's grant may be stamped: another attempt of the run,
// sent at the same time, may grant a task the first one noted, on another
// process's clock (see "What the clock is trusted for", doc.go).
const receiptSkew = time.Second

// grantInTrail finds the run's grant of taskID in the task's trail, which
// keeps every grant for the events' retention (far beyond a receipt's),
// waiting until the deadline for events not archived yet; with fence (not
// 0), that grant only: a run id may be used again by a checkout. The lease has
// ended (else the task itself would have shown it): it is returned
// expiring at its end.
//
// The grant was made at or after since (Unix ms: when the receipt was
// made, or the grant's lock time), so only the trail from then on is read
// (trailSince), newest first and bounded: what it costs depends on the
// task's events since, not on its whole history. A task with more events
// since than that read holds is not searched further: the grant is not
// found there (logged), as for one past the trail's retention.
func (s *Store) grantInTrail(ctx context.Context, taskID, agentID, runID string, fence, since int64, deadline time.Time) (Checkout, bool, error) {
	since -= receiptSkew.Milliseconds()
	for {
		tr, whole, err := s.trailSince(ctx, taskID, since)
		if errors.Is(err, ErrTaskNotFound) {
			return Checkout{}, false, nil
		}
		if err != nil {
			return Checkout{}, false, err
		}
		var c *Checkout
		for _, ev := range tr.Events {
			switch {
			case ev.Type == EventCheckout && ev.AgentID == agentID && ev.RunID == runID && (fence == 0 || ev.Fence == fence) && ms(ev.At) >= since:
				c = &Checkout{TaskID: taskID, AgentID: agentID, AgentName: agentID, RunID: runID, Fence: ev.Fence,
					LockedAt: ev.At, ExpiresAt: ev.At, Reason: ev.Reason}
			case c != nil && ev.Fence == c.Fence && ev.EndsLease() && ev.Held != nil:
				c.ExpiresAt = c.LockedAt.Add(*ev.Held)
				c.Timeout = *ev.Held
			}
		}
		if c != nil {
			return *c, true, nil
		}
		if !whole {
			s.log.WarnContext(ctx, "claim retry: the task's trail since the claim is longer than a retry reads; its grant is not looked for there",
				"task_id", taskID, "agent_id", agentID, "run_id", runID)
			return Checkout{}, false, nil
		}
		if tr.Pending == 0 || time.Now().After(deadline) {
			return Checkout{}, false, nil
		}
		if err := backoff(ctx, 2); err != nil {
			return Checkout{}, false, err
		}
	}
}

// claimedBefore finds the lease an earlier attempt of this named claim got:
// it reads the receipt and the tasks it lists, all consistently. The lease
// is returned as it is now: live (with its expiry and timeout after any
// renewal), or, if it has ended since, as it was, expiring when it ended.
//
// A lease of the run found on a tried task while the receipt keeps no
// grant may be another attempt's, sent at the same time, whose grant is
// not kept yet: should a third attempt's grant be kept first, that
// attempt gives it back (noteGrant). So the receipt decides, with the
// write noteGrant makes (keepGrant): kept, the lease is the run's; when
// the receipt keeps another grant by then, that one is answered (the
// attempt holding the lease found gives it back itself). A write that
// keeps failing is settled as noteGrant's is (settleGrant): undecided,
// the claim answers ErrGrantNotKept, and the lease found stays on its
// task for the next retry.
//
// A lease found ended on its task has no reason there (the item's record
// of an ending keeps none: endUpdate): a lease found without one is
// answered, and kept, with its checkout event's reason, read from the
// trail (one read, on that path alone), or, when the trail has yet to
// archive it and the lease has ended, with reason, this retry's, which
// repeats the claim's (grantsReason).
//
// A lease found on a task while the receipt keeps no grant is answered,
// and kept, as the claim's grant answered it (leaseOfRun): with name, the
// caller's (the claim's agent), the attempt its grant counted, and the
// task as granted. An attempt the item cannot tell and the trail has not
// archived yet is not guessed: the claim answers ErrGrantNotKept, keeping
// nothing, and the next retry counts it (asGranted).
//
// afresh says the receipt lists no task and keeps no grant, or there is
// none: the run's claims so far, if any, answered none (forgetClaim).
func (s *Store) claimedBefore(ctx context.Context, agentID, runID, name, reason string) (c Checkout, ok, afresh bool, err error) {
	rec, ok, err := s.receipt(ctx, agentID, runID)
	if err != nil || !ok || rec.Granted == nil && len(rec.Tried) == 0 {
		return Checkout{}, false, err == nil, err
	}
	c, ok, kept, err := s.leaseOf(ctx, agentID, runID, name, rec, true)
	if err != nil || !ok || kept {
		return c, ok, false, err
	}
	if c.Reason == "" {
		if c.Reason, err = s.grantsReason(ctx, c, reason); err != nil {
			return Checkout{}, false, false, err
		}
	}
	c, ok, err = s.keepFound(ctx, c)
	return c, ok, false, err
}

// grantsReason is the reason of c's grant, a lease of a named claim's run
// found with none, as its checkout event in the trail keeps it: none, for
// a lease granted without one, live or ended. When the trail has yet to
// archive that event, it is none for a lease its task still holds (read
// again, consistently: not judged by the clock, which another process's
// may run ahead of), and reason for one that has ended, whose record on
// the item keeps no reason.
func (s *Store) grantsReason(ctx context.Context, c Checkout, reason string) (string, error) {
	g, ok, err := s.grantInTrail(ctx, c.TaskID, c.AgentID, c.RunID, c.Fence, ms(c.LockedAt), time.Now())
	if err != nil || ok {
		return g.Reason, err
	}
	it, err := s.getTask(ctx, c.TaskID)
	if err != nil {
		return "", err
	}
	if it != nil && it.hasLease() && it.Holder == c.AgentID && it.Fence == c.Fence {
		return "", nil // held still, and granted without a reason
	}
	return reason, nil
}

// keepFound answers c, a lease of a named claim's run found on a task
// while the receipt kept no grant, once the receipt has decided (see
// claimedBefore).
func (s *Store) keepFound(ctx context.Context, c Checkout) (Checkout, bool, error) {
	kept, err := s.settleGrant(ctx, c, true)
	switch {
	case err != nil:
		return Checkout{}, false, err
	case !kept:
		return s.grantedBefore(ctx, c.AgentID, c.RunID)
	}
	return c, true, nil
}

// otherAttempt answers a named claim that found no task with the lease
// another attempt of its run, sent at the same time, took: that attempt
// may have taken the last task and not kept its grant yet, or be writing
// for it still. One consistent read of the receipt, on this path only:
// the grant it keeps is answered. Else each task it lists is read
// (consistently): one that holds a lease of the run is answered as
// claimedBefore answers it (the receipt decides, with keepGrant), and
// one still claimable here, which another attempt may be writing for,
// this attempt notes and writes for too: whichever write lands first,
// both attempts answer its lease, since the one that fails finds the
// run's lease on the task (claimOnce). (The note, an UpdateItem only
// then, keeps the task listed should the other attempt's write be
// refused and its entry go.)
func (s *Store) otherAttempt(ctx context.Context, cp CheckoutParams, notes *claimNotes) (Checkout, bool, error) {
	rec, ok, err := s.receipt(ctx, cp.AgentID, cp.RunID)
	if err != nil || !ok {
		return Checkout{}, false, err
	}
	if rec.Granted != nil {
		c, err := s.receiptsGrant(ctx, cp.AgentID, cp.RunID, *rec.Granted)
		return c, err == nil, err
	}
	for _, taskID := range rec.Tried {
		it, err := s.getTask(ctx, taskID)
		if err != nil {
			return Checkout{}, false, err
		}
		if it != nil && it.claimable() && it.NotBefore <= ms(s.clock()) && slices.Contains(cp.queues, it.queue()) {
			p := cp
			p.TaskID = taskID
			if err := s.noteClaim(ctx, cp.AgentID, cp.RunID, notes, taskID); err != nil {
				return Checkout{}, false, err
			}
			g, _, err := s.grantNow(ctx, p, nil, 0)
			if err != nil {
				return Checkout{}, false, err
			}
			if g.granted {
				if first, superseded, err := s.noteGrant(ctx, g.lease); err != nil || superseded {
					return first, err == nil, err
				}
				return g.lease, true, nil
			}
			if g.refused && !g.cur.showsRun(cp.AgentID, cp.RunID) {
				notes.refused = append(notes.refused, taskID)
			}
			it = g.cur
		}
		if it != nil && it.Holder == cp.AgentID && it.RunID == cp.RunID {
			return s.keepFound(ctx, it.checkout())
		}
	}
	return Checkout{}, false, nil
}

// grantedBefore is claimedBefore for a grant the receipt keeps only.
func (s *Store) grantedBefore(ctx context.Context, agentID, runID string) (Checkout, bool, error) {
	c, ok, _, err := s.runLease(ctx, agentID, runID, "", false)
	return c, ok, err
}

// receiptItem is a named claim's receipt, as runLease reads it. Tried
// lists its tasks, each once: those of its entries (triedName), then any
// an earlier version listed in its set.
type receiptItem struct {
	Tried   []string     `dynamodbav:"tried,stringset"`
	Granted *grantRecord `dynamodbav:"granted"`
	Created int64        `dynamodbav:"created"`
	TTL     int64        `dynamodbav:"ttl"`
	Turn    string       `dynamodbav:"turn"`    // the attempt whose turn it is (noteClaim)
	TurnAt  int64        `dynamodbav:"turn_at"` // when it last noted a task (Unix ms)
}

// madeBefore reports whether the receipt was made before registeredAt, the
// registration of its agent's id again: then it is the removed agent's.
// A receipt that keeps a grant is judged by the grant's lock time, as its
// lease is (removedUpTo): a claim in flight across the registration, whose
// first note came before it and whose grant after, is the new agent's, as
// its lease is. One without is judged by when it was made, or, for one of
// a version that did not stamp it, the latest its last note can have been
// (its ttl is that note's time plus 2*MaxTimeout, in whole seconds). One
// made in the very millisecond of the registration is the new agent's, as
// a watch placed then is.
func (r receiptItem) madeBefore(registeredAt int64) bool {
	switch {
	case r.Granted != nil:
		return r.Granted.Locked < registeredAt
	case r.Created != 0:
		return r.Created < registeredAt
	}
	return r.TTL*1000-(2*MaxTimeout).Milliseconds()+999 < registeredAt
}

// removedAgentsReceipt reports whether rec, the receipt of the run runID
// of agentID, is a removed agent's (madeBefore the registration of the id
// again): it outlived the removal, and the agent the id names now, another
// principal, never made it. It is then deleted, unless a note came since
// the read (a claim of the new agent made it again), so that the new
// agent's claim of the run starts a receipt of its own. One read of the
// agent's heartbeat, only when a receipt is found, and one of the agent
// item when that heartbeat item is gone (the registration outlives it:
// createdAt), as it is once a removal's tombstone has expired and the
// receipt has not yet been deleted (DynamoDB's TTL deletes late).
func (s *Store) removedAgentsReceipt(ctx context.Context, agentID, runID string, rec receiptItem) (bool, error) {
	hb, err := s.readHeartbeat(ctx, agentID)
	if err != nil {
		return false, err
	}
	var registered int64
	if hb != nil {
		registered = hb.registration()
	} else {
		created, err := s.createdAt(ctx, []string{agentID})
		if err != nil {
			return false, err
		}
		registered = fromCreation(created[agentID])
	}
	if registered == 0 || !rec.madeBefore(registered) {
		return false, nil
	}
	cond := expression.AttributeNotExists(expression.Name("created"))
	if rec.Created != 0 {
		cond = expression.Name("created").Equal(expression.Value(rec.Created))
	}
	expr, _ := expression.NewBuilder().WithCondition(cond).Build()
	_, err = s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.heartbeats, Key: agentKey(receiptID(agentID, runID)),
		ConditionExpression:       expr.Condition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	})
	if _, failed := conditionFailed(err); failed {
		err = nil
	}
	if err != nil {
		return false, fmt.Errorf("delete the claim receipt of removed agent %s: %w", agentID, err)
	}
	return true, nil
}

// runLease reads the run's receipt and finds its lease: the grant it
// keeps, or, with tried, on the tasks it lists (see claimedBefore). kept
// says it is the receipt's grant. name is the agent's, which a lease found
// on a tried task is answered with (leaseOfRun).
func (s *Store) runLease(ctx context.Context, agentID, runID, name string, tried bool) (c Checkout, ok, kept bool, err error) {
	rec, ok, err := s.receipt(ctx, agentID, runID)
	if err != nil || !ok {
		return Checkout{}, false, false, err
	}
	return s.leaseOf(ctx, agentID, runID, name, rec, tried)
}

// leaseOf is runLease for rec, the run's receipt as read.
func (s *Store) leaseOf(ctx context.Context, agentID, runID, name string, rec receiptItem, tried bool) (c Checkout, ok, kept bool, err error) {
	if rec.Granted != nil {
		c, err = s.receiptsGrant(ctx, agentID, runID, *rec.Granted)
		return c, err == nil, err == nil, err
	}
	if !tried {
		return Checkout{}, false, false, nil
	}
	c, ok, err = s.leaseOfRun(ctx, rec.Tried, agentID, runID, name, 0, rec.Created, 0)
	return c, ok, false, err
}

// receipt reads the run's receipt, consistently; ok is false when there
// is none, or it was a removed agent's (removedAgentsReceipt).
func (s *Store) receipt(ctx context.Context, agentID, runID string) (receiptItem, bool, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: &s.heartbeats, Key: agentKey(receiptID(agentID, runID)), ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return receiptItem{}, false, fmt.Errorf("claim receipt of %s: %w", agentID, err)
	}
	rec, ok := decodeReceipt(out.Item)
	if !ok {
		return receiptItem{}, false, nil
	}
	if removed, err := s.removedAgentsReceipt(ctx, agentID, runID, rec); removed || err != nil {
		return receiptItem{}, false, err
	}
	return rec, true, nil
}

// decodeReceipt reads a receipt's item; ok is false when there is none.
func decodeReceipt(item map[string]types.AttributeValue) (receiptItem, bool) {
	var rec receiptItem
	if len(item) == 0 || attributevalue.UnmarshalMap(item, &rec) != nil {
		return receiptItem{}, false
	}
	var tried []string
	for name := range item {
		if entry, ok := strings.CutPrefix(name, triedPrefix); ok {
			if _, taskID, ok := strings.Cut(entry, "#"); ok {
				tried = append(tried, taskID)
			}
		}
	}
	slices.Sort(tried)
	tried = slices.Compact(tried) // listed by several attempts
	for _, taskID := range rec.Tried {
		if !slices.Contains(tried, taskID) {
			tried = append(tried, taskID)
		}
	}
	rec.Tried = tried
	return rec, true
}

// receiptsGrant is the lease g, the grant a receipt keeps, as it is now.
func (s *Store) receiptsGrant(ctx context.Context, agentID, runID string, g grantRecord) (Checkout, error) {
	// The grant names its task: the lease is read there as it is now
	// (renewed, or ended), with the grant's own details.
	c, ok, err := s.leaseOfRun(ctx, []string{g.Task}, agentID, runID, g.Name, g.Fence, g.Locked, g.Attempt)
	if err != nil {
		return Checkout{}, err
	}
	if !ok {
		// Moved on, and its ending not in the trail (not archived
		// within trailWait, past the trail's retention, or further
		// back than grantInTrail reads): ended by now, at its expiry
		// at the latest.
		end := min(g.Expires, max(ms(s.clock()), g.Locked))
		c = Checkout{TaskID: g.Task, AgentID: agentID, RunID: runID, Fence: g.Fence, LockedAt: fromMS(g.Locked),
			ExpiresAt: fromMS(end), Timeout: fromMS(end).Sub(fromMS(g.Locked)), Reason: g.Reason}
	}
	// A receipt a version before 2026-12-07 kept for a lease a retry
	// found (keepFound) may keep no attempt: the task tells it (leaseOfRun).
	c.AgentName, c.Title, c.Queue, c.Priority, c.Attempt = cmp.Or(g.Name, agentID), g.Title, g.Queue, g.Priority, cmp.Or(g.Attempt, c.Attempt)
	// The receipt keeps the grant's reason; the item's record of an
	// ended lease keeps none (endUpdate), the trail's does.
	c.Reason = cmp.Or(c.Reason, g.Reason)
	return c, nil
}

// leaseOfRun finds the lease the run (agentID, runID) got on one of tasks
// (of fence, when not 0), as it is now: live on the task, or, if it has
// ended, as it was, expiring when it ended: the task's last ending, the
// lease its latest checkout took over, or, once the task has moved on,
// the grant in its trail, made at or after since (Unix ms; see
// grantInTrail). Every read is consistent. It is answered as the grant
// answered it (asGranted): with name, the agent's (for a lease its task
// no longer holds, which keeps no name), the attempt it counted (attempt,
// when the caller knows it: not 0), and the task as granted.
//
// Without fence, tasks are a receipt's tried ones, and more than one may
// show a lease of the run: besides the claim's grant, a checkout by name
// of the run (one agent run, one run id) on a task a claim of the run
// tried and lost, which follows that loss. The earliest granted since
// the receipt was made (less receiptSkew, as grantInTrail reads) is
// returned, whatever the order of the task ids: a lease of the run
// granted before, which a task tried shows as its last ending, is no
// grant of the claim.
func (s *Store) leaseOfRun(ctx context.Context, tasks []string, agentID, runID, name string, fence, since int64, attempt int) (Checkout, bool, error) {
	is := func(agent, run string, f int64) bool {
		return agent == agentID && run == runID && (fence == 0 || f == fence)
	}
	var found *Checkout
	var on *taskItem // found's task, as read
	items := make(map[string]*taskItem, len(tasks))
	for _, taskID := range tasks {
		it, err := s.getTask(ctx, taskID)
		if err != nil {
			return Checkout{}, false, err
		}
		items[taskID] = it
		var c Checkout
		switch {
		case it == nil:
			continue
		case is(it.Holder, it.RunID, it.Fence):
			c = it.checkout() // with the name it was granted with
		case is(it.EndAgent, it.EndRun, it.EndFence):
			c = it.endedCheckout()
		case is(it.PrevAgent, it.PrevRun, it.PrevFence):
			c = it.replacedCheckout() // taken over since
		default:
			continue
		}
		if ms(c.LockedAt) < since-receiptSkew.Milliseconds() {
			continue
		}
		if found == nil || c.LockedAt.Before(found.LockedAt) {
			found, on = &c, it
		}
	}
	if found == nil {
		// The task has moved on past the lease: the trail still has it.
		deadline := time.Now().Add(trailWait)
		for _, taskID := range tasks {
			c, ok, err := s.grantInTrail(ctx, taskID, agentID, runID, fence, since, deadline)
			if err != nil {
				return Checkout{}, false, err
			}
			if ok {
				found, on = &c, items[taskID]
				// The grant may have landed after the task was read above
				// (another attempt's, in flight): a lease the task holds
				// now is live, not ended at its lock time.
				it, err := s.getTask(ctx, taskID)
				if err != nil {
					return Checkout{}, false, err
				}
				if it != nil && is(it.Holder, it.RunID, it.Fence) && it.Fence == c.Fence {
					live := it.checkout()
					found, on = &live, it
				}
				break
			}
		}
	}
	if found == nil {
		return Checkout{}, false, nil
	}
	c, err := s.asGranted(ctx, *found, on, name, attempt)
	if err != nil {
		return Checkout{}, false, err
	}
	return c, true, nil
}

// asGranted completes c, a lease of a named claim's run that leaseOfRun
// found on it (its task, as read) or in its trail, as the grant answered
// it (API.md: a claim answers a checkout with the task's title, queue and
// priority, and its attempt), so that a retry, and the receipt that keeps
// what it answers (keepFound), answer what the claim's first attempt did:
//
//   - the agent's name: name, the caller's (the claim's agent, whose name
//     its first answer carried), for a lease its task no longer holds,
//     whose record of it keeps none (one the task holds keeps its own);
//   - the task's title, queue and priority as its latest grant found them
//     (grant_was keeps what a PATCH changed since): c's own grant's, when
//     it is the latest; for an earlier one, the task as the latest grant
//     found it, nearer to c's grant than the task as it is now, which is
//     all the item keeps (a PATCH between c's grant and the next is not
//     kept: README, "Known limits");
//   - the attempt its grant counted: attempt, when the caller knows it (a
//     receipt's grant), else as the item tells it (attemptOf), else, a
//     reopen having come since that the item keeps no mark of (two grants
//     on, or made by an earlier version), counted from the trail as a
//     grant sent again counts it (grantInTrailAt). A failed read of the
//     trail fails the retry, where a grant sent again answers attempt 1:
//     nothing is kept before this answer (keepFound writes it after), so
//     the next retry reads again rather than keep a guess in the receipt
//     for good. So does a grant not found while the trail has events the
//     change stream has not archived within trailWait, or below those it
//     has (the grant may be one of them), or found with a grant it would
//     count not archived yet: ErrGrantNotKept, which asks for a retry
//     with the same run id. A grant the trail no longer shows (past its retention, or
//     more than maxRepeatScan events back from the newest), or whose
//     grants back to the finish before it lie further back than
//     maxRepeatScan events before it, is answered as attempt 1, as grant
//     does, and logged: the attempt is at least that.
func (s *Store) asGranted(ctx context.Context, c Checkout, on *taskItem, name string, attempt int) (Checkout, error) {
	if on == nil || !(on.hasLease() && on.Fence == c.Fence) {
		c.AgentName = cmp.Or(name, c.AgentID)
	}
	if on == nil {
		// No item, which is never deleted: the trail had the grant.
		c.Attempt = max(attempt, 1)
		return c, nil
	}
	c.Title, c.Queue, c.Priority = on.GrantWas.at(on.Title, on.queue(), on.priority())
	if attempt > 0 {
		c.Attempt = attempt
		return c, nil
	}
	if n, ok := on.attemptOf(c.Fence); ok {
		c.Attempt = n
		return c, nil
	}
	ev, n, settled, err := s.grantInTrailAt(ctx, on, c.LockedAt, func(ev *eventItem) bool {
		return ev.Fence == c.Fence && ev.AgentID == c.AgentID && ev.RunID == c.RunID
	})
	if err != nil {
		return Checkout{}, fmt.Errorf("claim %s: the attempt of %s (fence %d): %w", c.RunID, c.TaskID, c.Fence, err)
	}
	if ev == nil && !settled || ev != nil && n < 0 {
		// The change stream has not archived every event of the task the
		// look needed (within trailWait, or, archived out of order, below
		// those it has): the grant, or a grant it would count, may be
		// among them. A guess answered here would be kept for good
		// (keepFound): the retry fails as a grant the receipt has not
		// decided does, keeping nothing, and the caller retries with the
		// same run id.
		return Checkout{}, fmt.Errorf("claim %s: %s was granted (fence %d) but %w: its attempt is not in the task's trail yet (events not archived yet)",
			c.RunID, c.TaskID, c.Fence, ErrGrantNotKept)
	}
	c.Attempt = 1
	if ev != nil && n > 0 {
		c.Attempt = n
	} else {
		// Past the trail's retention or its bounded read: at least 1.
		s.log.WarnContext(ctx, "claim retry: the grant's attempt cannot be counted from the task's trail; answered as attempt 1",
			"task_id", c.TaskID, "agent_id", c.AgentID, "run_id", c.RunID, "fence", c.Fence, "grant_found", ev != nil)
	}
	return c, nil
}
