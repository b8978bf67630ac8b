package lease

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"
)

// Dependencies.
//
// A task may name up to MaxBlockers tasks it is blocked by (blocked_by,
// at creation or by PATCH). The task item keeps the list as named and, in
// the string set waiting_on, those blockers that were not done when last
// looked at; while waiting_on is not empty the task is blocked: out of
// the claim index, and a named checkout answers BlockedError.
//
// The edge is kept on the blocker's side as an item of its own in the
// inbox table, "#deps#<blocker>" / <dependent> ('#' cannot occur in an id,
// as with the watches), and the blocker's item carries has_dependents.
// Keeping the dependents' ids off the blocker's item keeps every
// transition of a task that blocks a thousand others at one write unit.
//
// Unblocking is the change stream's work, off the request path: when a
// change records a completion of a task with has_dependents,
// ApplyChanges reads it (still done?) and its edges (one consistent
// Query) and unblocks each
// dependent (unblock): one conditional UpdateItem that takes the blocker
// out of waiting_on and, when it was the last one and the task is
// blocked, makes the task todo, puts it in the claim index and records
// an unblocked event, whose own change tells the watchers
// (task_available, reason unblocked), publishes TaskAvailable and wakes
// the process's claims waiting on its queue. The write is conditioned on the blocker
// being in waiting_on, so a change delivered again, or two writers
// racing, unblock each dependent once: exactly one unblocked event per
// unblocking. A named checkout that
// comes first, having read every blocker the task waits on done, unblocks
// it in its own grant (checkout.go); the stream's write then finds the
// blocker gone from waiting_on and does nothing.
//
// Creating a dependent while its blocker completes must not strand it.
// The writer (create or PATCH) puts the edges first, then sets
// has_dependents on each blocker that lacks it, then writes the task with
// waiting_on = the blockers not done as read, and then reads those
// blockers again and unblocks the task from any that is done by then
// (settle). The writer answers with what its own write left (blocked):
// the settling is a step of its own after it, and another write may come
// between the two. A completion before that last read is seen by it; one after
// it finds the flag, the edge and the task waiting, and the stream
// unblocks it. A writer may stop before it settles (killed, or its
// write's answer lost and the retry answered "exists"): so the stream
// settles too, for every change that leaves a task blocked on blockers it
// did not wait on before (settleChange), reading them after the change.
// Every path makes the same conditional writes, so whichever comes second
// finds nothing to do.
//
// Two blockers completing at once each find the other still waited on,
// and each takes only itself out: the task is left blocked, waiting on
// nothing. Whoever takes a blocker out and sees that unblocks it, on
// condition that nothing is waited on, and so does the stream for any
// change that leaves a task so; that write applies once.
//
// A blocker that is cancelled or fails stays in waiting_on: its
// dependents stay blocked, and GET shows each blocker's status, which
// says why. Reopening it and completing it releases them. A task that is
// cancelled keeps its waiting_on. A task reopened waits on those of its
// blockers that are not done as read at its reopen (reopenGraph), and is
// blocked while there are any, settled after its write as any PATCH
// that leaves a task blocked: a blocker done when the task was unblocked
// may have been reopened since. PATCH replaces blocked_by on a todo or blocked task only; the
// edges of blockers it drops are deleted after its write (an edge left by
// a crash is harmless: unblock finds the blocker not waited on; GET
// shows the ids in blocks until then).
//
// Reopening a done blocker. A dependent released by a blocker's
// completion must not be claimed while the blocker is done no more. When
// a change takes a task with has_dependents out of done (a PATCH to todo,
// a checkout expecting done), the stream reads the blocker and, if it is
// still not done, its edges, and blocks each dependent again (reblock):
// one conditional write on condition that the dependent still names the
// blocker and has not started, that makes a todo task blocked (out of the
// claim index, no event) or adds the blocker to a blocked one's
// waiting_on. A dependent in progress keeps its lease and is marked as
// waiting on the blocker: if that lease ends other than by completion,
// the ending's own write makes it blocked rather than todo (endLease),
// with the delay of a not_before still to come that it shows. A
// dependent done, cancelled or failed is left alone. The stream passes a blocker's completions and reopens on in
// the order they were written, each as the blocker is when the stream
// reads it: a completion of a blocker that is not done by then unblocks
// nothing, and a reopen of one that is done again blocks nothing, since
// the change that left it so comes later and does the work: all the
// completions and reopens of one blocker in a batch come to one pass over
// its dependents, after one read of it (passOnBlocker). So a dependent
// never waits on a done blocker once the stream has caught up, and is not
// unblocked for a moment by a completion already undone. A grant in the
// moment before the reblocking wins over it, as a checkout in the moment
// before an unblocking does. The reblocked task's own
// change is settled like any that leaves a task blocked (settleChange).
//
// A writer that read a blocker done and then wrote the task not waiting
// on it (a create or PATCH naming it, a reopen of the task, an
// unblocking) may have been overtaken by a reopen of the blocker between
// its read and its write, whose pass found the task not naming it yet,
// finished, or still waiting on it, and did nothing. So such a writer
// reads them again after its write, and reblocks the task on any not done
// by then (recheck): a reopen after that read finds the task's write. (A
// writer stopped in between leaves the task so; the stream's own
// unblocking needs no such read: a reopen after its read of the blocker
// is passed on after its writes, in the order of the blocker's changes.)
//
// Cycles are refused: before a PATCH names new blockers, a walk from them
// along blocked_by (a consistent BatchGetItem per level, at most
// maxGraphWalk tasks) must not reach the task. A new task cannot close a
// cycle, since no task can name it before it exists. Two PATCHes that
// each add one edge of a cycle could each walk before the other's write,
// and both pass: so a PATCH writes new blockers only if no change of the
// blocked_by of a task it walked was written since its walk began (the
// graph's epoch and its log, below), and walks again if one was. Only its
// writes hold the graph's lock, never its walk: a long walk delays no one
// else, and changes elsewhere in the graph do not send it back.

