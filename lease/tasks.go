package lease

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/checkout-dev/checkout/lease/schema"
)

// CreateTask creates a task in status todo, in its queue's claim index.
func (s *Store) CreateTask(ctx context.Context, p CreateTaskParams) (Task, error) {
	it, err := s.newTaskItem(&p)
	if err != nil {
		return Task{}, err
	}
	cur, err := s.putTask(ctx, it)
	if err != nil {
		return Task{}, err
	}
	if cur != nil {
		return Task{}, ErrTaskExists
	}
	s.claims.wake()
	return it.task(false), nil
}

// compactMetadata stores metadata as compact JSON text.
func compactMetadata(m json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, m) != nil {
		return string(m)
	}
	return b.String()
}

// newTaskItem validates p, fills in its defaults and returns the item to put.
func (s *Store) newTaskItem(p *CreateTaskParams) (taskItem, error) {
	if p.TaskID == "" {
		p.TaskID = newID("task-")
	}
	if err := CheckID("task_id", p.TaskID); err != nil {
		return taskItem{}, err
	}
	if p.Queue == "" {
		p.Queue = DefaultQueue
	}
	if p.Priority == nil {
		d := DefaultPriority
		p.Priority = &d
	}
	if err := CheckTaskFields(&p.Title, &p.Description, &p.Queue, p.Priority, p.Metadata); err != nil {
		return taskItem{}, err
	}
	now := s.clock()
	prio := *p.Priority
	it := taskItem{
		TaskID: p.TaskID, Title: p.Title, Description: p.Description, Queue: p.Queue, Priority: &prio,
		Status: StatusTodo, Version: 1,
		CreatedAt: ms(now), CreatedKey: fmt.Sprintf("%013d#%s", ms(now), p.TaskID),
		ClaimHome: claimHome(p.Queue, p.TaskID), ClaimKey: claimKey(prio, ms(now), p.TaskID),
	}
	it.ClaimShard = it.ClaimHome
	if p.Metadata != nil {
		it.Metadata = compactMetadata(p.Metadata)
	}
	return it, nil
}

// putTask writes a new task item unless the id is taken; then it returns
// the task that has it (from the failed write itself, ALL_OLD).
func (s *Store) putTask(ctx context.Context, it taskItem) (*taskItem, error) {
	item, err := attributevalue.MarshalMap(it)
	if err != nil {
		return nil, err
	}
	expr, _ := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("task_id"))).Build()
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.tasks, Item: item,
		ConditionExpression:                 expr.Condition(),
		ExpressionAttributeNames:            expr.Names(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if returned, failed := conditionFailed(err); failed {
		cur, err := s.currentTask(ctx, returned, it.TaskID)
		if err == nil && cur == nil {
			err = fmt.Errorf("create task %s: it exists and then does not", it.TaskID)
		}
		return cur, err
	}
	if err != nil {
		return nil, fmt.Errorf("create task %s: %w", it.TaskID, err)
	}
	return nil, nil
}

