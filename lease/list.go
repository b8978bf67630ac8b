package lease

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"golang.org/x/sync/errgroup"

	"github.com/checkout-dev/checkout/lease/schema"
)

// Listing tasks (GET /api/tasks).
//
// Each status is listed from an index that its tasks are in anyway, so
// that no transition writes an index entry for the listing's sake:
//
//	todo         by_claim: each queue's claimable tasks in claim order
//	             (highest priority, then oldest; those waiting for their
//	             not_before after the ready ones, earliest first). Without
//	             a queue, the queues are walked in name order.
//	in_progress  by_lease_expiry: leases in expiry order, soonest first.
//	blocked      by_status, in creation order, each over the status
//	done         shard count's partitions ("open#<n>" for blocked,
//	cancelled    "done#<n>" and so on).
//	failed
//
// Why. todo and in_progress are the two statuses every checkout, release
// and sweep moves a task between. Were they in by_status, each of those
// writes would rewrite the entry's projected status, one write unit on
// every transition of the fleet only for listings. So a task that is todo
// or in_progress has no status_shard (setStatus REMOVEs it) and no
// by_status entry; a todo task is in by_claim and an in_progress one in
// by_lease_expiry already. An entry in "open#<n>" written before this
// (when todo and in_progress were kept there) stays until the task's next
// write removes it; the blocked listing filters on the status, and a
// listing confirms every task on its item, so such an entry shows nothing
// wrongly.
//
// The walk of every queue needs every queue's name at once, so a queue is
// in the registry (queuecounts.go) before its first task is written
// (enlistQueues: a consistent read of the registry and, for a queue it
// lacks, an ADD, once a process per queue). The walk reads this process's
// copy of the registry (registry.go), read again once it is a second old:
// a queue another process created within that second may be missing, as
// an index entry may lag. The default queue is always walked: a task
// written before queues is in it.
//
// What a page costs and shows. A todo page Queries each claim shard of the
// queues it walks (todoWalkStart queues at once, widening to
// todoWalkWidth), an in_progress page each lease shard, any other status
// each status shard, every shard at once and Limit entries each; the
// entries are merged in order and the page confirmed with one consistent
// BatchGetItem (100 keys a request). Every page's reads are bounded
// whatever the fleet holds (maxListReads reads of a status; a todo read
// at most todoWalkQueues queues, an in_progress read of one queue
// max(limit, leaseScan) of every queue's leases; the dependents of at
// most pageDependentsReads tasks; the statuses of at most
// pageBlockerReads blockers), so a page may come short, even empty,
// with a cursor at the position reached. A cursor holds the position of the
// last entry listed (a claim_key; "<expiry ms>#<task_id>"; or, for by_status,
// one created_key per shard), so a task is never listed twice by one
// walk but for a lease renewed after it was listed (its expiry moves on,
// past the cursor), and one that moves in behind the cursor (a task
// released with a higher priority than the page's last) is listed on no
// later page of that walk.
//
// As everywhere, an index only proposes: a page shows each task as its item
// is now, and only under the status it has now; a task whose entry lags
// the table is missing from a page, never shown wrongly. A lease that
// expired unswept is shown as its ending leads (todo, or failed) in the
// listing of every status, under in_progress, and in a one-status
// listing once the sweep has recorded its ending.

// cursor is the decoded form of TaskPage.NextCursor: the listing it
// continues (its status and queue filters), the status the next page
// starts in, and where in that status.
type cursor struct {
	// Listing is 2 on the cursors issued today; 1 on one issued before
	// todo and in_progress were listed from their own indexes (its
	// position in those two is not theirs, and they are listed again
	// from their start); 0 on one issued before cursors named their
	// listing, which continues the listing the request names.
	Listing    int    `json:"l,omitempty"`
	ListStatus Status `json:"ls,omitempty"`
	ListQueue  string `json:"lq,omitempty"`
	Status     int    `json:"s"`
	// After holds, for a by_status listing, per shard the created_key of
	// the last task listed from it: "" for none yet, shardDone for a
	// shard listed to its end.
	After []string `json:"a,omitempty"`
	// Queue is the queue a walk of todo tasks is in, and Pos the last
	// entry listed: a claim_key for todo, "<expiry ms>#<task_id>" for
	// in_progress.
	Queue string `json:"q,omitempty"`
	Pos   string `json:"p,omitempty"`
}

