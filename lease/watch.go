package lease

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Watchers.
//
// A watch is an item of its own (watch.go), in the inbox table under the
// task's watch partition, so that every transition writes the same small
// task item however many agents watch it. A task has at most MaxWatchers
// (100) watchers: past the bound a watch is 409 too_many_watchers, checked
// against a consistent read of the task's watches (concurrent watches can
// pass it by as many as race, a bounded overshoot); watching again only
// refreshes the watch. A watch records the task's eseq; the stream function
// tells, for each freeing, the watches placed before it, then deletes them
// (each conditioned on being the watch it read), and reads the watchers'
// heartbeat items in one batch, so that a removed agent, or an id
// registered again after the watch, is not told. A removal that lands
// between that read and the message's write leaves the message behind its
// emptied inbox; each message keeps when its watch was placed, and Inbox
// hides those of a removed agent (see Store.Inbox). A task item from
// before watch items may still carry a watch list (watchers); its next
// freeing tells those too, and the ending write removes the list.

// A watch is an item of its own in the inbox table, under the task's watch
// partition ("#watch#<task_id>"; '#' cannot occur in an agent id, so no
// agent's inbox meets it), one per watching agent. It is kept off the task
// item so that however many agents watch a task, every transition of that
// task writes the same small item: a watch list on the task item grew it
// by up to 100 entries, and every checkout and ending billed them.
//
// A watch records the task's eseq when it was placed. A freeing of the
// task (its event's seq S) tells every watch placed before it (eseq < S),
// once: the stream function reads the task's watches with a consistent
// Query (only for a task whose item says it has been watched: a task's
// first watch sets its watched flag, and is placed at the eseq that write
// returns, after every freeing written without the flag), writes each
// watcher's message (idempotent, as before) and then deletes each watch
// it told, conditioned on the watch being the one it read, so an agent
// that watches again meanwhile stays on. A watch placed
// after the freeing waits for the next one, as a watch written after the
// freeing's write always has.
//
// The stream function may be behind by several freeings when an agent
// watches again (it runs about a second after each write, and longer when
// it is held up), so one agent's watch of a task has places: its first
// (eseq), and one more (asks) for each watch placed after the task had
// moved on from the one before; last_eseq is the latest. Each freeing
// tells the watch once if it has a place before the freeing, and uses up
// every such place: the watch then waits from its first place after the
// freeing, or is deleted. So an agent that watched before each of two
// freeings is told of both, as a watch list on the task item (which each
// freeing's write emptied) told it, however late the stream function
// handles them (TestWatchAgainAfterEachOfTwoUnhandledFreeingsIsToldOfBoth).

// watchRetention is how long a watch that no freeing has used is kept
// (TTL, garbage collection only).
const watchRetention = 30 * 24 * time.Hour

// watchItem is one agent's watch of a task.
type watchItem struct {
	Partition string `dynamodbav:"agent_id"`   // "#watch#<task_id>"
	AgentID   string `dynamodbav:"message_id"` // the watcher
	At        int64  `dynamodbav:"at"`
	// ESeq is the task's eseq when the watch was first placed: a freeing
	// after it tells the watch. LastESeq is the task's eseq at the latest
	// watch: a freeing before it does not use the watch up.
	ESeq     int64 `dynamodbav:"eseq"`
	LastESeq int64 `dynamodbav:"last_eseq,omitempty"`
	// Asks are the task's eseqs at the agent's later watches, one for each
	// watch placed after the task had moved on from the one before: a
	// freeing between two of them uses up the earlier and leaves the later
	// waiting for the next freeing (see nextPlace).
	Asks []int64 `dynamodbav:"asks,numberset,omitempty"`
	TTL  int64   `dynamodbav:"ttl"`
}

// maxWatchAsks bounds a watch's Asks: an agent that watches again on
// every change of a task while the stream function is held up keeps at
// most this many places; past it, only its first and latest count, and a
// freeing between two places it lost tells it nothing.
const maxWatchAsks = 16

// nextPlace is where w waits once a freeing with event seq seq has told
// it: its first place at or after that freeing (a watch placed after it),
// or -1 when it has none, and is used up.
func nextPlace(w watchItem, seq int64) int64 {
	next := int64(-1)
	for _, a := range append([]int64{w.LastESeq}, w.Asks...) {
		if a >= seq && (next < 0 || a < next) {
			next = a
		}
	}
	return next
}

func watchPartition(taskID string) string { return "#watch#" + taskID }

// Watch puts agentID on the task's watch list: it gets one task_available
// message the next time the task is freed. An agent already on it keeps
// its place (a freeing since it was first placed tells it) and, when the
// task has moved on since its latest watch, gains one for the next
// freeing after now; a task has at most MaxWatchers watchers.
func (s *Store) Watch(ctx context.Context, taskID, agentID string) error {
	if err := CheckID("task_id", taskID); err != nil {
		return err
	}
	cur, err := s.getTask(ctx, taskID)
	if err != nil {
		return err
	}
	if cur == nil {
		return ErrTaskNotFound
	}
	return s.watch(ctx, cur, agentID)
}

