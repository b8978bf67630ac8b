package lease

import (
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// endRecord is the last lease that an ending write ended (release,
// completion, force release, or the sweep's timeout or agent_death): the
// lease as it was, moved out of the lease attributes by that write, and how
// it ended. It gives the ending's event, and it lets a holder retrying its
// release or completion be answered as its first attempt was.
type endRecord struct {
	EndSeq         int64     `dynamodbav:"end_seq,omitempty"`
	EndType        EventType `dynamodbav:"end_type,omitempty"`
	EndAgent       string    `dynamodbav:"end_agent,omitempty"`
	EndRun         string    `dynamodbav:"end_run,omitempty"`
	EndFence       int64     `dynamodbav:"end_fence,omitempty"`
	EndLocked      int64     `dynamodbav:"end_locked,omitempty"`
	EndExpires     int64     `dynamodbav:"end_expires,omitempty"`
	EndAt          int64     `dynamodbav:"end_at,omitempty"`
	EndBy          string    `dynamodbav:"end_by,omitempty"`
	EndReason      string    `dynamodbav:"end_reason,omitempty"`
	EndLeaseSeq    int64     `dynamodbav:"end_lease_seq,omitempty"`
	EndLeaseReason string    `dynamodbav:"end_lease_reason,omitempty"`
}

// prevRecord is the lease a checkout took over (expired, or its holder
// dead), copied by the checkout's own write; prev_agent is NULL when the
// checkout found the task free. With the lease it replaced on the item, the
// write carries both of its events: the old lease's end and the new
// checkout.
type prevRecord struct {
	PrevAgent   string    `dynamodbav:"prev_agent,omitempty"`
	PrevRun     string    `dynamodbav:"prev_run,omitempty"`
	PrevFence   int64     `dynamodbav:"prev_fence,omitempty"`
	PrevLocked  int64     `dynamodbav:"prev_locked,omitempty"`
	PrevExpires int64     `dynamodbav:"prev_expires,omitempty"`
	PrevEnd     EventType `dynamodbav:"prev_end,omitempty"`
}

// ending says how a lease ends.
type ending struct {
	typ    EventType
	by     string
	reason string
	status Status // todo when the task is freed, done when completed
}

// null is DynamoDB's NULL, for copies of attributes that may be missing.
var null = expression.Value(&types.AttributeValueMemberNULL{Value: true})

func copyOf(name string) expression.OperandBuilder {
	return expression.IfNotExists(expression.Name(name), null)
}

// endUpdate is the update of a write that ends the lease on a task: it moves
// the lease into the end_* attributes (SET end_agent = holder ... REMOVE
// holder), records the transition (last_op, last_at, eseq), drops the watch
// list (the change stream hands the old one to the messages) and sets the
// task's status. afterEnd mirrors it.
//
// An ending that leaves the task todo puts it back in the claim index (SET
// claim_shard = claim_home, the task's own queue and shard; a task written
// before queues has none and goes to the default queue); any other ending
// leaves it out.
func endUpdate(taskID string, e ending, now time.Time) expression.UpdateBuilder {
	u := expression.Set(nameStatus, expression.Value(string(e.status))).
		Set(nameESeq, nameESeq.Plus(expression.Value(1))).
		Set(expression.Name("last_op"), expression.Value(string(e.typ))).
		Set(expression.Name("last_at"), expression.Value(ms(now))).
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
		Set(expression.Name("end_lease_reason"), copyOf("reason"))
	if e.reason != "" {
		u = u.Set(expression.Name("end_reason"), expression.Value(e.reason))
	} else {
		u = u.Remove(expression.Name("end_reason"))
	}
	if e.status == StatusDone || e.status == StatusCancelled {
		u = u.Set(expression.Name("completed_at"), expression.Value(ms(now)))
	}
	if e.status == StatusTodo {
		u = u.Set(nameClaimShard, expression.IfNotExists(expression.Name("claim_home"), expression.Value(claimHome(DefaultQueue, taskID))))
	} else {
		u = u.Remove(nameClaimShard)
	}
	return clearLease(u).Remove(expression.Name("watchers")).Remove(expression.Name("lease_seq"))
}

// afterEnd is the item as endUpdate leaves this one.
func (t *taskItem) afterEnd(e ending, now time.Time) *taskItem {
	old := t
	after := *old
	t = &after
	t.Status = e.status
	t.ESeq = old.ESeq + 1
	t.LastOp, t.LastAt = e.typ, ms(now)
	t.Version = old.Version + 1
	t.ClaimShard = ""
	if e.status == StatusTodo {
		t.ClaimShard = old.ClaimHome
		if t.ClaimShard == "" {
			t.ClaimShard = claimHome(DefaultQueue, old.TaskID)
		}
	}
	t.endRecord = endRecord{
		EndSeq: old.ESeq + 1, EndType: e.typ, EndAgent: old.Holder, EndRun: old.RunID,
		EndFence: old.Fence, EndLocked: old.LockedAt, EndExpires: old.LeaseExpires, EndAt: ms(now),
		EndBy: e.by, EndReason: e.reason, EndLeaseSeq: old.LeaseSeq, EndLeaseReason: old.Reason,
	}
	if e.status == StatusDone || e.status == StatusCancelled {
		t.CompletedAt = ms(now)
	}
	t.Holder, t.HolderName, t.RunID, t.LockedAt, t.LeaseExpires, t.TimeoutMS, t.Reason, t.LeaseShard = "", "", "", 0, 0, 0, "", ""
	t.Watchers, t.LeaseSeq = nil, 0
	return t
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

// endEvent is the event of the last lease an ending write ended.
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

// endedCheckout is the last lease an ending write ended, as it was.
func (t *taskItem) endedCheckout() Checkout {
	r := t.endRecord
	return Checkout{
		TaskID: t.TaskID, AgentID: r.EndAgent, AgentName: r.EndAgent, RunID: r.EndRun, Fence: r.EndFence,
		LockedAt: fromMS(r.EndLocked), ExpiresAt: fromMS(r.EndExpires),
		Timeout: fromMS(r.EndExpires).Sub(fromMS(r.EndLocked)), Reason: r.EndLeaseReason,
		Title: t.Title, Queue: t.queue(), Priority: t.priority(),
	}
}

// replacedCheckout is the lease the latest checkout took over, as it was.
func (t *taskItem) replacedCheckout() Checkout {
	r := t.prevRecord
	return Checkout{
		TaskID: t.TaskID, AgentID: r.PrevAgent, AgentName: r.PrevAgent, RunID: r.PrevRun, Fence: r.PrevFence,
		LockedAt: fromMS(r.PrevLocked), ExpiresAt: fromMS(r.PrevExpires),
		Timeout: fromMS(r.PrevExpires).Sub(fromMS(r.PrevLocked)),
	}
}

// itemEvent is an event that a task item's latest write recorded. frees
// says the task became available by it, so watchers are told.
type itemEvent struct {
	eventItem
	frees bool
}

// latestEvents are the events of the item's latest transition, which its
// one write recorded: a checkout (with the end of the lease it took over,
// if any), a renewal, or an ending. The change stream archives them; Events
// merges them in while their archive write is in flight.
func (t *taskItem) latestEvents() []itemEvent {
	switch t.LastOp {
	case "":
		return nil
	case EventCheckout:
		var out []itemEvent
		if t.PrevAgent != "" {
			typ, reason := t.PrevEnd, "lease expired"
			if typ == EventAgentDeath {
				reason = "holder's heartbeat expired"
			}
			held := heldMS(typ, t.PrevLocked, t.PrevExpires, t.LockedAt)
			out = append(out, itemEvent{eventItem: eventItem{
				TaskID: t.TaskID, Seq: t.ESeq - 1, Type: typ, AgentID: t.PrevAgent, RunID: t.PrevRun,
				Fence: t.PrevFence, At: t.LockedAt, HeldMS: &held, By: BySystem, Reason: reason,
			}})
		}
		if t.hasLease() {
			out = append(out, itemEvent{eventItem: eventItem{
				TaskID: t.TaskID, Seq: t.ESeq, Type: EventCheckout, AgentID: t.Holder, RunID: t.RunID,
				Fence: t.Fence, At: t.LockedAt, By: t.Holder, Reason: t.Reason,
			}})
		}
		return out
	case EventRenew:
		if !t.hasLease() {
			return nil
		}
		return []itemEvent{{eventItem: eventItem{
			TaskID: t.TaskID, Seq: t.ESeq, Type: EventRenew, AgentID: t.Holder, RunID: t.RunID,
			Fence: t.Fence, At: t.LastAt, By: t.Holder,
		}}}
	}
	if ev, ok := t.endEvent(); ok && ev.Seq == t.ESeq {
		// A cancel frees the task of its lease: watchers are told, with
		// reason cancel, though the task is not claimable.
		return []itemEvent{{eventItem: ev, frees: ev.Type != EventComplete}}
	}
	return nil
}
