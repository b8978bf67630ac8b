package lease

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Changing a task.
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

// UpdateTask changes a task's fields and status (PATCH). It reads the task
// consistently, decides, and makes one conditional write pinned to the
// version it read, so nothing that changed the task in between (a checkout,
// a release, another PATCH) is overwritten: the write fails and, without
// IfVersion, the change is decided again on the task as it is; with
// IfVersion it is ErrVersionMismatch.
//
// Status cancelled ends a live lease (only its holder or an admin may) with
// a cancel event, in that same write; watchers are told, as for any ending
// that frees the task of its lease. Status todo reopens a done or cancelled
// task. Otherwise a PATCH never touches a lease. A task that is claimable
// after the write (todo, no lease) is in its queue's claim index at its
// priority: the write sets the index keys it needs.
func (s *Store) UpdateTask(ctx context.Context, p UpdateTaskParams) (_ Task, err error) {
	if err := CheckID("task_id", p.TaskID); err != nil {
		return Task{}, err
	}
	p.Metadata = NormalizeMetadata(p.Metadata)
	if err := CheckTaskFields(p.Title, p.Description, p.Queue, p.Priority, p.Metadata); err != nil {
		return Task{}, err
	}
	if err := CheckPatchStatus(p.Status); err != nil {
		return Task{}, err
	}
	if err := CheckWorkFields(p.MaxAttempts, p.RetryDelay); err != nil {
		return Task{}, err
	}
	if p.BlockedBy != nil {
		ids, err := checkBlockers(p.TaskID, *p.BlockedBy)
		if err != nil {
			return Task{}, err
		}
		p.BlockedBy = &ids
	}
	// A change of blocked_by walks the graph from the graph's epoch on,
	// and writes only if no such change was written since (deps.go,
	// "Cycles are refused"); unlock gives the lock back after the write.
	var unlock func()
	defer func() {
		if unlock != nil {
			unlock()
		}
	}()
	// added is the blockers whose edges this PATCH recorded, every one:
	// the task's read may be stale by the time the lock is taken (another
	// PATCH may have dropped a blocker this one names again). A PATCH
	// refused for sure (its task write not made, or refused by its
	// condition) takes back those the task, read afresh, does not name,
	// while it holds the graph's lock within its write window: no other
	// change of the task's blockers runs meanwhile (deps.go,
	// takeBackEdges). Else they stay: an edge the task does not
	// name misleads no unblocking, while one deleted that it names would
	// strand it.
	var added []string
	linkID := writeID() // names the edges this PATCH records
	lockCtx, inWindow := ctx, func() bool { return true }
	cancelLock := func() {} // ends lockCtx
	defer func() {
		switch {
		case err == nil || len(added) == 0:
		case unlock != nil:
			s.takeBackEdges(lockCtx, inWindow, p.TaskID, added, linkID)
		default: // refused after giving the lock back (it walked again)
			s.cleanEdges(ctx, p.TaskID, added, linkID)
		}
		cancelLock()
	}()
	want := p.IfVersion
	for range retries(ctx) {
		if unlock != nil {
			unlock()
			unlock = nil
		}
		cancelLock()
		var blockers map[string]*taskItem
		var epoch int64
		lockCtx, inWindow, cancelLock = ctx, func() bool { return true }, func() {}
		if p.BlockedBy != nil {
			var err error
			// Every change of blocked_by takes the graph's lock, one
			// that only drops blockers too (it removes their edges).
			if epoch, err = s.graphEpoch(ctx); err != nil {
				return Task{}, err
			}
			// An unknown blocker is refused once the task is judged
			// (404, 412, 409 invalid_transition), as a cycle is.
			if blockers, err = s.readTasks(ctx, *p.BlockedBy); err != nil {
				return Task{}, err
			}
		}
		cur, err := s.getTask(ctx, p.TaskID)
		if err != nil {
			return Task{}, err
		}
		if cur == nil {
			return Task{}, ErrTaskNotFound
		}
		if err := s.fillBodies(ctx, cur); err != nil {
			return Task{}, err
		}
		if want != 0 && cur.Version != want {
			return Task{}, ErrVersionMismatch
		}
		now := s.clockAfter(cur.LastAt) // not before the task's latest transition
		live, err := s.leaseLive(ctx, cur, now)
		if err != nil {
			return Task{}, err
		}
		if cur.hasLease() && !live && (p.Status != nil || p.BlockedBy != nil || p.MaxAttempts != nil) {
			// A lease that has ended (expired, or its holder dead) and not
			// been swept: end it as the sweep would, so that it has its
			// event, then decide the status change on the task freed (or
			// failed: a new attempt limit must not revive a task whose
			// last attempt has ended).
			ended, err := s.endEnded(ctx, cur, now)
			if err != nil {
				return Task{}, err
			}
			if want != 0 {
				if !ended {
					return Task{}, ErrVersionMismatch // another write moved the task
				}
				want = cur.Version + 1 // that write was ours
			}
			continue
		}
		if err := checkAttemptsLeft(cur, cur.task(live).Status, p); err != nil {
			return Task{}, err
		}
		var g *patchGraph
		if p.BlockedBy != nil {
			// blocked_by is for a todo or blocked task only, even a list
			// that changes nothing (API.md, "Statuses").
			if st := cur.task(live).Status; st != StatusTodo && st != StatusBlocked {
				return Task{}, &TransitionError{TaskID: cur.TaskID, From: st, To: StatusBlocked, Field: "blocked_by"}
			}
			for _, id := range *p.BlockedBy {
				if blockers[id] == nil {
					return Task{}, invalidField("blocked_by", CodeInvalidDependency, "blocked_by names task %s, which does not exist", id)
				}
			}
		}
		if p.BlockedBy != nil && !slices.Equal(*p.BlockedBy, cur.BlockedBy) {
			walked, err := s.checkCycle(ctx, cur.TaskID, blockers)
			if err != nil {
				return Task{}, err
			}
			if len(blockers) > 0 || len(cur.BlockedBy) > 0 {
				var writeBy, by time.Time
				unlock, writeBy, by, err = s.lockGraph(ctx, epoch, cur.TaskID, walked)
				if errors.Is(err, errGraphChanged) {
					continue // walk again, over the graph as it is now
				}
				if err != nil {
					return Task{}, err
				}
				// The writes under the lock are made within its write
				// window, or not at all (deps.go, graphWriteWindow).
				var cancel context.CancelFunc
				lockCtx, cancel = context.WithDeadline(ctx, by)
				cancelLock = cancel // called at the next round or the return
				inWindow = func() bool { return s.clock().Before(writeBy) }
			}
			if !inWindow() {
				continue // stalled past the window: the lock may be taken over
			}
			for id := range blockers {
				if !slices.Contains(added, id) {
					added = append(added, id)
				}
			}
			waiting, err := s.link(lockCtx, cur.TaskID, blockers, linkID)
			if err != nil {
				return Task{}, err
			}
			g = &patchGraph{blockedBy: *p.BlockedBy, waiting: waiting}
		}
		if g == nil && reopens(cur.task(live).Status, p.Status) && len(cur.BlockedBy) > 0 {
			// A reopened task waits on its blockers not done now: one done
			// when the task was unblocked may have been reopened since.
			if g, err = s.reopenGraph(ctx, cur); err != nil {
				return Task{}, err
			}
		}
		upd, next, changed, err := s.patch(cur, live, p, g, now)
		if err != nil {
			return Task{}, err
		}
		// A new description or metadata is a new body, written before the
		// task item that names it (body.go).
		body := bodyItem{Description: cur.Description, Metadata: cur.Metadata}
		if p.Description != nil {
			body.Description = *p.Description
		}
		if p.Metadata != nil {
			body.Metadata = compactMetadata(p.Metadata)
		}
		newBody := body.Description != cur.Description || body.Metadata != cur.Metadata ||
			cur.bodyLost && (p.Description != nil || p.Metadata != nil) // a body gone for good is replaced
		if !changed && !newBody {
			if err := s.fillGraph(ctx, cur); err != nil {
				return Task{}, err
			}
			return cur.task(live), nil
		}
		if p.Queue != nil && *p.Queue != cur.queue() {
			if err := s.enlistQueues(ctx, *p.Queue); err != nil {
				return Task{}, err
			}
		}
		token := cur.BodyToken
		if newBody {
			withBody := taskItem{TaskID: cur.TaskID, Description: body.Description, Metadata: body.Metadata}
			if b := splitBody(&withBody, ms(s.clock())); b != nil {
				b.Follows = cur.PatchID
				if err := s.putBody(ctx, b); err != nil {
					return Task{}, err
				}
				upd = upd.Set(expression.Name("body"), expression.Value(withBody.BodyToken))
			} else {
				upd = upd.Remove(expression.Name("body"))
			}
			// A task item from before bodies held them itself.
			upd = upd.Remove(expression.Name("description")).Remove(expression.Name("metadata"))
			token = withBody.BodyToken
		}
		version := nameVersion.Equal(expression.Value(cur.Version))
		if cur.Version == 0 {
			version = expression.AttributeNotExists(nameVersion)
		}
		// And the claim key read: giving a task its delayed key moves no
		// version (keepDelay), but this update is decided from the key.
		key := expression.AttributeNotExists(expression.Name("claim_key"))
		if cur.ClaimKey != "" {
			key = expression.Name("claim_key").Equal(expression.Value(cur.ClaimKey))
		}
		// And not voided by its own writer (settlePatchBody); a write that
		// applies moves the version, past every voided one.
		patchID := writeID()
		cond := terms{version, key, expression.Not(nameVoided.Contains(patchID))}
		upd = upd.Set(expression.Name("patch"), expression.Value(patchID)).Remove(nameVoided).Remove(nameVoidAt)
		if cur.PatchID != "" { // the PATCHes before it, as the version pins them
			upd = upd.Set(expression.Name("patch_was"), expression.Value(cur.patchWas()))
		} else {
			upd = upd.Remove(expression.Name("patch_was"))
		}
		upd = upd.Remove(expression.Name("patch_prev")) // an earlier version's: in patch_was now
		if !inWindow() {
			if newBody {
				s.dropBody(ctx, p.TaskID, token)
			}
			continue // stalled past the window: the lock may be taken over
		}
		wctx, sends := countSends(lockCtx)
		after, applied, err := s.update(wctx, p.TaskID, cond, upd, types.ReturnValueAllNew)
		if applied && after != nil && s.patched != nil {
			s.patched(next.task(live), after.task(live))
		}
		own := false // applied by a sending whose answer was lost
		if err == nil && !applied && sends.Load() > 1 && after != nil && (after.patchedBy(patchID) || newBody && token != "" && after.BodyToken == token) {
			// Sent more than once, and the task holds this very write,
			// applied and sent again (its answer lost: sends.go): not
			// another's, which would name its own PATCH, as the latest
			// PATCH or, one PATCH on, the one before it. Its new body,
			// which no other write names, says so too, after later
			// PATCHes (of the title, say).
			applied, own = true, true
		}
		if err == nil && !applied && sends.Load() > 1 && after != nil {
			// Or a later PATCH of the description landed on it: the body
			// the task names now, or its own new body gone, says so.
			mine := ""
			if newBody {
				mine = token
			}
			applied, err = s.replacedOwn(ctx, after, patchID, mine)
			own = applied
		}
		if own && after.Version != next.Version {
			// Later writes have moved the task on since (a grant, a
			// renewal, another PATCH): the answer is the task as this
			// PATCH's write left it, as its lost answer said, not as
			// they did (whose lease it would show, or hide, at a version
			// that never had it).
			after = next
		}
		switch {
		case err == nil && !applied && len(added) > 0 && unlock != nil:
			s.takeBackEdges(lockCtx, inWindow, p.TaskID, added, linkID)
		case err == nil && applied && g != nil && unlock != nil && inWindow():
			// The edges of the blockers it no longer names, under the lock.
			var dropped []string
			for _, id := range cur.BlockedBy {
				if !slices.Contains(g.blockedBy, id) {
					dropped = append(dropped, id)
				}
			}
			s.dropEdges(lockCtx, inWindow, p.TaskID, dropped)
		}
		added = nil // taken back, or the write may have applied: left
		if unlock != nil {
			unlock()
			unlock = nil
		}
		if err != nil {
			switch {
			case newBody && refused(err, sends.Load()):
				s.dropBody(ctx, p.TaskID, token) // the write did not apply
			case newBody:
				s.settlePatchBody(ctx, p.TaskID, cur.Version, patchID, cur.BodyToken, token)
			}
			return Task{}, err
		}
		if !applied {
			if newBody {
				s.dropBody(ctx, p.TaskID, token)
			}
			if after == nil {
				return Task{}, ErrTaskNotFound
			}
			if want != 0 && after.Version != cur.Version {
				return Task{}, ErrVersionMismatch
			}
			continue // the version held: only the claim key moved
		}
		if newBody && cur.BodyToken != token && !cur.bodyLost {
			s.dropBody(ctx, p.TaskID, cur.BodyToken)
		}
		if after.Status == StatusBlocked {
			// A blocker done meanwhile unblocks the task, in writes after
			// this PATCH's own, which another write may come between.
			if _, err := s.settle(ctx, p.TaskID, after.WaitingOn); err != nil {
				return Task{}, err
			}
		}
		if g != nil {
			// And a blocker it read done, reopened since, blocks it again
			// (deps.go, recheck).
			if err := s.recheck(ctx, p.TaskID, clearedAnew(cur, after)); err != nil {
				return Task{}, err
			}
		}
		// The answer is what this PATCH's write left, not a later read
		// (its settling included: that is a step of its own, after it).
		if err := s.fillGraph(ctx, after); err != nil {
			return Task{}, err
		}
		after.Description, after.Metadata = body.Description, body.Metadata
		if after.LastErrorID == cur.LastErrorID {
			after.LastError = cur.LastError
		}
		if after.claimable() {
			s.claims.freed(after.TaskID)
			s.claims.wake(after.queue()) // the queue it is in now, moved or not
		}
		live = after.hasLease() && live
		return after.task(live), nil
	}
	return Task{}, fmt.Errorf("update task %s: %w", p.TaskID, ErrBusy)
}

