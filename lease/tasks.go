package lease

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
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
	var waiting []string
	if len(blockers) > 0 {
		var err error
		if waiting, err = s.link(ctx, it.TaskID, blockers); err != nil {
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
		s.unlink(ctx, it.TaskID, stale)
		return Task{}, cur, nil
	}
	// A blocker done meanwhile unblocks the task, in writes after this
	// one, which another write may come between: the answer is what this
	// write left, and the settling a step of its own after it.
	read, err := s.settle(ctx, it.TaskID, waiting)
	if err != nil {
		return Task{}, nil, err
	}
	if len(waiting) == 0 {
		s.claims.wake()
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
		Status: StatusTodo, StatusShard: statusShard(StatusTodo, p.TaskID, s.shards.Status), Version: 1,
		CreatedAt: ms(now), CreatedKey: fmt.Sprintf("%013d#%s", ms(now), p.TaskID),
		ClaimHome: claimHome(p.Queue, p.TaskID, s.shards.Claim), ClaimKey: claimKey(prio, ms(now), p.TaskID),
	}
	it.ClaimShard = it.ClaimHome
	it.ClaimRank = it.ClaimKey
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
		it.NotBefore, it.ClaimKey = notBefore, delayedKey(notBefore, it.ClaimRank)
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
	if b := splitBody(&it); b != nil {
		if err := s.putBody(ctx, b); err != nil {
			return nil, err
		}
	}
	cur, err := s.putTaskItem(ctx, it)
	if err != nil || cur == nil {
		return cur, err
	}
	s.dropBody(ctx, it.TaskID, it.BodyToken) // the id was taken: nobody names this body
	return cur, s.fillBodies(ctx, cur)
}