// cursorListing is the Listing of the cursors issued today.
const cursorListing = 2

// shardDone marks a shard listed to its end in a cursor.
const shardDone = "~"

func encodeCursor(c cursor) string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// decodeCursor decodes a cursor of a store with n status shards. A cursor
// issued with fewer (the count has grown since) reads the shards it does
// not name from their start; one with more was not issued by this
// deployment. The position is checked against its status by
// listPosition.
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
	if c.Listing < 0 || c.Listing > cursorListing || c.Listing == 0 && (c.ListStatus != "" || c.ListQueue != "") ||
		c.Listing < cursorListing && (c.Queue != "" || c.Pos != "") ||
		c.ListStatus != "" && CheckListStatus(c.ListStatus) != nil || c.ListQueue != "" && !ValidID(c.ListQueue) ||
		c.Queue != "" && !ValidID(c.Queue) {
		return cursor{}, notIssued()
	}
	return c, nil
}

// listPos is where the listing of one status starts or goes on.
type listPos struct {
	After      []string // by_status: per shard (cursor.After)
	Queue, Pos string   // todo and in_progress (cursor.Queue, cursor.Pos)
}

// listPosition is where c says the listing of st goes on, checked.
func (c cursor) listPosition(st Status) (listPos, error) {
	switch {
	case st != StatusTodo && st != StatusInProgress:
		if c.Queue != "" || c.Pos != "" {
			return listPos{}, notIssued()
		}
		return listPos{After: c.After}, nil
	case c.Listing < cursorListing:
		return listPos{}, nil // a position in by_status: start again
	case c.After != nil || st == StatusInProgress && (c.Queue != "" || c.Pos != "" && !validCreatedKey(c.Pos)) ||
		st == StatusTodo && c.Pos != "" && !validClaimKey(c.Pos):
		return listPos{}, notIssued()
	}
	return listPos{Queue: c.Queue, Pos: c.Pos}, nil
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

// validCreatedKey reports whether k could be a task's created_key (13
// digits of milliseconds, '#', the task's id), or a lease's position
// in an in_progress listing (its expiry, likewise).
func validCreatedKey(k string) bool {
	ms, id, ok := strings.Cut(k, "#")
	return ok && len(ms) == 13 && digits(ms) && ValidID(id)
}

// validClaimKey reports whether k could be a claim_key: claimKey's
// "<9-priority>#<created ms>#<id>", or delayedKey's "~<ms>#" before one.
func validClaimKey(k string) bool {
	if nb, rest, ok := strings.Cut(k, "#"); ok && len(nb) == 14 && nb[0] == '~' && digits(nb[1:]) {
		k = rest
	}
	p, rest, ok := strings.Cut(k, "#")
	return ok && len(p) == 1 && digits(p) && validCreatedKey(rest)
}

func digits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// ListTasks lists tasks by status, a page at a time, each status from its
// index (see "Listing tasks" above for the order of each). With no status
// it walks every status (Statuses) in turn. A page's cursor continues its
// own listing: given alone, it keeps that listing's status and queue.
//
// A page is also bounded in bytes, as a trail's is (pageBytes): when the
// tasks read do not fit, the listing is read again with a limit of those
// that do, so its cursor goes on right after them.
//
// A page reads the dependents of at most pageDependentsReads of its tasks
// (a Query each), and no more once the ids read would pass pageBytes,
// and the statuses of at most pageBlockerReads blockers: when its tasks
// need more, the listing is read again with a limit of those read, their
// dependents kept from the first read.
func (s *Store) ListTasks(ctx context.Context, p ListTasksParams) (TaskPage, error) {
	known := map[string][]string{}
	for {
		page, filled, err := s.listTasks(ctx, p, known)
		if err != nil {
			return TaskPage{}, err
		}
		if filled > 0 {
			p.Limit = filled // fewer than the page had, so this ends
			continue
		}
		n := fitTasks(page.Tasks)
		if n == len(page.Tasks) {
			return page, nil
		}
		p.Limit = n // likewise
	}
}

// taskWireFixed bounds a task's field names, punctuation, times, numbers
// and statuses in an answer.
const taskWireFixed = 1024

// taskWireBound is the most task t can take in a Lambda's answer (see
// eventWireBound): its free text 7 bytes a byte, the rest 2. Its lease
// is bounded as a listing of leases bounds it: the holder's name is free
// text, and a task's lease shows no title or queue.
func taskWireBound(t Task) int {
	text := len(t.Title) + len(t.Description) + len(t.Metadata) + len(t.LastError)
	rest := taskWireFixed + len(t.TaskID) + len(t.Queue)
	size := 0
	if c := t.Checkout; c != nil {
		size = checkoutWireBound(*c)
	}
	for _, b := range t.BlockedBy {
		rest += len(b.TaskID) + 48
	}
	for _, id := range t.Blocks {
		rest += len(id) + 4
	}
	return size + 7*text + 2*rest
}

// fitTasks returns how many of tasks, from the first, fit in pageBytes:
// at least one, if there is one.
func fitTasks(tasks []Task) int {
	size := 0
	for i, t := range tasks {
		if size += taskWireBound(t); size > pageBytes && i > 0 {
			return i
		}
	}
	return len(tasks)
}

// listTasks is ListTasks without its bound in bytes. When the page's
// reads of dependents (fillGraphWithin, from known) or of blockers'
// statuses stop short of its entries, it answers how many of them, from the first, they cover
// (filled) instead of a page.
func (s *Store) listTasks(ctx context.Context, p ListTasksParams, known map[string][]string) (page TaskPage, filled int, err error) {
	if p.Limit == 0 {
		p.Limit = DefaultListLimit
	}
	if err := CheckLimit(p.Limit); err != nil {
		return TaskPage{}, 0, err
	}
	if p.Status != "" {
		if err := CheckListStatus(p.Status); err != nil {
			return TaskPage{}, 0, err
		}
	}
	if p.Queue != "" {
		if err := CheckQueue(p.Queue); err != nil {
			return TaskPage{}, 0, err
		}
	}
	if err := CheckCursor(p.Cursor); err != nil {
		return TaskPage{}, 0, err
	}
	c := cursor{}
	if p.Cursor != "" {
		var err error
		if c, err = decodeCursor(p.Cursor, s.shards.Status); err != nil {
			return TaskPage{}, 0, err
		}
		// A cursor continues its own listing: given alone, it keeps that
		// listing's filters; with others, it is refused.
		switch {
		case c.Listing == 0: // issued before cursors named their listing
		case p.Status == "" && p.Queue == "":
			p.Status, p.Queue = c.ListStatus, c.ListQueue
		case p.Status != c.ListStatus || p.Queue != c.ListQueue:
			return TaskPage{}, 0, c.otherListing()
		}
	}
	statuses := Statuses
	if p.Status != "" {
		statuses = []Status{p.Status}
	}
	if c.Status >= len(statuses) {
		return TaskPage{}, 0, notIssued()
	}
	var items []taskItem
	listed := map[string]Status{} // the status each task was listed under
	next := ""
	for i := c.Status; i < len(statuses) && len(items) < p.Limit; i++ {
		st := statuses[i]
		var at listPos
		if i == c.Status && p.Cursor != "" {
			var err error
			if at, err = c.listPosition(st); err != nil {
				return TaskPage{}, 0, err
			}
		}
		// A read may list fewer than asked and not be at the end (a
		// queue's filter, tasks that moved on): read on a few times,
		// so that a page is seldom short, and empty only at the end or
		// after maxListReads reads that found nothing.
		var more *listPos
		for reads := 1; ; reads++ {
			batch, after, err := s.listStatus(ctx, st, p.Queue, at, p.Limit-len(items))
			if err != nil {
				return TaskPage{}, 0, err
			}
			for _, it := range batch {
				listed[it.TaskID] = st
			}
			items, more = append(items, batch...), after
			if more == nil || len(items) >= p.Limit || reads == maxListReads {
				break
			}
			at = *more
		}
		if more == nil { // this status is listed to its end
			if len(items) >= p.Limit && i+1 < len(statuses) {
				// The page is full at a status's end: a cursor only if a
				// later status shows a task (API.md: null when nothing
				// follows).
				later, err := s.anyListed(ctx, statuses[i+1:], p.Queue)
				if err != nil {
					return TaskPage{}, 0, err
				}
				if later {
					next = encodeCursor(cursor{Listing: cursorListing, ListStatus: p.Status, ListQueue: p.Queue, Status: i + 1})
				}
			}
			continue
		}
		next = encodeCursor(cursor{Listing: cursorListing, ListStatus: p.Status, ListQueue: p.Queue, Status: i,
			After: more.After, Queue: more.Queue, Pos: more.Pos})
		break
	}
	live, err := s.liveLeases(ctx, items, s.clock())
	if err != nil {
		return TaskPage{}, 0, err
	}
	ptrs := make([]*taskItem, len(items))
	for i := range items {
		ptrs[i] = &items[i]
	}
	if err := s.fillBodies(ctx, ptrs...); err != nil {
		return TaskPage{}, 0, err
	}
	n, err := s.fillGraphWithin(ctx, ptrs, pageDependentsReads, pageBlockerReads, known)
	if err != nil {
		return TaskPage{}, 0, err
	}
	if n < len(items) {
		return TaskPage{}, n, nil
	}
	page = TaskPage{Tasks: make([]Task, 0, len(items)), NextCursor: next}
	shown := make(map[string]bool, len(items))
	for _, it := range items {
		if shown[it.TaskID] {
			continue // listed under two statuses, as it moved between them
		}
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
			shown[it.TaskID] = true
		}
	}
	return page, 0, nil
}

