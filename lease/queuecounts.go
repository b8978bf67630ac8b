package lease

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
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

// Queue counts.
//
// GET /api/queues gives each queue's tasks by status and its oldest todo
// task without a Scan and without a second write on the request path: the
// stream function keeps the counts. Each queue has a counter item in the
// heartbeats table, "#queue#<queue>" (a key no agent id can take, as the
// claim receipts), with n#<status> for each status and p#<priority> for
// todo tasks by priority; the queue registry (registry.go) holds the
// queue names, each added before its queue's first count. A new
// table would have cost a schema entry, CDK, grants and nag rules for items
// this small; the heartbeats table already takes the stream function's
// reads and is keyed by a string.
//
// A change moves its task from (old queue, old status, old priority) to
// the new ones: a create adds one, a PATCH that moves the task to another
// queue takes one from the old queue and adds one to the new. A batch's
// changes are summed per queue and ADDed in one UpdateItem per queue.
//
// The stream delivers each change at least once, and a failed batch is
// delivered again whole, bisected by the event source mapping, or, by the
// local poller, re-read from its checkpoint with later records behind it.
// Records of one shard come in order, one batch at a time. So each counter
// item keeps, per shard, the sequence number of the last record it has
// applied (seq#<shard>, zero-padded to 40 digits so numbers compare as
// strings) and when (at#<shard>). A batch reads the counters of the queues
// it touches (one consistent BatchGetItem), leaves out, per queue, every
// record at or before that queue's position, and writes the rest with the
// new position, conditioned on the position being what it read. Any
// redelivery, in any split, then counts every change once, with no
// transaction (the local DynamoDB has none): a queue written before a
// batch failed has moved past those records; one not written has not.
// What this cannot count is a batch the event source mapping gave up on
// (dead-lettered) and went past: a later batch moves the positions of the
// queues it touches past the batch's records, so a replay of them skips
// those queues, whose counts stay off (DEPLOY.md, stream-dead-letters)
// until a recount (recount.go) counts their tasks again. A
// failed condition (only two deliveries of one shard at once could cause
// it, or the write itself, sent again by the SDK after its answer was
// lost) fails the batch, which is delivered again, unless the item it
// failed on has counted every record the write would have (its positions
// at or past the write's): then there is nothing left to count. Positions not moved for
// longer than the stream's retention (24 h) are removed by the next write
// of the item: their shard can deliver nothing again, so the item stays
// small.
//
// This needs each batch's shard. The local poller gives it to the handler
// (stream.WithShard); a Lambda event names its shard only with a tumbling
// window, so the stream function's mapping has one (15 minutes, its state
// unused; stream.WindowHandler). Changes without a shard are not counted,
// rather than counted twice. The mapping must keep ParallelizationFactor
// 1: with several batches of one shard at once, positions are no longer
// in order.
//
// oldest_todo_at comes from by_claim: for each priority that has todo
// tasks (p#<priority> > 0), the first entry of each of the queue's claim
// shards with that priority's claim_key prefix (Limit 1), the oldest of
// them. Only claimable tasks are in by_claim, which is every todo task (a
// todo task has no lease) but one written before queues, until its next
// ending or PATCH (see "Queues, priorities and claim" in claim.go), which is also
// when it starts to be counted (below). The index may lag a write: for a moment it
// can still show a task just granted (an older oldest_todo_at) or not yet
// show one just created or freed. The counts lag the writes by the
// stream's delay (about a second), and are never read from an index.
//
// Counting starts when the feature is deployed: a task last written before
// that is counted from its next change, so a data dir or table from before
// may show fewer tasks (and a count that would go below zero shows 0)
// until every old task has changed once, or a recount (recount.go) has
// counted them.