// endEnded ends a lease that has ended by time or by its holder's death but
// is still on the item, with the sweep's event, pinned to that exact lease.
// ended is false when another write moved the task first.
func (s *Store) endEnded(ctx context.Context, cur *taskItem, now time.Time) (ended bool, err error) {
	typ, reason := EventAgentDeath, reasonHeartbeat
	if cur.LockedAt <= s.deaths.removedUpTo(cur.Holder) {
		reason = reasonRemoved
	}
	// The attempt failed; if it was the task's last, the task fails. The
	// condition pins eseq, so attempts are as read, and the limit as
	// read: a PATCH of max_attempts moves no eseq.
	e := ending{typ: typ, by: BySystem, reason: reason, status: StatusTodo, failed: true, exhausted: !cur.belowLimit()}
	limit := belowLimitCond()
	if e.exhausted {
		limit = atLimitCond()
	}
	cond := pinnedTo(cur).and(nameESeq.Equal(expression.Value(cur.ESeq)), limit)
	if !cur.leaseTimeValid(now) {
		e.typ, e.reason = EventTimeout, "lease expired"
		cond = cond.and(nameExpires.LessThanEqual(expression.Value(ms(now))))
	} else {
		// A death is stamped when the holder died (its heartbeat's
		// expiry), or when it was seen dead if that is not known, as a
		// takeover stamps it (a heartbeat landing in between must not put
		// it inside a new life). The write itself is made now, which is
		// where the fleet feed lists it (ending.at).
		now = s.clockAfter(cur.LastAt)
		if died := s.deaths.stampOf(cur.Holder, cur.LockedAt); died != 0 {
			if at := max(died, cur.LastAt); at < ms(now) {
				e.at = at
			}
		}
	}
	// A task waiting for a not_before PATCHed while it was held gets its
	// delay, as the sweep's ending gives it (sweep.go, sweepEnd), pinned
	// to that not_before and rank (a PATCH moves them without eseq).
	switch {
	case e.exhausted:
	case cur.NotBefore > ms(now):
		e.notBefore, e.rank = cur.NotBefore, cur.rank()
		cond = cond.and(nameNotBefore.Equal(expression.Value(cur.NotBefore))).and(cur.rankIs()...)
	default:
		cond = cond.and(readyCond(now))
	}
	// Known by its write's id when the SDK sent it again (its answer
	// lost: sends.go): the second sending fails on the first's own
	// ending, which is no other writer's (a sweep's ending of the same
	// lease in that millisecond would look the same but for it).
	e.write = writeID()
	wctx, sends := countSends(ctx)
	old, _, ended, err := s.endLease(wctx, cur.TaskID, cond, e, now, types.ReturnValueNone)
	if err == nil && !ended && sends.Load() > 1 && old != nil && old.EndWrite == e.write {
		ended = true
		s.freedUnanswered(old)
	}
	return ended, err // not applied: someone else moved it; the caller reads again
}