func (s *Store) putTaskItem(ctx context.Context, it taskItem) (*taskItem, error) {
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
	// Blockers are read before anything is written: each is a task that
	// exists, or one that comes earlier in the batch. A batch with blockers
	// is written in its order, so that each task's blockers are there
	// before it; one without, concurrently.
	var outside []string
	graph := false
	for i, it := range items {
		for _, id := range it.BlockedBy {
			graph = true
			j := slices.IndexFunc(items[:i], func(o taskItem) bool { return o.TaskID == id })
			switch {
			case j >= 0:
			case slices.ContainsFunc(items[i:], func(o taskItem) bool { return o.TaskID == id }):
				return nil, InBatch(i, invalidField("blocked_by", CodeInvalidDependency, "blocked_by names %s, which comes later in the batch; put blockers first", id))
			default:
				outside = append(outside, id)
			}
		}
	}
	if len(outside) > 0 {
		got, err := s.readTasks(ctx, outside)
		if err != nil {
			return nil, err
		}
		for i, it := range items {
			for _, id := range it.BlockedBy {
				if slices.Contains(outside, id) && got[id] == nil {
					return nil, InBatch(i, invalidField("blocked_by", CodeInvalidDependency, "blocked_by names task %s, which does not exist", id))
				}
			}
		}
	}
	out := make([]BatchResult, len(items))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	if graph {
		g.SetLimit(1)
	}
	for i := range items {
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
	if err := s.fillBodies(ctx, it); err != nil {
		return Task{}, err
	}
	if err := s.fillGraph(ctx, it); err != nil {
		return Task{}, err
	}
	return it.task(live), nil
}

// checkNotBefore checks a not_before given on create or PATCH, and returns
// it in Unix ms: 0 for none, or for a time not after now (it keeps
// nothing from being granted).
func checkNotBefore(t *time.Time, now time.Time) (int64, error) {
	if t == nil || !t.After(now) {
		return 0, nil
	}
	if t.Year() >= 2200 {
		return 0, invalidField("not_before", CodeInvalidRequest, "not_before must be before the year 2200")
	}
	return ms(t.Truncate(time.Millisecond)), nil
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

// cursor is the decoded form of TaskPage.NextCursor: the listing it
// continues (its status and queue filters), the status the next page
// starts in, and where it starts in each of that status's shards.
type cursor struct {
	// Listing is 1 on a cursor that names its listing (ListStatus and
	// ListQueue); a cursor issued before cursors did has 0 and continues
	// the listing the request names, as it used to.
	Listing    int    `json:"l,omitempty"`
	ListStatus Status `json:"ls,omitempty"`
	ListQueue  string `json:"lq,omitempty"`
	Status     int    `json:"s"`
	// After holds, per shard, the created_key of the last task listed from
	// it: "" for none yet, shardDone for a shard listed to its end.
	After []string `json:"a,omitempty"`
}

// shardDone marks a shard listed to its end in a cursor.
const shardDone = "~"

func encodeCursor(c cursor) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor decodes a cursor of a store with n status shards. A cursor
// issued with fewer (the count has grown since) reads the shards it does
// not name from their start; one with more was not issued by this
// deployment.
func decodeCursor(s string, n int) (cursor, error) {
	var c cursor
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(s) > MaxCursorLen || json.Unmarshal(b, &c) != nil || c.Status < 0 || c.Status >= len(Statuses) ||
		c.After != nil && (len(c.After) == 0 || len(c.After) > n) {
		return cursor{}, notIssued()
	}
	if c.After != nil {
		c.After = append(c.After, make([]string, n-len(c.After))...)
	}
	for _, k := range c.After {
		if k != "" && k != shardDone && !validCreatedKey(k) {
			return cursor{}, notIssued()
		}
	}
	if c.Listing != 0 && c.Listing != 1 || c.Listing == 0 && (c.ListStatus != "" || c.ListQueue != "") ||
		c.ListStatus != "" && CheckListStatus(c.ListStatus) != nil || c.ListQueue != "" && !ValidID(c.ListQueue) {
		return cursor{}, notIssued()
	}
	return c, nil
}

// otherListing is the error for a cursor given with filters not its own.
func (c cursor) otherListing() error {
	if c.ListStatus == "" && c.ListQueue == "" {
		return invalidField("cursor", CodeInvalidRequest, "cursor continues the listing of every task: give no status or queue with it")
	}
	what := "tasks"
	if c.ListStatus != "" {
		what = string(c.ListStatus) + " tasks"
	}
	if c.ListQueue != "" {
		what += " in queue " + c.ListQueue
	}
	return invalidField("cursor", CodeInvalidRequest, "cursor continues the listing of %s: give that status and queue, or neither", what)
}

// validCreatedKey reports whether k could be a task's created_key: 13
// digits of milliseconds, '#', the task's id.
func validCreatedKey(k string) bool {
	ms, id, ok := strings.Cut(k, "#")
	if !ok || len(ms) != 13 || !ValidID(id) {
		return false
	}
	for _, c := range ms {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ListTasks lists tasks by status in creation order, a page at a time. With
// no status it walks every status (Statuses) in turn. A status's tasks are
// spread over the status shard count's index partitions; a page reads the
// next tasks of every shard at once and merges them by creation. A page's
// cursor continues its own listing: given alone, it keeps that listing's
// status and queue. Listings come from an index and so reflect the sweep: a
// task whose lease expired unswept is shown as the ending leads (todo, or
// failed) in the listing of every status, and in a listing of that one
// status once the sweep has recorded the ending; it is never shown with a
// live checkout.
func (s *Store) ListTasks(ctx context.Context, p ListTasksParams) (TaskPage, error) {
	if p.Limit == 0 {
		p.Limit = DefaultListLimit
	}
	if err := CheckLimit(p.Limit); err != nil {
		return TaskPage{}, err
	}
	if p.Status != "" {
		if err := CheckListStatus(p.Status); err != nil {
			return TaskPage{}, err
		}
	}
	if p.Queue != "" {
		if err := CheckQueue(p.Queue); err != nil {
			return TaskPage{}, err
		}
	}
	if err := CheckCursor(p.Cursor); err != nil {
		return TaskPage{}, err
	}
	c := cursor{}
	if p.Cursor != "" {
		var err error
		if c, err = decodeCursor(p.Cursor, s.shards.Status); err != nil {
			return TaskPage{}, err
		}
		// A cursor continues its own listing: given alone, it keeps that
		// listing's filters; with others, it is refused.
		switch {
		case c.Listing == 0: // issued before cursors named their listing
		case p.Status == "" && p.Queue == "":
			p.Status, p.Queue = c.ListStatus, c.ListQueue
		case p.Status != c.ListStatus || p.Queue != c.ListQueue:
			return TaskPage{}, c.otherListing()
		}
	}
	statuses := Statuses
	if p.Status != "" {
		statuses = []Status{p.Status}
	}
	if c.Status >= len(statuses) {
		return TaskPage{}, notIssued()
	}
	var filter *expression.ConditionBuilder
	if p.Queue != "" {
		f := expression.Name("queue").Equal(expression.Value(p.Queue))
		if p.Queue == DefaultQueue {
			f = f.Or(expression.AttributeNotExists(expression.Name("queue")))
		}
		filter = &f
	}
	var items []taskItem
	listed := map[string]Status{} // the status each task was listed under
	next := ""
	for i := c.Status; i < len(statuses) && len(items) < p.Limit; i++ {
		after := c.After
		if i != c.Status || after == nil {
			after = make([]string, s.shards.Status)
		}
		batch, pos, err := s.listStatus(ctx, statuses[i], after, p.Limit-len(items), filter)
		if err != nil {
			return TaskPage{}, err
		}
		for _, it := range batch {
			listed[it.TaskID] = statuses[i]
		}
		items = append(items, batch...)
		if !slices.ContainsFunc(pos, func(k string) bool { return k != shardDone }) {
			if len(items) >= p.Limit && i+1 < len(statuses) {
				next = encodeCursor(cursor{Listing: 1, ListStatus: p.Status, ListQueue: p.Queue, Status: i + 1})
			}
			continue // this status is listed to its end
		}
		next = encodeCursor(cursor{Listing: 1, ListStatus: p.Status, ListQueue: p.Queue, Status: i, After: pos})
		break
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
	ptrs := make([]*taskItem, len(items))
	for i := range items {
		ptrs[i] = &items[i]
	}
	if err := s.fillBodies(ctx, ptrs...); err != nil {
		return TaskPage{}, err
	}
	if err := s.fillGraph(ctx, ptrs...); err != nil {
		return TaskPage{}, err
	}
	page := TaskPage{Tasks: make([]Task, 0, len(items)), NextCursor: next}
	for _, it := range items {
		// A listing of every status shows a task where its item's status
		// puts it (a task whose lease has ended unswept shows its next
		// state there); a listing of one status, the tasks shown in it.
		t := it.task(live[it.TaskID])
		st := t.Status
		if p.Status == "" {
			st = it.Status
		}
		if st == listed[it.TaskID] && (p.Queue == "" || t.Queue == p.Queue) {
			page.Tasks = append(page.Tasks, t)
		}
	}
	return page, nil
}

// listStatus reads up to limit tasks of one status, in creation order,
// after the positions in after (one per shard), from every shard at once.
// It returns them and the positions after them. A shard read with a queue
// filter may stop before limit tasks without reaching its end; only tasks
// up to the earliest place such a shard stopped are surely in order, so a
// page may hold fewer than limit tasks and still have a next cursor. (The
// open statuses, todo and in_progress, are always read with a filter.)
func (s *Store) listStatus(ctx context.Context, st Status, after []string, limit int, filter *expression.ConditionBuilder) ([]taskItem, []string, error) {
	type read struct {
		items []taskItem
		stop  string // the key the Query stopped at; "" at the shard's end
	}
	reads := make([]read, len(after))
	// todo and in_progress share their partitions ("open"): the status is
	// a filter too.
	f := filter
	if statusGroup(st) != string(st) {
		c := nameStatus.Equal(expression.Value(string(st)))
		if filter != nil {
			c = c.And(*filter)
		}
		f = &c
	}
	g, gctx := errgroup.WithContext(ctx)
	for shard, pos := range after {
		if pos == shardDone {
			continue
		}
		g.Go(func() error {
			part := statusGroup(st) + "#" + strconv.Itoa(shard)
			b := expression.NewBuilder().WithKeyCondition(expression.Key("status_shard").Equal(expression.Value(part)))
			if f != nil {
				b = b.WithFilter(*f)
			}
			expr, _ := b.Build()
			in := &dynamodb.QueryInput{
				TableName: &s.tasks, IndexName: aws.String(schema.TasksByStatus),
				KeyConditionExpression:    expr.KeyCondition(),
				FilterExpression:          expr.Filter(),
				ExpressionAttributeNames:  expr.Names(),
				ExpressionAttributeValues: expr.Values(),
				Limit:                     aws.Int32(int32(limit)),
			}
			if pos != "" {
				_, id, _ := strings.Cut(pos, "#")
				in.ExclusiveStartKey = stringKey(map[string]string{"task_id": id, "status_shard": part, "created_key": pos})
			}
			out, err := s.db.Query(gctx, in)
			if err != nil {
				return fmt.Errorf("list tasks: %w", err)
			}
			if err := attributevalue.UnmarshalListOfMaps(out.Items, &reads[shard].items); err != nil {
				return err
			}
			if len(out.LastEvaluatedKey) > 0 {
				reads[shard].stop = plainKey(out.LastEvaluatedKey)["created_key"]
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, nil, err
	}
	// Tasks up to the earliest stop are every task of the status there.
	bound := ""
	for _, r := range reads {
		if r.stop != "" && (bound == "" || r.stop < bound) {
			bound = r.stop
		}
	}
	var all []taskItem
	for _, r := range reads {
		for _, it := range r.items {
			if bound == "" || it.CreatedKey <= bound {
				all = append(all, it)
			}
		}
	}
	slices.SortFunc(all, func(a, b taskItem) int { return strings.Compare(a.CreatedKey, b.CreatedKey) })
	all = all[:min(limit, len(all))]
	pos := slices.Clone(after)
	last := ""
	if len(all) > 0 {
		last = all[len(all)-1].CreatedKey
	}
	for shard, r := range reads {
		if after[shard] == shardDone {
			continue
		}
		// The shard's position: its last task listed, or, when all of it
		// up to where the Query stopped is listed, that stop.
		for _, it := range r.items {
			if it.CreatedKey <= last && (bound == "" || it.CreatedKey <= bound) {
				pos[shard] = it.CreatedKey
			}
		}
		switch {
		case r.stop == "" && (len(r.items) == 0 || r.items[len(r.items)-1].CreatedKey <= last):
			pos[shard] = shardDone
		case r.stop != "" && r.stop <= last:
			pos[shard] = r.stop
		case r.stop != "" && r.stop == bound && len(all) < limit:
			pos[shard] = r.stop // filtered out up to there
		}
	}
	return all, pos, nil
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
		var err error
		if items, err = s.leasesOf(ctx, agentID); err != nil {
			return nil, err
		}
	} else {
		for shard := range s.shards.Lease {
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