// Queue counters live in the heartbeats table under keys no agent id can
// take ('#' never occurs in an id), as claim receipts do: one item per
// queue, "#queue#<queue>", and the registry of every queue counted, in
// pages "#queues", "#queues#1", ... (registry.go). See "Queue counts"
// above.
const (
	queueCounterPrefix = "#queue#"
	queueRegistryID    = "#queues"
	// Counter attributes: n#<status> tasks by status, p#<priority> todo
	// tasks by priority, seq#<shard> the last stream record applied from a
	// shard (zero-padded) and at#<shard> when (epoch ms), for pruning.
	countAttr    = "n#"
	todoPrioAttr = "p#"
	seqAttr      = "seq#"
	seqAtAttr    = "at#"
	// revAttr counts the writes of the item's counts, the stream's and a
	// recount's: a recount writes only over the rev it read (recount.go).
	revAttr = "rev"
	// seqWidth is the width sequence numbers are padded to, so that they
	// compare as strings: DynamoDB Streams' are decimal, at most 40 digits.
	seqWidth = 40
	// streamRetention is how long the stream keeps a record; a shard whose
	// last applied record is older than this cannot be delivered again.
	streamRetention = 24 * time.Hour
)

// QueueStats is one queue's tasks by status and its oldest todo task.
type QueueStats struct {
	Queue string
	// Counts has every status (todo, in_progress, done, cancelled).
	Counts map[Status]int64
	// OldestTodoAt is the creation time of the queue's oldest claimable
	// todo task; zero when it has none.
	OldestTodoAt time.Time
}

// queueState is where one task image counts: its queue, status, and
// priority (which counts for todo tasks only).
type queueState struct {
	queue    string
	status   Status
	priority int
}

func stateOf(img map[string]types.AttributeValue) (queueState, bool, error) {
	if img == nil {
		return queueState{}, false, nil
	}
	var t taskItem
	if err := attributevalue.UnmarshalMap(img, &t); err != nil {
		return queueState{}, false, fmt.Errorf("decode change: %w", err)
	}
	if t.TaskID == "" || !t.Status.Valid() {
		return queueState{}, false, nil
	}
	return queueState{queue: t.queue(), status: t.Status, priority: t.priority()}, true, nil
}

// padSeq pads a stream sequence number so that numbers compare as strings.
func padSeq(seq string) string {
	if len(seq) >= seqWidth {
		return seq
	}
	return strings.Repeat("0", seqWidth-len(seq)) + seq
}

// queueDelta is what a batch adds to one queue's counters: per attribute,
// and per shard the last record (padded) it took into account.
type queueDelta map[string]int64

// countQueues applies a batch's changes to the queue counters, exactly
// once per change however often and however split the batch is delivered.
// Per queue it reads the counter item (one BatchGetItem for the batch),
// leaves out every change at or before the shard's recorded sequence
// number, and ADDs the rest in one UpdateItem conditioned on that recorded
// number being what it read. Changes without a shard are not counted.
func (s *Store) countQueues(ctx context.Context, changes []Change) error {
	type pending struct {
		shard, seq string
		from, to   queueState
		hasFrom    bool
		hasTo      bool
	}
	var ps []pending
	queues := map[string]bool{}
	for _, ch := range changes {
		if ch.Shard == "" || ch.Seq == "" {
			continue
		}
		from, hasFrom, err := stateOf(ch.Old)
		if err != nil {
			return err
		}
		to, hasTo, err := stateOf(ch.New)
		if err != nil {
			return err
		}
		if hasFrom == hasTo && from == to {
			continue
		}
		ps = append(ps, pending{ch.Shard, padSeq(ch.Seq), from, to, hasFrom, hasTo})
		if hasFrom {
			queues[from.queue] = true
		}
		if hasTo {
			queues[to.queue] = true
		}
	}
	if len(ps) == 0 {
		return nil
	}
	names := slices.Sorted(maps.Keys(queues))
	items, err := s.queueItems(ctx, names)
	if err != nil {
		return fmt.Errorf("read queue counters: %w", err)
	}
	if err := s.registerQueues(ctx, names, items); err != nil {
		return err
	}
	now := s.clock()
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, q := range names {
		item := items[q]
		delta := queueDelta{}
		last := map[string]string{} // shard -> last seq of this batch for q
		for _, p := range ps {
			if (!p.hasFrom || p.from.queue != q) && (!p.hasTo || p.to.queue != q) {
				continue
			}
			if applied := stringAttr(item, seqAttr+p.shard); applied != "" && p.seq <= applied {
				continue // applied before: a redelivery
			}
			if p.hasFrom && p.from.queue == q {
				delta[countAttr+string(p.from.status)]--
				if p.from.status == StatusTodo {
					delta[todoPrioAttr+strconv.Itoa(p.from.priority)]--
				}
			}
			if p.hasTo && p.to.queue == q {
				delta[countAttr+string(p.to.status)]++
				if p.to.status == StatusTodo {
					delta[todoPrioAttr+strconv.Itoa(p.to.priority)]++
				}
			}
			last[p.shard] = max(last[p.shard], p.seq)
		}
		if len(last) == 0 {
			continue
		}
		g.Go(func() error { return s.addQueueDelta(gctx, q, item, delta, last, now) })
	}
	return g.Wait()
}

