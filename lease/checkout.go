package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func statusValues(ss []Status) (expression.OperandBuilder, []expression.OperandBuilder) {
	rest := make([]expression.OperandBuilder, 0, len(ss)-1)
	for _, s := range ss[1:] {
		rest = append(rest, expression.Value(string(s)))
	}
	return expression.Value(string(ss[0])), rest
}

// Checkout grants the caller a lease on a task. The grant is one conditional
// write: the task exists, no live-by-time lease is on it (an expired one is
// taken over in the same write), and its status is expected. When a lease
// is there, the failed write returns it: a live one is the caller's own
// (the same run retrying) or a conflict; one whose holder is dead by
// heartbeat is taken over by a second write conditioned on that exact lease
// (holder, fence and eseq).
func (s *Store) Checkout(ctx context.Context, p CheckoutParams) (Checkout, error) {
	if err := checkCheckout(&p); err != nil {
		return Checkout{}, err
	}
	var over *taskItem // a lease whose holder is dead, to take over
	// mismatch is the answer when the task, its ended lease aside, is not
	// in an expected status.
	mismatch := func(cur *taskItem) error {
		st := cur.Status
		if st == StatusInProgress && cur.hasLease() {
			// Ended: a todo checkout ends that lease itself (and looks
			// again); any other is told where that ending leads, as GET
			// shows it.
			st = cur.afterEnding()
			if slices.Contains(p.ExpectedStatuses, StatusTodo) {
				st = StatusTodo
			}
		}
		if !slices.Contains(p.ExpectedStatuses, st) {
			return &StatusMismatchError{TaskID: p.TaskID, Status: st}
		}
		return nil
	}
	var floor int64 // the latest transition seen on the task
	// The version of the blocked task the last unblocking grant was
	// pinned to (-1: none tried).
	unblockTried := int64(-1)
	for range retries(ctx) {
		// Each attempt's own time: its write decides.
		g, now, err := s.grantNow(ctx, p, over, floor)
		if err == nil && g.granted {
			// A grant that unblocked or reopened the task read its
			// blockers done: one reopened since, perhaps before the grant,
			// marks it (deps.go, recheck). The lease is granted either way.
			var cleared []string
			switch {
			case p.unblocking != nil:
				cleared = p.unblocking.WaitingOn
			case p.reopening != nil:
				cleared = p.reopening.BlockedBy
			}
			if err := s.recheck(ctx, p.TaskID, cleared); err != nil {
				s.log.WarnContext(ctx, "read again the blockers of a task granted", "task", p.TaskID, "err", err)
			}
		}
		if err != nil || g.granted {
			return g.lease, err
		}
		cur := g.cur
		over, p.unblocking, p.reopening = nil, nil, nil
		if cur != nil {
			floor = max(floor, cur.LastAt)
		}
		switch {
		case cur == nil && p.CreateIfMissing && slices.Contains(p.ExpectedStatuses, StatusTodo):
			// Created only for a checkout that would take it: one
			// expecting no todo task is told there is none.
			if _, err := s.CreateTask(ctx, CreateTaskParams{TaskID: p.TaskID}); err != nil && !errors.Is(err, ErrTaskExists) {
				return Checkout{}, err
			}
			continue
		case cur == nil:
			return Checkout{}, ErrTaskNotFound
		case cur.leaseTimeValid(now):
			ended, hb, err := s.endedByDeath(ctx, cur.Holder, cur.LockedAt)
			if err != nil {
				return Checkout{}, err
			}
			if ended {
				if cur.Holder == p.AgentID && cur.RunID == p.RunID {
					// The same run retrying a checkout it made while dead
					// gets the same lease, as a live one does: a new grant
					// would be as dead, and would use up an attempt.
					dead, err := s.stillDead(ctx, p.AgentID, hb)
					if err != nil || dead {
						return cur.checkout(), err
					}
				}
				if err := mismatch(cur); err != nil {
					return Checkout{}, err
				}
				if !cur.belowLimit() || len(cur.WaitingOn) > 0 {
					// The dead holder's attempt was the task's last: the
					// task fails instead of being taken over. Or the task
					// waits on a reopened blocker: the ending blocks it.
					if _, err := s.endEnded(ctx, cur, now); err != nil {
						return Checkout{}, err
					}
					continue
				}
				if cur.NotBefore > ms(now) {
					// PATCHed not to run yet: no takeover before then.
					return Checkout{}, &NotReadyError{TaskID: cur.TaskID, NotBefore: fromMS(cur.NotBefore)}
				}
				over = cur
				continue
			}
			if cur.Holder == p.AgentID && cur.RunID == p.RunID {
				return cur.checkout(), nil // the same run retrying: same lease, same fence
			}
			e := conflict(cur, hb)
			if p.Watch {
				if e.Watching, err = s.watchIfRoom(ctx, cur, p.AgentID); err != nil {
					return Checkout{}, err
				}
			}
			return Checkout{}, e
		case cur.hasLease() && !cur.belowLimit() && (slices.Contains(p.ExpectedStatuses, StatusTodo) || slices.Contains(p.ExpectedStatuses, StatusFailed)):
			// An expired lease that was the task's last attempt: the task
			// fails; the next look answers its status (or, failed being
			// expected, reopens it).
			if _, err := s.endEnded(ctx, cur, now); err != nil {
				return Checkout{}, err
			}
		case cur.hasLease() && slices.Contains(p.ExpectedStatuses, StatusTodo) && len(cur.WaitingOn) > 0:
			// An expired lease of a task that waits on a reopened
			// blocker: ended as the sweep would, which blocks the task.
			if _, err := s.endEnded(ctx, cur, now); err != nil {
				return Checkout{}, err
			}
		case cur.hasLease() && slices.Contains(p.ExpectedStatuses, StatusTodo) && cur.NotBefore > ms(now):
			// An expired lease of a task PATCHed not to run yet: its
			// takeover would fail on readiness, again and again.
			return Checkout{}, &NotReadyError{TaskID: cur.TaskID, NotBefore: fromMS(cur.NotBefore)}
		case cur.hasLease() && slices.Contains(p.ExpectedStatuses, StatusTodo):
			// An expired lease with attempts left: a failed attempt,
			// taken over in a write pinned to it, which counts the
			// failure (the plain grant takes free tasks only).
			over = cur
			continue
		case cur.Status == StatusBlocked:
			err := s.blocked(ctx, cur)
			if unblockTried != cur.Version && cur.waitsOnDoneOnly() && slices.Contains(p.ExpectedStatuses, StatusTodo) && cur.NotBefore <= ms(now) {
				// Its blockers are all done and the change stream has not
				// unblocked it yet: the grant unblocks it, once per
				// version (the stream's pass of another of its blockers
				// may land first, and leave it still blocked).
				unblockTried, p.unblocking = cur.Version, cur
				continue
			}
			if be := (*BlockedError)(nil); p.Watch && errors.As(err, &be) {
				// Told when it is unblocked, as a watcher is.
				var werr error
				if be.Watching, werr = s.watchIfRoom(ctx, cur, p.AgentID); werr != nil {
					return Checkout{}, werr
				}
			}
			return Checkout{}, err
		case reopenable(cur, p.ExpectedStatuses):
			// A finished task taken again is reopened as a PATCH to todo
			// would reopen it: its attempts count anew, and it waits for
			// its blockers not done. The grant is pinned to the task as
			// read here (its version), so a blocker named since is seen.
			if len(cur.BlockedBy) > 0 {
				err := s.blocked(ctx, cur)
				var be *BlockedError
				if !errors.As(err, &be) || len(be.BlockedBy) > 0 {
					return Checkout{}, err
				}
			}
			p.reopening = cur
		default:
			if err := mismatch(cur); err != nil {
				return Checkout{}, err
			}
			if cur.NotBefore > ms(now) {
				return Checkout{}, &NotReadyError{TaskID: cur.TaskID, NotBefore: fromMS(cur.NotBefore)}
			}
			// The lease ended between the write and the read: try again.
		}
	}
	return Checkout{}, fmt.Errorf("checkout %s: %w", p.TaskID, ErrBusy)
}

// finished reports whether st is a status that a checkout or a PATCH to
// todo reopens.
func finished(st Status) bool {
	return st == StatusDone || st == StatusCancelled || st == StatusFailed
}

// reopenable reports whether a checkout expecting expected reopens cur:
// a finished task, in an expected status, with no lease on it.
func reopenable(cur *taskItem, expected []Status) bool {
	return finished(cur.Status) && slices.Contains(expected, cur.Status) && !cur.hasLease()
}

// grantable is what of expected a plain grant takes as it is: todo and
// in_progress. A finished status is reopened by a grant of its own
// (reopenable); a blocked task is never granted (a checkout answers
// blocked whatever it expects).
func grantable(expected []Status) []Status {
	var open []Status
	for _, st := range expected {
		if st == StatusTodo || st == StatusInProgress {
			open = append(open, st)
		}
	}
	return open
}

// blocked is the answer to a checkout of the blocked task cur: its
// blockers that are not done, as they are now.
func (s *Store) blocked(ctx context.Context, cur *taskItem) error {
	if err := s.fillGraph(ctx, cur); err != nil {
		return err
	}
	e := &BlockedError{TaskID: cur.TaskID}
	for _, b := range cur.task(false).BlockedBy {
		if b.Status != StatusDone {
			e.BlockedBy = append(e.BlockedBy, b)
		}
	}
	return e
}

// watchIfRoom puts agentID on cur's watch list for a refused checkout
// with watch, and says whether it is on it: a full list, or a watch that
// failed before it wrote anything (unwatchedError: a task's first watch
// that cannot wait any longer for the change stream's archive, say),
// leaves the refusal as it is (the holder, or the blockers, matter more
// to the caller than the watch), with Watching false.
func (s *Store) watchIfRoom(ctx context.Context, cur *taskItem, agentID string) (*bool, error) {
	err := s.watch(ctx, cur, agentID)
	if err != nil && !errors.Is(err, ErrTooManyWatchers) && !errors.As(err, new(unwatchedError)) {
		return nil, err
	}
	watching := err == nil
	return &watching, nil
}

// conflict is the answer to a checkout that found cur's live lease, with
// the holder's heartbeat hb as endedByDeath read it (no further request):
// nil, or one not sent since a registration again, is a holder that is not
// watched.
func conflict(cur *taskItem, hb *heartbeatItem) *ConflictError {
	e := &ConflictError{Holder: cur.checkout()}
	if hb != nil && !hb.Fresh && !hb.Removed {
		last, exp := fromMS(hb.LastAt), fromMS(hb.ExpiresAt)
		e.LastHeartbeatAt, e.HeartbeatExpiresAt = &last, &exp
	}
	return e
}

// granted is what a grant's write did: the lease it granted, or, when it
// granted none, the task as it is (cur; nil when there is no task), from
// which the caller decides the answer.
type granted struct {
	granted bool
	lease   Checkout
	cur     *taskItem
	refused bool // the grant's write failed its condition: cur is why
}

