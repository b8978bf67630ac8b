package lease

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
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
// refreshes the watch. A watch records the task's eseq at its caller's
// read; the stream function tells, for each freeing, the watches with a
// place before it and after any earlier freeing (one written too late for that
// freeing is told by its writer: watch.go), then deletes them
// (each conditioned on being the watch it read), and reads the watchers'
// heartbeat items in one batch (and the agent items of those whose
// heartbeat item has expired: createdAt), so that a removed agent, or an
// id registered again after the watch, is not told. A removal that lands
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
// first watch sets its watched flag), writes each watcher's message
// (idempotent, as before) and then deletes each watch it told,
// conditioned on the watch being the one it read, so an agent that
// watches again meanwhile stays on.
//
// Placing a watch in the past. A watch is placed at the eseq of its
// caller's own read of the task: for a refused checkout, the read that
// found the lease live, so that the release that follows the 409 tells
// it. But the watch is written a moment later, and the stream function
// may have handled a freeing in between without seeing it. Both sides
// therefore keep one rule: a place is told by the first freeing after it,
// with that freeing's message id, and by no other.
//
//   - The stream function records each freeing it handles (an item
//     "#freed#<seq>" in the watch partition, which carries the freeing's
//     message) before it reads the watches for it, and reads them afresh
//     for each freeing (take). The rule is per place, not per watch: a
//     freeing S tells each place p (eseq, asks, last_eseq) of a watch it
//     reads with p < S, of the first freeing recorded after p: mostly S
//     itself. A place before an earlier recorded freeing R is still
//     there only if R's batch did not use it up: the batch failed for
//     good after R's record (its retries used up and not replayed),
//     having told the place or not, or R's read did not see the place,
//     which is then its writer's to tell, of R. Either way R's message,
//     written by S's batch with R's id (putMessages writes an id once),
//     is the place's one message, and S's batch uses the place up; so a
//     record never stands for a tell that did not happen
//     (TestAWatchReadForAFreeingWhoseBatchFailedForGoodIsToldLater). A
//     watch's later place counts even when its first lies before a
//     recorded freeing (the agent watched again while its writer was
//     telling it of that freeing:
//     TestAWatchAgainDuringASettleIsToldOfTheNextFreeing), and so does a
//     place added between two freeings of one batch, which the second's
//     fresh read sees (TestAWatchAgainLandingMidBatchIsToldOfTheNextFreeing).
//     So the stream tells a place only of the first freeing after it.
//   - The watcher, after its write, reads the records of freeings after
//     its place (settleWatch, one consistent Query). None: every freeing
//     after the place is recorded after this read, so after the write,
//     and its read sees the place (a place is only used up by a freeing
//     after it, and a later freeing than the first is recorded after the
//     first's read); the stream tells it, as above. Some:
//     the first of them is the first freeing after the place (the stream
//     records a task's freeings in order), so the watcher writes that
//     freeing's message itself, with the id the stream uses (putMessages
//     writes an id once, so if the stream also saw the watch there is
//     still one message), and uses the place up as dropWatch does, then
//     does the same for the watch's next place, if any.
//
// Whatever the interleaving, and however often the stream applies a batch
// again (its records and decisions are the same each time, its messages
// idempotent), a place gets one message. Telling the watch of the first
// freeing alone is what needs the stream's records: a watcher that told
// itself of a freeing the stream missed could not otherwise stop the
// stream telling it of the next one, read before the watcher used the
// watch up (TestAWatchRacingTwoFreeingsIsToldOnce).
//
// A freeing written without the watched flag (between a first watcher's
// read and its flag) is never recorded nor read for: the first watcher
// tells itself of the first freeing since its read, and then writes no
// watch. Its flag's write shows the task's latest transition; a freeing
// hidden behind a later transition (a release, then another agent's
// checkout) is read from the archive, where the stream function marks
// each freeing (eventItem.Freeing), waited for as long as a transition
// waits out a busy item, read again at a pace (archiveReads), not back
// to back (hiddenFreeing:
// TestAFirstWatchIsToldOfAReleaseHiddenBehindALaterCheckout,
// TestAFirstWatchPacesItsReadsOfAHeldUpArchive). Past that,
// the watch writes nothing: a watch request answers busy, and a refused
// checkout its refusal, not watching
// (TestACheckoutWhoseFirstWatchCannotSettleStillAnswersItsConflict). A
// freeing record is kept as long as a watch placed before it
// (watchRetention), but tells only while the freeing's messages are kept
// (messageRetention): past that, so that no message deleted by its agent
// (whose tombstone is kept as long) comes back, a place before it left
// behind is passed by and used up, as a record from before records
// carried their freeing passes it by. Were the record gone, the next
// freeing would tell the place again, of itself, though its batch may
// have told it (TestAWatchToldByABatchThatFailedForGoodIsNotToldAgainAWeekOn).
//
// The stream function may be behind by several freeings when an agent
// watches again (it runs about a second after each write, and longer when
// it is held up), so one agent's watch of a task has places: its first
// (eseq), and one more (asks) for each watch placed after the task had
// moved on from the one before; last_eseq is the latest (it only moves
// forward). Each freeing tells the watch once if it has a place before
// the freeing (and after any earlier one), and uses up every such place: the watch then waits from its first place after the
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

