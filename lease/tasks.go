package lease

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"
)

// CreateTask creates a task in status todo, in its queue's claim index,
// or blocked when a task it names in BlockedBy is not done (deps.go).
func (s *Store) CreateTask(ctx context.Context, p CreateTaskParams) (Task, error) {
	it, err := s.newTaskItem(&p)
	if err != nil {
		return Task{}, err
	}
	var blockers map[string]*taskItem
	if len(it.BlockedBy) > 0 {
		if blockers, err = s.readBlockers(ctx, it.BlockedBy); err != nil {
			return Task{}, err
		}
	}
	created, cur, err := s.create(ctx, it, blockers)
	if err != nil {
		return Task{}, err
	}
	if cur != nil {
		return Task{}, ErrTaskExists
	}
	return created, nil
}

// create writes a new task item it (checked by newTaskItem) whose
// blockers were read by readBlockers: the edges and the blockers' flags
// first, then the task, blocked on those not done, then settle (deps.go).
// cur is the task that has the id already, if one does.
func (s *Store) create(ctx context.Context, it taskItem, blockers map[string]*taskItem) (Task, *taskItem, error) {
	if err := s.enlistQueues(ctx, it.queue()); err != nil {
		return Task{}, nil, err
	}
	var waiting []string
	if len(blockers) > 0 {
		var err error
		if waiting, err = s.link(ctx, it.TaskID, blockers, it.MadeBy); err != nil {
			var ve *ValidationError
			if errors.As(err, &ve) && ve.Code == CodeInvalidDependency {
				// A blocker at its bound refuses a new dependent, but a
				// task that exists already is answered as it is.
				if cur, gerr := s.getTask(ctx, it.TaskID); gerr == nil && cur != nil {
					return Task{}, cur, s.fillBodies(ctx, cur)
				}
			}
			return Task{}, nil, err
		}
		if len(waiting) > 0 {
			it.WaitingOn = waiting
			it.Status, it.StatusShard, it.ClaimShard = StatusBlocked, statusShard(StatusBlocked, it.TaskID, s.shards.Status), ""
		}
	}
	cur, err := s.putTask(ctx, it)
	if err != nil {
		return Task{}, nil, err
	}
	if cur != nil {
		var stale []string
		for id := range blockers {
			if !slices.Contains(cur.BlockedBy, id) {
				stale = append(stale, id)
			}
		}
		s.cleanEdges(ctx, it.TaskID, stale, it.MadeBy)
		return Task{}, cur, nil
	}
	// A blocker done meanwhile unblocks the task, in writes after this
	// one, which another write may come between: the answer is what this
	// write left, and the settling a step of its own after it.
	read, err := s.settle(ctx, it.TaskID, waiting)
	if err != nil {
		return Task{}, nil, err
	}
	// A blocker read done and reopened since, perhaps before this write
	// named it, blocks the task again (deps.go, recheck).
	if err := s.recheck(ctx, it.TaskID, clearedAnew(nil, &it)); err != nil {
		return Task{}, nil, err
	}
	if len(waiting) == 0 {
		s.claims.wake(it.queue())
	}
	if len(blockers) > 0 {
		// The blockers as last read: by link, and those waited on by settle.
		v := &graphView{blockers: map[string]Status{}}
		now := s.clock()
		for id, b := range blockers {
			v.blockers[id] = b.task(b.leaseTimeValid(now)).Status
		}
		for id, b := range read {
			v.blockers[id] = b.task(b.leaseTimeValid(now)).Status
		}
		it.graph = v
	}
	return it.task(false), nil, nil
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
	p.Metadata = NormalizeMetadata(p.Metadata)
	if err := CheckTaskFields(&p.Title, &p.Description, &p.Queue, p.Priority, p.Metadata); err != nil {
		return taskItem{}, err
	}
	if err := CheckWorkFields(p.MaxAttempts, p.RetryDelay); err != nil {
		return taskItem{}, err
	}
	blockers, err := checkBlockers(p.TaskID, p.BlockedBy)
	if err != nil {
		return taskItem{}, err
	}
	now := s.clock()
	notBefore, err := checkNotBefore(p.NotBefore, now)
	if err != nil {
		return taskItem{}, err
	}
	prio := *p.Priority
	it := taskItem{
		TaskID: p.TaskID, Title: p.Title, Description: p.Description, Queue: p.Queue, Priority: &prio,
		Status: StatusTodo, Version: 1,
		CreatedAt: ms(now), CreatedKey: fmt.Sprintf("%013d#%s", ms(now), p.TaskID),
		ClaimHome: claimHome(p.Queue, p.TaskID, s.shards.Claim), ClaimKey: claimKey(prio, ms(now), p.TaskID),
	}
	it.ClaimShard = it.ClaimHome
	it.MadeBy = writeID()        // this create's own: a sending of it again knows it
	it.Watched = aws.Bool(false) // until a watch (watch.go)
	it.BlockedBy = blockers
	it.MaxAttempts = DefaultMaxAttempts
	if p.MaxAttempts != nil {
		it.MaxAttempts = *p.MaxAttempts
	}
	delay := DefaultRetryDelay
	if p.RetryDelay != nil {
		delay = *p.RetryDelay
	}
	it.RetryDelayMS = aws.Int64(delay.Milliseconds())
	if notBefore != 0 {
		// Ranked after the ready tasks, and in the expiry index until then,
		// so that the sweep ranks it as ready (claim.go, "Delays").
		it.NotBefore, it.ClaimRank = notBefore, it.ClaimKey
		it.ClaimKey = delayedKey(notBefore, it.ClaimRank)
		it.LeaseExpires, it.LeaseShard = notBefore, shardOf(p.TaskID, s.shards.Lease)
	}
	if p.Metadata != nil {
		it.Metadata = compactMetadata(p.Metadata)
	}
	return it, nil
}