// patch builds the update of a PATCH on cur (whose lease, if any, is live
// when live says so), or changed=false when it changes nothing. next is
// the task as the update leaves cur, as far as a reader of the task sees
// it (taskItem.task), body and graph aside: the answer of a PATCH whose
// own answer was lost, once later writes have moved the task on.
func (s *Store) patch(cur *taskItem, live bool, p UpdateTaskParams, g *patchGraph, now time.Time) (upd expression.UpdateBuilder, next *taskItem, changed bool, err error) {
	next = new(*cur)
	next.Version++
	// The status the task has, an ended lease aside (the caller has ended
	// any before a status change).
	status := cur.task(live).Status
	// waiting is what the task waits on after the PATCH.
	waiting := cur.WaitingOn
	if g != nil {
		waiting = g.waiting
	}
	notBefore := cur.NotBefore // after the PATCH
	// final is the status after the PATCH; written says the update sets
	// it already (a cancel's ending).
	final, written := status, false
	if p.Status != nil && *p.Status != status {
		switch to := *p.Status; {
		case to == StatusCancelled && (status == StatusDone || status == StatusFailed),
			to == StatusTodo && (status == StatusInProgress || status == StatusBlocked):
			return upd, nil, false, &TransitionError{TaskID: cur.TaskID, From: status, To: to}
		case to == StatusCancelled && live:
			if cur.Holder != p.AgentID && !p.Admin {
				return upd, nil, false, &NotHolderError{Holder: cur.checkout(), Caller: p.AgentID}
			}
			// The ending write: the lease moves to end_*, the task to
			// cancelled and out of the claim index; its event is cancel.
			upd = endUpdate(cur.TaskID, ending{typ: EventCancel, by: p.AgentID, reason: reasonCancelled, status: StatusCancelled}, now, s.shards)
			written = true
			next.Holder, next.Status = "", StatusCancelled // the lease ended
		case to == StatusCancelled:
			// No lease to end: the status, and the cancel recorded as a
			// transition of its own (its event names no lease; the
			// ending record, end_*, stays the last lease's). Not before
			// the task's latest transition. completed_at is a
			// completion's.
			upd = upd.Set(nameESeq, nameESeq.Plus(expression.Value(1))).
				Set(expression.Name("last_op"), expression.Value(string(EventCancel))).
				Set(expression.Name("last_at"), expression.Value(max(ms(now), cur.LastAt))).
				Set(namePriorAt, priorAt).
				Set(expression.Name("cancel_by"), expression.Value(p.AgentID))
		default: // todo, from done, cancelled or failed: reopen, with its attempts anew
			// The last lease's renewal ids go too: a renewal of it sent
			// again is no longer answered as made (its attempt is gone).
			upd = upd.Remove(expression.Name("completed_at")).Remove(nameAttempts).Remove(nameFailures).
				Remove(expression.Name("renew_write")).Remove(expression.Name("renew_prev"))
			if cur.Attempts > 0 && cur.GrantWrite != "" {
				// The first reopen since the latest grant keeps that
				// grant's attempt on its record, for the grant sent
				// again (splitGrantWrite).
				upd = upd.Set(expression.Name("grant_write"), expression.Value(withAttempt(cur.GrantWrite, cur.Attempts)))
				next.GrantWrite = withAttempt(cur.GrantWrite, cur.Attempts)
			}
			notBefore = 0
			next.CompletedAt, next.Attempts, next.Failures = 0, 0, 0
			next.RenewWrite, next.RenewPrev = "", ""
		}
		final = *p.Status
		changed = true
	}
	if g != nil {
		if len(g.blockedBy) > 0 {
			upd = upd.Set(expression.Name("blocked_by"), expression.Value(g.blockedBy))
		} else {
			upd = upd.Remove(expression.Name("blocked_by"))
		}
		if len(g.waiting) > 0 {
			upd = upd.Set(nameWaitingOn, expression.Value(&types.AttributeValueMemberSS{Value: g.waiting}))
		} else {
			upd = upd.Remove(nameWaitingOn)
		}
		waiting = g.waiting
		next.BlockedBy, next.WaitingOn = g.blockedBy, g.waiting
		changed = true
	}
	if final == StatusTodo || final == StatusBlocked {
		// A task that waits on a blocker is blocked; one that does not, todo.
		final = StatusTodo
		if len(waiting) > 0 {
			final = StatusBlocked
		}
	}
	claimable := final == StatusTodo && !cur.hasLease()
	expiresWritten := false // lease_expires set or removed by this update already
	if !written && (p.Status != nil || g != nil) && final != cur.Status {
		upd = setStatus(upd, cur.TaskID, final, s.shards.Status)
		next.Status = final
		if cur.Status == StatusBlocked && final == StatusTodo {
			// Unblocked by this PATCH: the transition a blocker's completion
			// records, so that its event tells the watchers. Its time is not
			// before the task's latest.
			upd = unblockedTransition(upd, max(ms(now), cur.LastAt), unblockedByPatch)
			if p.AgentID != "" {
				upd = upd.Set(expression.Name("patch_by"), expression.Value(p.AgentID))
			} else {
				upd = upd.Remove(expression.Name("patch_by"))
			}
		}
		if !claimable {
			upd = upd.Remove(nameClaimShard)
		}
		if final != StatusTodo && final != StatusBlocked && !cur.hasLease() && cur.LeaseExpires != 0 {
			// A delayed task that will not be claimed leaves the expiry
			// index, where it waited for the sweep (claim.go, "Delays").
			upd = upd.Remove(nameExpires).Remove(expression.Name("lease_shard"))
			expiresWritten = true
		}
	}
	if p.MaxAttempts != nil && *p.MaxAttempts != cur.maxAttempts() {
		upd = upd.Set(nameMaxAttempts, expression.Value(*p.MaxAttempts))
		next.MaxAttempts = *p.MaxAttempts
		changed = true
	}
	if p.RetryDelay != nil && (cur.RetryDelayMS == nil || *cur.RetryDelayMS != p.RetryDelay.Milliseconds()) {
		upd = upd.Set(expression.Name("retry_delay_ms"), expression.Value(p.RetryDelay.Milliseconds()))
		next.RetryDelayMS = new(p.RetryDelay.Milliseconds())
		changed = true
	}
	if p.SetNotBefore {
		nb, err := checkNotBefore(p.NotBefore, now)
		if err != nil {
			return upd, nil, false, err
		}
		notBefore = nb
	}
	if notBefore != cur.NotBefore {
		next.NotBefore = notBefore
		// A task without a lease that may still be claimed waits in the
		// expiry index too, so that the sweep ranks it as ready at its
		// not_before (claim.go, "Delays"); a finished one has left it
		// (above).
		idle := !cur.hasLease() && !written && !expiresWritten && (final == StatusTodo || final == StatusBlocked)
		switch {
		case notBefore != 0:
			upd = upd.Set(nameNotBefore, expression.Value(notBefore))
			if idle && notBefore > ms(now) {
				upd = upd.Set(nameExpires, expression.Value(notBefore)).
					Set(expression.Name("lease_shard"), expression.Value(shardOf(cur.TaskID, s.shards.Lease)))
				expiresWritten = true
			}
		default:
			upd = upd.Remove(nameNotBefore)
			if idle && cur.LeaseExpires != 0 {
				upd = upd.Remove(nameExpires).Remove(expression.Name("lease_shard"))
				expiresWritten = true
			}
		}
		changed = true
	}
	set := func(name string, v any) {
		upd = upd.Set(expression.Name(name), expression.Value(v))
		changed = true
	}
	setText := func(name string, v *string, old string) {
		switch {
		case v == nil || *v == old:
		case *v == "":
			upd = upd.Remove(expression.Name(name))
			changed = true
		default:
			set(name, *v)
		}
	}
	setText("title", p.Title, cur.Title) // description and metadata are the body's: UpdateTask
	if p.Title != nil {
		next.Title = *p.Title
	}
	queue, prio := cur.queue(), cur.priority()
	if p.Queue != nil && (*p.Queue != queue || cur.Queue == "") {
		queue = *p.Queue
		set("queue", queue)
		next.Queue = queue
	}
	if p.Priority != nil && (*p.Priority != prio || cur.Priority == nil) {
		prio = *p.Priority
		set("priority", prio)
		next.Priority = &prio
	}
	if cur.GrantWrite != "" {
		// What the task's latest grant answered, each field kept by the
		// first PATCH since that changes it, for that grant sent again
		// (grant, sends.go), whose lease may have ended before this
		// PATCH. The version pins what is kept already.
		upd = keepGrantWas(upd, cur, next.Title, queue, prio)
	}
	// A task keeps its claim shard while it stays in its queue, whatever
	// the claim shard count has become since it was written. A task that
	// waits for its not_before ranks after the ready ones (delayedKey),
	// but for one with a lease: no entry of the expiry index would tell
	// the sweep when to rank it ready again (its lease's ending removes
	// the lease's), so it keeps its ready key until the lease's ending
	// gives it its delay (claim.go, "Delays"). A finished or
	// cancelled task is claimed by no one: it keeps its ready key too, and
	// a cancel of a cancelled task writes nothing.
	rank := claimKey(prio, cur.CreatedAt, cur.TaskID)
	home, key := cur.ClaimHome, rank
	if notBefore > ms(now) && !cur.hasLease() && (final == StatusTodo || final == StatusBlocked) {
		key = delayedKey(notBefore, rank)
	}
	if !strings.HasPrefix(home, queue+"#") {
		home = claimHome(queue, cur.TaskID, s.shards.Claim)
	}
	keyMoved := key != cur.ClaimKey
	if nb, ok := delayedUntil(cur.ClaimKey); ok && nb <= ms(now) && key == rank && cur.ClaimKey == delayedKey(nb, rank) &&
		cur.LeaseExpires == nb && !cur.hasLease() && notBefore == cur.NotBefore && (final == StatusTodo || final == StatusBlocked) {
		// The key of a delay that has passed, which the sweep ranks again
		// (claim.go, "Delays"), its expiry-index entry staying: nothing
		// the task shows, nothing to write. (A PATCH that clears the
		// not_before, or leaves the task unclaimable, removes the entry:
		// then the key is made ready here.)
		keyMoved = false
	}
	if home != cur.ClaimHome || keyMoved {
		set("claim_home", home)
		set("claim_key", key)
		if key != rank {
			set("claim_rank", rank)
		} else {
			upd = upd.Remove(expression.Name("claim_rank")) // ready: its key is its rank
		}
	}
	if key != rank && !expiresWritten && !cur.hasLease() && (final == StatusTodo || final == StatusBlocked) && cur.LeaseExpires != notBefore {
		// Delayed, with no entry of its own in the expiry index (its
		// not_before was PATCHed while it was held, or given back at a
		// reopen): in the index too, so that the sweep ranks it ready
		// again (claim.go, "Delays"), a blocked task too, which may be
		// unblocked before then.
		upd = upd.Set(nameExpires, expression.Value(notBefore)).
			Set(expression.Name("lease_shard"), expression.Value(shardOf(cur.TaskID, s.shards.Lease)))
		changed = true
	}
	if claimable && changed {
		set("claim_shard", home)
	}
	return upd, next, changed, nil
}