// watch places agentID's watch on the task cur was read as: at cur's
// eseq, the caller's own read (for a refused checkout, the read that saw
// the lease live), and then tells it of any freeing since that the change
// stream may have handled without it (see "Placing a watch in the past").
func (s *Store) watch(ctx context.Context, cur *taskItem, agentID string) error {
	if cur.Watched != nil && !*cur.Watched {
		marked, err := s.markWatched(ctx, cur.TaskID)
		if err != nil {
			return unwatched(err)
		}
		// A freeing between the caller's read and the flag was written
		// without the flag: the stream read no watches for it, and never
		// will. The first such freeing is told by this request alone,
		// and uses the watch up before it is written.
		ev, notBefore, ok, err := s.hiddenFreeing(ctx, cur.ESeq, marked)
		if err != nil {
			return unwatched(err)
		}
		if ok {
			return s.tellWatcher(ctx, agentID, ms(s.clock()), ev, notBefore)
		}
	}
	// A write refused on its condition found the agent's watch other than
	// read: placed by another request of the agent, or by this one's
	// first sending, which landed unanswered (the SDK sent it again).
	// Past it, a watch of the agent's may stand, and no failure is one
	// that left the caller unwatched.
	refused := false
	for range retries(ctx) {
		w, placed, err := s.placeWatch(ctx, cur, agentID)
		if err != nil {
			return standing(err, refused)
		}
		if placed {
			return s.settleWatch(ctx, cur.TaskID, w)
		}
		refused = true
		// The write's condition failed: the watch changed since its
		// read (another request of the agent placed a place, or the
		// change stream used it up), or the watch it was pinned to (a
		// removed self's, replaced by the agent registered again) was
		// used up by the change stream, expired, or was refreshed by
		// the new agent meanwhile. Read the watches again and decide
		// anew: only a watch now there and the new agent's own may
		// stand for this one (TestReregisteredWatcherRacingTheStreamKeepsItsWatch).
	}
	return fmt.Errorf("watch %s: %w", cur.TaskID, ErrBusy) // every write refused: a watch of the agent's may stand
}

// unwatchedError is a failure of watch before it wrote a watch or a
// message, while it knew of no watch of the agent's on the task (a read,
// the first watch's flag, or a wait that ran out): the caller is not
// watching, and nothing will tell it. A watch request answers the error
// itself; a refused checkout answers its refusal, not watching
// (watchIfRoom). A failure of the watch's write (which may have landed),
// any failure once the agent's watch was read or a write of it refused
// (a watch of the agent's may stand: standing), or one of its settling
// (the watch stands, and may have missed a freeing: settleWatch) is not
// one; a retry places and settles it again.
type unwatchedError struct{ err error }