// Attempts and failed tasks.
//
// Every grant (checkout, claim, takeover) adds one to the task's
// attempts, in the grant's own write; the lease's attempt is that count.
// An attempt fails when its lease ends by timeout, by its holder's death,
// or by a release with outcome failed; failures counts them since the
// last reopen, however the attempt ended: the sweep's ending adds one, and
// so does a takeover at checkout, which is a write pinned to the lease it
// read (the plain grant takes only a free task, so it never ends a lease
// it did not read). When the attempt that fails
// is the task's last (attempts >= max_attempts), the ending write makes
// the task failed instead, and records two events: the ending, then
// failed (reason: how the attempt ended). Its change tells the watchers
// (task_available, reason failed) and publishes TaskFailed. A failed
// task is terminal like done: no checkout expects it, and a PATCH to todo
// reopens it with attempts and failures back to zero and no not_before.
//
// Which ending to write depends on the attempts: a release with outcome
// failed reads the task first (it needs the failures for the retry wait
// too) and pins its write to what it read; the sweep, which reads leases
// from an index, writes the ending of an attempt below the limit, and
// when that fails on the limit alone writes the failing one; a checkout
// that finds an expired or dead holder's lease at the limit ends it as
// failed (endEnded) instead of taking it over, and answers that the task
// is failed.

// maxGraphWalk bounds the tasks a cycle check reads.
const maxGraphWalk = 10000

// depsPartition is the inbox-table partition of a blocker's edges.
func depsPartition(blocker string) string { return "#deps#" + blocker }

// edgeItem says dependent names blocker in its blocked_by.
type edgeItem struct {
	Blocker   string `dynamodbav:"agent_id"`
	Dependent string `dynamodbav:"message_id"`
	At        int64  `dynamodbav:"at"`
	// By names the write that recorded it (a create or PATCH): an edge is
	// deleted only on condition that it is still the one read or written,
	// so that an edge recorded again meanwhile stays (unlinkIf).
	By string `dynamodbav:"by,omitempty"`
	// Named is how many blockers the dependent named when the edge was
	// written (0 on edges written before it was kept): a hint for the
	// unblocking of a dependent of several (unblockDependent).
	Named int `dynamodbav:"named,omitempty"`
}