// watch places agentID's watch on the task cur was read as.
func (s *Store) watch(ctx context.Context, cur *taskItem, agentID string) error {
	if cur.Watched != nil && !*cur.Watched {
		var err error
		if cur, err = s.markWatched(ctx, cur.TaskID); err != nil {
			return err
		}
	}
	for range retries(ctx) {
		placed, err := s.placeWatch(ctx, cur, agentID)
		if err != nil || placed {
			return err
		}
		// The write's condition failed: the watch it was pinned to (a
		// removed self's, replaced by the agent registered again) was
		// used up by the change stream, expired, or was refreshed by
		// the new agent meanwhile. Read the watches again and decide
		// anew: only a watch now there and the new agent's own may
		// stand for this one (TestReregisteredWatcherRacingTheStreamKeepsItsWatch).
	}
	return fmt.Errorf("watch %s: %w", cur.TaskID, ErrBusy)
}

// placeWatch writes agentID's watch on the task cur was read as, from a
// fresh read of its watches. placed is false when the write's condition
// (the old watch it replaces is still as read) failed: nothing was
// written, and the caller reads again.
func (s *Store) placeWatch(ctx context.Context, cur *taskItem, agentID string) (placed bool, err error) {
	watchers, err := s.watches(ctx, cur.TaskID)
	if err != nil {
		return false, err
	}
	var mine *watchItem
	for i := range watchers {
		if watchers[i].AgentID == agentID {
			mine = &watchers[i]
		}
	}
	if mine == nil && len(watchers)+len(cur.Watchers) >= MaxWatchers {
		return false, ErrTooManyWatchers
	}
	// Watching again refreshes the watch's time but keeps its place: the
	// eseq it was first placed at, so that a freeing since then still
	// tells it, as a watch list on the task item did. A watch placed
	// before the agent's id was registered (again) is its removed self's:
	// the new agent's watch starts from now, on condition that the old
	// one is still as read.
	// A watch placed again after the task has moved on (its eseq is past
	// the watch's latest place) is a place of its own, kept in asks, so
	// that a freeing in between, not yet handled by the stream function,
	// uses up the earlier place and leaves this one for the next freeing.
	// A removed agent that watches again keeps its watch's time: the
	// watch stays its removed self's, whom no freeing tells, even when the
	// id is registered again in the same millisecond as this write.
	var place expression.OperandBuilder = expression.IfNotExists(expression.Name("eseq"), expression.Value(cur.ESeq))
	b := expression.NewBuilder()
	now := s.clock()
	at := ms(now)
	upd := expression.Set(expression.Name("ttl"), expression.Value(now.Add(watchRetention).Unix())).
		Set(expression.Name("last_eseq"), expression.Value(cur.ESeq))
	if mine != nil {
		hb, err := s.heartbeat(ctx, agentID)
		if err != nil {
			return false, err
		}
		if hb != nil && hb.Removed {
			at = mine.At
		}
		switch {
		case hb != nil && hb.RegisteredAt > mine.At:
			place = expression.Value(cur.ESeq)
			b = b.WithCondition(expression.Name("at").Equal(expression.Value(mine.At)))
			if len(mine.Asks) > 0 {
				upd = upd.Remove(expression.Name("asks"))
			}
		case cur.ESeq > max(mine.ESeq, mine.LastESeq) && len(mine.Asks) < maxWatchAsks:
			upd = upd.Add(expression.Name("asks"), expression.Value(&types.AttributeValueMemberNS{Value: []string{strconv.FormatInt(cur.ESeq, 10)}}))
		}
	}
	upd = upd.Set(expression.Name("eseq"), place).Set(expression.Name("at"), expression.Value(at))
	expr, err := b.WithUpdate(upd).Build()
	if err != nil {
		return false, err
	}
	if _, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.inbox,
		Key: map[string]types.AttributeValue{
			"agent_id":   &types.AttributeValueMemberS{Value: watchPartition(cur.TaskID)},
			"message_id": &types.AttributeValueMemberS{Value: agentID},
		},
		ConditionExpression:       expr.Condition(),
		UpdateExpression:          expr.Update(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	}); err != nil {
		if _, failed := conditionFailed(err); failed {
			return false, nil
		}
		return false, fmt.Errorf("watch %s: %w", cur.TaskID, err)
	}
	return true, nil
}

// markWatched sets the task's watched flag, so that its freeings from now
// on read its watches, and returns the task as that write left it: the
// watch is placed at that eseq, after every freeing written without the
// flag, none of which tells it. It is not a transition: the version is
// not moved, and the change stream has nothing to do for it.
func (s *Store) markWatched(ctx context.Context, taskID string) (*taskItem, error) {
	cur, applied, err := s.write(ctx, taskID, terms{expression.AttributeExists(expression.Name("task_id"))},
		expression.Set(expression.Name("watched"), expression.Value(true)), types.ReturnValueAllNew)
	if err != nil {
		return nil, err
	}
	if !applied {
		return nil, ErrTaskNotFound
	}
	return cur, nil
}