func unwatched(err error) error { return unwatchedError{err} }

// standing is err, no longer an unwatchedError when a watch of the
// agent's may stand (mayStand).
func standing(err error, mayStand bool) error {
	var u unwatchedError
	if mayStand && errors.As(err, &u) {
		return u.err
	}
	return err
}

func (e unwatchedError) Error() string { return e.err.Error() }
func (e unwatchedError) Unwrap() error { return e.err }

// placeWatch writes agentID's watch on the task cur was read as, from a
// fresh read of its watches, and returns it as the write left it. placed
// is false when the write's condition (the old watch it replaces is still
// as read) failed: this sending wrote nothing (an earlier one, which the
// SDK sent again, may have), and the caller reads again.
func (s *Store) placeWatch(ctx context.Context, cur *taskItem, agentID string) (w watchItem, placed bool, err error) {
	watchers, err := s.watches(ctx, cur.TaskID)
	if err != nil {
		return w, false, unwatched(err)
	}
	var mine *watchItem
	for i := range watchers {
		if watchers[i].AgentID == agentID {
			mine = &watchers[i]
		}
	}
	if mine == nil && len(watchers)+len(cur.Watchers) >= MaxWatchers {
		return w, false, ErrTooManyWatchers
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
	// last_eseq only moves forward, so that it stays the watch's latest
	// place (dropWatch deletes a watch whose last_eseq is before the
	// freeing that told it): a request that read the task before another
	// request of the agent placed a later place keeps that place. The
	// write is conditioned on last_eseq being as read (and on there being
	// no watch, when none was read); when it is not, the caller reads
	// again (TestAStaleWatchAgainKeepsALaterPlace).
	var place expression.OperandBuilder = expression.IfNotExists(expression.Name("eseq"), expression.Value(cur.ESeq))
	last := expression.Name("last_eseq")
	b := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("eseq")))
	lastESeq := cur.ESeq
	if mine != nil {
		lastESeq = max(lastESeq, mine.LastESeq)
		if mine.LastESeq == 0 {
			b = b.WithCondition(expression.AttributeExists(expression.Name("eseq")).
				And(expression.Or(expression.AttributeNotExists(last), last.Equal(expression.Value(0)))))
		} else {
			b = b.WithCondition(last.Equal(expression.Value(mine.LastESeq)))
		}
	}
	now := s.clock()
	at := ms(now)
	upd := expression.Set(expression.Name("ttl"), expression.Value(now.Add(watchRetention).Unix()))
	if mine != nil {
		hb, err := s.heartbeat(ctx, agentID)
		if err != nil {
			return w, false, err // the agent's watch stands
		}
		if hb != nil && hb.Removed {
			at = mine.At
		}
		earlier, err := s.registeredAfter(ctx, agentID, hb, mine.At)
		if err != nil {
			return w, false, err // the agent's watch stands
		}
		switch {
		case (hb == nil || !hb.Removed) && earlier:
			place = expression.Value(cur.ESeq)
			lastESeq = cur.ESeq
			b = b.WithCondition(expression.Name("at").Equal(expression.Value(mine.At)))
			if len(mine.Asks) > 0 {
				upd = upd.Remove(expression.Name("asks"))
			}
		case cur.ESeq > mine.ESeq && cur.ESeq != mine.LastESeq && len(mine.Asks) < maxWatchAsks:
			upd = upd.Add(expression.Name("asks"), expression.Value(&types.AttributeValueMemberNS{Value: []string{strconv.FormatInt(cur.ESeq, 10)}}))
		}
	}
	upd = upd.Set(expression.Name("eseq"), place).Set(expression.Name("at"), expression.Value(at)).
		Set(last, expression.Value(lastESeq))
	expr, err := b.WithUpdate(upd).Build()
	if err != nil {
		return w, false, err
	}
	out, err := s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.inbox,
		Key: map[string]types.AttributeValue{
			"agent_id":   &types.AttributeValueMemberS{Value: watchPartition(cur.TaskID)},
			"message_id": &types.AttributeValueMemberS{Value: agentID},
		},
		ConditionExpression:       expr.Condition(),
		UpdateExpression:          expr.Update(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
		ReturnValues:              types.ReturnValueAllNew,
	})
	if err != nil {
		if _, failed := conditionFailed(err); failed {
			return w, false, nil
		}
		return w, false, fmt.Errorf("watch %s: %w", cur.TaskID, err)
	}
	if err := attributevalue.UnmarshalMap(out.Attributes, &w); err != nil {
		return w, false, fmt.Errorf("decode the watch of %s on %s: %w", agentID, cur.TaskID, err)
	}
	return w, true, nil
}