// grantNow makes the checkout write (grant) at a time not before floor, and
// keeps the time rule: a plain grant that lost to a later write of the task
// is tried again at a time not before that write's (a pinned takeover is
// judged again by the caller), and a grant whose write took more than half
// of its lease is extended before it is answered (fresh). It
// returns what grant does, and the time of the last write.
func (s *Store) grantNow(ctx context.Context, p CheckoutParams, over *taskItem, floor int64) (granted, time.Time, error) {
	now := s.clockAfter(floor)
	for range retries(ctx) {
		g, err := s.grant(ctx, p, now, over)
		switch {
		case err != nil:
			return granted{}, now, err
		case g.granted:
			s.claims.granted(p.TaskID, g.lease.Fence)
			return s.fresh(ctx, g.lease, now)
		case over == nil && lostToLater(g.cur, now):
			now = s.clockAfter(g.cur.LastAt)
			continue
		}
		return g, now, nil
	}
	return granted{}, now, fmt.Errorf("checkout %s: %w", p.TaskID, ErrBusy)
}

// fresh hands out a grant made at `at` as a lease of its full timeout:
// when the write took more than half the timeout (a saturated server or
// database), the lease is renewed, as its holder would, before the answer,
// so that no grant is answered expired or nearly so. If it expired before
// it could be renewed, the caller sees the task as it is (cur) and decides
// again. A lease another write ended or took over before the renewal is
// answered as granted (it was), not granted again: so is a grant the SDK
// sent twice, known as its own once its lease had ended.
func (s *Store) fresh(ctx context.Context, c Checkout, at time.Time) (granted, time.Time, error) {
	for range retries(ctx) {
		now := s.clockAfter(ms(at))
		if now.Sub(at) <= c.Timeout/2 {
			return granted{granted: true, lease: c}, at, nil
		}
		// Made once: a renewal the SDK sent again (its answer lost:
		// sends.go) is refused on its own, and knows it by its write's id.
		cond := holderCond(c.AgentID, c.RunID, c.Fence, now).and(timeCond(now), notRenewedAt(now))
		write := writeID()
		it, applied, err := s.update(ctx, c.TaskID, cond, renewUpdate(now, c.Timeout, write), types.ReturnValueAllNew)
		if err != nil {
			return granted{}, now, err
		}
		if !applied && it != nil && it.renewedBy(write) {
			applied = true // this very renewal
		}
		if !applied && it != nil && it.endedRenewalOf(write) && it.EndFence == c.Fence {
			// This very renewal, sent again after the lease ended: the
			// lease was granted and renewed, and ended since.
			ended := it.renewedCheckout(ms(now))
			ended.AgentName, ended.Reason, ended.Title, ended.Queue, ended.Priority, ended.Attempt = c.AgentName, c.Reason, c.Title, c.Queue, c.Priority, c.Attempt
			return granted{granted: true, lease: ended}, now, nil
		}
		if !applied && it != nil && (!it.hasLease() && it.EndFence >= c.Fence || it.Fence > c.Fence) {
			// The lease was ended (released, force-released, swept) or
			// taken over before it could be renewed: it was granted, and
			// is answered as granted. Deciding again would grant the
			// task a second time for one request.
			return granted{granted: true, lease: c}, at, nil
		}
		if !applied {
			if !lostToLater(it, now) || it.Holder != c.AgentID || it.Fence != c.Fence {
				return granted{cur: it}, now, nil
			}
			now = fromMS(it.LastAt) // renewed meanwhile by a later write
		}
		fresh := it.checkout()
		fresh.AgentName, fresh.Title, fresh.Queue, fresh.Priority = c.AgentName, c.Title, c.Queue, c.Priority
		c, at = fresh, now
	}
	if s.clock().Before(c.ExpiresAt) {
		return granted{granted: true, lease: c}, at, nil // every renewal was slow: what is left of it
	}
	cur, err := s.getTask(ctx, c.TaskID)
	return granted{cur: cur}, at, err
}

// notRenewedAt says the task's latest transition is no renewal at now.
func notRenewedAt(now time.Time) expression.ConditionBuilder {
	return expression.Or(expression.Name("last_op").NotEqual(expression.Value(string(EventRenew))), nameLastAt.NotEqual(expression.Value(ms(now))))
}

// renewUpdate is a renewal's update at now, by the write named write: the
// lease expires at now + timeout (timeout 0: the lease's own), with its
// renew event.
func renewUpdate(now time.Time, timeout time.Duration, write string) expression.UpdateBuilder {
	upd := expression.Set(nameESeq, nameESeq.Plus(expression.Value(1))).
		Set(expression.Name("last_op"), expression.Value(string(EventRenew))).
		Set(expression.Name("last_at"), expression.Value(ms(now))).
		Set(namePriorAt, priorAt).
		Set(expression.Name("renew_prev"), copyOf("renew_write")).
		Set(expression.Name("renew_write"), expression.Value(write))
	if timeout != 0 {
		return upd.Set(expression.Name("timeout_ms"), expression.Value(timeout.Milliseconds())).
			Set(nameExpires, expression.Value(ms(now.Add(timeout))))
	}
	return upd.Set(nameExpires, expression.Name("timeout_ms").Plus(expression.Value(ms(now))))
}

// replacedLease copies the lease a grant replaces into prev_*, when one
// may be on the task (held says so: the grant is conditioned on that lease,
// or on a version read with it); else it removes the copy of the lease an
// earlier grant replaced, which saves the item the bytes of a copy of
// nothing (prev_agent absent: the grant found the task free). prev_fence
// and prev_write, the task's fence and grant_write before this grant, are
// copied either way (grant).
func replacedLease(u expression.UpdateBuilder, held bool, end EventType) expression.UpdateBuilder {
	names := []string{"prev_agent", "prev_run", "prev_locked", "prev_expires"}
	if !held {
		for _, n := range append(names, "prev_end") {
			u = u.Remove(expression.Name(n))
		}
		return u
	}
	for i, from := range []string{"holder", "run_id", "locked_at", "lease_expires"} {
		u = u.Set(expression.Name(names[i]), copyOf(from))
	}
	return u.Set(expression.Name("prev_end"), expression.Value(string(end)))
}

