package lease

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
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

// record is the second and last request of a transition: one BatchWriteItem
// with its audit events and inbox messages. Only the writer whose conditional
// write decided the transition gets here, so each event and each message is
// written once; the keys are deterministic, so a retry of the batch rewrites
// the same items. The decision already stands, so a failure here is logged,
// not returned: the caller's lease must not be reported lost because its
// audit record was slow.
func (s *Store) record(ctx context.Context, evs []eventItem, msgs []messageItem, notices []Notice) {
	ttl := s.clock().Add(s.retention).Unix()
	var writes []types.WriteRequest
	for _, ev := range evs {
		ev.TTL = ttl
		item, err := attributevalue.MarshalMap(ev)
		if err != nil {
			s.log.ErrorContext(ctx, "encode audit event", "task_id", ev.TaskID, "err", err)
			continue
		}
		writes = append(writes, types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
	}
	byTable := map[string][]types.WriteRequest{}
	if len(writes) > 0 {
		byTable[s.events] = writes
	}
	for _, m := range msgs {
		item, err := attributevalue.MarshalMap(m)
		if err != nil {
			continue
		}
		byTable[s.inbox] = append(byTable[s.inbox], types.WriteRequest{PutRequest: &types.PutRequest{Item: item}})
	}
	if err := s.batchWrite(ctx, byTable); err != nil {
		s.log.ErrorContext(ctx, "audit write failed after the transition was decided",
			"task_id", evs[0].TaskID, "events", len(evs), "messages", len(msgs), "err", err)
	}
	for _, n := range notices {
		if err := s.notifier.Notify(ctx, n); err != nil {
			s.log.WarnContext(ctx, "notify", "kind", n.Kind, "task_id", n.Event.TaskID, "err", err)
		}
	}
}

// batchWrite writes every request, 25 at a time, retrying unprocessed items
// and transient errors.
func (s *Store) batchWrite(ctx context.Context, byTable map[string][]types.WriteRequest) error {
	for len(byTable) > 0 {
		chunk := map[string][]types.WriteRequest{}
		n := 0
		for table, reqs := range byTable {
			take := min(len(reqs), 25-n)
			if take == 0 {
				break
			}
			chunk[table] = reqs[:take]
			n += take
			if take == len(reqs) {
				delete(byTable, table)
			} else {
				byTable[table] = reqs[take:]
			}
		}
		var lastErr error
		for attempt := 0; len(chunk) > 0; attempt++ {
			if attempt >= recordAttempts {
				return fmt.Errorf("batch write: %d attempts: %w", attempt, lastErr)
			}
			if attempt > 0 {
				if err := backoff(ctx, attempt); err != nil {
					return err
				}
			}
			out, err := s.db.BatchWriteItem(ctx, &dynamodb.BatchWriteItemInput{RequestItems: chunk})
			if err != nil {
				lastErr = err
				continue
			}
			chunk = out.UnprocessedItems
			lastErr = fmt.Errorf("unprocessed items")
		}
	}
	return nil
}

// Events returns a task's audit trail, oldest first.
func (s *Store) Events(ctx context.Context, taskID string) ([]Event, error) {
	if err := checkID("task_id", taskID); err != nil {
		return nil, err
	}
	it, err := s.getTask(ctx, taskID)
	if err != nil {
		return nil, err
	}
	if it == nil {
		return nil, ErrTaskNotFound
	}
	items, err := queryAll[eventItem](ctx, s.db, s.events, "", expression.Key("task_id").Equal(expression.Value(taskID)))
	if err != nil {
		return nil, err
	}
	out := make([]Event, 0, len(items)+3)
	seen := map[int64]bool{}
	for _, e := range items {
		out = append(out, e.event())
		seen[e.Seq] = true
	}
	// The item itself holds the latest lease's checkout and the last ending:
	// shown even if their audit batch never arrived.
	added := false
	for _, e := range it.itemEvents() {
		if !seen[e.Seq] {
			out = append(out, e.event())
			added = true
		}
	}
	if added {
		sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	}
	return out, nil
}

// Inbox returns an agent's messages, oldest first.
func (s *Store) Inbox(ctx context.Context, agentID string) ([]Message, error) {
	items, err := queryAll[messageItem](ctx, s.db, s.inbox, "", expression.Key("agent_id").Equal(expression.Value(agentID)))
	if err != nil {
		return nil, err
	}
	out := make([]Message, 0, len(items))
	for _, m := range items {
		out = append(out, Message{MessageID: m.MessageID, Type: m.Type, TaskID: m.TaskID, Reason: m.Reason, At: fromMS(m.At)})
	}
	return out, nil
}

var messageIDPattern = regexp.MustCompile(`^[0-9]{13}\.[0-9]{1,19}\.[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

// DeleteMessage deletes one of the agent's messages.
func (s *Store) DeleteMessage(ctx context.Context, agentID, messageID string) error {
	if !messageIDPattern.MatchString(messageID) {
		return ErrMessageNotFound
	}
	key := agentKey(agentID)
	key["message_id"] = &types.AttributeValueMemberS{Value: messageID}
	expr, _ := expression.NewBuilder().WithCondition(expression.AttributeExists(expression.Name("message_id"))).Build()
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.inbox, Key: key,
		ConditionExpression:      expr.Condition(),
		ExpressionAttributeNames: expr.Names(),
	})
	if _, failed := conditionFailed(err); failed {
		return ErrMessageNotFound
	}
	if err != nil {
		return fmt.Errorf("delete message %s: %w", messageID, err)
	}
	return nil
}