// settleWatch tells the watch w, as its write left it, of the freeings
// the change stream has begun to handle since w's place: each is one the
// stream may have handled without seeing w, and then never tells it (see
// "Placing a watch in the past"). It tells them as the stream would have:
// each place of w by the first freeing after it, with that freeing's
// message id (putMessages writes an id once, so the stream, had it seen w,
// wrote the same message), and uses the place up as the stream does.
func (s *Store) settleWatch(ctx context.Context, taskID string, w watchItem) error {
	freed, err := s.freedBetween(ctx, taskID, w.ESeq+1, math.MaxInt64)
	if err != nil {
		return err
	}
	for _, f := range freed {
		seq := f.Seq
		if seq <= w.ESeq {
			continue // placed again after it
		}
		ev, notBefore := f.event(), f.NotBefore
		if f.At == 0 { // recorded before records carried their freeing
			if ev, notBefore, err = s.freeingEvent(ctx, taskID, seq); err != nil {
				return err
			}
		}
		if !f.messageGone(s.clock()) {
			if err := s.tellWatcher(ctx, w.AgentID, w.At, ev, notBefore); err != nil {
				return err
			}
		}
		if err := s.dropWatch(ctx, w, seq); err != nil {
			return err
		}
		next := nextPlace(w, seq)
		if next < 0 {
			return nil
		}
		// As dropWatch left it: waiting from its first place after the
		// freeing.
		w.ESeq = next
		w.Asks = slices.DeleteFunc(w.Asks, func(a int64) bool { return a < next })
	}
	return nil
}

// freeingEvent is the event of the task's freeing of seq seq, which the
// change stream has begun to handle, and until when it left the task
// waiting (0: not known, or not waiting): from the task item while it is
// the task's latest transition, else from the archive, which the stream
// writes right after it read the watches (waited for, as a transition
// waits out a busy item).
func (s *Store) freeingEvent(ctx context.Context, taskID string, seq int64) (eventItem, int64, error) {
	for range retries(ctx) {
		it, err := s.getTask(ctx, taskID)
		if err != nil {
			return eventItem{}, 0, err
		}
		if it == nil {
			return eventItem{}, 0, ErrTaskNotFound
		}
		for _, e := range it.latestEvents() {
			if e.Seq == seq && e.frees {
				return e.eventItem, waitsUntil(it, e.eventItem), nil
			}
		}
		got, err := getItem[eventItem](ctx, s.db, s.events, map[string]types.AttributeValue{
			"task_id": &types.AttributeValueMemberS{Value: taskID},
			"seq":     &types.AttributeValueMemberN{Value: strconv.FormatInt(seq, 10)},
		})
		if err != nil {
			return eventItem{}, 0, fmt.Errorf("read the archived event %s/%d: %w", taskID, seq, err)
		}
		if got != nil {
			return *got, 0, nil
		}
	}
	return eventItem{}, 0, fmt.Errorf("the freeing %s/%d: %w", taskID, seq, ErrBusy)
}