// reopens says a PATCH to status to reopens a task of status from.
// checkAttemptsLeft refuses a max_attempts that the attempts cur has used
// already reach: a task waiting for its next attempt (todo, blocked) must
// have one left, a task in progress keep the one it is in. A PATCH that
// reopens the task counts its attempts anew. A max_attempts that keeps or
// raises the task's own takes nothing away: plain releases are grants but
// not failures, so a task may have had more attempts than its limit, and a
// client writing back what it read must not be refused.
func checkAttemptsLeft(cur *taskItem, st Status, p UpdateTaskParams) error {
	if p.MaxAttempts == nil || reopens(st, p.Status) || *p.MaxAttempts >= cur.maxAttempts() {
		return nil
	}
	switch n := *p.MaxAttempts; {
	case (st == StatusTodo || st == StatusBlocked) && n <= cur.Attempts:
		return invalidField("max_attempts", CodeInvalidRequest,
			"max_attempts must be more than the %d attempts task %s has had, so that it has one left (or reopen it to count anew)", cur.Attempts, cur.TaskID)
	case st == StatusInProgress && n < cur.Attempts:
		return invalidField("max_attempts", CodeInvalidRequest,
			"max_attempts must be at least %d: task %s is in its attempt %d", cur.Attempts, cur.TaskID, cur.Attempts)
	}
	return nil
}