// anyListed says whether a listing of any of statuses (of queue, if not
// "") shows a task, or may: one read of each from its start, in turn,
// until one lists a task or has more to read.
func (s *Store) anyListed(ctx context.Context, statuses []Status, queue string) (bool, error) {
	for _, st := range statuses {
		batch, more, err := s.listStatus(ctx, st, queue, listPos{}, 1)
		if err != nil || len(batch) > 0 || more != nil {
			return err == nil, err
		}
	}
	return false, nil
}

// maxListReads bounds the reads of one status for one page of a listing.
const maxListReads = 4

// listStatus reads up to limit tasks of status st (of queue, if not "")
// from at on, each as its item is now (confirm), and the position after
// them; nil when the status is listed to its end. A page may hold fewer
// than limit tasks and still have a next position: entries whose task has
// moved on are dropped, and a by_status listing of one queue filters.
func (s *Store) listStatus(ctx context.Context, st Status, queue string, at listPos, limit int) ([]taskItem, *listPos, error) {
	var (
		items []taskItem
		more  *listPos
		err   error
	)
	switch st {
	case StatusTodo:
		items, more, err = s.listTodo(ctx, queue, at, limit)
	case StatusInProgress:
		return s.listLeased(ctx, queue, at, limit)
	default:
		items, more, err = s.listByStatus(ctx, st, queue, at, limit)
	}
	if err != nil {
		return nil, nil, err
	}
	if items, err = s.confirm(ctx, items); err != nil {
		return nil, nil, err
	}
	return items, more, nil
}