// grant makes the checkout write. With over nil it is the plain grant: the
// task is free. With over it takes over exactly that lease, which has
// expired or whose holder was found dead, and counts its failed attempt
// (failures + 1). Either way the write copies the lease it replaces into
// prev_* (none when there was none: replacedLease) and records the transition, so that it
// carries both of its events. It returns the lease granted, or
// condition fails, the task as it is (cur nil and a zero checkout when there
// is no task).
//
// The write records its id (grant_write), and the id of the grant before
// it (prev_write). When the SDK sent it again (its first answer lost:
// sends.go), the second sending fails its condition on the first's own
// lease, or on the next grant's when one came in between (a lease taken
// while its holder was dead is taken over at once); the grant is then
// known by its id, and answered as granted. Holder, run and time are not
// enough: a same-run checkout of the same millisecond may have made that
// lease, and a lease already ended (taken in the millisecond its holder
// came back from the dead) is taken over by a same-run checkout that
// finds it, not answered. Past two grants in between, the item no longer
// names it, and a refused second sending looks for it in the trail
// (resentGrantInTrail); a second sending that finds the task free again
// grants it anew.
func (s *Store) grant(ctx context.Context, p CheckoutParams, now time.Time, over *taskItem) (granted, error) {
	// The condition is one flat AND (see readyCond on nesting): not
	// before the task's latest transition, and never before its
	// not_before (which a reopening clears, as a PATCH to todo does).
	conds := terms{timeCond(now)}
	write := writeID() // this grant's id: grant_write, then the next grant's prev_write
	prevEnd, prevReason, prevEndAt := EventTimeout, "", int64(0)
	failedAttempt := false
	switch {
	case p.unblocking != nil:
		conds = append(conds, readyCond(now), unblockCond(p.unblocking))
	case p.reopening != nil:
		// Exactly the finished task as Checkout read it: no write since
		// (version), so its blockers are as Checkout found them.
		conds = append(conds, expression.AttributeNotExists(nameHolder),
			nameStatus.Equal(expression.Value(string(p.reopening.Status))),
			nameVersion.Equal(expression.Value(p.reopening.Version)))
	case over == nil:
		// Free in an expected status. A lease that has expired, which
		// makes the task todo in all but name, is not taken here: its
		// attempt failed, and only a write pinned to it (over) can count
		// that failure. Checkout takes it over so, or fails the task when
		// it was its last attempt.
		open := grantable(p.ExpectedStatuses)
		if len(open) == 0 {
			// Only finished statuses expected: no plain grant can apply,
			// so look instead of writing (Checkout reopens what it finds).
			cur, err := s.getTask(ctx, p.TaskID)
			return granted{cur: cur}, err
		}
		first, rest := statusValues(open)
		free := expression.AttributeNotExists(nameHolder).And(nameStatus.In(first, rest...))
		conds = append(conds, readyCond(now), expression.AttributeExists(expression.Name("task_id")), free)
		// Not a task this very write left: sent again by the SDK (its
		// first answer lost) after the lease it made had ended (its
		// holder swept as dead, a force-release), the task is free again,
		// and the second sending would grant it a second time. It fails
		// instead and knows its own grant (below), up to one grant on.
		conds = append(conds, notLeftBy(write)...)
	default:
		// Exactly the ended lease, as we read it: the same grant (holder and
		// fence), with no transition since (eseq: not even a renewal that
		// left the expiry where it was). A holder that came back and renewed
		// in between has shown it is alive; the write then fails and the
		// lease is judged again. Checkout takes it only for a todo checkout.
		// Its attempt failed (timeout or death): failures counts it, as
		// the sweep's ending would.
		failedAttempt = true
		conds = append(conds, readyCond(now), expression.AttributeNotExists(nameWaitingOn))
		conds = append(conds, pinnedTo(over).and(nameESeq.Equal(expression.Value(over.ESeq)), belowLimitCond())...)
		if over.leaseTimeValid(now) {
			prevEnd = EventAgentDeath
			if over.LockedAt <= s.deaths.removedUpTo(over.Holder) {
				prevReason = reasonRemoved
			}
			// The death's time is when the holder died (its heartbeat's
			// expiry), or when it was seen dead if that is not known; not
			// this write's: a heartbeat that lands in between does not make
			// it fall inside the holder's life. Not before the lease's
			// latest transition, nor after now.
			if died := s.deaths.stampOf(over.Holder, over.LockedAt); died != 0 {
				prevEndAt = min(max(died, over.LastAt), ms(now))
			}
		}
	}
	if len(p.queues) > 0 {
		// A claim's candidate came from an index that may lag a PATCH that
		// moved the task: the write itself checks the queue.
		conds = append(conds, queueCond(p.queues))
	}
	exp := now.Add(p.Timeout)
	prevWrite := copyOf("grant_write")
	if r := p.reopening; r != nil && r.Attempts > 0 && r.GrantWrite != "" {
		// A reopen: the grant before it keeps its attempt (splitGrantWrite),
		// as a PATCH to todo keeps it.
		prevWrite = expression.Value(withAttempt(r.GrantWrite, r.Attempts))
	}
	upd := replacedLease(expression.UpdateBuilder{}, over != nil || p.unblocking != nil && p.unblocking.hasLease(), prevEnd).
		Set(expression.Name("prev_fence"), nameFence).
		Set(expression.Name("prev_write"), prevWrite).
		Set(nameHolder, expression.Value(p.AgentID)).
		Set(expression.Name("run_id"), expression.Value(p.RunID)).
		Set(expression.Name("locked_at"), expression.Value(ms(now))).
		Set(nameExpires, expression.Value(ms(exp))).
		Set(expression.Name("timeout_ms"), expression.Value(p.Timeout.Milliseconds())).
		Set(expression.Name("lease_shard"), expression.Value(shardOf(p.TaskID, s.shards.Lease))).
		Remove(expression.Name("renew_write")).Remove(expression.Name("renew_prev")). // a lease taken over: its renewals'
		Set(nameFence, nameFence.Plus(expression.Value(1))).
		Set(expression.Name("started_at"), expression.IfNotExists(expression.Name("started_at"), expression.Value(ms(now)))).
		Set(nameESeq, nameESeq.Plus(expression.Value(2))).
		Set(expression.Name("lease_seq"), nameESeq.Plus(expression.Value(2))).
		Set(expression.Name("grant_write"), expression.Value(write)).
		Remove(expression.Name("grant_was")). // the task as the grant before found it
		// The last ending's reason (up to 1 KB) would stay billed on every
		// transition of this lease: nothing after a grant reads it (the
		// ending's event was archived from its own write).
		Remove(expression.Name("end_reason")).
		Set(expression.Name("last_op"), expression.Value(string(EventCheckout))).
		Set(expression.Name("last_at"), expression.Value(ms(now))).
		Set(namePriorAt, priorAt).
		Remove(expression.Name("completed_at")). // a task reopened is not done
		Remove(nameClaimShard).                  // held: out of the claim index
		Remove(nameNotBefore).                   // passed, or cleared by a reopening
		// Ready: its claim key ranks it so again (a delay's key may not
		// have been ranked ready by the sweep yet; claim.go, "Delays").
		Set(expression.Name("claim_key"), expression.IfNotExists(expression.Name("claim_rank"), expression.Name("claim_key"))).
		Remove(expression.Name("claim_rank")). // ready: its key is its rank
		Set(nameMaxAttempts, expression.IfNotExists(nameMaxAttempts, expression.Value(DefaultMaxAttempts)))
	attempt := func(old *taskItem) int { return old.Attempts + 1 }
	if p.reopening != nil {
		// Reopened: its attempts count anew, this grant the first. Every
		// blocker was read done (the grant is pinned to that version), so
		// a mark left from a lease that completed goes (deps.go, reblock).
		upd = upd.Set(nameAttempts, expression.Value(1)).Remove(nameFailures).Remove(nameWaitingOn)
		attempt = func(*taskItem) int { return 1 }
	} else {
		upd = upd.Add(nameAttempts, expression.Value(1))
	}
	if failedAttempt {
		upd = upd.Add(nameFailures, expression.Value(1))
	}
	upd = setStatus(upd, p.TaskID, StatusInProgress, s.shards.Status)
	if p.Reason != "" {
		upd = upd.Set(expression.Name("reason"), expression.Value(p.Reason))
	} else {
		upd = upd.Remove(expression.Name("reason"))
	}
	if p.AgentName != p.AgentID {
		upd = upd.Set(expression.Name("holder_name"), expression.Value(p.AgentName))
	} else {
		upd = upd.Remove(expression.Name("holder_name")) // the holder's id (holderName)
	}
	if p.By != "" {
		upd = upd.Set(nameLeaseBy, expression.Value(p.By))
	} else {
		upd = upd.Remove(nameLeaseBy)
	}
	if prevReason != "" {
		upd = upd.Set(expression.Name("prev_reason"), expression.Value(prevReason))
	} else {
		upd = upd.Remove(expression.Name("prev_reason"))
	}
	if prevEndAt != 0 {
		upd = upd.Set(expression.Name("prev_end_at"), expression.Value(prevEndAt))
	} else {
		upd = upd.Remove(expression.Name("prev_end_at"))
	}
	if p.unblocking != nil {
		upd = unblockUpdate(upd, p.unblocking)
	}
	wctx, sends := countSends(ctx)
	old, applied, err := s.update(wctx, p.TaskID, conds, upd, types.ReturnValueAllOld)
	var gw, pw string
	if old != nil {
		gw, pw = old.grantWrite(), old.prevWrite()
	}
	if err == nil && !applied && sends.Load() > 1 && old != nil && (gw == write || pw == write) {
		// This very grant, its answer lost: the item is as it left it
		// (or moved on since by writes other than grants), or one grant
		// on, which counted one more attempt. A reopen counts the
		// attempts anew, and keeps the attempt of the grant before it on
		// that grant's record (attemptOf).
		fence := old.Fence
		if gw != write {
			fence = old.PrevFence // the next grant's write copied it
		}
		attempt, known := old.attemptOf(fence)
		if !known {
			// A reopen that an earlier version made, which kept no
			// attempt: the trail has the attempt this grant counted.
			// The grant is made and known: a failed read answers it
			// all the same, as attempt 1, and so does one that does
			// not find it (not archived within trailWait, past the
			// trail's retention or its bounded read) or cannot count
			// it (grantInTrailAt): nothing keeps this answer.
			ev, n, _, err := s.grantInTrailAt(ctx, old, now, func(ev *eventItem) bool { return ev.Fence == fence })
			switch {
			case err != nil:
				s.log.WarnContext(ctx, "grant sent twice: its attempt could not be read from the trail", "task_id", p.TaskID, "fence", fence, "error", err.Error())
			case ev == nil || n < 1:
				s.log.WarnContext(ctx, "grant sent twice: its attempt is not in the task's trail as read; answered as attempt 1", "task_id", p.TaskID, "fence", fence, "found", ev != nil)
			}
			attempt = 1
			if ev != nil && n > 0 {
				attempt = n
			}
		}
		// The task as granted: a PATCH since the latest grant kept what it
		// changed (grant_was). One grant on, that is the task as the next
		// grant found it, as this one did unless a PATCH came between the
		// two (whose copy the next grant removed: README, "Known limits").
		title, queue, prio := old.GrantWas.at(old.Title, old.queue(), old.priority())
		return granted{granted: true, lease: Checkout{
			TaskID: p.TaskID, AgentID: p.AgentID, AgentName: p.AgentName, RunID: p.RunID,
			Fence: fence, LockedAt: now, Timeout: p.Timeout, ExpiresAt: exp, Reason: p.Reason,
			Title: title, Queue: queue, Priority: prio, Attempt: attempt,
		}}, nil
	}
	if err == nil && !applied && sends.Load() > 1 && old != nil && mayBeTwoGrantsBack(old, now) {
		// Sent again, refused, and not one of the task's last two grants:
		// its first sending may still have been a grant two or more
		// grants back, which the trail keeps.
		c, ok, terr := s.resentGrantInTrail(ctx, p, now, write, old)
		if terr != nil {
			return granted{}, terr
		}
		if ok {
			return granted{granted: true, lease: c}, nil
		}
	}
	if err != nil || !applied {
		return granted{cur: old, refused: err == nil}, err
	}
	return granted{granted: true, lease: Checkout{
		TaskID: p.TaskID, AgentID: p.AgentID, AgentName: p.AgentName, RunID: p.RunID,
		Fence: old.Fence + 1, LockedAt: now, Timeout: p.Timeout, ExpiresAt: exp, Reason: p.Reason,
		Title: old.Title, Queue: old.queue(), Priority: old.priority(), Attempt: attempt(old),
	}}, nil
}

// resentGrantInTrail looks in the task's trail for the grant p made at now,
// made by the write named write, for a grant the SDK sent more than once
// whose second sending was refused with neither of the task's last two
// grants its own (grant): with two or more grants of the task in between,
// its first sending may have made a lease the item no longer names. The
// checkout event carries its grant's write id (eventItem.Write): agent,
// run and time cannot tell it from another request's grant to the same
// run in the same millisecond. It answers the lease as it was granted,
// now likely ended, with the task's title, queue and priority as they are
// (the trail does not keep them), and the attempt it counted. cur is the
// task as the refusal found it.
func (s *Store) resentGrantInTrail(ctx context.Context, p CheckoutParams, now time.Time, write string, cur *taskItem) (Checkout, bool, error) {
	ev, attempt, _, err := s.grantInTrailAt(ctx, cur, now, func(ev *eventItem) bool { return ev.Write == write })
	if err != nil || ev == nil {
		return Checkout{}, false, err
	}
	if attempt < 1 {
		// Its grants back to the finish before it lie past the bounded
		// read, or one of them is not archived yet: at least 1 (README,
		// "Known limits").
		s.log.WarnContext(ctx, "grant sent twice: its attempt could not be counted in the task's trail; answered as attempt 1", "task_id", p.TaskID, "fence", ev.Fence)
		attempt = 1
	}
	return Checkout{
		TaskID: p.TaskID, AgentID: p.AgentID, AgentName: p.AgentName, RunID: p.RunID,
		Fence: ev.Fence, LockedAt: now, Timeout: p.Timeout, ExpiresAt: now.Add(p.Timeout), Reason: p.Reason,
		Title: cur.Title, Queue: cur.queue(), Priority: cur.priority(), Attempt: attempt,
	}, true, nil
}

