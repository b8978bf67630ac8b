package lease

import (
	"context"
	"encoding/base64"
	"fmt"
	"regexp"
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
)

// messageRetention is how long an unread inbox message is kept.
const messageRetention = 7 * 24 * time.Hour

// recordAttempts bounds the retries of the audit write.
const recordAttempts = 6

// messageID is the id of the message that tells a watcher about the
// freeing ev: one per freeing and watcher, so a retried write lands on the
// same one. A lease ends once, so its fence and time name its ending; a
// freeing that ends no lease (an unblocking: fence 0) is named by its seq
// too, since two of them may share a millisecond (a write is stamped no
// earlier than the transition before it).
func messageID(ev eventItem) string {
	if ev.Fence == 0 {
		return fmt.Sprintf("%013d.0.%s~%d", ev.At, ev.TaskID, ev.Seq)
	}
	return fmt.Sprintf("%013d.%d.%s", ev.At, ev.Fence, ev.TaskID)
}

// lostMessageID is the id of the lease_lost message about the ending ev:
// one per ended lease, apart from any task_available message of the same
// ending (the former holder may also watch the task).
func lostMessageID(ev eventItem) string {
	return lostPrefix + messageID(ev)
}

// lostPrefix starts every lease_lost message's id.
const lostPrefix = "lost."

// Events returns a task's audit trail, oldest first: the part of it that
// is known to have no hole (see Trail), whole.
func (s *Store) Events(ctx context.Context, taskID string) ([]Event, error) {
	tr, err := s.Trail(ctx, taskID)
	return tr.Events, err
}

// Trail is a task's audit trail, or a page of it, as a reader can see it
// now: Events, oldest first, is always a prefix of the whole trail (or of
// what follows the page's cursor), with no event missing between two it
// shows. NextCursor, when set, continues the trail: the events right after
// this page can be shown, and Pending is 0. Otherwise the page is the
// last, and Pending counts the later events already known (recorded on
// the task, or archived past a hole) that are held back until the change
// stream has archived the ones before them, about a second.
type Trail struct {
	Events     []Event
	Pending    int
	NextCursor string
}

// TrailParams select a page of a task's trail.
type TrailParams struct {
	TaskID string
	// Cursor continues from a page's NextCursor.
	Cursor string
	// Limit is 1 to MaxListLimit (0: MaxListLimit).
	Limit int
}

// Trail returns the task's whole trail, however long (its Query pages on
// every 1 MB): for the store's own readers. The API reads it by pages
// (TrailPage).
func (s *Store) Trail(ctx context.Context, taskID string) (Trail, error) {
	if err := CheckID("task_id", taskID); err != nil {
		return Trail{}, err
	}
	return s.trail(ctx, taskID, 0, 0)
}

// TrailPage returns a page of the task's trail: up to p.Limit events after
// p.Cursor (from the first without one).
//
// A task gains an event with every transition and keeps them for the
// events' retention, so a trail has no bound of its own: thousands of
// renewals make hundreds of kilobytes, and one answer of it all would in
// the end pass Lambda's 6 MB. A page is bounded instead: limit events (at
// most 1,000) and pageBytes of them (fitPage), read with one GetItem of
// the task and one Query of limit+1 events (one more per 1 MB of them past
// the first, and a GetItem of a failed release's error while its archive
// write is in flight). A page of 1,000 renewals is 1 GetItem and 1 Query,
// 46 read units (TestTrailPagesFollowTheWholeTrail). The cursor is the
// last event's seq: the next page reads the events after it, and the hole
// check goes on from it.
func (s *Store) TrailPage(ctx context.Context, p TrailParams) (Trail, error) {
	if err := CheckID("task_id", p.TaskID); err != nil {
		return Trail{}, err
	}
	limit := p.Limit
	if limit == 0 {
		limit = MaxListLimit
	}
	if err := CheckLimit(limit); err != nil {
		return Trail{}, err
	}
	if err := CheckCursor(p.Cursor); err != nil {
		return Trail{}, err
	}
	var after int64
	if p.Cursor != "" {
		var err error
		if after, err = decodeTrailCursor(p.Cursor, p.TaskID); err != nil {
			return Trail{}, err
		}
	}
	t, err := s.trail(ctx, p.TaskID, after, limit)
	// A hole is almost always the change stream's lag: wait for it to
	// fill, up to trailWait, with reads further and further apart.
	deadline := time.Now().Add(s.trailWait)
	for wait := 50 * time.Millisecond; err == nil && t.Pending > 0 && time.Now().Add(wait).Before(deadline); wait = min(2*wait, 500*time.Millisecond) {
		select {
		case <-ctx.Done():
			return t, nil // what was read: the hole counted as pending
		case <-time.After(wait):
		}
		t, err = s.trail(ctx, p.TaskID, after, limit)
	}
	return t, err
}