// listTodo reads the next limit entries of todo tasks from by_claim: of
// queue, or of every queue in name order.
func (s *Store) listTodo(ctx context.Context, queue string, at listPos, limit int) ([]taskItem, *listPos, error) {
	queues := []string{queue}
	if queue == "" {
		all, err := s.queueRegistry(ctx)
		if err != nil {
			return nil, nil, err
		}
		// The cursor's queue is walked too: another process's page may
		// end in a queue created within the second this process's copy
		// of the registry may lag.
		for _, q := range []string{DefaultQueue, at.Queue} {
			if q != "" && !slices.Contains(all, q) {
				all = append(all, q)
				slices.Sort(all)
			}
		}
		from := sort.SearchStrings(all, at.Queue)
		queues = all[from:]
		if len(queues) == 0 || queues[0] != at.Queue {
			at.Pos = ""
		}
	} else if at.Queue != "" && at.Queue != queue {
		return nil, nil, notIssued()
	}
	// Queues are read a few at once, each for as many entries as the page
	// still wants, and taken in order: a page over many small queues
	// waits for a few round trips, not one a queue, at the price of
	// entries read past the page's end (at most width-1 queues' worth,
	// each up to the page's limit). The width starts small, so that a
	// page the first queues fill reads little past them, and doubles up
	// to todoWalkWidth while the queues read come short.
	var items []taskItem
	for w, width := 0, todoWalkStart; w < len(queues); width = min(2*width, todoWalkWidth) {
		if w == todoWalkQueues {
			// Every queue ever used stays in the registry, and most may
			// hold no todo task: a read goes no further than this, and
			// the page goes on at the start of the next queue.
			return items, &listPos{Queue: queues[w]}, nil
		}
		window := queues[w:min(w+width, len(queues), todoWalkQueues)]
		type read struct {
			batch []taskItem
			done  bool
		}
		reads := make([]read, len(window))
		want := limit - len(items)
		g, gctx := errgroup.WithContext(ctx)
		for i, q := range window {
			pos := ""
			if w+i == 0 {
				pos = at.Pos
			}
			g.Go(func() error {
				batch, _, done, err := s.claimEntries(gctx, q, pos, want)
				reads[i] = read{batch, done}
				return err
			})
		}
		if err := g.Wait(); err != nil {
			return nil, nil, err
		}
		for i, r := range reads {
			q, room := window[i], limit-len(items)
			if len(r.batch) > room || !r.done {
				taken := r.batch[:min(room, len(r.batch))]
				items = append(items, taken...)
				return items, &listPos{Queue: q, Pos: taken[len(taken)-1].ClaimKey}, nil
			}
			items = append(items, r.batch...)
			if len(items) >= limit {
				if next := w + i + 1; next < len(queues) {
					// The page ends with q's last task: the next goes on
					// after it, in q, then in the queues after q then,
					// so that what is created in between ahead of the
					// cursor is not skipped.
					return items, &listPos{Queue: q, Pos: items[len(items)-1].ClaimKey}, nil
				}
				return items, nil, nil
			}
		}
		w += len(window)
	}
	return items, nil, nil
}