// grantInTrailAt finds in cur's trail the checkout event made at now
// that ours accepts, and the attempt that grant counted. Each look reads
// the trail newest first back to now, up to maxRepeatScan events, waiting
// up to trailWait for events the change stream has not archived yet
// (lookInTrail). settled says, for a grant not found, that the last look
// read the events it needed with none of them missing: the grant is not
// there (past the trail's retention, or further back than the read),
// rather than not archived yet. An event names the one before it
// (PrevSeq), so a look sees one missing between two it read, or below the
// oldest it read when that is the oldest stored (archived out of order:
// a batch write's unprocessed items are written again later), unless it
// is older than the events' retention.
//
// Every grant counts an attempt, and a reopen, which only a finished task
// has, counts anew, so cur's attempts less the grants since (a fence
// counts every grant) are the grant's attempt when at least 1, and tell
// of a reopen since otherwise (the events after the grant may not be
// archived yet); then the attempt is the task's grants back to the finish
// before it, which the trail holds, as it holds the grant: read from the
// grant back, up to maxRepeatScan events before it. attempt is 0 (not
// known) when those events hold no finish and the trail goes on past
// them, and -1 (not known yet) when one of them is not archived yet.
func (s *Store) grantInTrailAt(ctx context.Context, cur *taskItem, now time.Time, ours func(*eventItem) bool) (found *eventItem, attempt int, settled bool, err error) {
	task := expression.Key("task_id").Equal(expression.Value(cur.TaskID))
	holed := false // the last look missed an event it needed
	settled, err = s.lookInTrailHoled(ctx, cur.TaskID, true, func() (bool, bool, error) {
		found, attempt, holed = nil, 0, false
		seen, back := 0, 0      // events read looking for the grant; then before it, counting
		var older *eventItem    // the event read last: the oldest so far
		whole := true           // the read went on to the oldest event stored
		counted := func() int { // the count as read, but for an event missing
			if holed {
				return -1
			}
			return attempt
		}
		trimmed := ms(s.clock()) - s.retention.Milliseconds() // an event made before may be TTL's (gapFree)
		err := queryNewestFirst(ctx, s.db, s.events, task, 100, func(ev *eventItem) bool {
			if older != nil && older.PrevSeq > ev.Seq && older.PrevAt > trimmed {
				holed = true // an event between the two is not archived (yet)
			}
			older = ev
			if found == nil {
				seen++
				if ev.Type == EventCheckout && ev.At == ms(now) && ours(ev) {
					found, attempt, holed = ev, 1, false // what lies after the grant does not count
					if n := cur.Attempts - int(cur.Fence-ev.Fence); n >= 1 {
						attempt, whole = n, false
						return false
					}
					return true
				}
				if ev.At >= ms(now) && seen < maxRepeatScan {
					return true
				}
				whole = false
				return false
			}
			if back == maxRepeatScan {
				attempt, whole = 0, false // an event past the count's bound: not known
				return false
			}
			back++
			if finishes(ev.Type) {
				whole = false // counted back to the finish before the grant
				return false
			}
			if ev.Type == EventCheckout {
				attempt++
			}
			return true
		})
		if err == nil && whole && older != nil && older.PrevSeq != 0 && older.PrevAt > trimmed {
			holed = true // the oldest event stored names one before it, not archived yet
		}
		if found != nil {
			attempt = counted()
		}
		return found != nil && !holed, holed, err
	})
	if err != nil {
		return nil, 0, false, err
	}
	return found, attempt, settled && !holed, nil
}

// finishes reports whether an event of type typ may leave the task
// finished (done, cancelled or failed), which only a reopen takes back.
func finishes(typ EventType) bool {
	return typ == EventComplete || typ == EventCancel || typ == EventFailed
}

// mayBeTwoGrantsBack says whether cur, the task as a grant made at now
// and sent again found it, may have had that grant and two more since:
// each would have counted a fence, and been made, as every later
// transition, at or after now (the time rule). A lease on the task
// granted before now, a task whose latest transition came before now,
// or one granted fewer than three times, had none of it, and the refusal
// answers at once.
func mayBeTwoGrantsBack(cur *taskItem, now time.Time) bool {
	return cur.Fence >= 3 && cur.LastAt >= ms(now) && !(cur.hasLease() && cur.LockedAt < ms(now))
}

// notLeftBy says the task's last two grants were not made by the write
// named write: a grant sent again is refused on its own lease, ended or
// not, or on the one grant after it. A grant's record begins with its
// write id (a reopen may have kept its attempt after it: splitGrantWrite).
func notLeftBy(write string) terms {
	return terms{expression.Not(expression.Name("grant_write").BeginsWith(write)), expression.Not(expression.Name("prev_write").BeginsWith(write))}
}

// queueCond says "the task is in one of queues"; a task written before
// queues has no queue attribute and is in the default queue.
func queueCond(queues []string) expression.ConditionBuilder {
	name := expression.Name("queue")
	first, rest := expression.Value(queues[0]), []expression.OperandBuilder{}
	for _, q := range queues[1:] {
		rest = append(rest, expression.Value(q))
	}
	c := name.In(first, rest...)
	if slices.Contains(queues, DefaultQueue) {
		c = c.Or(expression.AttributeNotExists(name))
	}
	return c
}

// Renew extends the caller's live lease to now + timeout (default: the
// lease's own timeout). A holder that is dead by heartbeat has lost its
// lease and cannot renew it.
func (s *Store) Renew(ctx context.Context, p RenewParams) (Checkout, error) {
	if err := checkHolder(p.TaskID, p.RunID); err != nil {
		return Checkout{}, err
	}
	by, err := actedBy(p.AgentID, p.By)
	if err != nil {
		return Checkout{}, err
	}
	if p.Timeout != 0 {
		if err := TimeoutRange.Check(p.Timeout); err != nil {
			return Checkout{}, err
		}
	}
	var floor int64
	// again: a renewal at the instant of another (againAt), asked for
	// twice, made on the eseq the other left (seq), so that it is made
	// once even when the SDK sends it again. write names its write
	// (renew_write): sent again, it knows its own, where another
	// renewal of the holder's at that instant is another's.
	again, againAt, seq := false, int64(0), int64(0)
	write := writeID()
	for range retries(ctx) {
		cond, hb, now, err := s.holderGuard(ctx, p.AgentID, p.RunID, p.Fence, floor)
		if errors.Is(err, errDeadCaller) {
			cur, err := s.getTask(ctx, p.TaskID)
			if err != nil {
				return Checkout{}, err
			}
			return Checkout{}, s.notHolder(ctx, cur, p.AgentID, p.RunID, p.Fence, now, hb)
		}
		if err != nil {
			return Checkout{}, err
		}
		// Not a second renewal at one instant, unless asked for twice: a
		// renewal sent again by the SDK (its answer lost: sends.go) finds
		// its own and answers with it, instead of renewing twice.
		cond = cond.and(timeCond(now))
		again = again && againAt == ms(now) // a later instant has no renewal of its own yet
		if !again {
			cond = cond.and(notRenewedAt(now))
		} else {
			cond = cond.and(nameESeq.Equal(expression.Value(seq)))
		}
		// lease_by names who renewed when it is not the holder (the
		// renew event's by); a renewal by the holder takes it off.
		upd := renewUpdate(now, p.Timeout, write)
		if by != p.AgentID {
			upd = upd.Set(nameLeaseBy, expression.Value(by))
		} else {
			upd = upd.Remove(nameLeaseBy)
		}
		it, applied, err := s.update(ctx, p.TaskID, cond, upd, types.ReturnValueAllNew)
		if err != nil {
			return Checkout{}, err
		}
		if !applied && it != nil && it.renewedBy(write) {
			// This very renewal, sent again (its answer lost), refused on
			// itself or on one renewal since: the lease as it is.
			return it.checkout(), nil
		}
		if !applied && it != nil && it.endedRenewalOf(write) {
			// This very renewal, sent again, after the lease it renewed
			// ended: made, and answered as made.
			return it.renewedCheckout(ms(now)), nil
		}
		if !applied && it != nil && it.LastOp == EventRenew && it.LastAt == ms(now) && (!again || it.ESeq != seq) {
			// Another renewal at this instant: this one is made too.
			again, againAt, seq = true, ms(now), it.ESeq
			continue
		}
		if !applied && lostToLater(it, now) {
			floor = it.LastAt // a later transition landed first: again, after it
			continue
		}
		if !applied {
			return Checkout{}, s.notHolder(ctx, it, p.AgentID, p.RunID, p.Fence, now, hb)
		}
		return it.checkout(), nil
	}
	return Checkout{}, fmt.Errorf("renew %s: %w", p.TaskID, ErrBusy)
}

// notHolder explains why a holder-only operation's condition failed: no task,
// another live lease (with its holder), or no live lease of the caller's.
// callerHB is the caller's heartbeat when already read.
func (s *Store) notHolder(ctx context.Context, cur *taskItem, agentID, runID string, fence int64, now time.Time, callerHB *heartbeatItem) error {
	if cur == nil {
		return ErrTaskNotFound
	}
	if !cur.leaseTimeValid(now) {
		return ErrNotCheckedOut
	}
	hb := callerHB
	if cur.Holder != agentID || hb == nil {
		var err error
		if hb, err = s.heartbeat(ctx, cur.Holder); err != nil {
			return err
		}
	}
	if !holderAlive(hb, cur.LockedAt, now) {
		return ErrNotCheckedOut
	}
	if cur.Holder == agentID && (runID == "" || runID == cur.RunID) && (fence == 0 || fence == cur.Fence) {
		return ErrNotCheckedOut // raced with its own end; nothing of the caller's is live
	}
	return &NotHolderError{Holder: cur.checkout(), Caller: agentID}
}

// errDeadCaller says the caller of a holder operation is dead by heartbeat:
// whatever lease it held has ended, and it cannot finish it.
var errDeadCaller = errors.New("lease: caller is dead by heartbeat")

// holderGuard reads the caller's heartbeat (the alive cache makes this free
// on the common path) and returns the condition a holder operation writes
// under: the caller holds this unexpired lease, locked after it last came
// back from the dead. A dead caller gets errDeadCaller and writes nothing,
// since a lease ended by death is ended whether or not a sweep has run. now
// is read after the heartbeat, for the write, and is not before floor (the
// latest transition seen on the task).
//
// What the read shows was so when it was served, between the clock read
// before it and now. A heartbeat that ran out in between is ambiguous:
// served before its expiry, the read may have missed a heartbeat that
// landed after it and keeps the caller alive, whose lease then lives on
// (a checkout is refused it: endedByDeath judges the read at the clock
// before it). So that read is made once more, now that the expiry has
// passed: one GetItem more, only when the caller's heartbeat runs out
// while it is read.
func (s *Store) holderGuard(ctx context.Context, agentID, runID string, fence int64, floor int64) (terms, *heartbeatItem, time.Time, error) {
	readAt := s.clock()
	hb, err := s.heartbeat(ctx, agentID)
	now := s.clockAfter(floor)
	if err == nil && !hb.dead(readAt) && hb.dead(now) {
		hb, err = s.heartbeat(ctx, agentID)
		now = s.clockAfter(floor)
	}
	if err != nil {
		return nil, nil, now, err
	}
	if hb.dead(now) {
		return nil, hb, now, errDeadCaller
	}
	cond := holderCond(agentID, runID, fence, now)
	if hb != nil && hb.AliveSince > 0 {
		cond = cond.and(expression.Name("locked_at").GreaterThan(expression.Value(hb.AliveSince)))
	}
	return cond, hb, now, nil
}

// Release ends the caller's lease and frees the task: it goes back to todo,
// each watcher gets one message, and the notifier hears TaskAvailable. With
// Force it ends whoever's lease is live (the caller must be an admin).
func (s *Store) Release(ctx context.Context, p ReleaseParams) (Released, error) {
	if err := checkHolder(p.TaskID, p.RunID); err != nil {
		return Released{}, err
	}
	if err := CheckReason(p.Reason); err != nil {
		return Released{}, err
	}
	if err := CheckOutcome(p.Outcome, p.Error); err != nil {
		return Released{}, err
	}
	by, err := actedBy(p.AgentID, p.By)
	if err != nil {
		return Released{}, err
	}
	p.By = by
	if p.Force {
		if p.Outcome != OutcomeNone {
			return Released{}, invalidField("outcome", CodeInvalidRequest, "outcome is the holder's to give, not a force release's")
		}
		return s.forceRelease(ctx, p)
	}
	var it *taskItem
	if p.Outcome == OutcomeFailed {
		it, err = s.failRelease(ctx, p)
	} else {
		e := ending{typ: EventRelease, by: p.By, reason: p.Reason, status: StatusTodo, outcome: p.Outcome}
		it, err = s.finish(ctx, p.TaskID, p.AgentID, p.RunID, p.Fence, e)
	}
	if err != nil {
		return s.releasedAgain(ctx, err, p, EventRelease)
	}
	if it.claimable() {
		// Freed here, by this write or by its first sending, whose
		// answer was lost (finish): no grant the index lags (claim.go).
		s.claims.freed(it.TaskID)
	}
	return released(it), nil
}