// addQueueDelta is the one conditional write of a batch to a queue's
// counter: the ADDs, the shards' new positions, and the removal of shard
// positions older than the stream's retention.
func (s *Store) addQueueDelta(ctx context.Context, q string, item map[string]types.AttributeValue, delta queueDelta, last map[string]string, now time.Time) error {
	var upd expression.UpdateBuilder
	first := true
	set := func(u expression.UpdateBuilder) { upd, first = u, false }
	for _, k := range slices.Sorted(maps.Keys(delta)) {
		if delta[k] == 0 {
			continue
		}
		if first {
			set(expression.Add(expression.NameNoDotSplit(k), expression.Value(delta[k])))
		} else {
			upd = upd.Add(expression.NameNoDotSplit(k), expression.Value(delta[k]))
		}
	}
	// Every write of the counts moves rev on, so that a recount can tell
	// whether the counts moved while it counted (recount.go).
	if first {
		set(expression.Add(expression.Name(revAttr), expression.Value(1)))
	} else {
		upd = upd.Add(expression.Name(revAttr), expression.Value(1))
	}
	var conds terms
	shards := slices.Sorted(maps.Keys(last))
	for _, sh := range shards {
		name := expression.NameNoDotSplit(seqAttr + sh)
		if first {
			set(expression.Set(name, expression.Value(last[sh])))
		} else {
			upd = upd.Set(name, expression.Value(last[sh]))
		}
		upd = upd.Set(expression.NameNoDotSplit(seqAtAttr+sh), expression.Value(now.UnixMilli()))
		c := expression.AttributeNotExists(name)
		if read := stringAttr(item, seqAttr+sh); read != "" {
			c = name.Equal(expression.Value(read))
		}
		conds = append(conds, c)
	}
	for k, v := range item {
		sh, ok := strings.CutPrefix(k, seqAtAttr)
		if !ok || last[sh] != "" {
			continue
		}
		if n, ok := v.(*types.AttributeValueMemberN); ok {
			if at, err := strconv.ParseInt(n.Value, 10, 64); err == nil && now.Sub(time.UnixMilli(at)) > streamRetention {
				upd = upd.Remove(expression.NameNoDotSplit(k)).Remove(expression.NameNoDotSplit(seqAttr + sh))
			}
		}
	}
	expr, err := expression.NewBuilder().WithUpdate(upd).WithCondition(conds.cond()).Build()
	if err != nil {
		return err
	}
	_, err = s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &s.heartbeats, Key: agentKey(queueCounterPrefix + q),
		UpdateExpression:                    expr.Update(),
		ConditionExpression:                 expr.Condition(),
		ExpressionAttributeNames:            expr.Names(),
		ExpressionAttributeValues:           expr.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if cur, failed := conditionFailed(err); failed {
		if len(cur) > 0 && countedPast(cur, last) {
			// Every record of the batch for q is counted already: by
			// this write, its answer lost and the SDK sending it again,
			// or by another delivery of the same records.
			return nil
		}
		// Another delivery of this shard's records moved it meanwhile
		// (the stream hands one shard to one reader at a time, so only
		// after a lost answer): fail the batch, which is delivered again
		// and leaves out what that delivery applied.
		return fmt.Errorf("queue %s counter moved under the batch: %w", q, err)
	}
	if err != nil {
		return fmt.Errorf("count queue %s: %w", q, err)
	}
	return nil
}