// putTask writes a new task (its body first, then its item) unless the id
// is taken; then it returns the task that has it (from the failed write
// itself, ALL_OLD), with its body.
func (s *Store) putTask(ctx context.Context, it taskItem) (*taskItem, error) {
	if b := splitBody(&it, ms(s.clock())); b != nil {
		if err := s.putBody(ctx, b); err != nil {
			return nil, err
		}
	}
	cur, err := s.putTaskItem(ctx, it)
	if err != nil && it.BodyToken != "" {
		cur, err = s.settleCreatedBody(ctx, it, err)
	}
	if err != nil || cur == nil {
		return cur, err
	}
	if cur.BodyToken != it.BodyToken {
		s.dropBody(ctx, it.TaskID, it.BodyToken) // the id was taken: nobody names this body
	}
	return cur, s.fillBodies(ctx, cur)
}

func (s *Store) putTaskItem(ctx context.Context, it taskItem) (*taskItem, error) {
	item, err := attributevalue.MarshalMap(it)
	if err != nil {
		return nil, err
	}
	expr, _ := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("task_id"))).Build()
	ctx, sends := countSends(ctx)
	_, err = s.db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &s.tasks, Item: item,
		ConditionExpression:                 expr.Condition(),
		ExpressionAttributeNames:            expr.Names(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, sendOpts(ctx)...)
	if returned, failed := conditionFailed(err); failed {
		if sends.Load() > 1 && sameAttr(returned, item, "made") {
			// This very create (its id is in no other write): the put
			// applied, its answer was lost, and the SDK sent it again
			// (sends.go), whatever writes (a checkout, a PATCH) the task
			// has had since.
			return nil, nil
		}
		cur, err := s.currentTask(ctx, returned, it.TaskID)
		if err == nil && cur == nil {
			err = fmt.Errorf("create task %s: it exists and then does not", it.TaskID)
		}
		return cur, err
	}
	if err != nil {
		err = fmt.Errorf("create task %s: %w", it.TaskID, err)
		if refused(err, sends.Load()) {
			err = refusedWrite{err}
		}
		return nil, err
	}
	return nil, nil
}