// todoWalkStart and todoWalkWidth are how many queues a listing of every
// queue's todo tasks reads at once, at first and at most, and
// todoWalkQueues how many one read of it (listTodo) reads at most. A
// page, of maxListReads reads, reads at most 256 queues, a Query per
// claim shard of each (1,024 with the default 4), 64 at once: in AWS,
// at about 10 ms a round of Queries, some 0.25 s whatever the number
// of queues, well within the tasks function's 10 s.
const (
	todoWalkStart  = 4
	todoWalkWidth  = 16
	todoWalkQueues = 64
)

// claimEntries reads the next n entries of queue q's claim shards after
// the claim_key pos, in claim order, and whether the queue is listed to
// its end with them.
func (s *Store) claimEntries(ctx context.Context, q, pos string, n int) ([]taskItem, string, bool, error) {
	query := func(ctx context.Context, shard int, start map[string]types.AttributeValue) (*dynamodb.QueryOutput, error) {
		key := expression.Key("claim_shard").Equal(expression.Value(q + "#" + strconv.Itoa(shard)))
		if pos != "" {
			key = key.And(expression.Key("claim_key").GreaterThan(expression.Value(pos)))
		}
		expr, _ := expression.NewBuilder().WithKeyCondition(key).Build()
		return s.db.Query(ctx, &dynamodb.QueryInput{
			TableName: &s.tasks, IndexName: aws.String(schema.TasksByClaim),
			KeyConditionExpression:    expr.KeyCondition(),
			ExpressionAttributeNames:  expr.Names(),
			ExpressionAttributeValues: expr.Values(),
			ExclusiveStartKey:         start,
			Limit:                     aws.Int32(int32(n)),
		})
	}
	key := func(item map[string]types.AttributeValue) string { return stringAttr(item, "claim_key") }
	// claim_keys are unique: a Query that stopped at k has read every
	// entry up to k.
	covered := func(last map[string]types.AttributeValue) string { return key(last) + "\x00" }
	return mergeShards[taskItem](ctx, s.shards.Claim, n, pos, query, key, covered)
}