// trail returns the task's trail after seq after: the archive, with the
// item's latest transition merged in while its archive write is in
// flight, cut at the first hole, and at limit events (0: none). Each event
// names the seq of the one before it (prev_seq), so a hole is seen even
// though seqs are not consecutive. A missing event whose transition is
// older than the events' retention may have been removed by TTL and is not
// waited for.
//
// The archive is read up to limit+1 events: the one past the page says
// whether a cursor is due (it can be shown: no hole before it) or the page
// is the last (a hole: it and what else was read are pending). Only a read
// that reached the archive's end merges the item's events, which come
// after every archived one; a page that did not will see them on a later
// page. Pending then counts what this read found past the hole: exact,
// unless more than a page of archived events lie past it, when it counts
// those the read saw (at least one).
func (s *Store) trail(ctx context.Context, taskID string, after int64, limit int) (Trail, error) {
	it, err := s.getTask(ctx, taskID)
	if err != nil {
		return Trail{}, err
	}
	if it == nil {
		return Trail{}, ErrTaskNotFound
	}
	items, err := s.queryTrail(ctx, taskID, after, limit)
	if err != nil {
		return Trail{}, err
	}
	if limit == 0 || len(items) <= limit {
		seen := map[int64]bool{}
		for _, e := range items {
			seen[e.Seq] = true
		}
		// The item holds its latest transition's events: shown while the
		// change stream's archive write is still in flight.
		for _, e := range it.latestEvents() {
			if seen[e.Seq] || e.Seq <= after {
				continue
			}
			if e.errored {
				// A failed release's error, as the archive will have it.
				if e.Error, err = s.readError(ctx, taskID, e.errorID); err != nil {
					return Trail{}, err
				}
			}
			items = append(items, e.eventItem)
		}
		sort.Slice(items, func(i, j int) bool { return items[i].Seq < items[j].Seq })
	}
	n := gapFree(items, after, ms(s.clock())-s.retention.Milliseconds())
	shown := n
	if limit > 0 {
		shown = fitPage(items[:min(n, limit)])
	}
	var tr Trail
	if shown < n {
		tr.NextCursor = encodeTrailCursor(taskID, items[shown-1].Seq)
	} else {
		tr.Pending = len(items) - n
	}
	tr.Events = make([]Event, 0, shown)
	for _, e := range items[:shown] {
		tr.Events = append(tr.Events, e.event())
	}
	return tr, nil
}

// The latest events of a trail, for a named claim's retry looking for its
// grant (grantInTrail), are read newest first: first sinceFirst of them,
// then, only when every one of those was made since the time asked for,
// up to sinceMore more. Two Queries at most, whatever the trail's length:
// a task with thousands of events costs what a task with a few does. A
// hundred events of usual size are about 8 read units.
const (
	sinceFirst = 10
	sinceMore  = 100
)

// trailSince returns the task's latest events, oldest first, back to the
// first made before since (Unix ms), as trail shows a trail: the item's
// latest transition merged in while its archive write is in flight (a
// failed release without its error), cut at the first hole, Pending
// counting the events held back. The archive is read newest first
// (sinceFirst, then sinceMore: see there); whole says the read went back
// past since, or to the trail's first event, so that every event made
// since is among those shown and pending. When it is false, more events
// were made since than the read holds: Events are the latest of them.
func (s *Store) trailSince(ctx context.Context, taskID string, since int64) (tr Trail, whole bool, err error) {
	it, err := s.getTask(ctx, taskID)
	if err != nil {
		return Trail{}, false, err
	}
	if it == nil {
		return Trail{}, false, ErrTaskNotFound
	}
	items, whole, err := s.queryTrailBack(ctx, taskID, since)
	if err != nil {
		return Trail{}, false, err
	}
	// The first event read names the one before it: the trail's holes are
	// looked for from there on.
	var after int64
	if len(items) > 0 {
		after = items[0].PrevSeq
	}
	seen := map[int64]bool{}
	for _, e := range items {
		seen[e.Seq] = true
	}
	for _, e := range it.latestEvents() {
		if !seen[e.Seq] && e.Seq > after {
			items = append(items, e.eventItem)
		}
	}
	sort.Slice(items, func(i, j int) bool { return items[i].Seq < items[j].Seq })
	n := gapFree(items, after, ms(s.clock())-s.retention.Milliseconds())
	tr.Pending = len(items) - n
	for _, e := range items[:n] {
		tr.Events = append(tr.Events, e.event())
	}
	return tr, whole, nil
}

