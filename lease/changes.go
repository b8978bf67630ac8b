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

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Change is one change of a task item, as the table's change stream carries
// it (NEW_AND_OLD_IMAGES): the item before and after one write. Old is nil
// for a new item, New nil for a deleted one.
type Change struct {
	Old, New map[string]types.AttributeValue
	// Shard and Seq are the stream shard the change came from and its
	// sequence number there, which make the queue counters exact under
	// redelivery (queuecounts.go). A change without them is not counted.
	Shard, Seq string
	// Landed is when the write landed in the table, as its stream record
	// says (ApproximateCreationDateTime: whole seconds, rounded down);
	// zero when not known. With Config.FeedAtLanding, the change's events
	// are keyed in the fleet feed no earlier than that (feed.go).
	Landed time.Time
}

// ApplyChanges carries out the consequences of a batch of task changes, in
// order: it archives every event the writes recorded, writes each watcher's
// task_available message for every freeing and the former holder's
// lease_lost message for every lease ended without its consent (see lost),
// and then gives the notices to the notifier: ApplyConsequences and
// PublishNotices in one call, for one consumer of the stream that does
// both (the tests'). The deployed functions and the local server run the
// two as consumers of their own, so that a slow notifier holds up nothing
// else.
//
// It is idempotent, so a batch delivered again (the stream delivers each
// change at least once) writes nothing new: events are keyed by (task_id,
// seq), a message's id derives from its ending and is written only if
// absent (a message its agent deleted stays marked, not gone), and every
// notice carries a deterministic id for consumers to drop duplicates. An
// error means the batch must be delivered again; nothing is lost by that.
func (s *Store) ApplyChanges(ctx context.Context, changes []Change) error {
	return s.applyChanges(ctx, changes, true)
}

// ApplyConsequences is ApplyChanges without the notices: the archive, the
// feed, the queue counts, the messages and the unblocking. The stream
// function (in AWS) and the local server run it as one consumer of the
// stream, and PublishNotices as another with its own position (the
// notices function; a second poller), so that a webhook receiver that is
// slow or down, whose deliveries are retried for seconds, delays only the
// notices, never a watcher's message.
func (s *Store) ApplyConsequences(ctx context.Context, changes []Change) error {
	return s.applyChanges(ctx, changes, false)
}

// PublishNotices gives the notifier the notices of a batch of task
// changes, in order, as ApplyChanges does (the same notices, with the same
// ids and events), and writes nothing. Every notice is offered even when
// one fails; an error means the batch must be delivered again, and the
// notices that did go out then go out again under the same ids.
func (s *Store) PublishNotices(ctx context.Context, changes []Change) error {
	var notices []Notice
	for _, ch := range changes {
		old, cur, ok, err := decodeChange(ch)
		if err != nil {
			return err
		}
		if !ok {
			continue
		}
		for _, ev := range newEvents(&old, &cur) {
			if ev.errored {
				text, err := s.readError(ctx, ev.TaskID, ev.errorID)
				if err != nil {
					return err
				}
				ev.Error = text
			}
			notices = append(notices, eventNotices(ev, &cur)...)
		}
	}
	return s.notify(ctx, notices)
}

// ErrorsRead are the keys of the failed releases' errors that applying
// changes reads (ApplyConsequences, PublishNotices): DeleteStrayBodies
// keeps them (StrayBodiesParams.Unread) while a consumer of the stream has
// yet to apply the changes, as the notices of a stopped local server.
func ErrorsRead(changes []Change) ([]string, error) {
	var keys []string
	for _, ch := range changes {
		old, cur, ok, err := decodeChange(ch)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		for _, ev := range newEvents(&old, &cur) {
			if ev.errored {
				keys = append(keys, errorKey(ev.TaskID, ev.errorID))
			}
		}
	}
	return keys, nil
}