// listLeased reads the next limit tasks with a lease (of queue, if not
// "") from by_lease_expiry, soonest expiry first, as they are now.
// Entries of tasks waiting for their not_before (which have no holder) are
// left out by the Query's filter. The queue, which the index does not
// project, is told from the items: a read of one queue's reads
// max(limit, leaseScan) entries of every queue's, and its position is
// that of its limit-th task of the queue, or, with fewer, of the last
// entry read. The listing reads on a few times (maxListReads), then ends
// its page with the position reached.
func (s *Store) listLeased(ctx context.Context, queue string, at listPos, limit int) ([]taskItem, *listPos, error) {
	n := limit
	if queue != "" {
		n = max(limit, leaseScan)
	}
	batch, last, done, err := s.leaseEntries(ctx, at.Pos, n)
	if err != nil {
		return nil, nil, err
	}
	ids := make([]string, len(batch))
	for i, it := range batch {
		ids[i] = it.TaskID
	}
	fresh, err := s.readTasks(ctx, ids)
	if err != nil {
		return nil, nil, fmt.Errorf("read tasks: %w", err)
	}
	listed := func(entry taskItem) (*taskItem, bool) {
		it, ok := fresh[entry.TaskID]
		return it, ok && (queue == "" || it.queue() == queue)
	}
	var out []taskItem
	for i, entry := range batch {
		it, ok := listed(entry)
		if !ok {
			continue
		}
		if out = append(out, *it); len(out) == limit {
			if done && !slices.ContainsFunc(batch[i+1:], func(e taskItem) bool { _, ok := listed(e); return ok }) {
				return out, nil, nil // the last: no page after it
			}
			return out, &listPos{Pos: leasePos(entry.LeaseExpires, entry.TaskID)}, nil
		}
	}
	if done {
		return out, nil, nil
	}
	return out, &listPos{Pos: last}, nil
}

// leaseScan is how many entries of every queue's leases a read of one
// queue's in_progress tasks reads at least, so that a queue among a few
// hundred leases shows on the first page. A page (maxListReads reads of
// at most max(limit, leaseScan) entries, a Query per lease shard and a
// BatchGetItem per 100 of them) reads at most 1,000 task items for a
// limit up to leaseScan, 4,000 at MaxListLimit: in AWS, at about 10 ms a
// request, some 0.2 s and 0.5 s whatever the number of leases, well
// within the tasks function's 10 s.
const leaseScan = 250

// leaseQueryFloor is the least Limit of a Query of the lease index for a
// listing: its entries are a few attributes each (about 100 bytes with
// UUID ids), so 25 of them are under the 4 KB a read unit of an index
// Query covers (half a unit, eventually consistent), and a shard of few
// leases behind many delayed tasks' entries takes one Query for 25 of
// them, not one each.
const leaseQueryFloor = 25