func reopens(from Status, to *Status) bool {
	return to != nil && *to == StatusTodo && finished(from)
}

// reopenGraph is the graph of cur reopened: its blocked_by as it is, and
// those of its blockers not done as read now. Its edges are in place (the
// task has named them all along), so nothing is linked; a blocker done
// between this read and the write is settled after it, as for any PATCH
// that leaves a task blocked.
func (s *Store) reopenGraph(ctx context.Context, cur *taskItem) (*patchGraph, error) {
	got, err := s.readTasks(ctx, cur.BlockedBy)
	if err != nil {
		return nil, err
	}
	return &patchGraph{blockedBy: cur.BlockedBy, waiting: notDone(got)}, nil
}

// patchGraph is a PATCH's new blocked_by, linked (deps.go), and the
// blockers of it not done.
type patchGraph struct {
	blockedBy, waiting []string
}

// keepGrantWas adds to upd, a PATCH of cur leaving title, queue and prio,
// the grant_was entries of the fields it changes that cur keeps none of.
// (A reopen keeps the grant's attempt on its record: splitGrantWrite.)
func keepGrantWas(upd expression.UpdateBuilder, cur *taskItem, title, queue string, prio int) expression.UpdateBuilder {
	kept := cur.GrantWas
	if kept == nil {
		kept = &grantWas{}
	}
	was := map[string]types.AttributeValue{}
	if title != cur.Title && kept.Title == nil {
		was["t"] = &types.AttributeValueMemberS{Value: cur.Title}
	}
	if queue != cur.queue() && kept.Queue == nil {
		was["q"] = &types.AttributeValueMemberS{Value: cur.queue()}
	}
	if prio != cur.priority() && kept.Priority == nil {
		was["p"] = &types.AttributeValueMemberN{Value: strconv.Itoa(cur.priority())}
	}
	if len(was) == 0 {
		return upd
	}
	if cur.GrantWas == nil {
		return upd.Set(expression.Name("grant_was"), expression.Value(&types.AttributeValueMemberM{Value: was}))
	}
	for _, k := range slices.Sorted(maps.Keys(was)) {
		upd = upd.Set(expression.Name("grant_was."+k), expression.Value(was[k]))
	}
	return upd
}