// decodeChange decodes a change's images; ok is false for a change of no
// transition: a deleted item (task items are never deleted), a watch, a
// new task, a task copied by Migrate.
func decodeChange(ch Change) (old, cur taskItem, ok bool, err error) {
	if ch.New == nil {
		return old, cur, false, nil
	}
	if err := attributevalue.UnmarshalMap(ch.New, &cur); err != nil {
		return old, cur, false, fmt.Errorf("decode change: %w", err)
	}
	if ch.Old != nil {
		if err := attributevalue.UnmarshalMap(ch.Old, &old); err != nil {
			return old, cur, false, fmt.Errorf("decode change of %s: %w", cur.TaskID, err)
		}
	}
	ok = !(cur.TaskID == "" || cur.ESeq <= old.ESeq || ch.Old == nil && cur.MigratedAt != 0)
	return old, cur, ok, nil
}

// newEvents are the events the change from old to cur recorded that old
// had not.
func newEvents(old, cur *taskItem) []itemEvent {
	return slices.DeleteFunc(cur.latestEvents(), func(ev itemEvent) bool { return ev.Seq <= old.ESeq })
}

// eventNotices are the notices of one recorded event (its Error read):
// LeaseEnded for every ending, LeaseLost for an ending without the
// holder's consent, and TaskAvailable (TaskFailed for a failure) for
// every freeing; a TaskAvailable says until when the task waits, as cur
// (the task after the change) shows it, as the watchers' messages do.
func eventNotices(ev itemEvent, cur *taskItem) []Notice {
	var out []Notice
	e := ev.event()
	if ev.endsLease() {
		out = append(out, Notice{ID: noticeID(NoticeLeaseEnded, e), Kind: NoticeLeaseEnded, Event: e, Takeover: ev.takeover})
		if lost(ev.eventItem) {
			out = append(out, Notice{ID: noticeID(NoticeLeaseLost, e), Kind: NoticeLeaseLost, Event: e, Takeover: ev.takeover})
		}
	}
	if ev.frees {
		kind := NoticeTaskAvailable
		if ev.Type == EventFailed {
			kind = NoticeTaskFailed
		}
		n := Notice{ID: noticeID(kind, e), Kind: kind, Event: e}
		if kind == NoticeTaskAvailable && cur.Status == StatusTodo && cur.NotBefore > ev.At {
			nb := fromMS(cur.NotBefore)
			n.NotBefore = &nb
		}
		out = append(out, n)
	}
	return out
}

// notify gives each notice to the notifier, every one even when one fails.
func (s *Store) notify(ctx context.Context, notices []Notice) error {
	var errs []error
	for _, n := range notices {
		if err := s.notifier.Notify(ctx, n); err != nil {
			errs = append(errs, fmt.Errorf("notify %s %s: %w", n.Kind, n.ID, err))
		}
	}
	return errors.Join(errs...)
}