// watches reads a task's watches, consistently.
func (s *Store) watches(ctx context.Context, taskID string) ([]watchItem, error) {
	out, err := queryAll[watchItem](ctx, s.db, s.inbox, "", expression.Key("agent_id").Equal(expression.Value(watchPartition(taskID))))
	if err != nil {
		return nil, fmt.Errorf("watchers of %s: %w", taskID, err)
	}
	return out, nil
}

// dropWatch uses up a watch that the freeing of event seq seq has told:
// it deletes it, unless the agent watched again after that freeing (its
// last_eseq is not before seq), in which case the watch stays, placed at
// its first place after the freeing (nextPlace), for the next freeing, as
// an entry added to a watch list after the freeing's write would have.
func (s *Store) dropWatch(ctx context.Context, w watchItem, seq int64) error {
	key := map[string]types.AttributeValue{
		"agent_id":   &types.AttributeValueMemberS{Value: w.Partition},
		"message_id": &types.AttributeValueMemberS{Value: w.AgentID},
	}
	last := expression.Name("last_eseq")
	expr, _ := expression.NewBuilder().WithCondition(expression.Name("eseq").Equal(expression.Value(w.ESeq)).
		And(expression.Or(expression.AttributeNotExists(last), last.LessThan(expression.Value(seq))))).Build()
	_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &s.inbox, Key: key,
		ConditionExpression:                 expr.Condition(),
		ExpressionAttributeNames:            expr.Names(),
		ExpressionAttributeValues:           expr.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	returned, failed := conditionFailed(err)
	if !failed {
		if err != nil {
			return fmt.Errorf("drop the watch of %s on %s: %w", w.AgentID, w.Partition, err)
		}
		return nil
	}
	var now watchItem
	if len(returned) == 0 || attributevalue.UnmarshalMap(returned, &now) != nil || now.ESeq != w.ESeq {
		return nil // gone, or already moved on
	}
	// Watched again since the freeing: the watch now waits from its first
	// place after it, and forgets the places the freeing used up.
	next := nextPlace(now, seq)
	if next < 0 {
		return nil // cannot be: last_eseq is not before seq
	}
	upd := expression.Set(expression.Name("eseq"), expression.Value(next))
	var stale []string
	for _, a := range now.Asks {
		if a < next {
			stale = append(stale, strconv.FormatInt(a, 10))
		}
	}
	if len(stale) > 0 {
		upd = upd.Delete(expression.Name("asks"), expression.Value(&types.AttributeValueMemberNS{Value: stale}))
	}
	up, _ := expression.NewBuilder().
		WithCondition(expression.Name("eseq").Equal(expression.Value(w.ESeq))).
		WithUpdate(upd).Build()
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.inbox, Key: key,
		ConditionExpression:       up.Condition(),
		UpdateExpression:          up.Update(),
		ExpressionAttributeNames:  up.Names(),
		ExpressionAttributeValues: up.Values(),
	})
	if _, failed := conditionFailed(err); failed {
		return nil
	}
	if err != nil {
		return fmt.Errorf("move the watch of %s on %s: %w", w.AgentID, w.Partition, err)
	}
	return nil
}

// freeingWatches hands out, to the freeings of one batch of changes in
// order, the watches each tells: for each task its watches are read once,
// and a freeing with event seq seq takes every watch placed before it that
// an earlier freeing of the batch did not take.
type freeingWatches struct {
	s    *Store
	read map[string][]watchItem
	// placed is, per watch ("task\x00agent"), the eseq it is placed at in
	// this batch: a freeing after it tells it; -1 once a freeing used it up.
	placed map[string]int64
	told   map[string]toldWatch // the latest freeing that told each watch
}

func (f *freeingWatches) take(ctx context.Context, taskID string, seq int64) (map[string]int64, error) {
	ws, ok := f.read[taskID]
	if !ok {
		var err error
		if ws, err = f.s.watches(ctx, taskID); err != nil {
			return nil, err
		}
		if f.read == nil {
			f.read, f.placed, f.told = map[string][]watchItem{}, map[string]int64{}, map[string]toldWatch{}
		}
		f.read[taskID] = ws
		for _, w := range ws {
			f.placed[taskID+"\x00"+w.AgentID] = w.ESeq
		}
	}
	out := map[string]int64{}
	for _, w := range ws {
		k := taskID + "\x00" + w.AgentID
		if p := f.placed[k]; p < 0 || p >= seq {
			continue
		}
		out[w.AgentID] = w.At
		f.told[k] = toldWatch{w, seq}
		f.placed[k] = nextPlace(w, seq) // watched again after this freeing, or used up
	}
	return out, nil
}

// toldWatch is a watch and the seq of the freeing that told it.
type toldWatch struct {
	watchItem
	seq int64
}

// drop deletes the watches the batch's freeings told, once their messages
// are written.
func (f *freeingWatches) drop(ctx context.Context) error {
	for _, k := range slices.Sorted(maps.Keys(f.told)) {
		t := f.told[k]
		if err := f.s.dropWatch(ctx, t.watchItem, t.seq); err != nil {
			return err
		}
	}
	return nil
}
