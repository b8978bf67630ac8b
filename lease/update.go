package lease

import (
	"context"
	"fmt"
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
func (s *Store) UpdateTask(ctx context.Context, p UpdateTaskParams) (Task, error) {
	if err := CheckID("task_id", p.TaskID); err != nil {
		return Task{}, err
	}
	if err := CheckTaskFields(p.Title, p.Description, p.Queue, p.Priority, p.Metadata); err != nil {
		return Task{}, err
	}
	if err := CheckPatchStatus(p.Status); err != nil {
		return Task{}, err
	}
	want := p.IfVersion
	for range maxAttempts {
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
		if cur.hasLease() && !live && p.Status != nil {
			// A lease that has ended (expired, or its holder dead) and not
			// been swept: end it as the sweep would, so that it has its
			// event, then decide the status change on the task freed.
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
		upd, changed, err := s.patch(cur, live, p, now)
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
		newBody := body.Description != cur.Description || body.Metadata != cur.Metadata
		if !changed && !newBody {
			return cur.task(live), nil
		}
		token := cur.BodyToken
		if newBody {
			next := taskItem{TaskID: cur.TaskID, Description: body.Description, Metadata: body.Metadata}
			if b := splitBody(&next); b != nil {
				if err := s.putBody(ctx, b); err != nil {
					return Task{}, err
				}
				upd = upd.Set(expression.Name("body"), expression.Value(next.BodyToken))
			} else {
				upd = upd.Remove(expression.Name("body"))
			}
			// A task item from before bodies held them itself.
			upd = upd.Remove(expression.Name("description")).Remove(expression.Name("metadata"))
			token = next.BodyToken
		}
		cond := nameVersion.Equal(expression.Value(cur.Version))
		if cur.Version == 0 {
			cond = expression.AttributeNotExists(nameVersion)
		}
		after, applied, err := s.update(ctx, p.TaskID, cond, upd, types.ReturnValueAllNew)
		if err != nil {
			return Task{}, err
		}
		if !applied {
			if newBody {
				s.dropBody(ctx, p.TaskID, token)
			}
			if after == nil {
				return Task{}, ErrTaskNotFound
			}
			if want != 0 {
				return Task{}, ErrVersionMismatch
			}
			continue
		}
		if newBody && cur.BodyToken != token {
			s.dropBody(ctx, p.TaskID, cur.BodyToken)
		}
		after.Description, after.Metadata = body.Description, body.Metadata
		if after.claimable() {
			s.claims.wake()
		}
		live = after.hasLease() && live
		return after.task(live), nil
	}
	return Task{}, fmt.Errorf("update task %s: too much contention", p.TaskID)
}

// endEnded ends a lease that has ended by time or by its holder's death but
// is still on the item, with the sweep's event, pinned to that exact lease.
// ended is false when another write moved the task first.
func (s *Store) endEnded(ctx context.Context, cur *taskItem, now time.Time) (ended bool, err error) {
	typ, reason := EventAgentDeath, reasonHeartbeat
	if cur.LockedAt <= s.deaths.removedUpTo(cur.Holder) {
		reason = reasonRemoved
	}
	cond := nameHolder.Equal(expression.Value(cur.Holder)).
		And(nameFence.Equal(expression.Value(cur.Fence)), nameESeq.Equal(expression.Value(cur.ESeq)))
	if !cur.leaseTimeValid(now) {
		typ, reason = EventTimeout, "lease expired"
		cond = cond.And(nameExpires.LessThanEqual(expression.Value(ms(now))))
	}
	_, _, ended, err = s.endLease(ctx, cur.TaskID, cond, ending{typ: typ, by: BySystem, reason: reason, status: StatusTodo}, now)
	return ended, err // not applied: someone else moved it; the caller reads again
}

// patch builds the update of a PATCH on cur (whose lease, if any, is live
// when live says so), or changed=false when it changes nothing.
func (s *Store) patch(cur *taskItem, live bool, p UpdateTaskParams, now time.Time) (expression.UpdateBuilder, bool, error) {
	var upd expression.UpdateBuilder
	changed := false
	// The status the task has, an ended lease aside (the caller has ended
	// any before a status change).
	status := cur.task(live).Status
	claimable := status == StatusTodo && !cur.hasLease()
	if p.Status != nil && *p.Status != status {
		switch to := *p.Status; {
		case to == StatusCancelled && status == StatusDone,
			to == StatusTodo && status == StatusInProgress:
			return upd, false, &TransitionError{TaskID: cur.TaskID, From: status, To: to}
		case to == StatusCancelled && live:
			if cur.Holder != p.AgentID && !p.Admin {
				return upd, false, &NotHolderError{Holder: cur.checkout()}
			}
			// The ending write: the lease moves to end_*, the task to
			// cancelled and out of the claim index; its event is cancel.
			upd = endUpdate(cur.TaskID, ending{typ: EventCancel, by: p.AgentID, reason: "cancelled", status: StatusCancelled}, now, s.shards)
			claimable = false
		case to == StatusCancelled:
			upd = setStatus(upd, cur.TaskID, StatusCancelled, s.shards.Status).
				Set(expression.Name("completed_at"), expression.Value(ms(now))).
				Remove(nameClaimShard)
			claimable = false
		default: // todo, from done or cancelled: reopen
			upd = setStatus(upd, cur.TaskID, StatusTodo, s.shards.Status).
				Remove(expression.Name("completed_at"))
			claimable = true
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
	queue, prio := cur.queue(), cur.priority()
	if p.Queue != nil && (*p.Queue != queue || cur.Queue == "") {
		queue = *p.Queue
		set("queue", queue)
	}
	if p.Priority != nil && (*p.Priority != prio || cur.Priority == nil) {
		prio = *p.Priority
		set("priority", prio)
	}
	// A task keeps its claim shard while it stays in its queue, whatever
	// the claim shard count has become since it was written.
	home, key := cur.ClaimHome, claimKey(prio, cur.CreatedAt, cur.TaskID)
	if !strings.HasPrefix(home, queue+"#") {
		home = claimHome(queue, cur.TaskID, s.shards.Claim)
	}
	if home != cur.ClaimHome || key != cur.ClaimKey {
		set("claim_home", home)
		set("claim_key", key)
	}
	if claimable && changed {
		set("claim_shard", home)
	}
	return upd, changed, nil
}