// leasePos is a lease's position in by_lease_expiry's order.
func leasePos(expires int64, taskID string) string {
	return fmt.Sprintf("%013d#%s", expires, taskID)
}

// leaseEntries reads the next n entries with a holder of the lease shards
// after pos ("<expiry ms>#<task_id>"), in that order, and whether the
// index is listed to its end with them.
func (s *Store) leaseEntries(ctx context.Context, pos string, n int) ([]taskItem, string, bool, error) {
	from := ""
	if pos != "" {
		from, _, _ = strings.Cut(pos, "#")
	}
	query := func(ctx context.Context, shard int, start map[string]types.AttributeValue) (*dynamodb.QueryOutput, error) {
		key := expression.Key("lease_shard").Equal(expression.Value(strconv.Itoa(shard)))
		if from != "" {
			// From the position's expiry on: entries that expire in the same
			// millisecond are told apart by their id, after the Query.
			exp, _ := strconv.ParseInt(from, 10, 64)
			key = key.And(expression.Key("lease_expires").GreaterThanEqual(expression.Value(exp)))
		}
		expr, _ := expression.NewBuilder().WithKeyCondition(key).WithFilter(expression.AttributeExists(nameHolder)).Build()
		return s.db.Query(ctx, &dynamodb.QueryInput{
			TableName: &s.tasks, IndexName: aws.String(schema.TasksByLeaseExpiry),
			KeyConditionExpression:    expr.KeyCondition(),
			FilterExpression:          expr.Filter(),
			ExpressionAttributeNames:  expr.Names(),
			ExpressionAttributeValues: expr.Values(),
			ExclusiveStartKey:         start,
			// At least leaseQueryFloor a Query: entries without a holder
			// (delayed tasks: claim.go, "Delays") are filtered out after
			// the Limit, so a Limit of 1 would read them one Query each.
			Limit: aws.Int32(int32(max(n, leaseQueryFloor))),
		})
	}
	key := func(item map[string]types.AttributeValue) string {
		return leasePos(numberAttr(item, "lease_expires"), stringAttr(item, "task_id"))
	}
	// Entries that expire in one millisecond come in no known order: a
	// Query that stopped in that millisecond has read every entry before
	// it only.
	covered := func(last map[string]types.AttributeValue) string {
		return fmt.Sprintf("%013d", numberAttr(last, "lease_expires"))
	}
	return mergeShards[taskItem](ctx, s.shards.Lease, n, pos, query, key, covered)
}

// mergeShards reads the next n entries after pos, in the order of key, from
// the shards partitions of a sharded index. query reads one page of one
// shard from start (nil: the start of what it reads) and covered is,
// for the key a page stopped at, a bound below which that shard has been
// read whole. Each shard is read, at once, until it has n entries below
// its bound or is read to its end; the entries below the least bound of
// the shards not at their end are then every entry there is up to it, and
// the first n of them are the answer. last is the key of the last entry
// taken, and done says there is nothing after it.
func mergeShards[T any](ctx context.Context, shards, n int, pos string,
	query func(context.Context, int, map[string]types.AttributeValue) (*dynamodb.QueryOutput, error),
	key func(map[string]types.AttributeValue) string,
	covered func(map[string]types.AttributeValue) string,
) (out []T, last string, done bool, err error) {
	type entry struct {
		key  string
		item map[string]types.AttributeValue
	}
	type read struct {
		entries []entry
		bound   string // "" when read to its end
	}
	reads := make([]read, shards)
	g, gctx := errgroup.WithContext(ctx)
	for shard := range shards {
		g.Go(func() error {
			r := &reads[shard]
			var start map[string]types.AttributeValue
			for {
				page, err := query(gctx, shard, start)
				if err != nil {
					return fmt.Errorf("list tasks: %w", err)
				}
				for _, item := range page.Items {
					if k := key(item); k > pos {
						r.entries = append(r.entries, entry{k, item})
					}
				}
				if len(page.LastEvaluatedKey) == 0 {
					r.bound = ""
					return nil
				}
				r.bound, start = covered(page.LastEvaluatedKey), page.LastEvaluatedKey
				below := 0
				for _, e := range r.entries {
					if e.key < r.bound {
						below++
					}
				}
				if below >= n {
					return nil
				}
			}
		})
	}
	if err := g.Wait(); err != nil {
		return nil, "", false, err
	}
	bound := ""
	for _, r := range reads {
		if r.bound != "" && (bound == "" || r.bound < bound) {
			bound = r.bound
		}
	}
	var all []entry
	for _, r := range reads {
		for _, e := range r.entries {
			if bound == "" || e.key < bound {
				all = append(all, e)
			}
		}
	}
	slices.SortFunc(all, func(a, b entry) int { return strings.Compare(a.key, b.key) })
	done = bound == "" && len(all) <= n
	all = all[:min(n, len(all))]
	last = pos
	out = make([]T, len(all))
	for i, e := range all {
		if err := attributevalue.UnmarshalMap(e.item, &out[i]); err != nil {
			return nil, "", false, err
		}
		last = e.key
	}
	return out, last, done, nil
}

