package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease/schema"
)

// maxAttempts bounds the retries of a transition whose condition failed for a
// reason that vanished by the time it was read (the lease ended in between).
const maxAttempts = 8

var (
	nameHolder  = expression.Name("holder")
	nameExpires = expression.Name("lease_expires")
	nameStatus  = expression.Name("status")
	nameFence   = expression.Name("fence")
	nameESeq    = expression.Name("eseq")
)

// update makes one conditional UpdateItem on a task. When the condition
// holds it returns the item as it was before (ALL_OLD) and applied=true;
// when it fails it returns the item as it is (nil if there is no task).
func (s *Store) update(ctx context.Context, taskID string, cond expression.ConditionBuilder, upd expression.UpdateBuilder, rv types.ReturnValue) (*taskItem, bool, error) {
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
	if err != nil {
		return nil, false, fmt.Errorf("build update of %s: %w", taskID, err)
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                           &s.tasks,
		Key:                                 taskKey(taskID),
		ConditionExpression:                 expr.Condition(),
		UpdateExpression:                    expr.Update(),
		ExpressionAttributeNames:            expr.Names(),
		ExpressionAttributeValues:           expr.Values(),
		ReturnValues:                        rv,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if returned, failed := conditionFailed(err); failed {
		cur, err := s.currentTask(ctx, returned, taskID)
		return cur, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("update task %s: %w", taskID, err)
	}
	var it taskItem
	if err := attributevalue.UnmarshalMap(out.Attributes, &it); err != nil {
		return nil, false, fmt.Errorf("decode task %s: %w", taskID, err)
	}
	return &it, true, nil
}

// holderCond says "the caller holds this unexpired lease", with the run id and
// fence when given.
func holderCond(agentID, runID string, fence int64, now time.Time) expression.ConditionBuilder {
	c := nameHolder.Equal(expression.Value(agentID)).
		And(nameExpires.GreaterThan(expression.Value(ms(now))))
	if runID != "" {
		c = c.And(expression.Name("run_id").Equal(expression.Value(runID)))
	}
	if fence != 0 {
		c = c.And(nameFence.Equal(expression.Value(fence)))
	}
	return c
}

// clearLease removes the lease and its index keys from a task item.
func clearLease(u expression.UpdateBuilder) expression.UpdateBuilder {
	for _, n := range []string{"holder", "holder_name", "run_id", "locked_at", "lease_expires", "timeout_ms", "reason", "lease_shard"} {
		u = u.Remove(expression.Name(n))
	}
	return u
}

func statusValues(ss []Status) (expression.OperandBuilder, []expression.OperandBuilder) {
	rest := make([]expression.OperandBuilder, 0, len(ss)-1)
	for _, s := range ss[1:] {
		rest = append(rest, expression.Value(string(s)))
	}
	return expression.Value(string(ss[0])), rest
}

// Checkout grants the caller a lease on a task. The grant is one conditional
// write: the task exists, no lease is on it, and its status is expected.
// When a lease is there, the failed write returns it: a live one is the
// caller's own (the same run retrying) or a conflict; an expired one, or one
// whose holder is dead by heartbeat, is taken over by a second write
// conditioned on that exact lease (holder, fence and eseq), which also
// records how it ended.
func (s *Store) Checkout(ctx context.Context, p CheckoutParams) (Checkout, error) {
	if err := s.checkCheckout(&p); err != nil {
		return Checkout{}, err
	}
	now := s.clock()
	var over *taskItem // an ended lease to take over: expired, or its holder dead
	// mismatch is the answer when the task, its ended lease aside, is not
	// in an expected status.
	mismatch := func(cur *taskItem) error {
		if st := cur.task(false).Status; !slices.Contains(p.ExpectedStatuses, st) {
			return &StatusMismatchError{TaskID: p.TaskID, Status: st}
		}
		return nil
	}
	for range maxAttempts {
		c, cur, err := s.grant(ctx, p, now, over)
		if err != nil || cur == nil && c.Fence != 0 {
			return c, err
		}
		over = nil
		switch {
		case cur == nil && p.CreateIfMissing:
			if _, err := s.CreateTask(ctx, CreateTaskParams{TaskID: p.TaskID}); err != nil && !errors.Is(err, ErrTaskExists) {
				return Checkout{}, err
			}
			continue
		case cur == nil:
			return Checkout{}, ErrTaskNotFound
		case cur.hasLease() && !cur.leaseTimeValid(now):
			if err := mismatch(cur); err != nil {
				return Checkout{}, err
			}
			over = cur // expired: never blocks
			continue
		case cur.leaseTimeValid(now):
			hb, err := s.heartbeat(ctx, cur.Holder)
			if err != nil {
				return Checkout{}, err
			}
			if !holderAlive(hb, cur.LockedAt, now) {
				if err := mismatch(cur); err != nil {
					return Checkout{}, err
				}
				over = cur
				continue
			}
			if cur.Holder == p.AgentID && cur.RunID == p.RunID {
				return cur.checkout(), nil // the same run retrying: same lease, same fence
			}
			if p.Watch {
				if err := s.Watch(ctx, p.TaskID, p.AgentID); err != nil {
					return Checkout{}, err
				}
			}
			return Checkout{}, &ConflictError{Holder: cur.checkout()}
		default:
			if err := mismatch(cur); err != nil {
				return Checkout{}, err
			}
			// The lease ended between the write and the read: try again.
		}
	}
	return Checkout{}, fmt.Errorf("checkout %s: too much contention", p.TaskID)
}

func (s *Store) checkCheckout(p *CheckoutParams) error {
	if err := checkID("task_id", p.TaskID); err != nil {
		return err
	}
	if err := checkID("agent_id", p.AgentID); err != nil {
		return err
	}
	if p.RunID == "" {
		p.RunID = newID("run-")
	} else if err := checkID("run_id", p.RunID); err != nil {
		return err
	}
	if p.Timeout == 0 {
		p.Timeout = DefaultTimeout
	}
	if err := checkTimeout(p.Timeout); err != nil {
		return err
	}
	if err := checkText("reason", p.Reason, MaxReasonLen); err != nil {
		return err
	}
	if p.AgentName == "" {
		p.AgentName = p.AgentID
	}
	if len(p.ExpectedStatuses) == 0 {
		p.ExpectedStatuses = []Status{StatusTodo, StatusInProgress}
	}
	for _, st := range p.ExpectedStatuses {
		if !st.Valid() {
			return invalid("invalid_request", "expected_statuses may hold only todo, in_progress, done, cancelled")
		}
	}
	return nil
}

// grant makes the checkout write. On success it records the events and
// returns the checkout (cur nil). When the condition fails it returns the
// task as it is (cur nil and a zero checkout when there is no task).
func (s *Store) grant(ctx context.Context, p CheckoutParams, now time.Time, over *taskItem) (Checkout, *taskItem, error) {
	first, rest := statusValues(p.ExpectedStatuses)
	statusOK := nameStatus.In(first, rest...)
	var cond expression.ConditionBuilder
	if over == nil {
		cond = expression.AttributeExists(expression.Name("task_id")).
			And(expression.AttributeNotExists(nameHolder), statusOK)
	} else {
		// Exactly the ended lease, as we read it: the same grant (holder and
		// fence), with no transition since (eseq: not even a renewal that
		// left the expiry where it was). A holder that came back and renewed
		// in between has shown it is alive; the write then fails and the
		// lease is judged again. Its task is todo in all but name.
		if slices.Contains(p.ExpectedStatuses, StatusTodo) {
			statusOK = statusOK.Or(nameStatus.Equal(expression.Value(string(StatusInProgress))))
		}
		cond = nameHolder.Equal(expression.Value(over.Holder)).
			And(nameFence.Equal(expression.Value(over.Fence)),
				nameESeq.Equal(expression.Value(over.ESeq)),
				statusOK)
	}
	exp := now.Add(p.Timeout)
	upd := expression.Set(nameStatus, expression.Value(string(StatusInProgress))).
		Set(nameHolder, expression.Value(p.AgentID)).
		Set(expression.Name("holder_name"), expression.Value(p.AgentName)).
		Set(expression.Name("run_id"), expression.Value(p.RunID)).
		Set(expression.Name("locked_at"), expression.Value(ms(now))).
		Set(nameExpires, expression.Value(ms(exp))).
		Set(expression.Name("timeout_ms"), expression.Value(p.Timeout.Milliseconds())).
		Set(expression.Name("lease_shard"), expression.Value(shardOf(p.TaskID))).
		Set(nameFence, nameFence.Plus(expression.Value(1))).
		Set(expression.Name("started_at"), expression.IfNotExists(expression.Name("started_at"), expression.Value(ms(now)))).
		Set(nameESeq, nameESeq.Plus(expression.Value(2))).
		Set(expression.Name("lease_seq"), nameESeq.Plus(expression.Value(2)))
	if p.Reason != "" {
		upd = upd.Set(expression.Name("reason"), expression.Value(p.Reason))
	} else {
		upd = upd.Remove(expression.Name("reason"))
	}
	var end ending
	if over != nil {
		// The lease taken over ends here. Nobody is told the task is
		// available: it never was.
		end = ending{typ: EventTimeout, by: BySystem, reason: "lease expired", status: StatusInProgress}
		if over.leaseTimeValid(now) {
			end.typ, end.reason = EventAgentDeath, "holder's heartbeat expired"
		}
		upd = takeoverUpdate(upd, over, end, now)
	}
	old, applied, err := s.update(ctx, p.TaskID, cond, upd, types.ReturnValueAllOld)
	if err != nil || !applied {
		return Checkout{}, old, err
	}
	c := Checkout{
		TaskID: p.TaskID, AgentID: p.AgentID, AgentName: p.AgentName, RunID: p.RunID,
		Fence: old.Fence + 1, LockedAt: now, Timeout: p.Timeout, ExpiresAt: exp, Reason: p.Reason,
	}
	var evs []eventItem
	var notices []Notice
	if over != nil {
		// Like any ending write: archive again the previous ending and the
		// ended lease's checkout, then this ending.
		ev, _ := old.afterEnd(end, now).endEvent()
		evs = append(old.itemEvents(), ev)
		notices = append(notices, Notice{Kind: NoticeLeaseEnded, Event: ev.event()})
	}
	evs = append(evs, eventItem{
		TaskID: p.TaskID, Seq: old.ESeq + 2, Type: EventCheckout, AgentID: p.AgentID, RunID: p.RunID,
		Fence: c.Fence, At: ms(now), By: p.AgentID, Reason: p.Reason,
	})
	s.record(ctx, evs, nil, notices)
	return c, nil, nil
}

// Renew extends the caller's live lease to now + timeout (default: the
// lease's own timeout). A holder that is dead by heartbeat has lost its
// lease and cannot renew it.
func (s *Store) Renew(ctx context.Context, p RenewParams) (Checkout, error) {
	if err := checkID("task_id", p.TaskID); err != nil {
		return Checkout{}, err
	}
	if p.Timeout != 0 {
		if err := checkTimeout(p.Timeout); err != nil {
			return Checkout{}, err
		}
	}
	now := s.clock()
	hb, err := s.heartbeat(ctx, p.AgentID)
	if err != nil {
		return Checkout{}, err
	}
	if hb != nil && hb.ExpiresAt <= ms(now) {
		cur, err := s.getTask(ctx, p.TaskID)
		if err != nil {
			return Checkout{}, err
		}
		return Checkout{}, s.notHolder(ctx, cur, p.AgentID, p.RunID, p.Fence, now, hb)
	}
	cond := holderCond(p.AgentID, p.RunID, p.Fence, now)
	if hb != nil && hb.AliveSince > 0 {
		cond = cond.And(expression.Name("locked_at").GreaterThan(expression.Value(hb.AliveSince)))
	}
	upd := expression.Set(nameESeq, nameESeq.Plus(expression.Value(1)))
	if p.Timeout != 0 {
		upd = upd.Set(expression.Name("timeout_ms"), expression.Value(p.Timeout.Milliseconds())).
			Set(nameExpires, expression.Value(ms(now.Add(p.Timeout))))
	} else {
		upd = upd.Set(nameExpires, expression.Name("timeout_ms").Plus(expression.Value(ms(now))))
	}
	it, applied, err := s.update(ctx, p.TaskID, cond, upd, types.ReturnValueAllNew)
	if err != nil {
		return Checkout{}, err
	}
	if !applied {
		return Checkout{}, s.notHolder(ctx, it, p.AgentID, p.RunID, p.Fence, now, hb)
	}
	s.record(ctx, []eventItem{{
		TaskID: p.TaskID, Seq: it.ESeq, Type: EventRenew, AgentID: p.AgentID, RunID: it.RunID,
		Fence: it.Fence, At: ms(now), By: p.AgentID,
	}}, nil, nil)
	return it.checkout(), nil
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
	return &NotHolderError{Holder: cur.checkout()}
}

// Release ends the caller's lease and frees the task: it goes back to todo,
// each watcher gets one message, and the notifier hears TaskAvailable. With
// Force it ends whoever's lease is live (the caller must be an admin).
func (s *Store) Release(ctx context.Context, p ReleaseParams) (Released, error) {
	if err := checkID("task_id", p.TaskID); err != nil {
		return Released{}, err
	}
	if err := checkText("reason", p.Reason, MaxReasonLen); err != nil {
		return Released{}, err
	}
	now := s.clock()
	cond := holderCond(p.AgentID, p.RunID, p.Fence, now)
	typ := EventRelease
	if p.Force {
		cond = expression.AttributeExists(nameHolder).And(nameExpires.GreaterThan(expression.Value(ms(now))))
		typ = EventForceRelease
	}
	it, applied, err := s.endLease(ctx, p.TaskID, cond, ending{typ: typ, by: p.AgentID, reason: p.Reason, status: StatusTodo}, now)
	if err != nil {
		return Released{}, err
	}
	if !applied {
		if replayed, err := s.replayEnd(ctx, it, typ, p.AgentID, p.RunID, p.Fence); replayed || err != nil {
			return released(it), err
		}
		if p.Force {
			if it == nil {
				return Released{}, ErrTaskNotFound
			}
			return Released{}, ErrNotCheckedOut
		}
		return Released{}, s.notHolder(ctx, it, p.AgentID, p.RunID, p.Fence, now, nil)
	}
	return released(it), nil
}

// released is the answer to a release that ended the lease recorded on it.
func released(it *taskItem) Released {
	end, _ := it.endEvent()
	return Released{TaskID: it.TaskID, ReleasedBy: end.By, Held: time.Duration(*end.HeldMS) * time.Millisecond}
}

// Complete ends the caller's lease and marks the task done. Nobody is told:
// the task will not be available again.
func (s *Store) Complete(ctx context.Context, p CompleteParams) (Task, error) {
	if err := checkID("task_id", p.TaskID); err != nil {
		return Task{}, err
	}
	now := s.clock()
	e := ending{typ: EventComplete, by: p.AgentID, status: StatusDone}
	it, applied, err := s.endLease(ctx, p.TaskID, holderCond(p.AgentID, p.RunID, p.Fence, now), e, now)
	if err != nil {
		return Task{}, err
	}
	if !applied {
		if replayed, err := s.replayEnd(ctx, it, EventComplete, p.AgentID, p.RunID, p.Fence); replayed || err != nil {
			return it.task(false), err
		}
		return Task{}, s.notHolder(ctx, it, p.AgentID, p.RunID, p.Fence, now, nil)
	}
	return it.task(false), nil
}

// Claim checks out the oldest todo task that nobody holds. Candidates come
// from the by_status index, oldest first; each is taken with the same
// conditional write as Checkout, so a candidate someone else took in the
// meantime is skipped, never double-granted. A caller that retries with the
// same run id gets the lease that run already holds.
func (s *Store) Claim(ctx context.Context, p ClaimParams) (Checkout, error) {
	cp := CheckoutParams{
		AgentID: p.AgentID, AgentName: p.AgentName, RunID: p.RunID, Timeout: p.Timeout, Reason: p.Reason,
		ExpectedStatuses: []Status{StatusTodo}, TaskID: "claim",
	}
	retry := p.RunID != ""
	if err := s.checkCheckout(&cp); err != nil {
		return Checkout{}, err
	}
	if retry {
		held, err := s.ListCheckouts(ctx, p.AgentID)
		if err != nil {
			return Checkout{}, err
		}
		for _, c := range held {
			if c.RunID == cp.RunID {
				return c, nil
			}
		}
	}
	now := s.clock()
	keyCond := expression.Key("status").Equal(expression.Value(string(StatusTodo)))
	expr, _ := expression.NewBuilder().WithKeyCondition(keyCond).Build()
	pager := dynamodb.NewQueryPaginator(s.db, &dynamodb.QueryInput{
		TableName: &s.tasks, IndexName: aws.String(schema.TasksByStatus),
		KeyConditionExpression:    expr.KeyCondition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
		Limit:                     aws.Int32(25),
	})
	try := func(items []taskItem) (Checkout, bool, error) {
		for _, it := range items {
			if it.leaseTimeValid(now) {
				continue
			}
			cp.TaskID = it.TaskID
			var over *taskItem
			if it.hasLease() {
				over = &it // expired: taken over like any ended lease
			}
			c, cur, err := s.grant(ctx, cp, now, over)
			if err != nil || cur == nil && c.Fence != 0 {
				return c, err == nil, err
			}
		}
		return Checkout{}, false, nil
	}
	for tried := 0; pager.HasMorePages() && tried < 200; {
		page, err := pager.NextPage(ctx)
		if err != nil {
			return Checkout{}, fmt.Errorf("claim: %w", err)
		}
		var items []taskItem
		if err := attributevalue.UnmarshalListOfMaps(page.Items, &items); err != nil {
			return Checkout{}, err
		}
		tried += len(items)
		if c, ok, err := try(items); ok || err != nil {
			return c, err
		}
	}
	// No free todo task. A task whose lease expired is free too, even
	// before the sweep moves it back to todo: try those, oldest first.
	var expired []taskItem
	for shard := range schema.Shards {
		keyCond := expression.Key("lease_shard").Equal(expression.Value(strconv.Itoa(shard))).
			And(expression.Key("lease_expires").LessThanEqual(expression.Value(ms(now))))
		items, err := s.queryTasks(ctx, schema.TasksByLeaseExpiry, keyCond)
		if err != nil {
			return Checkout{}, err
		}
		expired = append(expired, items...)
	}
	sort.Slice(expired, func(i, j int) bool { return expired[i].CreatedKey < expired[j].CreatedKey })
	if c, ok, err := try(expired); ok || err != nil {
		return c, err
	}
	return Checkout{}, ErrNoTaskAvailable
}

// Watch puts agentID on the task's watch list: it gets one task_available
// message the next time the task is freed.
func (s *Store) Watch(ctx context.Context, taskID, agentID string) error {
	if err := checkID("task_id", taskID); err != nil {
		return err
	}
	cond := expression.AttributeExists(expression.Name("task_id"))
	upd := expression.Add(expression.Name("watchers"), expression.Value(&types.AttributeValueMemberSS{Value: []string{agentID}}))
	_, applied, err := s.update(ctx, taskID, cond, upd, types.ReturnValueNone)
	if err != nil {
		return err
	}
	if !applied {
		return ErrTaskNotFound
	}
	return nil
}