// queryTrailBack reads the task's latest archived events, newest first,
// until one made before since, or the first event, or the bound (see
// sinceFirst): whole says it stopped at one of the first two. It returns
// them oldest first.
func (s *Store) queryTrailBack(ctx context.Context, taskID string, since int64) ([]eventItem, bool, error) {
	in, err := tableQuery(s.events, expression.Key("task_id").Equal(expression.Value(taskID)))
	if err != nil {
		return nil, false, err
	}
	in.ScanIndexForward = aws.Bool(false)
	var evs []eventItem
	for _, limit := range []int{sinceFirst, sinceMore} {
		in.Limit = int32ptr(limit)
		page, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, false, fmt.Errorf("query %s: %w", s.events, err)
		}
		var batch []eventItem
		if err := attributevalue.UnmarshalListOfMaps(page.Items, &batch); err != nil {
			return nil, false, fmt.Errorf("decode %s: %w", s.events, err)
		}
		evs = append(evs, batch...)
		if len(page.LastEvaluatedKey) == 0 || len(evs) > 0 && evs[len(evs)-1].At < since {
			slices.Reverse(evs)
			return evs, true, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
	slices.Reverse(evs)
	return evs, false, nil
}

// A page of events (a trail's, or the feed's) is also bounded in bytes, so
// that its answer stays under Lambda's 6 MB response whatever its events
// hold: pageBytes of eventWireBound, the most an event can take in the
// Lambda's answer. Its free text (reason, error; up to 3 KB) can take 7
// bytes a byte there (JSON writes a control character or a < as \u003c,
// and API Gateway's envelope escapes that backslash again), and the rest
// 2 (the envelope escapes its quotes). An event of usual size bounds at
// about 600 bytes, so 1,000 of them fit many times over; 227 of the
// largest possible do. A page holds at least one event.
const (
	pageBytes      = 5 << 20
	eventWireFixed = 256 // field names and punctuation, type, fence, at, held_seconds, outcome
)

func eventWireBound(e eventItem) int {
	return 7*(len(e.Reason)+len(e.Error)) + 2*(eventWireFixed+len(e.TaskID)+len(e.AgentID)+len(e.RunID)+len(e.By))
}

// fitPage returns how many of evs, from the first, fit in pageBytes: at
// least one, if there is one.
func fitPage(evs []eventItem) int {
	size := 0
	for i, e := range evs {
		if size += eventWireBound(e); size > pageBytes && i > 0 {
			return i
		}
	}
	return len(evs)
}

// queryTrail reads the task's archived events after seq after, in seq
// order: limit+1 of them at most (limit 0: all).
func (s *Store) queryTrail(ctx context.Context, taskID string, after int64, limit int) ([]eventItem, error) {
	cond := expression.Key("task_id").Equal(expression.Value(taskID)).And(expression.Key("seq").GreaterThan(expression.Value(after)))
	expr, err := expression.NewBuilder().WithKeyCondition(cond).Build()
	if err != nil {
		return nil, err
	}
	in := &dynamodb.QueryInput{
		TableName:                 &s.events,
		KeyConditionExpression:    expr.KeyCondition(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
		ConsistentRead:            aws.Bool(true),
	}
	var out []eventItem
	for {
		if limit > 0 {
			in.Limit = int32ptr(limit + 1 - len(out))
		}
		page, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("query %s: %w", s.events, err)
		}
		var batch []eventItem
		if err := attributevalue.UnmarshalListOfMaps(page.Items, &batch); err != nil {
			return nil, fmt.Errorf("decode %s: %w", s.events, err)
		}
		out = append(out, batch...)
		if len(page.LastEvaluatedKey) == 0 || limit > 0 && len(out) > limit {
			return out, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

var trailPosPattern = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9._:-]{0,127})#([0-9]{19})$`)

// encodeTrailCursor is the cursor after the event seq of taskID's trail.
func encodeTrailCursor(taskID string, seq int64) string {
	return "t1." + base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%s#%019d", taskID, seq))
}

// decodeTrailCursor returns the seq a cursor of taskID's trail is after.
func decodeTrailCursor(c, taskID string) (int64, error) {
	bad := notIssued()
	enc, ok := strings.CutPrefix(c, "t1.")
	if !ok {
		return 0, bad
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return 0, bad
	}
	m := trailPosPattern.FindSubmatch(b)
	if m == nil {
		return 0, bad
	}
	if string(m[1]) != taskID {
		return 0, invalidField("cursor", CodeInvalidRequest, "cursor continues the trail of task %s, not of %s", m[1], taskID)
	}
	seq, err := strconv.ParseInt(string(m[2]), 10, 64)
	if err != nil {
		return 0, bad
	}
	return seq, nil
}

// gapFree returns how many of evs (sorted by seq, each after the event
// seq after, which a reader has seen, or 0) form a trail with no hole:
// each event's predecessor is the event before it, or none (the first), or
// unknown (archived before predecessors were recorded), or made at or
// before trimmedBefore, so that TTL may have removed it.
func gapFree(evs []eventItem, after, trimmedBefore int64) int {
	last := after
	for i, e := range evs {
		if e.PrevSeq != 0 && e.PrevSeq > last && e.PrevAt > trimmedBefore {
			return i
		}
		last = e.Seq
	}
	return len(evs)
}

// Inbox returns an agent's messages, oldest first: the oldest MaxInbox.
//
// A message the change stream wrote after it had read the watchers'
// heartbeats, and the watcher had been removed in between (its inbox
// emptied), would outlive the removal: the agent's heartbeat item, read
// when a message it reads was earned by a watch or a lease, says which
// messages belong to a removed agent (watched before the id was
// registered again, or the id still removed).
//
// The read is bounded however many messages the agent leaves unread:
// each kind's ids sort by time in a range of their own (task_available
// ones "<ms>.…", lease_lost ones "lost.<ms>.…" after them; the
// tombstones of deleted ones, "~…", in neither), so each range is read
// oldest first, by pages, only until it has MaxInbox messages to show,
// and the oldest MaxInbox of both are the answer.
func (s *Store) Inbox(ctx context.Context, agentID string) ([]Message, error) {
	r := inboxRead{s: s, agentID: agentID}
	available, err := r.oldest(ctx, expression.Key("message_id").LessThan(expression.Value(lostPrefix)))
	if err != nil {
		return nil, err
	}
	lost, err := r.oldest(ctx, expression.KeyBeginsWith(expression.Key("message_id"), lostPrefix))
	if err != nil {
		return nil, err
	}
	// Oldest first by time, a task_available message before a lease_lost
	// one of the same millisecond (as their ids sort).
	out := append(available, lost...)
	slices.SortStableFunc(out, func(a, b Message) int { return a.At.Compare(b.At) })
	// The oldest MaxInbox, so that an answer stays small however many
	// an agent leaves unread.
	return out[:min(len(out), MaxInbox)], nil
}

// inboxPage is the fewest messages a page of an inbox read asks for: a
// page asks for as many as it still needs to show, and no fewer, so that
// a run of skipped messages is not read a few at a time.
const inboxPage = 100

// inboxRead is one read of an agent's inbox.
type inboxRead struct {
	s       *Store
	agentID string
	hb      *heartbeatItem // read at the first message that needs it
	hbRead  bool
	// created is when the agent was registered (fromCreation), read when
	// its heartbeat item is gone and a message is old enough for that to
	// matter (createdAt, mayOutliveHeartbeat); 0 when there is no agent.
	created     int64
	createdRead bool
}

// oldest returns the oldest MaxInbox messages to show (fewer if there are
// no more) of the agent's messages whose ids match idCond, in id order.
func (r *inboxRead) oldest(ctx context.Context, idCond expression.KeyConditionBuilder) ([]Message, error) {
	in, err := tableQuery(r.s.inbox, expression.Key("agent_id").Equal(expression.Value(r.agentID)).And(idCond))
	if err != nil {
		return nil, err
	}
	var out []Message
	for {
		in.Limit = int32ptr(max(MaxInbox-len(out), inboxPage))
		page, err := r.s.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("query %s: %w", r.s.inbox, err)
		}
		var items []messageItem
		if err := attributevalue.UnmarshalListOfMaps(page.Items, &items); err != nil {
			return nil, fmt.Errorf("decode %s: %w", r.s.inbox, err)
		}
		for _, m := range items {
			shown, err := r.shown(ctx, m)
			if err != nil {
				return nil, err
			}
			if shown {
				if out = append(out, m.message()); len(out) == MaxInbox {
					return out, nil
				}
			}
		}
		if len(page.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
}

// shown says whether Inbox shows m: not if it was deleted, by a deletion
// cut short or by an earlier version (DeleteMessage), nor if it is a
// removed agent's.
func (r *inboxRead) shown(ctx context.Context, m messageItem) (bool, error) {
	if m.Acked {
		return false, nil
	}
	if m.WatchedAt == 0 {
		return true, nil
	}
	if !r.hbRead {
		hb, err := r.s.readHeartbeat(ctx, r.agentID)
		if err != nil {
			return false, err
		}
		r.hb, r.hbRead = hb, true
	}
	if r.hb == nil {
		if !mayOutliveHeartbeat(m.WatchedAt, r.s.clock()) {
			return true, nil
		}
		if !r.createdRead {
			created, err := r.s.createdAt(ctx, []string{r.agentID})
			if err != nil {
				return false, err
			}
			r.created, r.createdRead = fromCreation(created[r.agentID]), true
		}
		return r.created <= m.WatchedAt, nil
	}
	return !r.hb.Removed && r.hb.registration() <= m.WatchedAt, nil
}

var messageIDPattern = regexp.MustCompile(`^(lost\.)?[0-9]{13}\.[0-9]{1,19}\.[A-Za-z0-9][A-Za-z0-9._:-]{0,127}(~[0-9]{1,19})?$`)

// tombstonePrefix starts the sort key of a deleted message's tombstone,
// "~"+its id: after every message id (a digit or "lost." first), so out
// of the range Inbox reads.
const tombstonePrefix = "~"

// tombstoneKey is the key of the tombstone of agentID's message messageID.
func tombstoneKey(agentID, messageID string) map[string]types.AttributeValue {
	key := agentKey(agentID)
	key["message_id"] = &types.AttributeValueMemberS{Value: tombstonePrefix + messageID}
	return key
}

// DeleteMessage deletes one of the agent's messages.
//
// The change stream may replay the freeing that made the message (its id
// is the freeing's), and that write must not bring it back. So the
// message is first marked acked, by the write whose condition decides
// whether there was one to delete; then its tombstone is put beside it,
// under tombstoneKey; then it is deleted. A replayed write that lands
// after the deletion finds the tombstone (putMessages) and deletes the
// message again. The tombstone is out of the range Inbox reads, so an
// inbox read costs the agent's unread messages only, however many it
// deleted in the last messageRetention; the deletion costs three write
// units instead of one. A deletion cut short leaves the message marked,
// which Inbox skips, as it skips the marked messages of earlier versions
// (which kept them in place until their TTL: they need no migration).
func (s *Store) DeleteMessage(ctx context.Context, agentID, messageID string) error {
	if !messageIDPattern.MatchString(messageID) {
		return ErrMessageNotFound
	}
	key := agentKey(agentID)
	key["message_id"] = &types.AttributeValueMemberS{Value: messageID}
	cond := expression.AttributeExists(expression.Name("message_id")).And(expression.AttributeNotExists(expression.Name("acked")))
	// The mark names its write: one the SDK sent again (its answer lost:
	// sends.go) fails on its first sending's mark, and knows it, where
	// another deletion's mark is another's, and answers 404.
	write := writeID()
	upd := expression.Set(expression.Name("acked"), expression.Value(true)).Set(expression.Name("acked_by"), expression.Value(write))
	expr, _ := expression.NewBuilder().WithCondition(cond).WithUpdate(upd).Build()
	wctx, sends := countSends(ctx)
	_, err := s.db.UpdateItem(wctx, &dynamodb.UpdateItemInput{
		TableName: &s.inbox, Key: key,
		ConditionExpression:                 expr.Condition(),
		UpdateExpression:                    expr.Update(),
		ExpressionAttributeNames:            expr.Names(),
		ExpressionAttributeValues:           expr.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, sendOpts(wctx)...)
	if returned, failed := conditionFailed(err); failed {
		mine := &types.AttributeValueMemberS{Value: write}
		if sends.Load() < 2 || !sameAttr(returned, map[string]types.AttributeValue{"acked_by": mine}, "acked_by") {
			return ErrMessageNotFound
		}
		err = nil // this very mark, sent again: the deletion goes on
	}
	if err != nil {
		return fmt.Errorf("delete message %s: %w", messageID, err)
	}
	// The tombstone is kept past any replay (the stream holds a change
	// for 24 hours), and at least as long as the marked message was kept
	// before (messageRetention from its freeing). It is marked acked too,
	// so that an earlier version, which reads the whole partition, skips
	// it as it skips a deleted message.
	tomb := tombstoneKey(agentID, messageID)
	tomb["ttl"] = &types.AttributeValueMemberN{Value: strconv.FormatInt(s.clock().Add(messageRetention).Unix(), 10)}
	tomb["acked"] = &types.AttributeValueMemberBOOL{Value: true}
	if _, err := s.db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &s.inbox, Item: tomb}); err != nil {
		return fmt.Errorf("delete message %s: tombstone: %w", messageID, err)
	}
	if _, err := s.db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &s.inbox, Key: key}); err != nil {
		return fmt.Errorf("delete message %s: %w", messageID, err)
	}
	return nil
}