func (s *Store) applyChanges(ctx context.Context, changes []Change, withNotices bool) error {
	var msgs []messageItem
	var notices []Notice
	fw := freeingWatches{s: s}
	var blockers blockerSteps // blockers completed or reopened, one step each
	var settle [][2]*taskItem // blocked tasks' changes: old (nil for new) and new
	var stranded []*taskItem  // delayed tasks left without their expiry entry
	ttl := s.clock().Add(s.retention).Unix()
	var archive []batchEvent
	for _, ch := range changes {
		old, cur, transition, err := decodeChange(ch)
		if err != nil {
			return err
		}
		if cur.TaskID != "" && cur.Status == StatusBlocked {
			var before *taskItem
			if ch.Old != nil {
				before = &old
			}
			settle = append(settle, [2]*taskItem{before, &cur})
		}
		if cur.strandedDelay() {
			stranded = append(stranded, &cur)
		}
		if ch.Old != nil && old.Status == StatusDone && cur.Status != StatusDone && cur.HasDependents {
			blockers.add(cur.TaskID, false)
		}
		if !transition {
			continue
		}
		for _, ev := range newEvents(&old, &cur) {
			ev.TTL = ttl
			if ev.errored {
				text, err := s.readError(ctx, ev.TaskID, ev.errorID)
				if err != nil {
					return err
				}
				ev.Error = text
			}
			if ev.Type == EventComplete && cur.HasDependents {
				blockers.add(ev.TaskID, true)
			}
			// A task left waiting (a failed release's retry delay) says
			// until when, so that its watchers come back then.
			var notBefore int64
			if ev.frees && cur.Status == StatusTodo && cur.NotBefore > ev.At {
				notBefore = cur.NotBefore
			}
			ev.Freeing, ev.NotBefore = ev.frees, notBefore
			archive = append(archive, batchEvent{ev.eventItem, max(old.LastAt, cur.LastAt, s.landed(ch))})
			if withNotices {
				notices = append(notices, eventNotices(ev, &cur)...)
			}
			takeover := ev.takeover
			if ev.endsLease() && lost(ev.eventItem) {
				lockedAt := old.LockedAt
				if takeover {
					lockedAt = cur.PrevLocked
				}
				// The message is the removed agent's when its id was
				// registered again at or after the lease was locked (see
				// removedUpTo): Inbox hides a message whose WatchedAt is
				// before the registration.
				lockedAt--
				msgs = append(msgs, messageItem{
					AgentID: ev.AgentID, MessageID: lostMessageID(ev.eventItem), Type: MessageLeaseLost,
					TaskID: ev.TaskID, Reason: string(lostReason(ev.eventItem)), At: ev.At, Fence: ev.Fence, RunID: ev.RunID,
					TTL: fromMS(ev.At).Add(messageRetention).Unix(), WatchedAt: lockedAt,
				})
			}
			if !ev.frees {
				continue
			}
			// The watches placed before this freeing (and places an
			// earlier freeing's batch left untold: see take), and the
			// watch list a task item from before watch items may still
			// carry. A task nobody has watched has no watches to read.
			rec := s.freedRecord(ev.eventItem, notBefore)
			tells := []freeingTell{{freed: rec, asked: map[string]int64{}}}
			if cur.Watched == nil || *cur.Watched {
				var err error
				if tells, err = fw.take(ctx, rec); err != nil {
					return err
				}
			}
			asked := tells[len(tells)-1].asked
			for id, at := range old.Watchers {
				if _, ok := asked[id]; !ok {
					asked[id] = at
				}
			}
			for _, t := range tells {
				watchers, err := s.currentWatchers(ctx, t.asked)
				if err != nil {
					return err
				}
				for _, w := range watchers {
					msgs = append(msgs, t.freed.message(w, t.asked[w]))
				}
			}
		}
	}
	if err := s.archiveEvents(ctx, archive); err != nil {
		return fmt.Errorf("archive events: %w", err)
	}
	if err := s.countQueues(ctx, slices.DeleteFunc(slices.Clone(changes), migrated)); err != nil {
		return err
	}
	if err := s.putMessages(ctx, msgs); err != nil {
		return err
	}
	if err := fw.drop(ctx); err != nil {
		return err
	}
	for _, b := range blockers {
		if err := s.passOnBlocker(ctx, b); err != nil {
			return err
		}
	}
	for _, ch := range settle {
		if err := s.settleChange(ctx, ch[0], ch[1]); err != nil {
			return fmt.Errorf("settle the blockers of %s: %w", ch[1].TaskID, err)
		}
	}
	for _, it := range stranded {
		if _, err := mendDelay(ctx, s.db, s.tasks, it, s.shards.Lease); err != nil {
			return err
		}
	}
	return s.notify(ctx, notices)
}

// batchEvent is an event of a batch of changes and when its change was
// recorded (feedFields).
type batchEvent struct {
	eventItem
	recordedAt int64
}

