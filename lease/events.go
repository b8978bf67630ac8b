package lease

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// messageRetention is how long an unread inbox message is kept.
const messageRetention = 7 * 24 * time.Hour

// recordAttempts bounds the retries of the audit write.
const recordAttempts = 6

// messageID is the id of the message that tells a watcher about the ending
// ev: one per ending and watcher, so a retried write lands on the same one.
func messageID(ev eventItem) string {
	return fmt.Sprintf("%013d.%d.%s", ev.At, ev.Fence, ev.TaskID)
}

// lostMessageID is the id of the lease_lost message about the ending ev:
// one per ended lease, apart from any task_available message of the same
// ending (the former holder may also watch the task).
func lostMessageID(ev eventItem) string {
	return "lost." + messageID(ev)
}

// Events returns a task's audit trail, oldest first: the part of it that
// is known to have no hole (see Trail).
func (s *Store) Events(ctx context.Context, taskID string) ([]Event, error) {
	tr, err := s.Trail(ctx, taskID)
	return tr.Events, err
}

// Trail is a task's audit trail as a reader can see it now: Events, oldest
// first, is always a prefix of the whole trail, with no event missing
// between two it shows; Pending counts the later events already known
// (recorded on the task, or archived past a hole) that are held back until
// the change stream has archived the ones before them, about a second.
type Trail struct {
	Events  []Event
	Pending int
}

// Trail returns the task's trail: the archive, with the item's latest
// transition merged in while its archive write is in flight, cut at the
// first hole. Each event names the seq of the one before it (prev_seq), so
// a hole is seen even though seqs are not consecutive. A missing event
// whose transition is older than the events' retention may have been
// removed by TTL and is not waited for.
func (s *Store) Trail(ctx context.Context, taskID string) (Trail, error) {
	if err := CheckID("task_id", taskID); err != nil {
		return Trail{}, err
	}
	it, err := s.getTask(ctx, taskID)
	if err != nil {
		return Trail{}, err
	}
	if it == nil {
		return Trail{}, ErrTaskNotFound
	}
	items, err := queryAll[eventItem](ctx, s.db, s.events, "", expression.Key("task_id").Equal(expression.Value(taskID)))
	if err != nil {
		return Trail{}, err
	}
	seen := map[int64]bool{}
	for _, e := range items {
		seen[e.Seq] = true
	}
	// The item holds its latest transition's events: shown while the change
	// stream's archive write is still in flight.
	for _, e := range it.latestEvents() {
		if seen[e.Seq] {
			continue
		}
		if e.errored {
			// A failed release's error, as the archive will have it.
			if e.Error, err = s.readError(ctx, taskID, e.Fence); err != nil {
				return Trail{}, err
			}
		}
		items = append(items, e.eventItem)
	}
	sort.Slice(items, func(i, j int) bool { return items[i].Seq < items[j].Seq })
	n := gapFree(items, ms(s.clock())-s.retention.Milliseconds())
	out := make([]Event, 0, n)
	for _, e := range items[:n] {
		out = append(out, e.event())
	}
	return Trail{Events: out, Pending: len(items) - n}, nil
}

// gapFree returns how many of evs (sorted by seq) form a trail with no
// hole: each event's predecessor is the event before it, or none (the
// first), or unknown (archived before predecessors were recorded), or made
// at or before trimmedBefore, so that TTL may have removed it.
func gapFree(evs []eventItem, trimmedBefore int64) int {
	var last int64
	for i, e := range evs {
		if e.PrevSeq != 0 && e.PrevSeq > last && e.PrevAt > trimmedBefore {
			return i
		}
		last = e.Seq
	}
	return len(evs)
}

// Inbox returns an agent's messages, oldest first.
//
// A message the change stream wrote after it had read the watchers'
// heartbeats, and the watcher had been removed in between (its inbox
// emptied), would outlive the removal: the agent's heartbeat item, read
// when there are messages, says which messages belong to a removed agent
// (watched before the id was registered again, or the id still removed).
func (s *Store) Inbox(ctx context.Context, agentID string) ([]Message, error) {
	items, err := queryAll[messageItem](ctx, s.db, s.inbox, "", expression.Key("agent_id").Equal(expression.Value(agentID)))
	if err != nil {
		return nil, err
	}
	var hb *heartbeatItem
	if slices.ContainsFunc(items, func(m messageItem) bool { return !m.Acked && m.WatchedAt != 0 }) {
		if hb, err = s.readHeartbeat(ctx, agentID); err != nil {
			return nil, err
		}
	}
	out := make([]Message, 0, len(items))
	for _, m := range items {
		if m.Acked {
			continue // deleted: kept so that a replayed change cannot bring it back
		}
		if hb != nil && m.WatchedAt != 0 && (hb.Removed || hb.RegisteredAt > m.WatchedAt) {
			continue // a removed agent's
		}
		out = append(out, Message{MessageID: m.MessageID, Type: m.Type, TaskID: m.TaskID, Reason: m.Reason, At: fromMS(m.At), Fence: m.Fence, RunID: m.RunID})
	}
	return out, nil
}

var messageIDPattern = regexp.MustCompile(`^(lost\.)?[0-9]{13}\.[0-9]{1,19}\.[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// DeleteMessage deletes one of the agent's messages.
func (s *Store) DeleteMessage(ctx context.Context, agentID, messageID string) error {
	if !messageIDPattern.MatchString(messageID) {
		return ErrMessageNotFound
	}
	key := agentKey(agentID)
	key["message_id"] = &types.AttributeValueMemberS{Value: messageID}
	// Marked, not deleted: the change stream may replay the freeing that
	// made the message, and its write must find the message already there.
	// TTL deletes it with the rest.
	cond := expression.AttributeExists(expression.Name("message_id")).And(expression.AttributeNotExists(expression.Name("acked")))
	expr, _ := expression.NewBuilder().WithCondition(cond).WithUpdate(expression.Set(expression.Name("acked"), expression.Value(true))).Build()
	_, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.inbox, Key: key,
		ConditionExpression:       expr.Condition(),
		UpdateExpression:          expr.Update(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	})
	if _, failed := conditionFailed(err); failed {
		return ErrMessageNotFound
	}
	if err != nil {
		return fmt.Errorf("delete message %s: %w", messageID, err)
	}
	return nil
}