// hiddenFreeing is the first freeing of the task after the event seq
// after and up to marked, the task as its watched flag's write left it,
// and until when it left the task waiting: a freeing written without the
// flag, for which the change stream read no watches (or, when another
// first watcher's flag came first, one it read them for before this
// watch is written). One of marked's latest transition is on marked;
// one before it, hidden behind that transition, is read from the archive
// (one consistent Query, only when a transition lies in between), which
// the change stream writes a moment after the transition: the read is
// made again, paced (archiveReads), until it holds every event between
// the two, as their prev_seq links tell.
func (s *Store) hiddenFreeing(ctx context.Context, after int64, marked *taskItem) (eventItem, int64, bool, error) {
	latest := marked.latestEvents()
	if len(latest) > 0 && latest[0].PrevSeq > after {
		for range archiveReads(ctx, s.archiveWait) {
			evs, err := queryAll[eventItem](ctx, s.db, s.events, "", expression.Key("task_id").Equal(expression.Value(marked.TaskID)).
				And(expression.Key("seq").Between(expression.Value(after+1), expression.Value(latest[0].Seq-1))))
			if err != nil {
				return eventItem{}, 0, false, fmt.Errorf("events of %s: %w", marked.TaskID, err)
			}
			if !linked(evs, after, latest[0].PrevSeq) {
				continue // not all archived yet
			}
			for _, e := range evs {
				if e.Freeing {
					return e, e.NotBefore, true, nil
				}
			}
			ev, ok := freeingAfter(marked, after)
			return ev, waitsUntil(marked, ev), ok, nil
		}
		return eventItem{}, 0, false, fmt.Errorf("the events of %s since %d: %w", marked.TaskID, after, ErrBusy)
	}
	ev, ok := freeingAfter(marked, after)
	return ev, waitsUntil(marked, ev), ok, nil
}

// archiveReads yields the reads of the archive that wait for the change
// stream to write a task's events, for up to budget (stopping
// retryMargin before the request's deadline, as retries do): the first
// at once, then after a pause of archivePause, doubling up to
// archivePauseMax, the last at the end of the budget. The stream
// typically archives within a second: a few reads, not a stream of them.
func archiveReads(ctx context.Context, budget time.Duration) iter.Seq[int] {
	return func(yield func(int) bool) {
		deadline := time.Now().Add(budget)
		if d, ok := ctx.Deadline(); ok && d.Add(-retryMargin).Before(deadline) {
			deadline = d.Add(-retryMargin)
		}
		pause := archivePause
		for i := 0; ; i++ {
			if !yield(i) {
				return
			}
			left := time.Until(deadline)
			if left <= 0 {
				return
			}
			t := time.NewTimer(min(pause, left))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			pause = min(2*pause, archivePauseMax)
		}
	}
}

// The pauses between the reads of archiveReads.
const (
	archivePause    = 150 * time.Millisecond
	archivePauseMax = time.Second
)

// linked reports whether evs, a task's events in seq order, hold every
// event from seq last back, by their prev_seq links, to the first after
// seq after (an event archived before prev_seq was kept ends the walk).
func linked(evs []eventItem, after, last int64) bool {
	for seq := last; seq > after; {
		i := slices.IndexFunc(evs, func(e eventItem) bool { return e.Seq == seq })
		if i < 0 {
			return false
		}
		seq = evs[i].PrevSeq
	}
	return true
}

// freeingAfter is the freeing, among the events of it's latest
// transition, after the event seq after, if there is one.
func freeingAfter(it *taskItem, after int64) (eventItem, bool) {
	for _, e := range it.latestEvents() {
		if e.frees && e.Seq > after {
			return e.eventItem, true
		}
	}
	return eventItem{}, false
}

// waitsUntil is until when the freeing ev, it's latest transition, left
// the task waiting (a failed release's retry delay), or 0, as the change
// stream's message says.
func waitsUntil(it *taskItem, ev eventItem) int64 {
	if it.Status == StatusTodo && it.NotBefore > ev.At {
		return it.NotBefore
	}
	return 0
}