// countedPast says the counter item has applied every shard's records up
// to last (its positions at or past them).
func countedPast(item map[string]types.AttributeValue, last map[string]string) bool {
	for sh, seq := range last {
		if applied := stringAttr(item, seqAttr+sh); applied == "" || applied < seq {
			return false
		}
	}
	return true
}

// registerQueues adds the queues that have no counter item yet to the
// registry, before their first count: adding to a set is idempotent.
func (s *Store) registerQueues(ctx context.Context, names []string, items map[string]map[string]types.AttributeValue) error {
	var fresh []string
	for _, q := range names {
		if items[q] == nil {
			fresh = append(fresh, q)
		}
	}
	if err := addToRegistry(ctx, s.db, s.heartbeats, s.registryPage, fresh); err != nil {
		return err
	}
	s.listed.add(fresh)
	return nil
}

// queueItems reads the counter items of queues consistently, 100 a
// request; a queue without one is missing from the answer.
func (s *Store) queueItems(ctx context.Context, queues []string) (map[string]map[string]types.AttributeValue, error) {
	got, err := batchGetItems(ctx, s.db, s.heartbeats,
		uniqueKeys(queues, func(q string) map[string]types.AttributeValue { return agentKey(queueCounterPrefix + q) }), "", nil)
	if err != nil {
		return nil, err
	}
	out := make(map[string]map[string]types.AttributeValue, len(got))
	for _, item := range got {
		if q, ok := strings.CutPrefix(stringAttr(item, "agent_id"), queueCounterPrefix); ok {
			out[q] = item
		}
	}
	return out, nil
}