// archiveEvents archives a batch's events, keyed in the feed at when they
// were recorded, in one BatchWriteItem per 25; but each one late (feed.go,
// "Events archived late"), judged now, after the batch's reads, which may
// have taken seconds, is keyed when its own PutItem is sent: the puts go
// one after another, each maybe retried, behind a throttled table. The
// events of a task after a late one in the batch are archived as late
// ones too, after it, and every event of a task no earlier than the late
// ones this process archived of it before (lateFeedTimes), so that the
// feed lists them in their order.
func (s *Store) archiveEvents(ctx context.Context, evs []batchEvent) error {
	now := s.clock()
	s.lateFeed.forget(ms(now.Add(-s.feedSettle - lateFeedMargin)))
	var onTime []types.WriteRequest
	var late []eventItem
	lateTasks := map[string]bool{}
	for _, ev := range evs {
		if lateTasks[ev.TaskID] || s.archivedLate(max(ev.At, ev.recordedAt), now) {
			lateTasks[ev.TaskID] = true
			late = append(late, ev.eventItem)
			continue
		}
		ev.feedFields(max(ev.recordedAt, s.lateFeed.floor(ev.TaskID)), s.shards.Feed)
		item, err := attributevalue.MarshalMap(ev.eventItem)
		if err != nil {
			return err
		}
		onTime = append(onTime, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
	}
	if len(onTime) > 0 {
		if err := s.batchWrite(ctx, map[string][]types.WriteRequest{s.events: onTime}); err != nil {
			return err
		}
	}
	for _, ev := range late {
		ev.feedFields(max(ms(s.clock()), s.lateFeed.floor(ev.TaskID)), s.shards.Feed)
		put, err := s.putEventIfAbsent(ctx, ev)
		if err != nil {
			return err
		}
		if put {
			s.lateFeed.keyed(ev.TaskID, posMS(ev.FeedKey))
		}
	}
	return nil
}

// putEventIfAbsent archives an event archived late (feed.go) unless it
// is archived already, on time or late: the first archive keeps its place
// in the feed, where a follower may have read it. put says it archived
// the event.
func (s *Store) putEventIfAbsent(ctx context.Context, ev eventItem) (put bool, err error) {
	item, err := attributevalue.MarshalMap(ev)
	if err != nil {
		return false, err
	}
	expr, _ := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("task_id"))).Build()
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.events, Item: item,
		ConditionExpression:      expr.Condition(),
		ExpressionAttributeNames: expr.Names(),
	})
	if _, failed := conditionFailed(err); failed {
		return false, nil
	}
	return err == nil, err
}

// lostReason is the reason a lease_lost message about the ending ev gives:
// its type, but for a release or completion an admin made for the holder,
// which is a force_release to the holder (API.md names four reasons:
// timeout, agent_death, force_release and cancel). The trail keeps the
// event's own type.
func lostReason(ev eventItem) EventType {
	if ev.Type == EventRelease || ev.Type == EventComplete {
		return EventForceRelease
	}
	return ev.Type
}

// lost reports whether the ending ev took its lease from its holder without
// the holder's consent, so that the former holder is told (lease_lost): a
// timeout, the death of a holder that still exists (not its removal),
// a force release, or a cancel, release or completion by someone else (an
// admin acting for the holder). The holder's own release, completion or
// cancel tells it nothing it does not know.
func lost(ev eventItem) bool {
	switch ev.Type {
	case EventTimeout:
		return true
	case EventAgentDeath:
		return ev.Reason != reasonRemoved
	case EventForceRelease, EventCancel, EventRelease, EventComplete:
		return ev.By != ev.AgentID
	}
	return false
}

// migrated reports whether ch is Migrate's copy of a task into today's
// table: no transition, and the task was counted where it came from.
func migrated(ch Change) bool {
	_, ok := ch.New["migrated_at"]
	return ch.Old == nil && ok
}

// currentWatchers returns the watchers that are still the agents who asked:
// not removed since, and not an id removed and registered again after the
// watch was placed (the new agent starts clean). It reads their heartbeat
// items in one batch, and the agent items of those whose heartbeat item is
// gone (expired: createdAt) in another, for watches old enough for that
// (mayOutliveHeartbeat).
func (s *Store) currentWatchers(ctx context.Context, watchers map[string]int64) ([]string, error) {
	ids := slices.Sorted(maps.Keys(watchers))
	if len(ids) == 0 {
		return nil, nil
	}
	hbs, err := s.heartbeatsOf(ctx, ids)
	if err != nil {
		return nil, err
	}
	var gone []string
	now := s.clock()
	for _, id := range ids {
		if hbs[id] == nil && mayOutliveHeartbeat(watchers[id], now) {
			gone = append(gone, id)
		}
	}
	created, err := s.createdAt(ctx, gone)
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(ids, func(id string) bool {
		hb := hbs[id]
		if hb == nil {
			return fromCreation(created[id]) > watchers[id]
		}
		return hb.Removed || hb.registration() > watchers[id]
	}), nil
}