// listByStatus reads up to limit tasks of a status that by_status holds
// (blocked, done, cancelled, failed; of queue, if not ""), in creation
// order, after the positions in at.After (one per shard, nil for the
// start), from every shard at once. A shard read with a filter may stop
// before limit tasks without reaching its end; only tasks up to the
// earliest place such a shard stopped are surely in order, so a page may
// hold fewer than limit tasks and still have a next position.
func (s *Store) listByStatus(ctx context.Context, st Status, queue string, at listPos, limit int) ([]taskItem, *listPos, error) {
	after := at.After
	if after == nil {
		after = make([]string, s.shards.Status)
	}
	type read struct {
		items []taskItem
		stop  string // the key the Query stopped at; "" at the shard's end
	}
	reads := make([]read, len(after))
	var filter *expression.ConditionBuilder
	if queue != "" {
		f := expression.Name("queue").Equal(expression.Value(queue))
		if queue == DefaultQueue {
			f = f.Or(expression.AttributeNotExists(expression.Name("queue")))
		}
		filter = &f
	}
	// blocked shares its partitions ("open") with the entries of todo and
	// in_progress tasks not written since those left by_status: the status
	// is a filter too.
	if statusGroup(st) != string(st) {
		c := nameStatus.Equal(expression.Value(string(st)))
		if filter != nil {
			c = c.And(*filter)
		}
		filter = &c
	}
	g, gctx := errgroup.WithContext(ctx)
	for shard, pos := range after {
		if pos == shardDone {
			continue
		}
		g.Go(func() error {
			part := statusGroup(st) + "#" + strconv.Itoa(shard)
			b := expression.NewBuilder().WithKeyCondition(expression.Key("status_shard").Equal(expression.Value(part)))
			if filter != nil {
				b = b.WithFilter(*filter)
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
		// A shard whose every task read was listed (none, say, when the
		// filter took them all) goes on from where its Query stopped:
		// nothing between its last task and the stop is of the listing.
		allListed := len(r.items) == 0 || r.items[len(r.items)-1].CreatedKey <= last
		switch {
		case r.stop == "" && allListed:
			pos[shard] = shardDone
		case r.stop != "" && allListed:
			pos[shard] = r.stop
		}
	}
	if !slices.ContainsFunc(pos, func(k string) bool { return k != shardDone }) {
		return all, nil, nil
	}
	return all, &listPos{After: pos}, nil
}

// pageDependentsReads bounds the tasks whose dependents one listing page
// reads (a Query each, more for a long list; see ListTasks).
const pageDependentsReads = 100

// pageBlockerReads bounds the blockers whose statuses one listing page
// reads (one BatchGetItem per 100): a page of the default 100 tasks, each
// blocked by MaxBlockers tasks of its own, reads them all.
const pageBlockerReads = 100 * MaxBlockers