// failRelease ends the caller's lease as a failed attempt (a release with
// outcome failed). Unlike a plain release it reads the task first: the
// ending depends on the attempts made (the last one fails the task) and
// on the failures before it (the retry wait doubles with each), and the
// write is pinned to what it read. The error, if any, is written first,
// as an item of its own (body.go).
func (s *Store) failRelease(ctx context.Context, p ReleaseParams) (*taskItem, error) {
	named, write := p.RunID != "" || p.Fence != 0, ""
	if !named {
		write = writeID() // its ending is known by it when sent again
	}
	var errID int64 // the id of its error's item, written at its first try that may end the lease
	var floor int64
	var sent resends       // earlier writes sent more than once (finish)
	since := ms(s.clock()) // the earliest time of the call's writes (finish)
	for range retries(ctx) {
		cond, hb, now, err := s.holderGuard(ctx, p.AgentID, p.RunID, p.Fence, floor)
		if err != nil && !errors.Is(err, errDeadCaller) {
			return nil, err
		}
		since = min(since, ms(now))
		cur, rerr := s.getTask(ctx, p.TaskID)
		if rerr != nil {
			return nil, rerr
		}
		mine := cur != nil && cur.Holder == p.AgentID && (p.RunID == "" || cur.RunID == p.RunID) && (p.Fence == 0 || cur.Fence == p.Fence) &&
			(!sent.any() || cur.LockedAt < sent.first)
		// A lease locked at or before its holder's return from the dead
		// ended by that death: not the caller's to fail (notHolder says so).
		if err != nil || !mine || !cur.leaseTimeValid(now) || !holderAlive(hb, cur.LockedAt, now) {
			if replayEnd(cur, EventRelease, OutcomeFailed, p.By, p.AgentID, p.RunID, p.Fence) {
				return cur, nil
			}
			return nil, resent(s.notHolder(ctx, cur, p.AgentID, p.RunID, p.Fence, now, hb), sent.any())
		}
		e := ending{typ: EventRelease, by: p.By, reason: p.Reason, status: StatusTodo,
			failed: true, outcome: OutcomeFailed, errored: p.Error != "", write: write}
		if !cur.belowLimit() {
			e.exhausted = true
		} else {
			// The retry wait, or a later not_before PATCHed while it was
			// held, whichever ends later.
			var nb int64
			if wait := retryWait(cur.retryDelay(), cur.Failures+1); wait > 0 {
				nb = ms(now.Add(wait))
			}
			if cur.NotBefore > max(nb, ms(now)) {
				nb = cur.NotBefore
			}
			if nb != 0 {
				e.notBefore, e.rank = nb, cur.rank()
			}
		}
		if p.Error != "" {
			if errID == 0 {
				errID = errorID()
				if err := s.putError(ctx, p.TaskID, errID, p.Error, ms(now)); err != nil {
					return nil, err
				}
			}
			e.errorID = errID
		}
		// Pinned to what it read: the lease, the counts, whether this is
		// the last attempt (a PATCH of max_attempts in between may change
		// that), the retry delay and not_before its wait comes from, and
		// the rank the delayed claim key is built from (a PATCH of the
		// priority or queue in between moves it): else the ending is
		// decided again.
		limit := belowLimitCond()
		if e.exhausted {
			limit = atLimitCond()
		}
		delay := expression.AttributeNotExists(expression.Name("retry_delay_ms"))
		if cur.RetryDelayMS != nil {
			delay = expression.Name("retry_delay_ms").Equal(expression.Value(*cur.RetryDelayMS))
		}
		pin := sent.pin(cond.and(nameFence.Equal(expression.Value(cur.Fence)), countIs(nameAttempts, cur.Attempts), countIs(nameFailures, cur.Failures), limit,
			delay, countIs(nameNotBefore, int(cur.NotBefore))).and(cur.rankIs()...))
		wctx, sends := countSends(ctx)
		it, after, applied, err := s.endLease(wctx, p.TaskID, pin, e, now, types.ReturnValueAllNew)
		switch {
		case err != nil:
			return nil, err
		case applied:
			return after, nil
		case (named || it != nil && it.EndWrite == write) && replayEnd(it, EventRelease, OutcomeFailed, p.By, p.AgentID, cur.RunID, cur.Fence):
			// The lease read ended by this caller's failed release: a
			// repeat of a request that named it, or this very write sent
			// again (its answer lost), also after a later transition (the
			// task granted again). A request that names no lease is
			// never a repeat: the ending is its own only when it holds its
			// write's id.
			if sends.Load() > 1 {
				s.freedUnanswered(it)
			}
			return it, nil
		}
		holds := it != nil && it.hasLease() && it.Holder == cur.Holder && it.Fence == cur.Fence // pinned to it
		if !named && sent.mayHaveApplied(sends, now, it, holds) {
			// Sent more than once and refused on a later ending: its own
			// ending may be in the trail, taken off the task since by
			// later transitions (finish, noted). Not there, the write
			// ended nothing; its pin to the lease read keeps it off any
			// other.
			ev, _, err := s.endingInTrail(ctx, p.TaskID, e, p.AgentID, since)
			if err != nil {
				return nil, err
			}
			if ev != nil {
				return nil, &repeatInTrail{ev: ev}
			}
		}
		sent.note(sends, now, it, holds)
		switch {
		case lostToLater(it, now):
			floor = it.LastAt
			continue
		case it != nil && it.Holder == cur.Holder && it.Fence == cur.Fence && it.leaseTimeValid(now) && holderAlive(hb, it.LockedAt, now):
			continue // the counts moved under a live lease: decide again
		}
		return nil, resent(s.notHolder(ctx, it, p.AgentID, p.RunID, p.Fence, now, hb), sent.any())
	}
	return nil, fmt.Errorf("release %s: %w", p.TaskID, ErrBusy)
}

// countIs says a counter attribute is n (absent counts as 0).
func countIs(name expression.NameBuilder, n int) expression.ConditionBuilder {
	if n == 0 {
		return expression.Or(expression.AttributeNotExists(name), name.Equal(expression.Value(0)))
	}
	return name.Equal(expression.Value(n))
}

// endLease makes an ending write on taskID under cond. Its consequences (the
// event's archive, the watchers' messages, the notices) follow from the
// change stream. With rv ALL_NEW it returns the item as the write left it
// (after, read back with the write: the ending is encoded once, in
// endUpdate); a caller that answers nothing from it (the sweep) passes
// NONE and gets no item back, which spares the whole item's answer. When
// cond failed it returns applied=false and the item as it is (cur). The
// write keeps the time rule (timeCond): it fails, too, when the item's
// latest transition is later than now (lostToLater), and the caller tries
// again.
func (s *Store) endLease(ctx context.Context, taskID string, cond terms, e ending, now time.Time, rv types.ReturnValue) (cur, after *taskItem, applied bool, err error) {
	cond = cond.and(timeCond(now))
	if e.at != 0 {
		cond = cond.and(timeCond(fromMS(e.at)))
	}
	if e.status != StatusTodo || e.exhausted {
		// No wake: an exhausted ending leaves the task failed, not
		// claimable.
		it, applied, err := s.update(ctx, taskID, cond, endUpdate(taskID, e, now, s.shards), rv)
		if err != nil || !applied {
			return it, nil, false, err
		}
		return nil, it, true, nil
	}
	// A caller that wants no item back still gets the attributes the
	// write set while a claim of this process waits (no read units: only
	// the answer grows by them), among them claim_shard, which names the
	// queue whose waiting claims the freed task wakes. While none waits
	// (the sweep's Lambda, always) it gets nothing back; a claim that
	// starts to wait meanwhile is woken with every other (wokenQueue of
	// an empty item is every queue).
	freeRV := rv
	if rv == types.ReturnValueNone && s.claims.anyWaiting() {
		freeRV = types.ReturnValueUpdatedNew
	}
	// A task marked as waiting on a reopened blocker (deps.go, reblock)
	// goes back to blocked, not todo: tried second, on the mark, when the
	// first write fails on it (blockedEnding, from the item that write
	// failed on). The change stream may take the mark off between the two
	// (the blocker completed again): then the first is tried again,
	// rather than the lease's ending lost.
	free := cond.and(e.freeIf...).and(expression.AttributeNotExists(nameWaitingOn))
	marked := cond.and(expression.AttributeExists(nameWaitingOn))
	var read *taskItem // the marked item the blocked write is pinned to
	for range retries(ctx) {
		if read == nil {
			it, applied, err := s.update(ctx, taskID, free, endUpdate(taskID, e, now, s.shards), freeRV)
			switch {
			case err != nil:
				return it, nil, false, err
			case applied:
				s.claims.freed(taskID)
				s.claims.wake(wokenQueue(it))
				if rv == types.ReturnValueNone {
					it = &taskItem{}
				}
				return nil, it, true, nil
			case it == nil || len(it.WaitingOn) == 0:
				return it, nil, false, nil
			}
			read = it
		}
		blocked, pin := blockedEnding(e, read, now)
		it, applied, err := s.update(ctx, taskID, marked.and(pin...), endUpdate(taskID, blocked, now, s.shards), rv)
		switch {
		case err != nil:
			return it, nil, false, err
		case applied:
			return nil, it, true, nil
		case it == nil:
			return it, nil, false, nil
		case len(it.WaitingOn) == 0:
			read = nil // the mark was taken off: free it
		case sameDelay(it, read, now):
			return it, nil, false, nil
		default:
			read = it // its not_before or rank moved in between
		}
	}
	return nil, nil, false, fmt.Errorf("end the lease on %s: %w", taskID, ErrBusy)
}

// rankIs says the task's rank (what a delayed claim key is built from) is
// still as read in t, in the form t holds it: claim_rank, or no claim_rank
// and the claim key. A write pinned to it fails when a PATCH of the
// priority or queue moved it, and also when a PATCH gave the same rank its
// other form (a queue PATCH removes a claim_rank kept from before
// 2026-12-06: rankPinned), which is then decided again.
func (t *taskItem) rankIs() terms {
	if t.ClaimRank != "" {
		return terms{expression.Name("claim_rank").Equal(expression.Value(t.ClaimRank))}
	}
	key := expression.AttributeNotExists(expression.Name("claim_key"))
	if t.ClaimKey != "" {
		key = expression.Name("claim_key").Equal(expression.Value(t.ClaimKey))
	}
	return terms{expression.AttributeNotExists(expression.Name("claim_rank")), key}
}