// noticeID is the deterministic id of a notice: one per kind and event.
func noticeID(kind string, e Event) string {
	return fmt.Sprintf("%s:%d:%s", e.TaskID, e.Seq, kind)
}

// putMessages writes each of msgs unless a message with its id is there
// already (sent before), or was deleted by its agent (its tombstone is
// there).
//
// The tombstones are read after the puts: a read before could miss a
// deletion landing between the read and the put, and the put, finding the
// id free, would then bring the message back for good. Read after, a
// tombstone is there whenever the deletion came before the put
// (DeleteMessage puts it before it deletes the message), and the message
// is deleted again; a deletion after the put deletes what it wrote. So
// only a replay that follows a deletion shows the message again, for the
// moment between its put and its delete. A put that found the message
// there has its tombstone read too: that message may be one an earlier
// attempt of this batch brought back and was cut short before its read
// (the stream retries a failed batch). The read costs a read unit for
// every message, in one BatchGetItem for up to 100 of them.
func (s *Store) putMessages(ctx context.Context, msgs []messageItem) error {
	for _, m := range msgs {
		item, err := attributevalue.MarshalMap(m)
		if err != nil {
			return err
		}
		expr, _ := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("message_id"))).Build()
		_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: &s.inbox, Item: item,
			ConditionExpression:      expr.Condition(),
			ExpressionAttributeNames: expr.Names(),
		})
		if _, failed := conditionFailed(err); !failed && err != nil {
			return fmt.Errorf("message %s for %s: %w", m.MessageID, m.AgentID, err)
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	var keys []map[string]types.AttributeValue
	seen := map[[2]string]bool{}
	for _, m := range msgs {
		if k := [2]string{m.AgentID, m.MessageID}; !seen[k] {
			seen[k] = true
			keys = append(keys, tombstoneKey(m.AgentID, m.MessageID))
		}
	}
	tombs, err := batchGet[messageItem](ctx, s.db, s.inbox, keys, "agent_id, message_id", nil)
	if err != nil {
		return fmt.Errorf("read the tombstones of %d messages: %w", len(keys), err)
	}
	for _, tomb := range tombs {
		key := agentKey(tomb.AgentID)
		id := strings.TrimPrefix(tomb.MessageID, tombstonePrefix)
		key["message_id"] = &types.AttributeValueMemberS{Value: id}
		if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.inbox, Key: key}); err != nil {
			return fmt.Errorf("message %s for %s: delete it again: %w", id, tomb.AgentID, err)
		}
	}
	return nil
}

// Archived reports whether the events change ch recorded are in the
// archive, by one consistent read of the last of them: known is false for
// a change that recorded none (a new task, a watch, a copy). The stream
// function archives a batch's events before anything else it does for the
// batch, so an archived event says that the batch holding its change was
// started, and, since a shard's batches are applied one at a time and in
// order, that every batch before it was applied whole (see
// stream.Poller.ResumeAfterApplied).
func (s *Store) Archived(ctx context.Context, ch Change) (known, archived bool, err error) {
	old, cur, ok, err := decodeChange(ch)
	if err != nil || !ok {
		return false, false, err
	}
	evs := newEvents(&old, &cur)
	if len(evs) == 0 {
		return false, false, nil
	}
	last := evs[len(evs)-1]
	got, err := getItem[eventItem](ctx, s.db, s.events, map[string]types.AttributeValue{
		"task_id": &types.AttributeValueMemberS{Value: last.TaskID},
		"seq":     &types.AttributeValueMemberN{Value: strconv.FormatInt(last.Seq, 10)},
	})
	if err != nil {
		return true, false, fmt.Errorf("read the archived event %s/%d: %w", last.TaskID, last.Seq, err)
	}
	return true, got != nil, nil
}