func stringAttr(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func numberAttr(item map[string]types.AttributeValue, name string) int64 {
	if v, ok := item[name].(*types.AttributeValueMemberN); ok {
		n, _ := strconv.ParseInt(v.Value, 10, 64)
		return n
	}
	return 0
}

// MaxQueuesListed bounds a page of the queue listing, and is its default
// size: a listing of up to that many queues is one page, unless their
// oldest todo tasks take more reads than a page makes (MaxQueueListingReads).
const MaxQueuesListed = 1000

// MaxQueueListingReads bounds the claim-index Queries one page of the queue
// listing makes for its queues' oldest todo tasks (each queue with todo tasks
// takes one per claim shard per priority that has todo tasks): a page ends
// before the queue that would take it past the bound, so that one GET's
// requests, and its time in a small Lambda, stay bounded however the
// queues' tasks are spread. With the default 4 claim shards, 250 queues
// whose todo tasks share a priority fill a page's reads (queues without
// todo tasks take none).
const MaxQueueListingReads = 1000

// ListQueuesParams asks for a page of the queue listing.
type ListQueuesParams struct {
	Limit  int    // 1..MaxQueuesListed; 0: MaxQueuesListed
	Cursor string // opaque, from QueuePage.NextCursor
}

// QueuePage is a page of the queue listing, in name order, and the cursor
// of the next page ("" after the last).
type QueuePage struct {
	Queues     []QueueStats
	NextCursor string
}

// ListQueues returns the first page of the queue listing (see
// ListQueuePage).
func (s *Store) ListQueues(ctx context.Context) ([]QueueStats, error) {
	page, err := s.ListQueuePage(ctx, ListQueuesParams{})
	return page.Queues, err
}

// queueCursor is the cursor of the queue listing's page after queue q.
func queueCursor(q string) string { return base64.RawURLEncoding.EncodeToString([]byte("q:" + q)) }

// queueAfter is the queue a queue listing's cursor goes on after.
func queueAfter(cursor string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	q, ok := strings.CutPrefix(string(b), "q:")
	if err != nil || !ok || !ValidID(q) {
		return "", notIssued()
	}
	return q, nil
}

// ListQueuePage returns a page of the counted queues, by name, each with
// its tasks by status and its oldest todo task: up to the limit, and
// fewer when the oldest todo tasks of more would take more than the page's
// reads (MaxQueueListingReads; the first queue is always listed).
// Requests: a GetItem of the registry (and a BatchGetItem of its further
// pages) once this process's copy of it is listedQueuesFor old
// (registry.go), a BatchGetItem of the counters of each 100 queues until
// the page is full, and for each queue of the page with todo tasks one
// Query (Limit 1) per claim shard per priority that has todo tasks, 16 at
// once.
// Counts are exact up to the stream's delay; oldest_todo_at comes from the
// claim index and may lag. Queues are only ever added, so a walk of the
// pages lists once every queue there was listedQueuesFor before it began.
func (s *Store) ListQueuePage(ctx context.Context, p ListQueuesParams) (QueuePage, error) {
	limit := cmp.Or(p.Limit, MaxQueuesListed)
	if limit < 1 || limit > MaxQueuesListed {
		return QueuePage{}, invalidField("limit", CodeInvalidRequest, "limit must be 1 to %d", MaxQueuesListed)
	}
	after := ""
	if p.Cursor != "" {
		if err := CheckCursor(p.Cursor); err != nil {
			return QueuePage{}, err
		}
		var err error
		if after, err = queueAfter(p.Cursor); err != nil {
			return QueuePage{}, err
		}
	}
	all, err := s.queueRegistry(ctx)
	if err != nil {
		return QueuePage{}, err
	}
	names := all[sort.Search(len(all), func(i int) bool { return all[i] > after }):]
	more := len(names) > limit
	names = names[:min(len(names), limit)]
	if len(names) == 0 {
		return QueuePage{Queues: []QueueStats{}}, nil
	}
	// The counters a BatchGetItem's worth at a time, until the page's
	// queues would take its reads past the bound.
	items := map[string]map[string]types.AttributeValue{}
	n, spent := 0, 0
	for read := 0; n == read && read < len(names); read = min(read+maxBatchGet, len(names)) {
		got, err := s.queueItems(ctx, names[read:min(read+maxBatchGet, len(names))])
		if err != nil {
			return QueuePage{}, fmt.Errorf("read queue counters: %w", err)
		}
		maps.Copy(items, got)
		for ; n < min(read+maxBatchGet, len(names)); n++ {
			r := oldestReads(items[names[n]], s.shards.Claim)
			if n > 0 && spent+r > s.queueReads {
				break
			}
			spent += r
		}
	}
	if n < len(names) {
		names, more = names[:n], true
	}
	var page QueuePage
	if more {
		page.NextCursor = queueCursor(names[len(names)-1])
	}
	page.Queues, err = s.queueStats(ctx, names, items)
	return page, err
}

// oldestReads is how many Queries the oldest todo task of the queue whose
// counter item is item takes: one per claim shard per priority with todo
// tasks, none when the queue has none.
func oldestReads(item map[string]types.AttributeValue, shards int) int {
	if numberAttr(item, countAttr+string(StatusTodo)) <= 0 {
		return 0
	}
	n := 0
	for p := 0; p <= MaxPriority; p++ {
		if numberAttr(item, todoPrioAttr+strconv.Itoa(p)) > 0 {
			n += shards
		}
	}
	return n
}

// queueStats is the counts and oldest todo task of each of names, whose
// counter items are items.
func (s *Store) queueStats(ctx context.Context, names []string, items map[string]map[string]types.AttributeValue) ([]QueueStats, error) {
	out := make([]QueueStats, len(names))
	oldest := make([][]int64, len(names))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, q := range names {
		item := items[q]
		out[i] = QueueStats{Queue: q, Counts: make(map[Status]int64, len(Statuses))}
		for _, st := range Statuses {
			out[i].Counts[st] = max(0, numberAttr(item, countAttr+string(st)))
		}
		if out[i].Counts[StatusTodo] == 0 {
			continue
		}
		oldest[i] = make([]int64, (MaxPriority+1)*s.shards.Claim)
		for p := 0; p <= MaxPriority; p++ {
			if numberAttr(item, todoPrioAttr+strconv.Itoa(p)) <= 0 {
				continue
			}
			for shard := range s.shards.Claim {
				g.Go(func() error {
					at, err := s.oldestClaimable(gctx, q, shard, p)
					oldest[i][p*s.shards.Claim+shard] = at
					return err
				})
			}
		}
	}
	if err := g.Wait(); err != nil {
		return nil, fmt.Errorf("oldest todo tasks: %w", err)
	}
	for i := range out {
		var best int64
		for _, at := range oldest[i] {
			if at > 0 && (best == 0 || at < best) {
				best = at
			}
		}
		if best > 0 {
			out[i].OldestTodoAt = fromMS(best)
		}
	}
	return out, nil
}

// queueRegistry is every queue name in the registry (registry.go), in
// name order, for listings: this process's copy, read again consistently
// once it is listedQueuesFor old.
func (s *Store) queueRegistry(ctx context.Context) ([]string, error) {
	return s.listed.get(s.clock, func() (registry, error) { return readRegistry(ctx, s.db, s.heartbeats) })
}

// enlistQueues puts queues in the registry before a task is written to
// them, so that a listing of every queue's todo tasks (list.go), which
// walks the registry, finds the task as soon as it is written (in another
// process, once its copy of the registry is listedQueuesFor old). A process
// remembers the queues it has found there (they are never removed): a
// queue costs a consistent read of the registry once a process, and an
// ADD once.
func (s *Store) enlistQueues(ctx context.Context, queues ...string) error {
	var fresh []string
	for _, q := range queues {
		if _, ok := s.enlisted.Load(q); !ok && !slices.Contains(fresh, q) {
			fresh = append(fresh, q)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	r, err := readRegistry(ctx, s.db, s.heartbeats)
	if err != nil {
		return err
	}
	var missing []string
	for _, q := range fresh {
		if !r.has(q) {
			missing = append(missing, q)
		}
	}
	if err := r.add(ctx, s.db, s.heartbeats, s.registryPage, missing); err != nil {
		return err
	}
	s.listed.add(fresh)
	for _, q := range fresh {
		s.enlisted.Store(q, true)
	}
	return nil
}

// oldestClaimable is the creation time (epoch ms) of the oldest claimable
// task of one priority in one claim shard of queue q, 0 if none: the first
// entry of the shard with that priority's prefix.
func (s *Store) oldestClaimable(ctx context.Context, q string, shard, priority int) (int64, error) {
	keyCond := expression.Key("claim_shard").Equal(expression.Value(q + "#" + strconv.Itoa(shard))).
		And(expression.Key("claim_key").BeginsWith(strconv.Itoa(MaxPriority-priority) + "#"))
	expr, _ := expression.NewBuilder().WithKeyCondition(keyCond).
		WithProjection(expression.NamesList(expression.Name("claim_key"))).Build()
	page, err := s.db.Query(ctx, &dynamodb.QueryInput{
		TableName: &s.tasks, IndexName: aws.String(schema.TasksByClaim),
		KeyConditionExpression:    expr.KeyCondition(),
		ProjectionExpression:      expr.Projection(),
		ExpressionAttributeNames:  expr.Names(),
		ExpressionAttributeValues: expr.Values(),
		Limit:                     aws.Int32(1),
	})
	if err != nil {
		return 0, err
	}
	if len(page.Items) == 0 {
		return 0, nil
	}
	parts := strings.SplitN(stringAttr(page.Items[0], "claim_key"), "#", 3)
	if len(parts) < 2 {
		return 0, errors.New("malformed claim_key")
	}
	return strconv.ParseInt(parts[1], 10, 64)
}