// CreateTasks creates up to MaxBatch tasks: each is created, or found to
// exist already and returned as it is, so a batch retried with the same ids
// is answered alike. Every task is validated before any is written; each
// write is its own conditional PutItem (BatchWriteItem has no conditions),
// made concurrently.
func (s *Store) CreateTasks(ctx context.Context, ps []CreateTaskParams) ([]BatchResult, error) {
	if err := CheckBatchSize(len(ps)); err != nil {
		return nil, err
	}
	items := make([]taskItem, len(ps))
	seen := map[string]bool{}
	for i := range ps {
		it, err := s.newTaskItem(&ps[i])
		if err != nil {
			return nil, InBatch(i, err)
		}
		if seen[it.TaskID] {
			return nil, invalidField(fmt.Sprintf("tasks[%d].task_id", i), CodeInvalidRequest, "tasks[%d]: task_id %s appears twice in the batch", i, it.TaskID)
		}
		seen[it.TaskID] = true
		items[i] = it
	}
	out := make([]BatchResult, len(items))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for i := range items {
		g.Go(func() error {
			cur, err := s.putTask(gctx, items[i])
			if err != nil {
				return err
			}
			if cur == nil {
				out[i] = BatchResult{TaskID: items[i].TaskID, Outcome: BatchCreated, Task: items[i].task(false)}
				return nil
			}
			live, err := s.leaseLive(gctx, cur, s.clock())
			if err != nil {
				return err
			}
			out[i] = BatchResult{TaskID: cur.TaskID, Outcome: BatchExists, Task: cur.task(live)}
			return nil
		})
	}
	err := g.Wait()
	s.claims.wake()
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetTask returns a task with its live lease, if any.
func (s *Store) GetTask(ctx context.Context, taskID string) (Task, error) {
	it, live, err := s.readTask(ctx, taskID)
	if err != nil {
		return Task{}, err
	}
	return it.task(live), nil
}

// LockStatus returns the task's live lease, or nil when it is free.
func (s *Store) LockStatus(ctx context.Context, taskID string) (*Checkout, error) {
	it, live, err := s.readTask(ctx, taskID)
	if err != nil {
		return nil, err
	}
	if !live {
		return nil, nil
	}
	c := it.checkout()
	return &c, nil
}

// readTask reads a task and judges its lease: live when it has not expired
// and its holder is alive by heartbeat. Two GetItems at most.
func (s *Store) readTask(ctx context.Context, taskID string) (*taskItem, bool, error) {
	if err := CheckID("task_id", taskID); err != nil {
		return nil, false, err
	}
	it, err := s.getTask(ctx, taskID)
	if err != nil {
		return nil, false, err
	}
	if it == nil {
		return nil, false, ErrTaskNotFound
	}
	live, err := s.leaseLive(ctx, it, s.clock())
	return it, live, err
}

// leaseLive judges a lease record: unexpired at now and its holder alive.
func (s *Store) leaseLive(ctx context.Context, it *taskItem, now time.Time) (bool, error) {
	if !it.leaseTimeValid(now) {
		return false, nil
	}
	ended, err := s.endedByDeath(ctx, it.Holder, it.LockedAt)
	return !ended, err
}

// endedByDeath reports whether a lease agentID locked at lockedAt has ended
// because its holder died: from the death cache when it knows, otherwise by
// the holder's heartbeat (the alive cache, or a consistent read, whose death
// is then remembered).
func (s *Store) endedByDeath(ctx context.Context, agentID string, lockedAt int64) (bool, error) {
	if lockedAt <= s.deaths.endedUpTo(agentID) {
		return true, nil
	}
	readAt := s.clock() // before the read: dead at least until the read
	hb, err := s.heartbeat(ctx, agentID)
	if err != nil {
		return false, err
	}
	if hb.dead(readAt) {
		s.deaths.put(agentID, ms(readAt))
	}
	s.deaths.noteRemoval(agentID, hb, ms(readAt))
	return !holderAlive(hb, lockedAt, s.clock()), nil
}

// liveLeases filters items to those whose lease is live, reading every
// holder's heartbeat in one batch.
func (s *Store) liveLeases(ctx context.Context, items []taskItem, now time.Time) (map[string]bool, error) {
	var holders []string
	for _, it := range items {
		if it.leaseTimeValid(now) {
			holders = append(holders, it.Holder)
		}
	}
	hbs, err := s.heartbeatsOf(ctx, holders)
	if err != nil {
		return nil, err
	}
	live := make(map[string]bool)
	for _, it := range items {
		if it.leaseTimeValid(now) && holderAlive(hbs[it.Holder], it.LockedAt, now) {
			live[it.TaskID] = true
		}
	}
	return live, nil
}

// cursor is the decoded form of TaskPage.NextCursor.
type cursor struct {
	Status int               `json:"s"`
	Key    map[string]string `json:"k,omitempty"`
}

func encodeCursor(c cursor) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeCursor(s string) (cursor, error) {
	var c cursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(s) > 2048 || json.Unmarshal(b, &c) != nil || c.Status < 0 || c.Status >= len(Statuses) {
		return cursor{}, notIssued()
	}
	for k := range c.Key {
		if k != "task_id" && k != "status" && k != "created_key" {
			return cursor{}, notIssued()
		}
	}
	return c, nil
}

// ListTasks lists tasks by status in creation order, a page at a time. With
// no status it walks todo, in_progress, done and cancelled in turn. Listings
// come from an index and so reflect the sweep: a task whose lease expired is
// listed as in_progress until the sweep moves it back to todo, but it is
// never shown with a live checkout.
func (s *Store) ListTasks(ctx context.Context, p ListTasksParams) (TaskPage, error) {
	if p.Limit == 0 {
		p.Limit = DefaultListLimit
	}
	if err := CheckLimit(p.Limit); err != nil {
		return TaskPage{}, err
	}
	statuses := Statuses
	if p.Status != "" {
		if err := CheckListStatus(p.Status); err != nil {
			return TaskPage{}, err
		}
		statuses = []Status{p.Status}
	}
	var filter *expression.ConditionBuilder
	if p.Queue != "" {
		if err := CheckQueue(p.Queue); err != nil {
			return TaskPage{}, err
		}
		f := expression.Name("queue").Equal(expression.Value(p.Queue))
		if p.Queue == DefaultQueue {
			f = f.Or(expression.AttributeNotExists(expression.Name("queue")))
		}
		filter = &f
	}
	if err := CheckCursor(p.Cursor); err != nil {
		return TaskPage{}, err
	}
	c := cursor{}
	if p.Cursor != "" {
		var err error
		if c, err = decodeCursor(p.Cursor); err != nil {
			return TaskPage{}, err
		}
		if c.Status >= len(statuses) || !validResumeKey(c.Key, statuses[c.Status]) {
			return TaskPage{}, notIssued()
		}
	}
	var items []taskItem
	listed := map[string]Status{} // the status each task was listed under
	next := ""
	for i := c.Status; i < len(statuses) && len(items) < p.Limit; i++ {
		keyCond := expression.Key("status").Equal(expression.Value(string(statuses[i])))
		b := expression.NewBuilder().WithKeyCondition(keyCond)
		if filter != nil {
			// A queue's tasks are filtered out of the status's pages: a page
			// may hold fewer than limit tasks and still have a next cursor.
			b = b.WithFilter(*filter)
		}
		expr, _ := b.Build()
		in := &dynamodb.QueryInput{
			TableName: &s.tasks, IndexName: aws.String(schema.TasksByStatus),
			KeyConditionExpression:    expr.KeyCondition(),
			FilterExpression:          expr.Filter(),
			ExpressionAttributeNames:  expr.Names(),
			ExpressionAttributeValues: expr.Values(),
			Limit:                     aws.Int32(int32(p.Limit - len(items))),
		}
		if i == c.Status && len(c.Key) > 0 {
			in.ExclusiveStartKey = stringKey(c.Key)
		}
		out, err := s.db.Query(ctx, in)
		if err != nil {
			return TaskPage{}, fmt.Errorf("list tasks: %w", err)
		}
		var batch []taskItem
		if err := attributevalue.UnmarshalListOfMaps(out.Items, &batch); err != nil {
			return TaskPage{}, err
		}
		for _, it := range batch {
			listed[it.TaskID] = statuses[i]
		}
		items = append(items, batch...)
		switch {
		case len(out.LastEvaluatedKey) > 0:
			next = encodeCursor(cursor{Status: i, Key: plainKey(out.LastEvaluatedKey)})
			i = len(statuses) // stop: resume inside this status
		case len(items) >= p.Limit && i+1 < len(statuses):
			next = encodeCursor(cursor{Status: i + 1})
		}
	}
	// The index only proposes: the page shows each task as its item is now,
	// and only under the status it has now.
	items, err := s.confirm(ctx, items)
	if err != nil {
		return TaskPage{}, err
	}
	live, err := s.liveLeases(ctx, items, s.clock())
	if err != nil {
		return TaskPage{}, err
	}
	page := TaskPage{Tasks: make([]Task, 0, len(items)), NextCursor: next}
	for _, it := range items {
		if t := it.task(live[it.TaskID]); t.Status == listed[it.TaskID] && (p.Queue == "" || t.Queue == p.Queue) {
			page.Tasks = append(page.Tasks, t)
		}
	}
	return page, nil
}

// validResumeKey reports whether k could be a by_status position of status:
// empty (the start of that status), or all three key parts, consistent.
func validResumeKey(k map[string]string, status Status) bool {
	if len(k) == 0 {
		return true
	}
	id := k["task_id"]
	return len(k) == 3 && k["status"] == string(status) && ValidID(id) &&
		len(k["created_key"]) == 14+len(id) && strings.HasSuffix(k["created_key"], "#"+id)
}

func stringKey(m map[string]string) map[string]types.AttributeValue {
	out := make(map[string]types.AttributeValue, len(m))
	for k, v := range m {
		out[k] = &types.AttributeValueMemberS{Value: v}
	}
	return out
}

func plainKey(m map[string]types.AttributeValue) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		if s, ok := v.(*types.AttributeValueMemberS); ok {
			out[k] = s.Value
		}
	}
	return out
}