// sameAttr says whether items a and b both have attribute name, alike.
func sameAttr(a, b map[string]types.AttributeValue, name string) bool {
	x, ok := a[name]
	return ok && reflect.DeepEqual(x, b[name])
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
	// Blockers are read before anything is written: each is a task that
	// exists, or one of the batch. A batch with blockers is written one
	// task at a time, each after its blockers in the batch (batchOrder),
	// so that they are there before it; one without, concurrently.
	order, err := batchOrder(items)
	if err != nil {
		return nil, err
	}
	// Every blocker named is read, those of the batch too: one that
	// exists already (a batch sent again, or one naming an existing task)
	// counts its dependents as any existing task does.
	var named []string
	for _, it := range items {
		for _, id := range it.BlockedBy {
			if !slices.Contains(named, id) {
				named = append(named, id)
			}
		}
	}
	graph := len(named) > 0
	if graph {
		got, err := s.readTasks(ctx, named)
		if err != nil {
			return nil, err
		}
		for i, it := range items {
			for _, id := range it.BlockedBy {
				if !seen[id] && got[id] == nil {
					return nil, InBatch(i, invalidField("blocked_by", CodeInvalidDependency, "blocked_by names task %s, which does not exist", id))
				}
			}
		}
		if err := s.checkBatchDependents(ctx, items, got); err != nil {
			return nil, err
		}
	}
	queues := make([]string, len(items))
	for i, it := range items {
		queues[i] = it.queue()
	}
	if err := s.enlistQueues(ctx, queues...); err != nil {
		return nil, err
	}
	out := make([]BatchResult, len(items))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	if graph {
		g.SetLimit(1)
	}
	for _, i := range order {
		g.Go(func() error {
			var blockers map[string]*taskItem
			if len(items[i].BlockedBy) > 0 {
				var err error
				if blockers, err = s.readBlockers(gctx, items[i].BlockedBy); err != nil {
					return err
				}
			}
			created, cur, err := s.create(gctx, items[i], blockers)
			if err != nil {
				return err
			}
			if cur == nil {
				out[i] = BatchResult{TaskID: items[i].TaskID, Outcome: BatchCreated, Task: created}
				return nil
			}
			live, err := s.leaseLive(gctx, cur, s.clock())
			if err != nil {
				return err
			}
			if err := s.fillGraph(gctx, cur); err != nil {
				return err
			}
			out[i] = BatchResult{TaskID: cur.TaskID, Outcome: BatchExists, Task: cur.task(live)}
			return nil
		})
	}
	if err := g.Wait(); err != nil { // each task created woke its queue's waiting claims
		return nil, err
	}
	// A task's answer was read before the tasks of the batch that name it
	// were written: add those to its blocks, as a read now would show it.
	// Then keep the first MaxBatchBlocks, so that the answer stays small
	// however many tasks the tasks that exist block.
	for i := range out {
		for j, dep := range items {
			if out[j].Outcome == BatchCreated && slices.Contains(dep.BlockedBy, items[i].TaskID) && !slices.Contains(out[i].Task.Blocks, dep.TaskID) {
				out[i].Task.Blocks = append(out[i].Task.Blocks, dep.TaskID)
			}
		}
		slices.Sort(out[i].Task.Blocks)
		if len(out[i].Task.Blocks) > MaxBatchBlocks {
			out[i].Task.Blocks, out[i].MoreBlocks = out[i].Task.Blocks[:MaxBatchBlocks], true
		}
	}
	return out, nil
}