// tellWatcher writes agentID, whose watch was placed at at, the
// task_available message of the freeing ev, as the change stream writes
// it (same id, so only one is ever written), unless the agent was
// removed, or registered again after the watch (as currentWatchers
// decides for the stream).
func (s *Store) tellWatcher(ctx context.Context, agentID string, at int64, ev eventItem, notBefore int64) error {
	told, err := s.currentWatchers(ctx, map[string]int64{agentID: at})
	if err != nil || len(told) == 0 {
		return err
	}
	return s.putMessages(ctx, []messageItem{availableMessage(ev, notBefore, agentID, at)})
}

// availableMessage is the task_available message that tells agentID,
// whose watch was placed at watchedAt, of the freeing ev, which left the
// task waiting until notBefore (0: not waiting).
func availableMessage(ev eventItem, notBefore int64, agentID string, watchedAt int64) messageItem {
	return messageItem{
		AgentID: agentID, MessageID: messageID(ev), Type: MessageTaskAvailable,
		TaskID: ev.TaskID, Reason: string(ev.Type), At: ev.At, Fence: ev.Fence, RunID: ev.RunID,
		TTL: fromMS(ev.At).Add(messageRetention).Unix(), WatchedAt: watchedAt, NotBefore: notBefore,
	}
}

// markWatched sets the task's watched flag, so that its freeings from now
// on read its watches, and returns the task as that write left it, which
// shows the first watcher a freeing written without the flag since its
// read (see watch). It is not a transition: the version is not moved,
// and the change stream has nothing to do for it.
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

// watches reads a task's watches, consistently: the partition's items
// keyed by an agent id (which starts with a letter or digit), not its
// freeing records ("#freed#...", which sort before them).
func (s *Store) watches(ctx context.Context, taskID string) ([]watchItem, error) {
	out, err := queryAll[watchItem](ctx, s.db, s.inbox, "", expression.Key("agent_id").Equal(expression.Value(watchPartition(taskID))).
		And(expression.Key("message_id").GreaterThanEqual(expression.Value("0"))))
	if err != nil {
		return nil, fmt.Errorf("watchers of %s: %w", taskID, err)
	}
	return out, nil
}

// freedPrefix begins the key of a freeing record in a task's watch
// partition ('#' cannot begin an agent id, so no watch meets it).
const freedPrefix = "#freed#"

// freedKey is the key of the record of the freeing of event seq seq: its
// seq in 19 digits, so that keys sort as seqs do.
func freedKey(seq int64) string { return fmt.Sprintf("%s%019d", freedPrefix, seq) }

// freedItem records that the change stream has begun to handle a freeing
// of the task: written before it reads the task's watches for it. It
// carries what the freeing's task_available message says, so that a
// place the record's batch did not get to tell (the batch failed for
// good after the record) is told of it later, with its id (see take); a
// record written before it carried them has At 0.
type freedItem struct {
	Partition string    `dynamodbav:"agent_id"`   // "#watch#<task_id>"
	Key       string    `dynamodbav:"message_id"` // freedKey(Seq)
	Seq       int64     `dynamodbav:"seq"`
	TTL       int64     `dynamodbav:"ttl"`
	Type      EventType `dynamodbav:"type,omitempty"`
	At        int64     `dynamodbav:"at,omitempty"`
	Fence     int64     `dynamodbav:"fence,omitempty"`
	RunID     string    `dynamodbav:"run_id,omitempty"`
	NotBefore int64     `dynamodbav:"not_before,omitempty"`
}

// freedRecord is the record of the freeing ev, which left the task
// waiting until notBefore (0: not waiting). It is kept as long as a watch
// placed before it, so that a place its batch left behind is not told
// again of a later freeing (see take); but once the freeing's messages
// have expired it tells nobody (messageGone). An expired record, which
// TTL may not have deleted yet, counts for nobody (see freedBetween).
func (s *Store) freedRecord(ev eventItem, notBefore int64) freedItem {
	return freedItem{
		Partition: watchPartition(ev.TaskID), Key: freedKey(ev.Seq), Seq: ev.Seq, TTL: s.clock().Add(watchRetention).Unix(),
		Type: ev.Type, At: ev.At, Fence: ev.Fence, RunID: ev.RunID, NotBefore: notBefore,
	}
}