// ListCheckouts returns every live lease, or one agent's, oldest first.
func (s *Store) ListCheckouts(ctx context.Context, agentID string) ([]Checkout, error) {
	now := s.clock()
	var items []taskItem
	if agentID != "" {
		if err := CheckID("agent_id", agentID); err != nil {
			return nil, err
		}
		keyCond := expression.Key("holder").Equal(expression.Value(agentID)).
			And(expression.Key("lease_expires").GreaterThan(expression.Value(ms(now))))
		var err error
		if items, err = s.queryTasks(ctx, schema.TasksByHolder, keyCond); err != nil {
			return nil, err
		}
	} else {
		for shard := range schema.Shards {
			keyCond := expression.Key("lease_shard").Equal(expression.Value(strconv.Itoa(shard))).
				And(expression.Key("lease_expires").GreaterThan(expression.Value(ms(now))))
			batch, err := s.queryTasks(ctx, schema.TasksByLeaseExpiry, keyCond)
			if err != nil {
				return nil, err
			}
			items = append(items, batch...)
		}
	}
	// The index only proposes: each lease is judged on the task as it is.
	items, err := s.confirm(ctx, items)
	if err != nil {
		return nil, err
	}
	live, err := s.liveLeases(ctx, items, now)
	if err != nil {
		return nil, err
	}
	out := []Checkout{}
	for _, it := range items {
		if live[it.TaskID] && (agentID == "" || it.Holder == agentID) {
			out = append(out, it.checkout())
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].LockedAt.Equal(out[j].LockedAt) {
			return out[i].LockedAt.Before(out[j].LockedAt)
		}
		return out[i].TaskID < out[j].TaskID
	})
	return out, nil
}