// rankPinned says o holds t's rankIs: the same rank in the same form. The
// same rank in the other form (a ready task's claim_rank, kept on an item
// written before 2026-12-06, removed by a PATCH of its queue) fails a
// write pinned to t's, which is then made again on o's.
func (t *taskItem) rankPinned(o *taskItem) bool {
	return t.ClaimRank == o.ClaimRank && (t.ClaimRank != "" || t.ClaimKey == o.ClaimKey)
}

// blockedEnding is e made blocked, for a marked task it read: it waits for
// its blocker instead of a retry delay, but keeps a not_before still to
// come that it shows (one PATCHed while it was held): its delayed claim
// key and its expiry entry, as any task delayed while blocked has (claim.go,
// "Delays"); else, unblocked, it would rank among the ready tasks. pin
// says its not_before (and the rank its delayed key is built from) is as
// read: a PATCH in between moves them without anything else the ending
// is pinned to.
func blockedEnding(e ending, it *taskItem, now time.Time) (ending, terms) {
	e.status, e.notBefore, e.rank = StatusBlocked, 0, ""
	if it.NotBefore <= ms(now) {
		return e, terms{readyCond(now)}
	}
	e.notBefore, e.rank = it.NotBefore, it.rank()
	return e, append(terms{nameNotBefore.Equal(expression.Value(it.NotBefore))}, it.rankIs()...)
}

// sameDelay says a and b wait alike at now: for the same not_before and
// rank, in the form a write pinned to it names (rankPinned), or for none.
func sameDelay(a, b *taskItem, now time.Time) bool {
	if a.NotBefore <= ms(now) || b.NotBefore <= ms(now) {
		return a.NotBefore <= ms(now) && b.NotBefore <= ms(now)
	}
	return a.NotBefore == b.NotBefore && a.rankPinned(b)
}

// freedUnanswered is what endLease does for an ending write that left the
// task claimable, for one whose answer was lost (the SDK sent it again,
// and the second sending was refused on the first's own ending: sends.go):
// the process's claims no longer pass the task by, and those waiting on
// its queue are woken.
func (s *Store) freedUnanswered(it *taskItem) {
	if it.claimable() {
		s.claims.freed(it.TaskID)
		s.claims.wake(wokenQueue(it))
	}
}

// finish ends the caller's own lease by e (release or complete): one
// conditional write under holderGuard. When it does not apply, a retry of an
// earlier attempt that did is answered as that attempt was; otherwise the
// error says why (not_checked_out, or not_holder with the live holder).
func (s *Store) finish(ctx context.Context, taskID, agentID, runID string, fence int64, e ending) (*taskItem, error) {
	if fence == 0 {
		// Any lease of the caller's matches (of its run, naming only a
		// run id: a run may check a task out again by name): its write is
		// known by its id (sentAgain), and refused on its own ending,
		// still on the item, should the SDK send it again after a later
		// lease of the caller's was granted in that same millisecond,
		// which the time rule lets through.
		e.write = writeID()
	}
	var floor int64
	var pinned *taskItem // the item the delayed ending is pinned to
	var sent resends     // earlier writes of this call sent more than once
	// Every ending this call writes is stamped at or after since, the
	// earliest time of its writes (a clock may step back), and every
	// later transition of the task after it (the time rule).
	since := ms(s.clock())
	// noted records a refused write of the call (resends.note). A request
	// naming no lease cannot tell from the item whether its write, sent
	// more than once, ended the caller's lease: the caller's later lease
	// (granted since by a clock running ahead, or after the write ended
	// the one before) looks the same. Its write's id can: the ending it
	// made keeps it in the trail (endingInTrail). Found there, the call is
	// answered as that ending (repeatInTrail); not there once the trail
	// is archived, the write ended nothing and the call goes on as if it
	// had been sent once. A trail held up past its wait leaves the
	// judgement to the times, as for a request naming its lease.
	// waited says the call waited for the trail already, in vain: its
	// refusal does not wait again (repeatedEnding).
	waited := false
	noted := func(sends *atomic.Int32, now time.Time, it *taskItem) error {
		// A request naming only its run cannot tell from the item
		// either (holdsNamed): the run's lease on it may be a later one,
		// checked out again by name after this write ended the one it
		// meant.
		holds := holdsNamed(it, agentID, runID, fence)
		if e.write == "" || !sent.mayHaveApplied(sends, now, it, holds) {
			sent.note(sends, now, it, holds)
			return nil
		}
		ev, settled, err := s.endingInTrail(ctx, taskID, e, agentID, since)
		switch {
		case err != nil:
			return err
		case ev != nil:
			return &repeatInTrail{ev: ev}
		case !settled:
			sent.note(sends, now, it, holds)
			waited = true
		}
		return nil
	}
	for range retries(ctx) {
		cond, hb, now, err := s.holderGuard(ctx, agentID, runID, fence, floor)
		since = min(since, ms(now))
		var it, after *taskItem
		applied := false
		wctx, sends := countSends(ctx)
		switch {
		case errors.Is(err, errDeadCaller):
			if it, err = s.getTask(ctx, taskID); err != nil {
				return nil, err
			}
		case err != nil:
			return nil, err
		default:
			if e.status == StatusTodo && e.notBefore == 0 {
				e.freeIf = terms{readyCond(now)}
			}
			if e.write != "" {
				wctx = sentAgainWith(wctx, terms{notEndedSince(now)})
			}
			if it, after, applied, err = s.endLease(wctx, taskID, sent.pin(cond).and(notEndedBy(e.write)...), e, now, types.ReturnValueAllNew); err != nil {
				return nil, err
			}
			if !applied && lostToLater(it, now) && !(sends.Load() > 1 && sentAgain(it, e, agentID, runID, fence, now)) {
				floor = it.LastAt // a later transition landed first: again, after it
				if err := noted(sends, now, it); err != nil {
					return nil, err
				}
				continue
			}
			if !applied && e.write != "" && sends.Load() > 1 && endedSince(it, now) && holdsUnnamed(it, agentID, runID) && !sentAgain(it, e, agentID, runID, fence, now) {
				// A second sending, refused on the caller's lease granted
				// in the millisecond of another ending (notEndedSince),
				// that the trail showed had ended nothing (noted): made
				// again, after that ending.
				floor = it.EndAt + 1
				if err := noted(sends, now, it); err != nil {
					return nil, err
				}
				continue
			}
			// This very write, sent again (its answer lost), its ending
			// still on the item (sentAgain; for a request naming no lease,
			// whatever the task has done since): answered below.
			mine := !applied && sends.Load() > 1 && sentAgain(it, e, agentID, runID, fence, now)
			if !applied && !mine && e.status == StatusTodo && waitsAhead(it, agentID, runID, fence, now) &&
				(pinned == nil || e.notBefore != it.NotBefore || !it.rankPinned(pinned)) {
				pinned = it
				// The caller's lease, on a task given a not_before while it
				// was held: the ending is written again with its delay (its
				// delayed claim key and expiry entry), pinned to that
				// not_before and rank, as the sweep's is. Writing the ready
				// ending and then moving its claim entry cost two writes
				// of the item and three of the claim index.
				e.notBefore, e.rank = it.NotBefore, it.rank()
				e.freeIf = append(terms{nameNotBefore.Equal(expression.Value(it.NotBefore))}, it.rankIs()...)
				if err := noted(sends, now, it); err != nil {
					return nil, err
				}
				continue
			}
			if !applied && !mine && e.notBefore != 0 && (it == nil || it.NotBefore <= ms(now)) {
				e.notBefore, e.rank, pinned = 0, "", nil // its not_before was cleared or has passed
				if it != nil && it.hasLease() {
					if err := noted(sends, now, it); err != nil {
						return nil, err
					}
					continue
				}
			}
		}
		if applied {
			return after, nil
		}
		if replayEnd(it, e.typ, e.outcome, e.by, agentID, runID, fence) || sends.Load() > 1 && sentAgain(it, e, agentID, runID, fence, now) {
			if sends.Load() > 1 {
				s.freedUnanswered(it) // this very write, its answer lost
			}
			return it, nil
		}
		if err := noted(sends, now, it); err != nil {
			return nil, err
		}
		return nil, resent(s.notHolder(ctx, it, agentID, runID, fence, now, hb), sent.any() && !waited)
	}
	return nil, fmt.Errorf("%s %s: %w", e.typ, taskID, ErrBusy)
}

// waitsAhead says whether it, the task as an ending's write found it,
// still has the lease the ending names (agentID's, by runID and fence
// when given) and a not_before after now.
func waitsAhead(it *taskItem, agentID, runID string, fence int64, now time.Time) bool {
	return it != nil && it.hasLease() && it.Holder == agentID && (runID == "" || it.RunID == runID) &&
		(fence == 0 || it.Fence == fence) && it.NotBefore > ms(now)
}

// notEndedBy is the term that refuses a write on an item whose last
// ending that very write made (none for a write with no id; NOT of the
// comparison is true when the item has no end_write: readyCond).
func notEndedBy(write string) []expression.ConditionBuilder {
	if write == "" {
		return nil
	}
	return []expression.ConditionBuilder{expression.Not(expression.Name("end_write").Equal(expression.Value(write)))}
}

// notEndedSince is the term an ending naming no lease carries in every
// write of its try once a sending may have applied (sentAgainWith): the
// item's last ending is before now, the sending's time. NOT of the
// comparison is true when the item has none.
//
// It refuses a second sending that would otherwise end a later lease of
// the caller: the first sending ended its lease at now, and within that
// millisecond (the other writers' clocks behind the caller's; the time
// rule lets ties through) another lease of the task was granted and
// ended by its fence, which took the write's id off the item, and the
// caller was granted the task again. Every transition after the first
// sending is stamped at or after now, so that ending is too: the second
// sending is refused, and finds its own ending in the trail
// (endingInTrail). A first sending never carries it: a lease granted in
// the millisecond of the ending before it is ended at once.
func notEndedSince(now time.Time) expression.ConditionBuilder {
	return expression.Not(expression.Name("end_at").GreaterThanEqual(expression.Value(ms(now))))
}

// endedSince says its last ending is at or after now (notEndedSince).
func endedSince(it *taskItem, now time.Time) bool {
	return it != nil && it.EndSeq != 0 && it.EndAt >= ms(now)
}

// holdsUnnamed says it holds a lease of agentID's (of runID's, when
// given): one a request naming no fence may mean.
func holdsUnnamed(it *taskItem, agentID, runID string) bool {
	return it != nil && it.hasLease() && it.Holder == agentID && (runID == "" || it.RunID == runID)
}

// repeatInTrail answers a holder's ending naming no lease whose write,
// sent more than once, ended the caller's lease, found in the trail by
// its id (finish): the call is answered as that ending (repeatedEnding).
type repeatInTrail struct{ ev *eventItem }

func (r *repeatInTrail) Error() string {
	return fmt.Sprintf("%s of %s: answered from the trail", r.ev.Type, r.ev.TaskID)
}