// checkBlockers checks a blocked_by list of taskID and drops repeats.
func checkBlockers(taskID string, ids []string) ([]string, error) {
	var out []string
	for i, id := range ids {
		if err := CheckID(fmt.Sprintf("blocked_by[%d]", i), id); err != nil {
			return nil, err
		}
		if id == taskID {
			return nil, invalidField("blocked_by", CodeInvalidDependency, "a task cannot be blocked by itself (%s)", id)
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	if len(out) > MaxBlockers {
		return nil, invalidField("blocked_by", CodeInvalidDependency, "blocked_by names %d tasks; at most %d", len(out), MaxBlockers)
	}
	return out, nil
}

// readTasks reads the task items of ids consistently, by id.
func (s *Store) readTasks(ctx context.Context, ids []string) (map[string]*taskItem, error) {
	items, err := batchGet[taskItem](ctx, s.db, s.tasks, uniqueKeys(ids, taskKey), "", nil)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*taskItem, len(items))
	for i := range items {
		out[items[i].TaskID] = &items[i]
	}
	return out, nil
}

// readBlockers reads the blockers ids (checked by checkBlockers) and
// refuses an unknown one.
func (s *Store) readBlockers(ctx context.Context, ids []string) (map[string]*taskItem, error) {
	got, err := s.readTasks(ctx, ids)
	if err != nil {
		return nil, err
	}
	for _, id := range ids {
		if got[id] == nil {
			return nil, invalidField("blocked_by", CodeInvalidDependency, "blocked_by names task %s, which does not exist", id)
		}
	}
	return got, nil
}

// checkCycle refuses blockers of taskID from which, along blocked_by, the
// task itself can be reached. walked is every task the walk read the
// blocked_by of: only a change of one of those can make its answer wrong.
func (s *Store) checkCycle(ctx context.Context, taskID string, blockers map[string]*taskItem) (walked map[string]bool, err error) {
	seen := map[string]bool{}
	var next []string
	visit := func(it *taskItem) {
		for _, id := range it.BlockedBy {
			if !seen[id] {
				seen[id] = true
				next = append(next, id)
			}
		}
	}
	for _, it := range blockers {
		seen[it.TaskID] = true
		visit(it)
	}
	for len(next) > 0 {
		if seen[taskID] {
			break
		}
		if len(seen) > maxGraphWalk {
			return nil, invalidField("blocked_by", CodeInvalidDependency, "the tasks blocked_by leads to are more than %d; a cycle cannot be ruled out", maxGraphWalk)
		}
		level := next
		next = nil
		got, err := s.readTasks(ctx, level)
		if err != nil {
			return nil, err
		}
		if s.walked != nil {
			s.walked()
		}
		for _, it := range got {
			visit(it)
		}
	}
	if seen[taskID] {
		return nil, invalidField("blocked_by", CodeDependencyCycle, "blocked_by would close a cycle: %s is already, through its blockers, a blocker of them", taskID)
	}
	return seen, nil
}

// link records that taskID names blockers (read by readBlockers): an edge
// per blocker, then has_dependents on each blocker that lacks it (which
// leaves the blocker's version, so a create refused after it changes
// nothing a client sees; its edges are taken away again). It
// returns the blockers not done, by the latest read of each.
func (s *Store) link(ctx context.Context, taskID string, blockers map[string]*taskItem, by string) ([]string, error) {
	if err := s.checkDependents(ctx, taskID, blockers); err != nil {
		return nil, err
	}
	now := ms(s.clock())
	named := len(blockers) // read here: the goroutines below write the map
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for id, it := range maps.Clone(blockers) {
		g.Go(func() error {
			item, err := attributevalue.MarshalMap(edgeItem{Blocker: depsPartition(id), Dependent: taskID, At: now, By: by, Named: named})
			if err != nil {
				return err
			}
			if _, err := s.db.PutItem(gctx, &dynamodb.PutItemInput{TableName: &s.inbox, Item: item}); err != nil {
				return fmt.Errorf("record that %s is blocked by %s: %w", taskID, id, err)
			}
			if it.HasDependents {
				return nil
			}
			// A flag for the change stream, not a change of the blocker: its
			// version stays (as the watched flag's, watch.go).
			after, applied, err := s.write(gctx, id, terms{expression.AttributeExists(expression.Name("task_id"))},
				expression.Set(expression.Name("has_dependents"), expression.Value(true)), types.ReturnValueAllNew)
			if err != nil {
				return err
			}
			if applied {
				mu.Lock()
				blockers[id] = after
				mu.Unlock()
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return notDone(blockers), nil
}

// checkDependents refuses blockers that already block maxDependents tasks
// other than taskID. Only a blocker that has dependents is counted (one
// Query of its edges, COUNT), so naming a task for the first time costs
// nothing more. Writers that name one blocker at once may each pass the
// count: the bound holds up to their number.
func (s *Store) checkDependents(ctx context.Context, taskID string, blockers map[string]*taskItem) error {
	for id, it := range blockers {
		if !it.HasDependents {
			continue
		}
		n, err := queryCount(ctx, s.db, s.inbox, expression.Key("agent_id").Equal(expression.Value(depsPartition(id))), s.maxDependents)
		if err != nil {
			return err
		}
		if n < s.maxDependents {
			continue
		}
		edge, err := getItem[edgeItem](ctx, s.db, s.inbox, map[string]types.AttributeValue{
			"agent_id": &types.AttributeValueMemberS{Value: depsPartition(id)}, "message_id": &types.AttributeValueMemberS{Value: taskID},
		})
		if err != nil {
			return err
		}
		if edge == nil {
			return invalidField("blocked_by", CodeInvalidDependency, "task %s already blocks %d tasks, the most one task may block", id, s.maxDependents)
		}
	}
	return nil
}

// notDone is the ids of blockers, as read, that are not done: what a task
// naming them waits on. Sorted.
func notDone(blockers map[string]*taskItem) []string {
	var waiting []string
	for id, it := range blockers {
		if it.Status != StatusDone {
			waiting = append(waiting, id)
		}
	}
	slices.Sort(waiting)
	return waiting
}

// settle reads taskID's blockers waited on again, after the task's write,
// and unblocks the task from each that is done by now (see "Creating a
// dependent while its blocker completes"). It returns the blockers read.
func (s *Store) settle(ctx context.Context, taskID string, waiting []string) (map[string]*taskItem, error) {
	if len(waiting) == 0 {
		return nil, nil
	}
	got, err := s.readTasks(ctx, waiting)
	if err != nil {
		return nil, err
	}
	var unblocked []string
	for _, id := range waiting {
		if it := got[id]; it != nil && it.Status == StatusDone {
			if err := s.unblock(ctx, taskID, id); err != nil {
				return nil, err
			}
			unblocked = append(unblocked, id)
		}
	}
	// Read done, and reopened since, perhaps before this unblocking.
	if err := s.recheck(ctx, taskID, unblocked); err != nil {
		return nil, err
	}
	return got, nil
}

// unblock takes blocker out of taskID's waiting_on; when it was the last
// one of a blocked task, the task becomes todo, claimable, with an
// unblocked event. Nothing happens when the task does not wait on
// blocker (any more).
//
// The last blocker's unblocking is one write (unblockWrite, on condition
// that the blocker is the only one waited on). When more are waited on,
// or the task is not blocked, the blocker is taken out alone, on
// condition that it is not by then the only one of a blocked task (two
// blockers completing at once, or a marked task's lease ending in
// between): then the unblocking write is tried again instead. A task
// left blocked waiting on nothing (by a writer that stopped in between)
// is unblocked by a write on condition that nothing is waited on, the one
// the change stream makes too. Either way the unblocking write can apply
// once.
func (s *Store) unblock(ctx context.Context, taskID, blocker string) error {
	return s.unblockFrom(ctx, taskID, blocker, false)
}

// unblockDependent is unblock of the dependent of blocker that edge
// names, by the blocker's completion. A refused write bills the whole
// item it was tried on, so the unblocking write is not tried first on a
// dependent that will refuse it: one that named several blockers is read
// first (eventually consistent, half a read unit up to 4 KB), and, when
// it waits on others too, blocker is taken out alone at once (one write
// where trying the unblocking first made two). A dependent of one, or
// read wrong (the read is a hint: both writes are conditioned), takes
// the usual way.
func (s *Store) unblockDependent(ctx context.Context, edge edgeItem, blocker string) error {
	takeOut := false
	if edge.Named > 1 {
		proj, _ := expression.NewBuilder().WithProjection(expression.NamesList(nameStatus, nameWaitingOn)).Build()
		out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
			TableName: &s.tasks, Key: taskKey(edge.Dependent),
			ProjectionExpression: proj.Projection(), ExpressionAttributeNames: proj.Names(),
		})
		if err != nil {
			return fmt.Errorf("get task %s: %w", edge.Dependent, err)
		}
		var it taskItem
		if len(out.Item) > 0 && attributevalue.UnmarshalMap(out.Item, &it) == nil {
			takeOut = slices.Contains(it.WaitingOn, blocker) && (it.Status != StatusBlocked || len(it.WaitingOn) > 1)
		}
	}
	return s.unblockFrom(ctx, edge.Dependent, blocker, takeOut)
}

// unblockFrom is unblock; with takeOut, its first write takes blocker
// out alone, as for a task that waits on others too.
func (s *Store) unblockFrom(ctx context.Context, taskID, blocker string, takeOut bool) error {
	waits := expression.Contains(nameWaitingOn, blocker)
	var floor int64
	for range retries(ctx) {
		now := s.clockAfter(floor)
		last := expression.Size(nameWaitingOn).Equal(expression.Value(1))
		var cur *taskItem
		if takeOut {
			takeOut = false // once: refused, it was the last after all
		} else {
			var applied bool
			var err error
			cur, applied, err = s.unblockWrite(ctx, taskID, blocker, now, waits, last)
			switch {
			case err != nil:
				return err
			case applied || cur == nil:
				return nil
			case cur.Status == StatusBlocked && len(cur.WaitingOn) == 1 && cur.WaitingOn[0] == blocker:
				floor = cur.LastAt // lost to a later write only
				continue
			}
		}
		switch {
		case cur == nil || slices.Contains(cur.WaitingOn, blocker):
			// Not the last blocker, or the task is not blocked (cancelled,
			// say): only take the blocker out, unless the task has become
			// blocked on it alone meanwhile (a lease of a marked task
			// ended): then the unblocking write, one write as ever.
			lastOfBlocked := nameStatus.Equal(expression.Value(string(StatusBlocked))).And(last)
			after, applied, err := s.update(ctx, taskID, terms{waits, expression.Not(lastOfBlocked)},
				expression.Delete(nameWaitingOn, expression.Value(&types.AttributeValueMemberSS{Value: []string{blocker}})), types.ReturnValueAllNew)
			if err != nil {
				return err
			}
			if !applied {
				continue // it moved meanwhile: look again
			}
			cur = after
		}
		if cur.Status == StatusBlocked && len(cur.WaitingOn) == 0 {
			return s.unblockEmptied(ctx, taskID, blocker)
		}
		return nil
	}
	return fmt.Errorf("unblock %s: %w", taskID, ErrBusy)
}

// unblockEmptied unblocks a blocked task that waits on nothing any more
// (see unblock): once, on condition that it is still so.
func (s *Store) unblockEmptied(ctx context.Context, taskID, blocker string) error {
	var floor int64
	for range retries(ctx) {
		now := s.clockAfter(floor)
		cur, applied, err := s.unblockWrite(ctx, taskID, blocker, now, expression.AttributeNotExists(nameWaitingOn))
		switch {
		case err != nil || applied:
			return err
		case cur != nil && cur.Status == StatusBlocked && len(cur.WaitingOn) == 0 && lostToLater(cur, now):
			floor = cur.LastAt
			continue
		}
		return nil
	}
	return fmt.Errorf("unblock %s: %w", taskID, ErrBusy)
}

// unblockedTransition records an unblocking in upd, at `at` (epoch ms), by
// blocker ("" when not known, unblockedByPatch for a PATCH of blocked_by):
// the transition whose event, unblocked, tells the task's watchers.
func unblockedTransition(upd expression.UpdateBuilder, at int64, blocker string) expression.UpdateBuilder {
	upd = upd.Set(nameESeq, nameESeq.Plus(expression.Value(1))).
		Set(expression.Name("last_op"), expression.Value(string(EventUnblocked))).
		Set(expression.Name("last_at"), expression.Value(at)).
		Set(namePriorAt, priorAt)
	if blocker != "" {
		return upd.Set(expression.Name("unblocked_by"), expression.Value(blocker))
	}
	return upd.Remove(expression.Name("unblocked_by"))
}

// unblockWrite makes a blocked task todo, in the claim index, with its
// unblocked event (by blocker, "" when not known), on condition that it
// is blocked, at now, and conds.
func (s *Store) unblockWrite(ctx context.Context, taskID, blocker string, now time.Time, conds ...expression.ConditionBuilder) (*taskItem, bool, error) {
	cond := terms{nameStatus.Equal(expression.Value(string(StatusBlocked))), timeCond(now)}.and(conds...)
	upd := setStatus(expression.UpdateBuilder{}, taskID, StatusTodo, s.shards.Status).
		Remove(nameWaitingOn).
		Set(nameClaimShard, expression.IfNotExists(expression.Name("claim_home"), expression.Value(claimHome(DefaultQueue, taskID, s.shards.Claim))))
	upd = unblockedTransition(upd, ms(now), blocker)
	// The attributes it set (no read units), claim_shard among them: the
	// queue whose waiting claims it wakes.
	wctx, sends := countSends(ctx)
	cur, applied, err := s.update(wctx, taskID, cond, upd, types.ReturnValueUpdatedNew)
	if applied || err == nil && sends.Load() > 1 && cur != nil && cur.LastOp == EventUnblocked && cur.LastAt == ms(now) && cur.claimable() {
		// Made, or, sent again (its answer lost: sends.go), refused on an
		// unblocking at its own instant: its own, or one just like it,
		// whose wake costs the claims a look at most.
		s.claims.freed(taskID)
		s.claims.wake(wokenQueue(cur))
	}
	return cur, applied, err
}

// settleChange is the change stream's part in keeping every dependent
// unblocked once its blockers are done, whatever stopped a writer (see
// "Creating a dependent while its blocker completes"): a change that left
// a task blocked while waiting on blockers it did not wait on before (a
// creation, a PATCH of blocked_by) has them read and settled, as its
// writer should have; one that left a task blocked waiting on nothing is
// unblocked.
func (s *Store) settleChange(ctx context.Context, old, cur *taskItem) error {
	if cur.Status != StatusBlocked {
		return nil
	}
	if len(cur.WaitingOn) == 0 {
		return s.unblockEmptied(ctx, cur.TaskID, "")
	}
	for _, id := range cur.WaitingOn {
		if old == nil || !slices.Contains(old.WaitingOn, id) {
			_, err := s.settle(ctx, cur.TaskID, cur.WaitingOn)
			return err
		}
	}
	return nil
}

// clearedAnew is the blockers that a write from old (nil: a creation) to
// cur left cur naming and not waiting on, having read them done, when it
// did not leave them so before: a creation or a change of blocked_by that
// found them done, a reopen of the task. Only a task that has not finished
// is looked at (reblock leaves the others alone).
func clearedAnew(old, cur *taskItem) []string {
	switch cur.Status {
	case StatusTodo, StatusBlocked, StatusInProgress:
	default:
		return nil
	}
	var out []string
	for _, id := range cur.BlockedBy {
		if slices.Contains(cur.WaitingOn, id) {
			continue
		}
		if old != nil && !finished(old.Status) &&
			slices.Contains(old.BlockedBy, id) && !slices.Contains(old.WaitingOn, id) {
			continue // cleared already before this write
		}
		out = append(out, id)
	}
	return out
}

// recheck reads again, after a write that left taskID not waiting on the
// blockers cleared, each of which it read done before, those blockers,
// and blocks the task again (reblock) on each that is not done by now. A
// reopen of such a blocker between the writer's read and its write
// passed over the blocker's dependents before the write (reblock), and
// found the task not naming it yet, finished, or still waiting on it: it
// did nothing, and the write then left the task free to be taken while its
// blocker is not done, for good. A reopen after this read finds the
// write, and blocks the task itself.
func (s *Store) recheck(ctx context.Context, taskID string, cleared []string) error {
	if len(cleared) == 0 {
		return nil
	}
	got, err := s.readTasks(ctx, cleared)
	if err != nil {
		return err
	}
	for _, id := range cleared {
		if it := got[id]; it != nil && it.Status != StatusDone {
			if err := s.reblock(ctx, taskID, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// dependents returns the tasks that name blocker, by its edges.
func (s *Store) dependents(ctx context.Context, blocker string) ([]string, error) {
	edges, err := s.edges(ctx, blocker)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(edges))
	for i, e := range edges {
		out[i] = e.Dependent
	}
	return out, nil
}

// edges returns blocker's edges, one per dependent.
func (s *Store) edges(ctx context.Context, blocker string) ([]edgeItem, error) {
	return queryAll[edgeItem](ctx, s.db, s.inbox, "", expression.Key("agent_id").Equal(expression.Value(depsPartition(blocker))))
}

// blockerStep is what one batch of changes has a blocker's dependents
// passed: its completions unblock them, its reopens block them again.
type blockerStep struct {
	id                  string
	completed, reopened bool
}

// blockerSteps are a batch's blockerSteps, one per blocker, in the order
// of each blocker's first change in the batch.
type blockerSteps []blockerStep

// add records a completion (completed) or a reopen of blocker id.
func (bs *blockerSteps) add(id string, completed bool) {
	i := slices.IndexFunc(*bs, func(b blockerStep) bool { return b.id == id })
	if i < 0 {
		*bs = append(*bs, blockerStep{id: id})
		i = len(*bs) - 1
	}
	if completed {
		(*bs)[i].completed = true
	} else {
		(*bs)[i].reopened = true
	}
}

// passOnBlocker passes a batch's completions and reopens of one blocker on
// to its dependents; the stream function's part (see "Reopening a done
// blocker"). Each is passed on as the blocker is when the stream reads
// it: a completion of a blocker done unblocks its dependents, a reopen of
// one not done blocks again those that have not started, and a completion
// of one reopened since, or a reopen of one done again, does nothing,
// since the change that left it so comes later and does the work. So the
// blocker is read once for the whole batch, and its dependents passed
// over once: every completion in the batch would find what the first one
// finds, and so would every reopen. (Passing over every dependent for
// each of them made the stream's work grow with the blocker's changes
// times its dependents: a blocker reopened and completed again and again
// put the stream, and every dependent waiting on the stream, tens of
// seconds behind.)
func (s *Store) passOnBlocker(ctx context.Context, b blockerStep) error {
	it, err := s.getTask(ctx, b.id)
	if err != nil || it == nil {
		return err
	}
	switch done := it.Status == StatusDone; {
	case done && b.completed:
		if err := s.passOn(ctx, b.id, s.unblockDependent); err != nil {
			return fmt.Errorf("unblock the dependents of %s: %w", b.id, err)
		}
	case !done && b.reopened:
		if err := s.passOn(ctx, b.id, func(ctx context.Context, e edgeItem, blocker string) error {
			return s.reblock(ctx, e.Dependent, blocker)
		}); err != nil {
			return fmt.Errorf("block again the dependents of %s: %w", b.id, err)
		}
	}
	return nil
}

// passOn applies each to every dependent of blocker (by its edges), 8 at
// once.
func (s *Store) passOn(ctx context.Context, blocker string, each func(ctx context.Context, edge edgeItem, blocker string) error) error {
	edges, err := s.edges(ctx, blocker)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, e := range edges {
		g.Go(func() error { return each(gctx, e, blocker) })
	}
	return g.Wait()
}

// reblock makes taskID wait on blocker again, if it still names it and
// has not started: a todo task becomes blocked and leaves the claim
// index; a blocked one adds blocker to what it waits on. One conditional
// write, which applies once however often it is sent.
//
// A task in progress keeps its lease, and is marked instead: blocker is
// added to what it waits on, its status left as it is (a second write,
// touching no index). If its lease ends other than by completion, the
// ending's write finds the mark and makes the task blocked, not todo
// (endLease); a checkout or claim does not take such a lease over (the
// checkout ends it so, and answers blocked). A completion of blocker
// before then takes the mark off, as it unblocks any task waiting on it.
func (s *Store) reblock(ctx context.Context, taskID, blocker string) error {
	waits := expression.Contains(nameWaitingOn, blocker)
	names := expression.Contains(expression.Name("blocked_by"), blocker)
	cond := terms{
		names,
		nameStatus.Equal(expression.Value(string(StatusTodo))).
			Or(nameStatus.Equal(expression.Value(string(StatusBlocked))).And(expression.Not(waits))),
	}
	waitOn := expression.Value(&types.AttributeValueMemberSS{Value: []string{blocker}})
	mark := terms{names, nameStatus.Equal(expression.Value(string(StatusInProgress))), expression.Not(waits)}
	for range retries(ctx) {
		// (Built anew each time: update adds to the builder it is given.)
		upd := setStatus(expression.UpdateBuilder{}, taskID, StatusBlocked, s.shards.Status).
			Remove(nameClaimShard).
			Add(nameWaitingOn, waitOn)
		cur, applied, err := s.update(ctx, taskID, cond, upd, types.ReturnValueNone)
		if err != nil || applied || cur == nil || cur.Status != StatusInProgress ||
			!slices.Contains(cur.BlockedBy, blocker) || slices.Contains(cur.WaitingOn, blocker) {
			return err
		}
		cur, applied, err = s.write(ctx, taskID, mark, expression.Add(nameWaitingOn, waitOn), types.ReturnValueNone)
		if err != nil || applied || cur == nil || cur.Status == StatusInProgress && !slices.Contains(cur.BlockedBy, blocker) {
			return err
		}
		// Its lease ended between the two writes: look again, so that a
		// task left todo is blocked now.
	}
	return fmt.Errorf("reblock %s: %w", taskID, ErrBusy)
}

// takeBackEdges removes the edges from blockers to taskID that a refused
// create or PATCH recorded (by), of those the task (read afresh) does not
// name: else the blockers would list it in blocks, and count it toward
// their bound, for good. The caller holds the graph's lock, and ctx ends
// with its write window: only within the window (inWindow) is the read
// still true when the edges go, no other change of the task's blockers
// being made meanwhile; and an edge recorded again since (by a change
// that took the lock over from a holder stalled past its window) stays,
// its by being another's. A failed read, or the window's end, leaves
// them: an edge the task does not name misleads no unblocking, while one
// deleted that it names would strand it.
func (s *Store) takeBackEdges(ctx context.Context, inWindow func() bool, taskID string, blockers []string, by string) {
	if !inWindow() {
		return
	}
	cur, err := s.getTask(ctx, taskID)
	if err != nil || !inWindow() {
		return
	}
	gone := map[string]string{}
	for _, id := range blockers {
		if cur == nil || !slices.Contains(cur.BlockedBy, id) {
			gone[id] = by
		}
	}
	s.unlinkIf(ctx, taskID, gone)
}

// dropEdges removes the edges from blockers to taskID, which a PATCH has
// just stopped naming, each on condition that it is the edge read first
// (an edge recorded again since stays). The caller holds the graph's
// lock within its write window, as for takeBackEdges.
func (s *Store) dropEdges(ctx context.Context, inWindow func() bool, taskID string, blockers []string) {
	gone := map[string]string{}
	for _, id := range blockers {
		edge, err := getItem[edgeItem](ctx, s.db, s.inbox, edgeKey(id, taskID))
		if err != nil {
			return
		}
		if edge != nil {
			gone[id] = edge.By
		}
	}
	if inWindow() {
		s.unlinkIf(ctx, taskID, gone)
	}
}

// cleanEdges is takeBackEdges for a create that found its id taken: it
// takes the graph's lock for it, and leaves the edges if it cannot.
func (s *Store) cleanEdges(ctx context.Context, taskID string, blockers []string, by string) {
	if len(blockers) == 0 {
		return
	}
	epoch, err := s.graphEpoch(ctx)
	if err != nil {
		return
	}
	unlock, writeBy, deadline, err := s.lockGraph(ctx, epoch, taskID, nil)
	if err != nil {
		return
	}
	defer unlock()
	lockCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	s.takeBackEdges(lockCtx, func() bool { return s.clock().Before(writeBy) }, taskID, blockers, by)
}

// unlinkIf deletes the edge from each blocker to taskID while its by is
// still the one given ("": an edge from before edges named their write).
func (s *Store) unlinkIf(ctx context.Context, taskID string, edges map[string]string) {
	for id, by := range edges {
		cond := expression.Name("by").Equal(expression.Value(by))
		if by == "" {
			cond = expression.AttributeNotExists(expression.Name("by"))
		}
		expr, err := expression.NewBuilder().WithCondition(cond).Build()
		if err != nil {
			return
		}
		_, _ = s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.inbox, Key: edgeKey(id, taskID),
			ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()})
	}
}

// edgeKey is the key of the edge from blocker to dependent.
func edgeKey(blocker, dependent string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"agent_id": &types.AttributeValueMemberS{Value: depsPartition(blocker)}, "message_id": &types.AttributeValueMemberS{Value: dependent},
	}
}

// graphView is what GET shows of a task's place in the graph, read by
// fillGraph: its blockers' statuses and its dependents.
type graphView struct {
	blockers map[string]Status
	blocks   []string
}

// fillGraph reads, for items that are in the graph, their blockers'
// statuses (one consistent BatchGetItem for all) and their dependents
// (a Query each, for those with has_dependents).
func (s *Store) fillGraph(ctx context.Context, items ...*taskItem) error {
	_, err := s.fillGraphWithin(ctx, items, len(items), len(items)*MaxBlockers, nil)
	return err
}

// graphReadWidth is how many tasks' dependents fillGraph reads at once.
const graphReadWidth = 8

// fillGraphWithin is fillGraph for a listing's page: it reads the
// dependents of the items in order, graphReadWidth at once, while it has
// read those of fewer than maxReads tasks and the ids read take less than
// pageBytes in the answer, and the statuses of the blockers of the items
// up to there, as far as they are at most maxBlockers tasks. It answers
// how many items, from the first, it covers (at least one), and fills
// them only when that is all of them (the caller lists again with fewer).
// known holds dependents already read by task id (nil: none), and gets
// those it reads.
func (s *Store) fillGraphWithin(ctx context.Context, items []*taskItem, maxReads, maxBlockers int, known map[string][]string) (n int, err error) {
	blocks := make([][]string, len(items))
	// toRead says whether item i's dependents are still to be read.
	toRead := func(i int) bool {
		it := items[i]
		if it == nil || !it.HasDependents {
			return false
		}
		deps, ok := known[it.TaskID]
		blocks[i] = deps
		return !ok
	}
	reads, size := 0, 0
	for n < len(items) && reads < maxReads && size <= pageBytes {
		from := n
		g, gctx := errgroup.WithContext(ctx)
		for width := 0; n < len(items); n++ {
			if !toRead(n) {
				continue
			}
			if width == graphReadWidth || reads == maxReads {
				break
			}
			width++
			reads++
			i := n
			g.Go(func() error {
				deps, err := s.dependents(gctx, items[i].TaskID)
				blocks[i] = deps
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return 0, err
		}
		for i := from; i < n; i++ {
			if known != nil && items[i] != nil && items[i].HasDependents {
				known[items[i].TaskID] = blocks[i]
			}
			for _, id := range blocks[i] {
				size += 2 * (len(id) + 4) // as taskWireBound counts it
			}
		}
	}
	// The blockers of the items covered so far, each once, while they
	// are at most maxBlockers.
	var ids []string
	named := map[string]bool{}
	for i, it := range items[:n] {
		if it == nil {
			continue
		}
		var more []string
		for _, id := range it.BlockedBy {
			if !named[id] && !slices.Contains(more, id) {
				more = append(more, id)
			}
		}
		if i > 0 && len(ids)+len(more) > maxBlockers {
			n = i
			break
		}
		for _, id := range more {
			named[id] = true
		}
		ids = append(ids, more...)
	}
	if n < len(items) {
		return n, nil
	}
	statuses := map[string]Status{}
	if len(ids) > 0 {
		got, err := s.readTasks(ctx, ids)
		if err != nil {
			return 0, err
		}
		now := s.clock()
		for id, it := range got {
			// As GET shows the blocker: an ended lease not swept yet is todo.
			statuses[id] = it.task(it.leaseTimeValid(now)).Status
		}
	}
	for i, it := range items[:n] {
		if it != nil {
			it.graph = &graphView{blockers: statuses, blocks: blocks[i]}
		}
	}
	return n, nil
}

// The graph's lock and epoch: an item of the heartbeats table, "#graph"
// (a key no agent id can take). Its epoch counts the changes of
// blocked_by written; its token, while there, says a change holds the
// lock, until its until.
//
// A PATCH that names new blockers reads the epoch (graphEpoch) before it
// reads the blockers and walks from them, with no lock held: a walk may
// be long (up to maxGraphWalk tasks), and a lock held for it would make
// every other change of blocked_by, fleet-wide, wait on the graph one
// caller chose. After its walk it takes the lock on condition that the
// epoch is still the one it read (lockGraph), so that no change was
// written since its reads began; makes its writes (edges, task); and
// gives the lock back with the epoch one higher, logging which task that
// epoch changed (unlockGraph; the item keeps the latest graphLog). If the
// epoch has moved, the walk still holds when no epoch since changed a
// task it read (only a change of one of those can change what it reaches:
// untouched); else it walks again. A change of blocked_by written while
// the walk ran was written under the lock, and gave it back with the
// epoch moved and logged; one that held the lock and stopped before
// giving it back (its write may have landed after the walk's reads) is
// taken over once its until has passed, which moves the epoch too, logged
// as unknown. So two changes whose walks overlap cannot both write on
// what they walked: the second walks again and sees the first's edge. The
// lock is held only for a few writes, far less than graphLockTTL.
//
// A holder that stalls (a paused process, a frozen Lambda, SDK retries
// backing off) could still write after its until, when its lock may have
// been taken over and another change written on a graph without its
// edge. So its writes under the lock are made within graphWriteWindow of
// taking it, half of graphLockTTL, or not at all (it walks again): its
// clock is checked before each, and each is sent under a deadline of the
// window, so that no attempt of the SDK starts later.
const (
	graphLockID      = "#graph"
	graphLockTTL     = 10 * time.Second
	graphWriteWindow = graphLockTTL / 2
)

// errGraphChanged says a change of blocked_by was written since the
// epoch a walk began at: walk again.
var errGraphChanged = errors.New("the task graph changed during the walk")

// graphLockItem is the graph's lock and epoch, and which task each of the
// latest graphLog epochs changed ("*": unknown, a lock taken over).
type graphLockItem struct {
	Token   string            `dynamodbav:"token"`
	Until   int64             `dynamodbav:"until"`
	Epoch   int64             `dynamodbav:"epoch"`
	Changed map[string]string `dynamodbav:"changed"`
}

// graphLog is how many epochs back the lock item says which task each
// changed.
const graphLog = 32

// untouched says whether every change of blocked_by from epoch on, up to
// the item's epoch, was of a task not in walked, as far as the item's log
// tells: then a walk that read walked from epoch on still holds.
func (it *graphLockItem) untouched(epoch int64, walked map[string]bool) bool {
	if it.Epoch <= epoch || it.Epoch-epoch > graphLog {
		return false
	}
	for e := epoch + 1; e <= it.Epoch; e++ {
		id, ok := it.Changed[strconv.FormatInt(e, 10)]
		if !ok || id == "*" || walked[id] {
			return false
		}
	}
	return true
}

// graphEpoch reads the graph's epoch: 0 before any change of blocked_by.
func (s *Store) graphEpoch(ctx context.Context) (int64, error) {
	it, err := getItem[graphLockItem](ctx, s.db, s.heartbeats, agentKey(graphLockID))
	if err != nil || it == nil {
		return 0, err
	}
	return it.Epoch, nil
}

// lockGraph takes the graph's lock for a change of taskID's blocked_by
// whose walk read walked from epoch on, on condition that no change of
// one of those tasks was written since (errGraphChanged when one was, or
// the log cannot tell), waiting while another change holds it (for
// graphWait at most, then ErrBusy), and returns the function that gives
// it back with the epoch moved on.
//
// writeBy is when the holder's write window ends by the store's clock,
// by the same instant in real time (for the writes' deadline): both from
// just before the request that took the lock was sent.
func (s *Store) lockGraph(ctx context.Context, epoch int64, taskID string, walked map[string]bool) (unlock func(), writeBy, by time.Time, err error) {
	token := newID("graph-")
	deadline := time.Now().Add(s.graphWait)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		now, sent := s.clock(), time.Now()
		same := expression.Name("epoch").Equal(expression.Value(epoch))
		if epoch == 0 {
			same = expression.AttributeNotExists(expression.Name("epoch"))
		}
		upd := expression.Set(expression.Name("token"), expression.Value(token)).
			Set(expression.Name("until"), expression.Value(ms(now.Add(graphLockTTL)))).
			Set(expression.Name("changed"), expression.IfNotExists(expression.Name("changed"), expression.Value(map[string]string{}))).
			Remove(expression.Name("ttl")) // set by versions before the epoch: the item is kept
		expr, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("token")).And(same)).WithUpdate(upd).Build()
		if err != nil {
			return nil, time.Time{}, time.Time{}, err
		}
		_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                           &s.heartbeats,
			Key:                                 agentKey(graphLockID),
			ConditionExpression:                 expr.Condition(),
			UpdateExpression:                    expr.Update(),
			ExpressionAttributeNames:            expr.Names(),
			ExpressionAttributeValues:           expr.Values(),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		item, refused := conditionFailed(err)
		held := epoch
		if !refused {
			if err != nil {
				return nil, time.Time{}, time.Time{}, fmt.Errorf("lock the task graph: %w", err)
			}
			return func() { s.unlockGraph(token, held+1, taskID) }, now.Add(graphWriteWindow), sent.Add(graphWriteWindow), nil
		}
		var old graphLockItem
		if err := attributevalue.UnmarshalMap(item, &old); err != nil {
			return nil, time.Time{}, time.Time{}, fmt.Errorf("lock the task graph: %w", err)
		}
		switch {
		case old.Token == token:
			// This very write, applied and sent again (its answer lost).
			return func() { s.unlockGraph(token, held+1, taskID) }, now.Add(graphWriteWindow), sent.Add(graphWriteWindow), nil
		case old.Token != "" && old.Until <= ms(now):
			// Its holder stopped without giving it back, and its write
			// may have landed after this walk's reads.
			if err := s.takeOverGraph(ctx, old.Token, old.Epoch); err != nil {
				return nil, time.Time{}, time.Time{}, err
			}
			return nil, time.Time{}, time.Time{}, errGraphChanged
		case old.Epoch != epoch && !old.untouched(epoch, walked):
			return nil, time.Time{}, time.Time{}, errGraphChanged
		case old.Epoch != epoch:
			// Changes elsewhere in the graph only: the walk holds; ask
			// again on the epoch as it is now.
			epoch = old.Epoch
			if old.Token == "" {
				continue
			}
		}
		if time.Now().After(deadline) {
			return nil, time.Time{}, time.Time{}, fmt.Errorf("lock the task graph: held by other changes for %v: %w", s.graphWait, ErrBusy)
		}
		select {
		case <-ctx.Done():
			return nil, time.Time{}, time.Time{}, ctx.Err()
		case <-time.After(wait):
		}
	}
}

// takeOverGraph frees the lock that token held past its until, moving the
// epoch (from epoch) on: whatever its holder wrote, a walk from before it
// walks again (the log starts again, saying "unknown" for that epoch).
func (s *Store) takeOverGraph(ctx context.Context, token string, epoch int64) error {
	next := strconv.FormatInt(epoch+1, 10)
	upd := expression.Set(expression.Name("epoch"), expression.Value(epoch+1)).
		Set(expression.Name("changed"), expression.Value(map[string]string{next: "*"})).
		Remove(expression.Name("token")).Remove(expression.Name("until"))
	expr, err := expression.NewBuilder().WithCondition(expression.Name("token").Equal(expression.Value(token))).WithUpdate(upd).Build()
	if err != nil {
		return err
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &s.heartbeats,
		Key:                       agentKey(graphLockID),
		ConditionExpression:       expr.Condition(),
		UpdateExpression:          expr.Update(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
	})
	if _, lost := conditionFailed(err); lost {
		return nil // taken over by another already
	}
	if err != nil {
		return fmt.Errorf("take over the task graph's lock: %w", err)
	}
	return nil
}

// unlockGraph gives the graph's lock back, if it is still token's, with
// the epoch at next, logged as a change of taskID. It runs after the
// PATCH's write, on a context of its own.
func (s *Store) unlockGraph(token string, next int64, taskID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	upd := expression.Set(expression.Name("epoch"), expression.Value(next)).
		Set(expression.Name("changed."+strconv.FormatInt(next, 10)), expression.Value(taskID)).
		Remove(expression.Name("token")).Remove(expression.Name("until"))
	if next > graphLog {
		upd = upd.Remove(expression.Name("changed." + strconv.FormatInt(next-graphLog, 10)))
	}
	expr, err := expression.NewBuilder().WithCondition(expression.Name("token").Equal(expression.Value(token))).WithUpdate(upd).Build()
	if err == nil {
		_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                           &s.heartbeats,
			Key:                                 agentKey(graphLockID),
			ConditionExpression:                 expr.Condition(),
			UpdateExpression:                    expr.Update(),
			ExpressionAttributeNames:            expr.Names(),
			ExpressionAttributeValues:           expr.Values(),
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
	}
	if item, lost := conditionFailed(err); lost {
		var now graphLockItem
		if attributevalue.UnmarshalMap(item, &now) == nil && now.Token == "" && now.Epoch == next {
			return // given back by this very write, sent again (its answer lost)
		}
		s.log.WarnContext(ctx, "the task graph's lock was taken over before it was given back: a change of blocked_by held it longer than its ttl", "ttl", graphLockTTL)
		return
	}
	if err != nil {
		// Not given back: it is taken over once its until has passed.
		s.log.WarnContext(ctx, "give back the task graph's lock", "err", err)
	}
}