// batchOrder is the order in which a batch's tasks are written: each
// after the tasks of the batch it names in blocked_by, and otherwise as
// given. Tasks of the batch that wait for each other in a cycle are
// refused, naming the first of them.
func batchOrder(items []taskItem) ([]int, error) {
	at := make(map[string]int, len(items))
	for i, it := range items {
		at[it.TaskID] = i
	}
	placed := make([]bool, len(items))
	order := make([]int, 0, len(items))
	for len(order) < len(items) {
		next := -1
		for i, it := range items {
			if !placed[i] && !slices.ContainsFunc(it.BlockedBy, func(id string) bool {
				j, ok := at[id]
				return ok && !placed[j]
			}) {
				next = i
				break
			}
		}
		if next < 0 {
			// Every task left waits for another one left: walk from the
			// first to a task met twice, which is on a cycle.
			i, walked := slices.Index(placed, false), map[int]bool{}
			for !walked[i] {
				walked[i] = true
				for _, id := range items[i].BlockedBy {
					if j, ok := at[id]; ok && !placed[j] {
						i = j
						break
					}
				}
			}
			return nil, InBatch(i, invalidField("blocked_by", CodeDependencyCycle,
				"blocked_by of %s waits, through tasks of the batch, for %s itself: a cycle", items[i].TaskID, items[i].TaskID))
		}
		placed[next] = true
		order = append(order, next)
	}
	return order, nil
}

// checkBatchDependents refuses a batch, before any of it is written,
// whose tasks would take a blocker outside it (as read: blockers) past
// maxDependents dependents, naming the first task that would: each
// task's own check (checkDependents) would otherwise refuse it only once
// the tasks before it were created. A task of the batch that the blocker
// already counts (a batch sent again) adds nothing.
func (s *Store) checkBatchDependents(ctx context.Context, items []taskItem, blockers map[string]*taskItem) error {
	var exists map[string]*taskItem // the batch's tasks stored already, once read
	adds := map[string]int{}
	for _, it := range items {
		for _, id := range it.BlockedBy {
			if blockers[id] != nil {
				adds[id]++
			}
		}
	}
	for id, k := range adds {
		if !blockers[id].HasDependents {
			if k <= s.maxDependents {
				continue
			}
		}
		n := 0
		if blockers[id].HasDependents {
			var err error
			if n, err = queryCount(ctx, s.db, s.inbox, expression.Key("agent_id").Equal(expression.Value(depsPartition(id))), s.maxDependents); err != nil {
				return err
			}
		}
		if n+k <= s.maxDependents {
			continue
		}
		// Near the bound: count the batch's tasks the blocker has yet to
		// count, in the batch's order; a task that exists already is
		// answered as it is, and adds none.
		if exists == nil {
			ids := make([]string, len(items))
			for i, it := range items {
				ids[i] = it.TaskID
			}
			var err error
			if exists, err = s.readTasks(ctx, ids); err != nil {
				return err
			}
		}
		for i, it := range items {
			if !slices.Contains(it.BlockedBy, id) || exists[it.TaskID] != nil {
				continue
			}
			if n > 0 {
				edge, err := getItem[edgeItem](ctx, s.db, s.inbox, map[string]types.AttributeValue{
					"agent_id": &types.AttributeValueMemberS{Value: depsPartition(id)}, "message_id": &types.AttributeValueMemberS{Value: it.TaskID},
				})
				if err != nil {
					return err
				}
				if edge != nil {
					continue
				}
			}
			if n++; n > s.maxDependents {
				return InBatch(i, invalidField("blocked_by", CodeInvalidDependency, "task %s already blocks %d tasks, the most one task may block", id, s.maxDependents))
			}
		}
	}
	return nil
}

// GetTask returns a task with its live lease, if any.
func (s *Store) GetTask(ctx context.Context, taskID string) (Task, error) {
	var it, prev *taskItem
	var live bool
	for range retries(ctx) {
		var err error
		if it, live, err = s.readTask(ctx, taskID); err != nil {
			return Task{}, err
		}
		if prev != nil && it.BodyToken == prev.BodyToken && it.Version == prev.Version {
			// The task as it was read, its body gone for good.
			it.LastError = prev.LastError
			s.lostBody(ctx, it)
			break
		}
		gone, err := s.readBodies(ctx, it)
		if err != nil {
			return Task{}, err
		}
		if len(gone) == 0 {
			break
		}
		// A PATCH replaced the body since the read: read the task again.
		prev, it = it, nil
	}
	if it == nil {
		return Task{}, fmt.Errorf("read task %s: its body replaced again and again: %w", taskID, ErrBusy)
	}
	if err := s.fillGraph(ctx, it); err != nil {
		return Task{}, err
	}
	return it.task(live), nil
}