// endingInTrail looks in taskID's trail for the lease's ending made by
// end's write, for agentID, by a call whose writes were made at since or
// later (Unix ms of this process's clock): the ending is stamped at or
// after since, and so is every transition of the task after it (the
// time rule), so the trail is read newest first back to an event before
// since, at most maxEndingScan events. It waits for the change stream to
// archive what the task shows (lookInTrail); settled says a nil ev is
// conclusive: the write ended no lease. Not when the scan stops at its
// bound, nor when it meets an ending like the call's archived without
// even noWrite (by the stream function of a version that kept no ids,
// during a deploy): that one may be the call's own.
func (s *Store) endingInTrail(ctx context.Context, taskID string, end ending, agentID string, since int64) (ev *eventItem, settled bool, err error) {
	reached := false
	settled, err = s.lookInTrail(ctx, taskID, true, func() (bool, error) {
		ev, reached = nil, true
		seen := 0
		err := queryNewestFirst(ctx, s.db, s.events, expression.Key("task_id").Equal(expression.Value(taskID)), maxEndingScan/4, func(e *eventItem) bool {
			seen++
			switch {
			case e.Write == end.write && e.endsLease():
				ev = e
				return false
			case e.At < since:
				return false
			case e.Write == "" && e.endsLease() && e.Type == end.typ && e.By == end.by && e.AgentID == agentID,
				seen >= maxEndingScan:
				reached = false
				return false
			}
			return true
		})
		return ev != nil, err
	})
	return ev, settled && reached, err
}

// maxEndingScan bounds endingInTrail's read of a trail: the events made
// since a call began, a few but for a clock far behind the task's (then
// the times decide, as without the trail).
const maxEndingScan = 100

// resentRefusal is the refusal of a holder's ending whose write was sent
// more than once (sends.go): its first sending may have applied and its
// ending been taken off the item by two later transitions before the
// second sending failed, so the trail is waited for (repeatedEnding).
type resentRefusal struct{ err error }

func (e *resentRefusal) Error() string { return e.err.Error() }
func (e *resentRefusal) Unwrap() error { return e.err }

// resent wraps err, a refusal, as a resentRefusal when the write was sent
// more than once.
func resent(err error, more bool) error {
	if err == nil || !more {
		return err
	}
	return &resentRefusal{err: err}
}

// resends is what a holder's ending call knows of its earlier writes that
// may have applied, their answer lost: sent more than once (sends.go),
// and refused on an item whose last ending is at or after the write's
// time (an ending that applied is stamped at its write's time, and every
// ending after it at a later one; a write refused on an older ending
// ended nothing: refused on the time rule, say, behind a lease granted on
// a clock running ahead). A refused write of the call may then be refused
// on such a write's own ending, taken off the item since by later
// transitions: its refusal is a resentRefusal, which waits for the trail
// (repeatedEnding). And a lease locked at or after the first such write
// is not one the call can mean: granted after the call had ended the
// caller's lease (its ending's id overwritten by a later ending, a
// request naming no lease is not known by it), it is left alone.
type resends struct {
	first int64 // the time (Unix ms) of the first write that may have applied; 0: none
}

// note records a write of the call made at now, sent sends times and
// refused on it. holds says it still holds the very lease the write
// named (by its fence, or its run id): then the write ended nothing,
// whatever the times say (another process's clock running ahead may
// have stamped the ending before that lease, and its grant, after the
// write's time). A request naming no lease is judged by the times alone.
func (r *resends) note(sends *atomic.Int32, now time.Time, it *taskItem, holds bool) {
	if r.mayHaveApplied(sends, now, it, holds) {
		r.first = ms(now)
	}
}

// mayHaveApplied says note would take the write for one that may have
// applied, the first such write of the call.
func (r *resends) mayHaveApplied(sends *atomic.Int32, now time.Time, it *taskItem, holds bool) bool {
	return r.first == 0 && sends.Load() > 1 && it != nil && !holds && it.EndSeq != 0 && it.EndAt >= ms(now)
}

// holdsNamed says it holds agentID's lease that fence (and runID, when
// given) names: a request naming it that was refused on it ended nothing.
// A request naming no fence cannot be told so: a run id alone may name a
// later lease of the run (a run checks a task out again by name).
func holdsNamed(it *taskItem, agentID, runID string, fence int64) bool {
	return it != nil && fence != 0 && it.hasLease() && it.Holder == agentID &&
		(runID == "" || it.RunID == runID) && it.Fence == fence
}

// any says a write of the call may have applied.
func (r *resends) any() bool { return r.first != 0 }

// pin is cond, pinned to a lease locked before the first write that may
// have applied.
func (r *resends) pin(cond terms) terms {
	if r.first == 0 {
		return cond
	}
	return cond.and(expression.Name("locked_at").LessThan(expression.Value(r.first)))
}

// forceRelease ends whoever's live lease is on the task (an admin's call).
// The lease is read and judged first, holder's heartbeat included, so that
// a lease already ended by its holder's death is not_checked_out; the write
// is pinned to that lease.
func (s *Store) forceRelease(ctx context.Context, p ReleaseParams) (Released, error) {
	cur, live, err := s.readTask(ctx, p.TaskID)
	if err != nil {
		return Released{}, err
	}
	named := (p.RunID == "" || cur.RunID == p.RunID) && (p.Fence == 0 || cur.Fence == p.Fence)
	if !live || !named {
		// No live lease, or not the one named: a repeat of a force release
		// that ended the named one is answered as it was; otherwise it is
		// not checked out, or another lease is live.
		if replayEnd(cur, EventForceRelease, OutcomeNone, p.By, p.AgentID, p.RunID, p.Fence) {
			return released(cur), nil
		}
		err := ErrNotCheckedOut
		if live {
			err = &NotHolderError{Holder: cur.checkout(), Caller: p.By, Forced: true}
		}
		return s.releasedAgain(ctx, err, p, EventForceRelease)
	}
	floor := cur.LastAt
	// Its ending is known by its write's id (sentAgain), sent again: not
	// another force release of the admin's in the same millisecond, and
	// its own after a later transition (the task granted again); after
	// two (granted and freed again), by the id in the trail.
	write := writeID()
	var sent resends
	since := ms(s.clock()) // the earliest time of the call's writes (finish)
	for range retries(ctx) {
		now := s.clockAfter(floor)
		since = min(since, ms(now))
		cond := pinnedTo(cur).and(nameExpires.GreaterThan(expression.Value(ms(now))))
		e := ending{typ: EventForceRelease, by: p.By, reason: p.Reason, status: StatusTodo, write: write}
		wctx, sends := countSends(ctx)
		it, after, applied, err := s.endLease(wctx, p.TaskID, cond, e, now, types.ReturnValueAllNew)
		if err != nil {
			return Released{}, err
		}
		if !applied && sends.Load() > 1 && sentAgain(it, e, cur.Holder, cur.RunID, cur.Fence, now) {
			// This very ending, its answer lost and sent again (finish).
			applied, after = true, it
			s.freedUnanswered(it)
		}
		holds := it != nil && it.hasLease() && it.Fence == cur.Fence // pinned to it
		if !applied && p.RunID == "" && p.Fence == 0 && it != nil && it.EndFence != cur.Fence && sent.mayHaveApplied(sends, now, it, holds) {
			// Sent more than once and refused on a later lease's ending:
			// its own ending may be in the trail, taken off the task
			// since by a grant and an ending (failRelease does the same).
			// Not there, the write ended nothing, or the trail is held up
			// past its wait or past endingInTrail's bound: the refusal
			// stands (README). Refused on an ending of the lease it read
			// that is not its own, it ended nothing (the write is pinned
			// to that lease), and reads no trail.
			ev, _, err := s.endingInTrail(ctx, p.TaskID, e, cur.Holder, since)
			if err != nil {
				return Released{}, err
			}
			if ev != nil {
				return s.releasedAgain(ctx, &repeatInTrail{ev: ev}, p, EventForceRelease)
			}
		}
		sent.note(sends, now, it, holds)
		if !applied && lostToLater(it, now) {
			floor = it.LastAt // a later transition (a renewal) landed first
			continue
		}
		if !applied {
			// It ended in between. By the same admin's force release of
			// the lease this one names (the one read, its write pinned
			// to): a repeat, answered as made, as when it is read before
			// the write. By this very call, when a
			// write of it may have applied and its ending has been
			// overwritten since (the task taken and freed again): the
			// trail shows it.
			if (p.RunID != "" || p.Fence != 0) && replayEnd(it, EventForceRelease, OutcomeNone, p.By, p.AgentID, p.RunID, cur.Fence) {
				return released(it), nil
			}
			return s.releasedAgain(ctx, resent(ErrNotCheckedOut, sent.any()), p, EventForceRelease)
		}
		s.keepDelay(ctx, after) // a not_before PATCHed while it was held
		return released(after), nil
	}
	return Released{}, fmt.Errorf("force release %s: %w", p.TaskID, ErrBusy)
}

// failedOutcome reports whether a release's outcome is a failure: a release
// with outcome done and one with none are one plain release, and repeat
// each other.
func failedOutcome(o ReleaseOutcome) bool { return o == OutcomeFailed }

// replayEnd reports whether a holder's release or completion that found no
// lease of its own repeats one that already took effect: the item's last
// ending is this caller's (by's) ending of the very lease the request
// names (agentID's, by run id or fence), and, for a release, failed or not
// as that one was, so the answer to that first attempt was lost and this
// is the retry. A request that names no lease is never taken for a retry.
func replayEnd(cur *taskItem, typ EventType, outcome ReleaseOutcome, by, agentID, runID string, fence int64) bool {
	if cur == nil || runID == "" && fence == 0 {
		return false
	}
	r := cur.endRecord
	return r.EndSeq != 0 && r.EndType == typ && (typ != EventRelease || failedOutcome(r.EndOutcome) == failedOutcome(outcome)) && r.EndBy == by &&
		(typ == EventForceRelease || r.EndAgent == agentID) &&
		(runID == "" || r.EndRun == runID) && (fence == 0 || r.EndFence == fence)
}

// sentAgain says whether it, the item a holder's ending write that was
// sent more than once failed its condition on, holds that very ending:
// the write applied, its answer was lost, and the SDK sent it again
// (sends.go). The ending is the caller's, of the same kind, of the lease
// the request named (run id, fence), stamped with the write's own time,
// and the item's latest transition: another of the caller's runs ending
// its own lease in that instant is not this one. A request that named no
// lease is known by its write's id (e.write), which the ending keeps:
// another request of the caller's, ending the lease in that same
// millisecond, is not this one either; and it is known by it after a
// later transition too (the task it freed granted again before the SDK
// sent it again), which the item's own time cannot tell.
func sentAgain(it *taskItem, e ending, agentID, runID string, fence int64, now time.Time) bool {
	if it == nil {
		return false
	}
	r := it.endRecord
	if e.write != "" {
		// No other write carries its id: its ending, whatever landed
		// since (a grant of the task it freed, say).
		return r.EndSeq != 0 && r.EndWrite == e.write
	}
	return r.EndSeq != 0 && r.EndSeq == it.ESeq && r.EndAt == ms(now) && r.EndType == e.typ && r.EndBy == e.by && r.EndAgent == agentID &&
		(e.typ != EventRelease || failedOutcome(r.EndOutcome) == failedOutcome(e.outcome)) &&
		(runID == "" || r.EndRun == runID) && (fence == 0 || r.EndFence == fence) && r.EndWrite == ""
}