// confirm replaces task items read from an index, which may lag the table,
// with the items as they are, read consistently with BatchGetItem (100 keys
// a request), in the same order. A task that no longer exists is dropped.
func (s *Store) confirm(ctx context.Context, items []taskItem) ([]taskItem, error) {
	fresh := make(map[string]taskItem, len(items))
	for start := 0; start < len(items); start += 100 {
		var keys []map[string]types.AttributeValue
		for _, it := range items[start:min(start+100, len(items))] {
			keys = append(keys, taskKey(it.TaskID))
		}
		req := map[string]types.KeysAndAttributes{s.tasks: {Keys: keys, ConsistentRead: aws.Bool(true)}}
		for attempt := 0; len(req) > 0; attempt++ {
			if attempt > 0 {
				if err := backoff(ctx, attempt); err != nil {
					return nil, err
				}
			}
			res, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: req})
			if err != nil {
				return nil, fmt.Errorf("read tasks: %w", err)
			}
			var got []taskItem
			if err := attributevalue.UnmarshalListOfMaps(res.Responses[s.tasks], &got); err != nil {
				return nil, err
			}
			for _, it := range got {
				fresh[it.TaskID] = it
			}
			req = res.UnprocessedKeys
		}
	}
	out := make([]taskItem, 0, len(items))
	for _, it := range items {
		if f, ok := fresh[it.TaskID]; ok {
			out = append(out, f)
		}
	}
	return out, nil
}

// queryTasks runs a Query on a tasks index and returns every page.
func (s *Store) queryTasks(ctx context.Context, index string, keyCond expression.KeyConditionBuilder) ([]taskItem, error) {
	return queryAll[taskItem](ctx, s.db, s.tasks, index, keyCond)
}