// event is the freeing f records, as far as its message needs it.
func (f freedItem) event() eventItem {
	return eventItem{
		TaskID: strings.TrimPrefix(f.Partition, watchPartition("")), Seq: f.Seq,
		Type: f.Type, At: f.At, Fence: f.Fence, RunID: f.RunID,
	}
}

// messageGone says the freeing f records is past its messages' time
// (messageRetention): a message of it written now would be one its agent
// may have deleted (its tombstone expires as soon), so it tells nobody.
func (f freedItem) messageGone(now time.Time) bool {
	return f.At > 0 && fromMS(f.At).Add(messageRetention).Unix() <= now.Unix()
}

// message is the task_available message that tells agentID, whose watch
// was placed at watchedAt, of the freeing f records.
func (f freedItem) message(agentID string, watchedAt int64) messageItem {
	return availableMessage(f.event(), f.NotBefore, agentID, watchedAt)
}

// recordFreeing writes the record of a freeing (again, when a batch is
// applied twice: the same item).
func (s *Store) recordFreeing(ctx context.Context, f freedItem) error {
	item, err := attributevalue.MarshalMap(f)
	if err != nil {
		return err
	}
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.inbox, Item: item}); err != nil {
		return fmt.Errorf("record the freeing %s: %w", f.Key, err)
	}
	return nil
}