// checkNotBefore checks a not_before given on create or PATCH, and returns
// it in Unix ms: 0 for none, or for a time not after now (it keeps
// nothing from being granted). A time between two milliseconds is kept as
// the later one, so that the task is never granted before the time given;
// the bound applies to the time kept, so that the task never shows a
// not_before the field would refuse.
func checkNotBefore(t *time.Time, now time.Time) (int64, error) {
	if t == nil || !t.After(now) {
		return 0, nil
	}
	n := ms(*t)
	if t.After(time.UnixMilli(n)) {
		n++
	}
	if time.UnixMilli(n).UTC().Year() >= 2200 {
		return 0, invalidField("not_before", CodeInvalidRequest, "not_before must be before the year 2200")
	}
	return n, nil
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
	items, err := s.leaseEntriesOf(ctx, agentID)
	if err != nil {
		return nil, err
	}
	cos, err := s.liveCheckouts(ctx, items, agentID, now)
	if err != nil {
		return nil, err
	}
	out := []Checkout{}
	for _, co := range cos {
		if co != nil {
			out = append(out, *co)
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

// leaseEntriesOf is every entry of the lease-expiry index, or agentID's
// ("" for every agent's): the leases a listing judges.
func (s *Store) leaseEntriesOf(ctx context.Context, agentID string) ([]taskItem, error) {
	if agentID != "" {
		if err := CheckID("agent_id", agentID); err != nil {
			return nil, err
		}
		return s.leasesOf(ctx, agentID)
	}
	// Every lease entry, whatever expiry the index shows: a lease
	// renewed just before its old expiry is still at that expiry in an
	// index that lags, and a bound on it would drop the lease before
	// the read below could find it live. The entries past their
	// expiry are the leases the sweep has yet to end, which it keeps
	// few.
	return s.liveLeaseEntries(ctx, nil)
}

// liveCheckouts judges lease entries of the index on their task items as
// they are: the i-th is entries[i]'s task's lease when it is live (and
// agentID's, when agentID is not ""), else nil.
func (s *Store) liveCheckouts(ctx context.Context, entries []taskItem, agentID string, now time.Time) ([]*Checkout, error) {
	// The index only proposes: each lease is judged on the task as it is.
	items, err := s.confirm(ctx, entries)
	if err != nil {
		return nil, err
	}
	live, err := s.liveLeases(ctx, items, now)
	if err != nil {
		return nil, err
	}
	byID := make(map[string]*Checkout, len(items))
	for _, it := range items {
		if live[it.TaskID] && (agentID == "" || it.Holder == agentID) {
			co := it.checkout()
			byID[it.TaskID] = &co
		}
	}
	out := make([]*Checkout, len(entries))
	for i, it := range entries {
		out[i] = byID[it.TaskID]
	}
	return out, nil
}

// confirm replaces task items read from an index, which may lag the table,
// with the items as they are, read consistently with BatchGetItem (100 keys
// a request), in the same order. A task that no longer exists is dropped.
func (s *Store) confirm(ctx context.Context, items []taskItem) ([]taskItem, error) {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.TaskID
	}
	fresh, err := s.readTasks(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("read tasks: %w", err)
	}
	out := make([]taskItem, 0, len(items))
	for _, it := range items {
		if f, ok := fresh[it.TaskID]; ok {
			out = append(out, *f)
		}
	}
	return out, nil
}

// queryTasks runs a Query on a tasks index and returns every page.
func (s *Store) queryTasks(ctx context.Context, index string, keyCond expression.KeyConditionBuilder) ([]taskItem, error) {
	return queryAll[taskItem](ctx, s.db, s.tasks, index, keyCond)
}
