package lease

import (
	"context"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// endRecord is the last lease that ended on a task, kept on the task item by
// the very write that ended it: the lease as it was (moved out of the lease
// attributes) and how it ended. From it the ending event and the checkout
// event of that lease can always be rebuilt, so neither depends on the audit
// batch that follows the write: if that batch is lost (a crash, an answer
// lost on the network), Events still shows both, the next ending write
// archives them again, and a holder retrying its release or completion is
// answered as the first attempt would have been.
type endRecord struct {
	EndSeq         int64            `dynamodbav:"end_seq,omitempty"`
	EndType        EventType        `dynamodbav:"end_type,omitempty"`
	EndAgent       string           `dynamodbav:"end_agent,omitempty"`
	EndRun         string           `dynamodbav:"end_run,omitempty"`
	EndFence       int64            `dynamodbav:"end_fence,omitempty"`
	EndLocked      int64            `dynamodbav:"end_locked,omitempty"`
	EndExpires     int64            `dynamodbav:"end_expires,omitempty"`
	EndAt          int64            `dynamodbav:"end_at,omitempty"`
	EndBy          string           `dynamodbav:"end_by,omitempty"`
	EndReason      string           `dynamodbav:"end_reason,omitempty"`
	EndLeaseSeq    int64            `dynamodbav:"end_lease_seq,omitempty"`
	EndLeaseReason string           `dynamodbav:"end_lease_reason,omitempty"`
	EndWatchers    map[string]int64 `dynamodbav:"end_watchers,omitempty"`
}

// ending says how a lease ends.
type ending struct {
	typ    EventType
	by     string
	reason string
	status Status // todo when the task is freed, done when completed
}

// endUpdate is the update of a write that ends the lease on a task. It moves
// the lease into the end_* attributes (SET end_agent = holder ... REMOVE
// holder), records how it ended, takes the watch list (into end_watchers,
// for the messages), and sets the task's status. Every attribute it writes
// is mirrored by afterEnd.
func endUpdate(e ending, now time.Time) expression.UpdateBuilder {
	null := expression.Value(&types.AttributeValueMemberNULL{Value: true})
	copyOf := func(name string) expression.OperandBuilder {
		return expression.IfNotExists(expression.Name(name), null)
	}
	u := expression.Set(nameStatus, expression.Value(string(e.status))).
		Set(nameESeq, nameESeq.Plus(expression.Value(1))).
		Set(expression.Name("end_seq"), nameESeq.Plus(expression.Value(1))).
		Set(expression.Name("end_type"), expression.Value(string(e.typ))).
		Set(expression.Name("end_agent"), nameHolder).
		Set(expression.Name("end_run"), expression.Name("run_id")).
		Set(expression.Name("end_fence"), nameFence).
		Set(expression.Name("end_locked"), expression.Name("locked_at")).
		Set(expression.Name("end_expires"), nameExpires).
		Set(expression.Name("end_at"), expression.Value(ms(now))).
		Set(expression.Name("end_by"), expression.Value(e.by)).
		Set(expression.Name("end_lease_seq"), copyOf("lease_seq")).
		Set(expression.Name("end_lease_reason"), copyOf("reason")).
		Set(expression.Name("end_watchers"), copyOf("watchers"))
	if e.reason != "" {
		u = u.Set(expression.Name("end_reason"), expression.Value(e.reason))
	} else {
		u = u.Remove(expression.Name("end_reason"))
	}
	if e.status == StatusDone {
		u = u.Set(expression.Name("completed_at"), expression.Value(ms(now)))
	}
	return clearLease(u).Remove(expression.Name("watchers")).Remove(expression.Name("lease_seq"))
}

// takeoverUpdate adds to a grant's update the ending of the lease it takes
// over, old, which the grant's condition pins (holder, fence and expiry):
// the same end_* attributes as endUpdate, from old's known values, while the
// grant's own SETs replace the lease. The watch list stays: the task never
// became free.
func takeoverUpdate(u expression.UpdateBuilder, old *taskItem, e ending, now time.Time) expression.UpdateBuilder {
	r := old.afterEnd(e, now).endRecord
	set := func(name string, v any) { u = u.Set(expression.Name(name), expression.Value(v)) }
	set("end_seq", r.EndSeq)
	set("end_type", string(r.EndType))
	set("end_agent", r.EndAgent)
	set("end_run", r.EndRun)
	set("end_fence", r.EndFence)
	set("end_locked", r.EndLocked)
	set("end_expires", r.EndExpires)
	set("end_at", r.EndAt)
	set("end_by", r.EndBy)
	set("end_reason", r.EndReason)
	for name, v := range map[string]int64{"end_lease_seq": r.EndLeaseSeq} {
		if v != 0 {
			set(name, v)
		} else {
			u = u.Remove(expression.Name(name))
		}
	}
	if r.EndLeaseReason != "" {
		set("end_lease_reason", r.EndLeaseReason)
	} else {
		u = u.Remove(expression.Name("end_lease_reason"))
	}
	return u.Remove(expression.Name("end_watchers"))
}

// afterEnd is the item as endUpdate leaves old.
func (old *taskItem) afterEnd(e ending, now time.Time) *taskItem {
	t := *old
	t.Status = e.status
	t.ESeq = old.ESeq + 1
	t.endRecord = endRecord{
		EndSeq: old.ESeq + 1, EndType: e.typ, EndAgent: old.Holder, EndRun: old.RunID,
		EndFence: old.Fence, EndLocked: old.LockedAt, EndExpires: old.LeaseExpires, EndAt: ms(now),
		EndBy: e.by, EndReason: e.reason, EndLeaseSeq: old.LeaseSeq, EndLeaseReason: old.Reason,
		EndWatchers: old.Watchers,
	}
	if e.status == StatusDone {
		t.CompletedAt = ms(now)
	}
	t.Holder, t.HolderName, t.RunID, t.LockedAt, t.LeaseExpires, t.TimeoutMS, t.Reason, t.LeaseShard = "", "", "", 0, 0, 0, "", ""
	t.Watchers, t.LeaseSeq = nil, 0
	return &t
}

// heldMS is how long a lease locked at locked and ending by typ at `at` was
// held: a lease that timed out ended when it expired, not when it was noticed.
func heldMS(typ EventType, locked, expires, at int64) int64 {
	end := at
	if typ == EventTimeout && expires > 0 && expires < end {
		end = expires
	}
	return max(end-locked, 0)
}

// endEvent is the event of the last ended lease.
func (t *taskItem) endEvent() (eventItem, bool) {
	r := t.endRecord
	if r.EndSeq == 0 {
		return eventItem{}, false
	}
	held := heldMS(r.EndType, r.EndLocked, r.EndExpires, r.EndAt)
	return eventItem{
		TaskID: t.TaskID, Seq: r.EndSeq, Type: r.EndType, AgentID: r.EndAgent, RunID: r.EndRun,
		Fence: r.EndFence, At: r.EndAt, HeldMS: &held, By: r.EndBy, Reason: r.EndReason,
	}, true
}

// endedCheckout is the last ended lease, as it was.
func (t *taskItem) endedCheckout() Checkout {
	r := t.endRecord
	return Checkout{
		TaskID: t.TaskID, AgentID: r.EndAgent, AgentName: r.EndAgent, RunID: r.EndRun, Fence: r.EndFence,
		LockedAt: fromMS(r.EndLocked), ExpiresAt: fromMS(r.EndExpires),
		Timeout: fromMS(r.EndExpires).Sub(fromMS(r.EndLocked)), Reason: r.EndLeaseReason,
	}
}

// endCheckoutEvent is the checkout event of the last ended lease.
func (t *taskItem) endCheckoutEvent() (eventItem, bool) {
	r := t.endRecord
	if r.EndSeq == 0 || r.EndLeaseSeq == 0 {
		return eventItem{}, false
	}
	return eventItem{
		TaskID: t.TaskID, Seq: r.EndLeaseSeq, Type: EventCheckout, AgentID: r.EndAgent, RunID: r.EndRun,
		Fence: r.EndFence, At: r.EndLocked, By: r.EndAgent, Reason: r.EndLeaseReason,
	}, true
}

// leaseCheckoutEvent is the checkout event of the lease on the item.
func (t *taskItem) leaseCheckoutEvent() (eventItem, bool) {
	if !t.hasLease() || t.LeaseSeq == 0 {
		return eventItem{}, false
	}
	return eventItem{
		TaskID: t.TaskID, Seq: t.LeaseSeq, Type: EventCheckout, AgentID: t.Holder, RunID: t.RunID,
		Fence: t.Fence, At: t.LockedAt, By: t.Holder, Reason: t.Reason,
	}, true
}

// itemEvents are the events the item itself can rebuild.
func (t *taskItem) itemEvents() []eventItem {
	var out []eventItem
	for _, f := range []func() (eventItem, bool){t.endCheckoutEvent, t.endEvent, t.leaseCheckoutEvent} {
		if ev, ok := f(); ok {
			out = append(out, ev)
		}
	}
	return out
}

// endLease makes an ending write on taskID under cond and records it: the
// previous ending and this lease's checkout event again (their keys are
// fixed, so rewriting them is harmless and repairs a lost batch), this
// ending's event, one message per watcher when the task is freed, and the
// notices. It returns the item as the write left it, or applied=false and
// the item as it is when cond failed.
func (s *Store) endLease(ctx context.Context, taskID string, cond expression.ConditionBuilder, e ending, now time.Time) (*taskItem, bool, error) {
	old, applied, err := s.update(ctx, taskID, cond, endUpdate(e, now), types.ReturnValueAllOld)
	if err != nil || !applied {
		return old, false, err
	}
	after := old.afterEnd(e, now)
	evs := old.itemEvents() // the previous ending, and this lease's checkout
	s.announce(ctx, after, evs)
	return after, true, nil
}

// announce records the ending on after (an item as endUpdate left it),
// together with extra events to archive again.
func (s *Store) announce(ctx context.Context, after *taskItem, extra []eventItem) {
	end, _ := after.endEvent()
	evs := append(extra, end)
	e := end.event()
	notices := []Notice{{Kind: NoticeLeaseEnded, Event: e}}
	var msgs []messageItem
	if end.Type != EventComplete { // every other ending frees the task
		notices = append(notices, Notice{Kind: NoticeTaskAvailable, Event: e})
		for _, w := range s.currentWatchers(ctx, after.EndWatchers) {
			msgs = append(msgs, messageItem{
				AgentID: w, Type: MessageTaskAvailable, TaskID: end.TaskID, Reason: string(end.Type), At: end.At,
				// Deterministic: a retried write lands on the same message.
				MessageID: messageID(end),
				TTL:       fromMS(end.At).Add(messageRetention).Unix(),
			})
		}
	}
	s.record(ctx, evs, msgs, notices)
}

// currentWatchers returns the watchers that are still the agents who asked:
// not removed since, and not an id removed and registered again after the
// watch was placed (the new agent starts clean). It reads their heartbeat
// items in one batch; if that read fails it tells them all, since a message
// too many is better than one lost.
func (s *Store) currentWatchers(ctx context.Context, watchers map[string]int64) []string {
	ids := slices.Sorted(maps.Keys(watchers))
	if len(ids) == 0 {
		return nil
	}
	hbs, err := s.heartbeatsOf(ctx, ids)
	if err != nil {
		s.log.WarnContext(ctx, "read watchers' heartbeats; telling them all", "err", err)
		return ids
	}
	return slices.DeleteFunc(ids, func(id string) bool {
		hb := hbs[id]
		return hb != nil && (hb.Removed || hb.RegisteredAt > watchers[id])
	})
}

// replayEnd answers a holder's release or completion that finds its lease
// already ended by its own earlier attempt (the answer to that attempt was
// lost, and this is the retry). The caller must have named the lease (run
// id or fence), so that a stray request is not taken for a retry. If the
// ending's event was never archived, the first attempt's audit batch was
// lost too, and it is made now; otherwise nothing is written again, so no
// watcher is told twice.
func (s *Store) replayEnd(ctx context.Context, cur *taskItem, typ EventType, agentID, runID string, fence int64) (bool, error) {
	if cur == nil {
		return false, nil
	}
	r := cur.endRecord
	if (runID == "" && fence == 0) || r.EndSeq == 0 || r.EndType != typ || r.EndBy != agentID ||
		typ != EventForceRelease && r.EndAgent != agentID ||
		runID != "" && r.EndRun != runID || fence != 0 && r.EndFence != fence {
		return false, nil
	}
	key := map[string]types.AttributeValue{
		"task_id": &types.AttributeValueMemberS{Value: cur.TaskID},
		"seq":     &types.AttributeValueMemberN{Value: strconv.FormatInt(r.EndSeq, 10)},
	}
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &s.events, Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return false, err
	}
	if len(out.Item) == 0 {
		var extra []eventItem
		if ev, ok := cur.endCheckoutEvent(); ok {
			extra = append(extra, ev)
		}
		s.announce(ctx, cur, extra)
	}
	return true, nil
}