// A repeat after a later ending. The item keeps only its last ending, so
// a holder's release or completion repeated after another lease of the
// task has ended (a later release, say) no longer finds its own there.
// A request that names its lease (run id or fence) and is refused as
// not_checked_out or not_holder then looks for its ending in the task's
// trail, newest first: the ending of that lease, of the same kind (and
// outcome, for a release), by the same caller. The trail is read until that lease's checkout, or a lease
// older than the fence named, or maxRepeatScan events: one Query of a
// few read units on a path that is already an error's. An ending whose
// event the change stream has yet to archive (about a second) is not
// found, and the refusal stands; but for a write the SDK sent more than
// once, whose own first sending may be that ending (resentRefusal),
// which waits for the archive while events are pending.

// maxRepeatScan bounds the events a repeat looks through.
const maxRepeatScan = 1000

// archivedEnding returns the ending of typ by `by` of agentID's lease
// runID/fence (at least one given) in taskID's trail, or nil.
func (s *Store) archivedEnding(ctx context.Context, taskID string, typ EventType, outcome ReleaseOutcome, by, agentID, runID string, fence int64) (*eventItem, error) {
	var found *eventItem
	seen := 0
	err := queryNewestFirst(ctx, s.db, s.events, expression.Key("task_id").Equal(expression.Value(taskID)), 100, func(ev *eventItem) bool {
		ours := (runID == "" || ev.RunID == runID) && (fence == 0 || ev.Fence == fence)
		switch {
		case ours && ev.Type == typ && ev.By == by && (typ == EventForceRelease || ev.AgentID == agentID):
			if typ == EventRelease && failedOutcome(ev.Outcome) != failedOutcome(outcome) {
				return false // this lease's ending, with another outcome
			}
			found = ev
			return false
		case ours && ev.Type == EventCheckout && (typ == EventForceRelease || ev.AgentID == agentID),
			fence != 0 && ev.Fence != 0 && ev.Fence < fence:
			return false // the lease's start, or older leases: no ending of it before
		}
		seen++
		return seen < maxRepeatScan
	})
	return found, err
}

// repeatedEnding is the archived ending a refused holder's request repeats
// (see "A repeat after a later ending"), or nil and the refusal err.
func (s *Store) repeatedEnding(ctx context.Context, err error, taskID string, typ EventType, outcome ReleaseOutcome, by, agentID, runID string, fence int64) (*eventItem, error) {
	var rt *repeatInTrail
	if errors.As(err, &rt) {
		return rt.ev, nil // found already, by its write's id (finish)
	}
	var rr *resentRefusal
	again := errors.As(err, &rr)
	if again {
		err = rr.err
	}
	var nh *NotHolderError
	if runID == "" && fence == 0 || !errors.Is(err, ErrNotCheckedOut) && !errors.As(err, &nh) {
		return nil, err
	}
	// The change stream archives an ending about a second after its
	// write. A write sent more than once may be refused on its own ending
	// taken off the item since by two more transitions: the trail is
	// waited for (lookInTrail).
	var found *eventItem
	_, lerr := s.lookInTrail(ctx, taskID, again, func() (bool, error) {
		ev, err := s.archivedEnding(ctx, taskID, typ, outcome, by, agentID, runID, fence)
		found = ev
		return ev != nil, err
	})
	if lerr != nil {
		return nil, lerr
	}
	if found == nil {
		return nil, err
	}
	return found, nil
}

// lookInTrail runs look, which reads taskID's trail for an event, until it
// finds it. With wait, while the trail has events the change stream has
// yet to archive (about a second after their writes), it looks again,
// 20 ms, 40 ms ... apart, for up to trailWait (one GetItem of the task
// and two Queries a wait), and once more when all are archived; without,
// it looks once. A task that is gone ends the looking. settled says the
// last look was made with the trail archived whole: what it did not find
// is not there.
func (s *Store) lookInTrail(ctx context.Context, taskID string, wait bool, look func() (bool, error)) (settled bool, err error) {
	return s.lookInTrailHoled(ctx, taskID, wait, func() (bool, bool, error) {
		found, err := look()
		return found, false, err
	})
}

// lookInTrailHoled is lookInTrail for a look that also says it saw an
// event missing among those it read (holed): it waits for that one as
// for one pending among the newest, which trailSince checks.
func (s *Store) lookInTrailHoled(ctx context.Context, taskID string, wait bool, look func() (found, holed bool, err error)) (settled bool, err error) {
	deadline := time.Now().Add(trailWait)
	for n := 1; ; n++ {
		found, holed, err := look()
		if found || err != nil {
			return false, err
		}
		if !wait || time.Now().After(deadline) {
			return settled && !holed, nil
		}
		if holed {
			settled = false
			if err := backoff(ctx, n); err != nil {
				return false, err
			}
			continue
		}
		tr, _, err := s.trailSince(ctx, taskID, ms(s.clock()))
		if errors.Is(err, ErrTaskNotFound) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		if tr.Pending == 0 {
			// Everything archived, perhaps since the look above: one
			// last look is conclusive.
			wait, settled = false, true
			continue
		}
		if err := backoff(ctx, n); err != nil {
			return false, err
		}
	}
}

// releasedAgain answers a release refused with err: as the release it
// repeats was answered, when there is one in the trail.
func (s *Store) releasedAgain(ctx context.Context, err error, p ReleaseParams, typ EventType) (Released, error) {
	outcome := p.Outcome
	if typ != EventRelease {
		outcome = OutcomeNone
	}
	ev, err := s.repeatedEnding(ctx, err, p.TaskID, typ, outcome, p.By, p.AgentID, p.RunID, p.Fence)
	if ev == nil {
		return Released{}, err
	}
	var held time.Duration
	if ev.HeldMS != nil {
		held = time.Duration(*ev.HeldMS) * time.Millisecond
	}
	return Released{TaskID: ev.TaskID, ReleasedBy: ev.By, Held: held}, nil
}

// released is the answer to a release that ended the lease recorded on it.
func released(it *taskItem) Released {
	end, _ := it.endEvent()
	return Released{TaskID: it.TaskID, ReleasedBy: end.By, Held: time.Duration(*end.HeldMS) * time.Millisecond}
}

// Complete ends the caller's lease and marks the task done. Nobody is told:
// the task will not be available again.
func (s *Store) Complete(ctx context.Context, p CompleteParams) (Task, error) {
	if err := checkHolder(p.TaskID, p.RunID); err != nil {
		return Task{}, err
	}
	by, err := actedBy(p.AgentID, p.By)
	if err != nil {
		return Task{}, err
	}
	it, err := s.finish(ctx, p.TaskID, p.AgentID, p.RunID, p.Fence, ending{typ: EventComplete, by: by, status: StatusDone})
	fromTrail := false
	if err != nil {
		ev, err := s.repeatedEnding(ctx, err, p.TaskID, EventComplete, OutcomeNone, by, p.AgentID, p.RunID, p.Fence)
		if ev == nil {
			return Task{}, err
		}
		// Found in the trail (see "A repeat after a later ending"): the
		// task as it is now, done as that completion left it, at the
		// version its event kept (one archived before versions were
		// kept: the version the task has now).
		if it, err = s.getTask(ctx, p.TaskID); err != nil || it == nil {
			return Task{}, cmp.Or(err, ErrTaskNotFound)
		}
		it.EndAt, it.EndVersion, fromTrail = ev.At, nil, true
		if ev.Version > 0 {
			it.EndVersion = new(ev.Version - 1)
		}
	}
	if fromTrail || it.Status != StatusDone || it.EndVersion != nil && it.Version != *it.EndVersion+1 {
		// A completion repeated after the task moved on (reopened, taken
		// again) is answered as the first one was: the task, done, at the
		// version the completion left (a completion from before versions
		// were kept has the task's own), with its fields as they are now.
		done := *it
		done.Status, done.CompletedAt = StatusDone, it.EndAt
		done.Holder, done.LeaseExpires = "", 0
		if it.EndVersion != nil {
			done.Version = *it.EndVersion + 1
		}
		it = &done
	}
	if err := s.fillBodies(ctx, it); err != nil {
		return Task{}, err
	}
	if err := s.fillGraph(ctx, it); err != nil {
		return Task{}, err
	}
	return it.task(false), nil
}

// A checkout of a blocked task whose blockers are all done.
//
// The change stream unblocks a task about a second after its last
// blocker's completion. A checkout in between would have to answer
// blocked, naming no blocker. Instead, having read every blocker the task
// waits on done, it unblocks the task in its grant's own write: the one
// write takes the task from blocked to in_progress and records both
// events, unblocked and then checkout (seqs eseq-1 and eseq: a checkout
// adds two to eseq, and a blocked task has no lease to take over, so the
// first is free; unblock_seq marks it). The write is conditioned on the
// task as read (status blocked, its version), so its waiting list is the
// one whose blockers were read done; a blocker reopened since its read is
// as one reopened right after the grant: the dependent, in progress,
// keeps its lease (deps.go, "Reopening a done blocker"). Watchers are not told (nothing was free): their watches
// tell them when this lease ends. The stream's own unblocking of the task
// then finds it unblocked already and writes nothing.

// waitsOnDoneOnly reports whether every blocker blocked task t waits on
// was read done (fillGraph).
func (t *taskItem) waitsOnDoneOnly() bool {
	if t.graph == nil || len(t.WaitingOn) == 0 {
		return false
	}
	for _, id := range t.WaitingOn {
		if st, ok := t.graph.blockers[id]; !ok || st != StatusDone {
			return false
		}
	}
	return true
}

// unblockCond is the grant's condition for blocked task cur: as read.
func unblockCond(cur *taskItem) expression.ConditionBuilder {
	return nameStatus.Equal(expression.Value(string(StatusBlocked))).And(nameVersion.Equal(expression.Value(cur.Version)))
}

// unblockUpdate adds the unblocking of cur to a grant's update: no waiting
// list, the blocker whose completion unblocked it when it waited on one,
// and unblock_seq, the seq of the unblocked event (eseq-1 after the
// grant's write).
func unblockUpdate(upd expression.UpdateBuilder, cur *taskItem) expression.UpdateBuilder {
	upd = upd.Remove(expression.Name("waiting_on")).
		Set(expression.Name("unblock_seq"), nameESeq.Plus(expression.Value(1)))
	if len(cur.WaitingOn) == 1 {
		return upd.Set(expression.Name("unblocked_by"), expression.Value(cur.WaitingOn[0]))
	}
	return upd.Remove(expression.Name("unblocked_by"))
}