// freedBetween are the records of the task's freeings with seqs from lo
// to hi that the change stream has written and that have not expired,
// oldest first, by one consistent Query (of no item at all unless the
// task was freed in that span).
func (s *Store) freedBetween(ctx context.Context, taskID string, lo, hi int64) ([]freedItem, error) {
	got, err := queryAll[freedItem](ctx, s.db, s.inbox, "", expression.Key("agent_id").Equal(expression.Value(watchPartition(taskID))).
		And(expression.Key("message_id").Between(expression.Value(freedKey(lo)), expression.Value(freedKey(hi)))))
	if err != nil {
		return nil, fmt.Errorf("freeings of %s: %w", taskID, err)
	}
	now := s.clock().Unix()
	return slices.DeleteFunc(got, func(f freedItem) bool { return f.TTL <= now }), nil
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
	if len(returned) == 0 || attributevalue.UnmarshalMap(returned, &now) != nil {
		return nil // gone
	}
	next := nextPlace(now, seq)
	if next < 0 {
		// Moved on by another's drop, yet every place it has is before
		// the freeing: used up.
		if now.LastESeq == 0 {
			return nil
		}
		del, _ := expression.NewBuilder().WithCondition(expression.Name("eseq").Equal(expression.Value(now.ESeq)).
			And(last.Equal(expression.Value(now.LastESeq)))).Build()
		_, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
			TableName: &s.inbox, Key: key,
			ConditionExpression:       del.Condition(),
			ExpressionAttributeNames:  del.Names(),
			ExpressionAttributeValues: del.Values(),
		})
		if _, failed := conditionFailed(err); failed {
			return nil
		}
		return err
	}
	if now.ESeq >= next {
		return nil // already moved on
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
		WithCondition(expression.Name("eseq").Equal(expression.Value(now.ESeq))).
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
// order, the watches each tells: each freeing is recorded and then reads
// its task's watches afresh (so a watch placed again between two
// freeings of the batch is seen with its new place), and each place p of
// a watch before the freeing is told of the first freeing recorded after
// it, with that freeing's message (see take), unless a freeing of this
// batch told the watch after p already (it is not dropped until the batch
// ends).
type freeingWatches struct {
	s    *Store
	told map[string]toldWatch // the latest freeing that told (or passed by) each watch
}

// freeingTell is a freeing, as its record says, and the watches it
// tells: each watcher's id and when its watch was placed.
type freeingTell struct {
	freed freedItem
	asked map[string]int64
}

// places are the eseqs a watch waits at: its first, its later ones
// (asks) and its latest (a watch written before last_eseq has none).
func places(w watchItem) []int64 {
	out := append([]int64{w.ESeq}, w.Asks...)
	if w.LastESeq > 0 {
		out = append(out, w.LastESeq)
	}
	return out
}

// take records the freeing rec and hands out the watches to tell for it:
// the last of the tells it returns is rec's; any before it are earlier
// freedings', told late.
//
// A place before the freeing is told of the first freeing recorded after
// it, as its writer tells it (settleWatch), and so with that freeing's
// message id: mostly this one. A place before an earlier recorded
// freeing is still there when that freeing's batch did not use it up: the
// batch failed for good after the record (its retries used up, and not
// replayed), before or after it told the place; or the place's writer
// tells it of that freeing (or failed midway). In each case the earlier
// freeing's message, written now (putMessages writes an id once, and not
// again once its agent deleted it), is the place's one message, and the
// place is used up with it. A record written before records carried
// their freeing, or one whose freeing's messages have expired
// (messageGone), cannot tell: a place before it is passed by, as it was
// then (used up by that freeing, or its writer's to tell), and used up.
func (f *freeingWatches) take(ctx context.Context, rec freedItem) ([]freeingTell, error) {
	taskID, seq := rec.event().TaskID, rec.Seq
	// Recorded before the watches are read, so that a watch written after
	// the read learns of the freeing (settleWatch); and for each freeing,
	// for a watch written between two of the batch's freeings of the task
	// is seen by the second's read only.
	if err := f.s.recordFreeing(ctx, rec); err != nil {
		return nil, err
	}
	ws, err := f.s.watches(ctx, taskID)
	if err != nil {
		return nil, err
	}
	if f.told == nil {
		f.told = map[string]toldWatch{}
	}
	// A place before a freeing of this batch that told the watch was used
	// up by it: only a place after it, or a watch no freeing of the batch
	// told, makes the freeing worth the read of the records.
	from := func(w watchItem) int64 { return f.told[taskID+"\x00"+w.AgentID].seq }
	due := func(w watchItem, p int64) bool { return p >= from(w) && p < seq }
	first := int64(-1)
	for _, w := range ws {
		for _, p := range places(w) {
			if due(w, p) && (first < 0 || p < first) {
				first = p
			}
		}
	}
	if first < 0 {
		return []freeingTell{{freed: rec, asked: map[string]int64{}}}, nil
	}
	// The freeings recorded between the first due place and this one:
	// none, unless a place was left behind (see above), and not read for
	// when no seq lies between.
	var earlier []freedItem
	if first+1 < seq {
		if earlier, err = f.s.freedBetween(ctx, taskID, first+1, seq-1); err != nil {
			return nil, err
		}
	}
	tells := make([]freeingTell, 0, len(earlier)+1)
	for _, e := range append(earlier, rec) {
		tells = append(tells, freeingTell{freed: e, asked: map[string]int64{}})
	}
	now := f.s.clock()
	for _, w := range ws {
		latest := -1
		for _, p := range places(w) {
			if !due(w, p) {
				continue
			}
			i := slices.IndexFunc(tells, func(t freeingTell) bool { return t.freed.Seq > p })
			latest = max(latest, i)
			if t := tells[i].freed; t.At == 0 || t.messageGone(now) {
				continue // passed by
			}
			tells[i].asked[w.AgentID] = w.At
		}
		if latest >= 0 {
			// The watch as this read found it, which drop uses up to the
			// latest freeing that told it or passed it by: a later place
			// stays, an earlier one is used up.
			f.told[taskID+"\x00"+w.AgentID] = toldWatch{w, tells[latest].freed.Seq}
		}
	}
	own := tells[len(tells)-1]
	return append(slices.DeleteFunc(tells[:len(tells)-1], func(t freeingTell) bool { return len(t.asked) == 0 }), own), nil
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
