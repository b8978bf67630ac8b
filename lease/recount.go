package lease

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease/schema"
)

// Recounting the queue counts.
//
// The stream function keeps the queue counts change by change
// (queuecounts.go), and nothing in them says when they are off: a change
// it never applied (a dead-lettered batch, records a redelivery out of
// order skipped, a task last written before counting began) leaves a
// count off for good. RecountQueues counts every queue's tasks again from
// the tasks table and writes the counts that differ.
//
// It runs while the service runs, and writes only counts that no change
// moved while it counted. A counter holds the changes the stream has
// applied so far; a task read by the recount is as its latest write left
// it, whose change the stream may not have applied yet. Writing what was
// read over the counter would count such a change twice (read now,
// applied later). So:
//
//  1. read every queue's counter item with its rev (each write of an
//     item's counts, the stream's or a recount's, moves rev on);
//  2. read every task (a consistent Scan of the tasks table, keeping
//     task_id, status, queue and priority) and count them per queue, status
//     and todo priority;
//  3. wait until the stream has applied every change written before the
//     Scan ended (RecountParams.Settle: by default, RecountSettle);
//  4. read the counters again. A queue whose rev moved took changes while
//     it was counted: it is left for the next attempt. For one whose rev
//     did not move, no change of it was written from 1 to the end of 2
//     (it would have been applied by 4), and every change written before
//     1 had been applied by 1 (or it would have been applied between 1
//     and 4): what 2 counted is what the counter's changes left, and the
//     difference is what the counter missed. Its counts are written when
//     they differ, conditioned on rev as read; a write of the stream in
//     between refuses it, and the queue is left for the next attempt (the
//     write sent again by the SDK, its first answer lost, finds its own
//     rev and counts: the queue is mended).
//
// The queues left are counted again, a Scan each attempt (Attempts,
// default 3); those that moved in every attempt are reported busy, their
// counts untouched. A queue whose tasks change without a pause as long as
// a Scan and a settle cannot be recounted; run it again when it is quiet.
//
// What it relies on: the stream applies a change within the settle of its
// write. A stream further behind (a batch failing and retried, the stream
// function throttled: the stream-iterator-age alarm) can apply, after the
// recount, a change the recount has read, which is then counted twice:
// recount with the stream caught up, or with a settle longer than its
// lag. Nor can it see a write of the counts that moves no rev: one by a
// stream function of a version before rev, while a deploy rolls out. A
// queue with no counter item (nothing counted yet) is recounted
// the same way; one that the Scan finds and the registry lacks (tasks
// from before queues were registered) is added to the registry first.
// The Scan reads every item of the tasks table, so this is an operator's
// command (`checkout-server recount`), never a request's.

// RecountSettle is how long RecountQueues waits by default for the stream
// to apply the changes written before its Scan ended: the stream's usual
// delay is about a second, and a stream function a minute behind fires
// the stream-iterator-age alarm (DEPLOY.md).
const RecountSettle = time.Minute

// RecountDB lists the calls RecountQueues makes.
type RecountDB interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
}

// RecountParams tunes RecountQueues.
type RecountParams struct {
	// Settle returns once the stream has applied every change written
	// before it was called. Default: waits RecountSettle.
	Settle func(context.Context) error
	// Attempts bounds the Scans (default 3).
	Attempts int
}

// RecountResult is what RecountQueues did.
type RecountResult struct {
	// Tasks is how many tasks the last Scan counted.
	Tasks int
	// Mended lists the queues whose counts were wrong and are now
	// written, Checked those found right, Busy those that took changes
	// in every attempt and were left as they were; each in name order.
	Mended, Checked, Busy []string
}

// queueCount is one queue's tasks as a recount counts them: the counter
// attributes (n#<status>, p#<priority>) and their numbers.
type queueCount map[string]int64

// RecountQueues counts the tasks of every queue again and writes the
// counts the stream's counters got wrong (see "Recounting the queue
// counts" above). Safe to run at any time and again.
func RecountQueues(ctx context.Context, db RecountDB, names schema.Names, p RecountParams) (RecountResult, error) {
	if p.Settle == nil {
		p.Settle = Wait(RecountSettle)
	}
	attempts := cmp.Or(p.Attempts, 3)
	heartbeats := names.Table(schema.HeartbeatsTable)
	var res RecountResult
	// Before the migration the tasks are in the earlier table, and the
	// counts, which carry over and which the copies do not move, count
	// them: today's table, empty or half copied, must not be written
	// over them.
	if err := refuseUnmigrated(ctx, db, names); err != nil {
		return res, err
	}
	var only map[string]bool // the queues still to recount; nil: all
	for attempt := 0; attempt < attempts; attempt++ {
		reg, err := readRegistry(ctx, db, heartbeats)
		if err != nil {
			return res, err
		}
		before, err := counterItems(ctx, db, heartbeats, reg.names)
		if err != nil {
			return res, err
		}
		counts, tasks, err := countTasks(ctx, db, names.Table(schema.TasksTable))
		if err != nil {
			return res, err
		}
		res.Tasks = tasks
		if err := p.Settle(ctx); err != nil {
			return res, err
		}
		// A queue of tasks from before queues were registered is added:
		// a counter's queue is in the registry before its first count.
		var unlisted []string
		for q := range counts {
			if !reg.has(q) {
				unlisted = append(unlisted, q)
			}
		}
		if err := addToRegistry(ctx, db, heartbeats, RegistryPage, unlisted); err != nil {
			return res, err
		}
		queues := slices.Sorted(slices.Values(append(slices.Clone(reg.names), unlisted...)))
		after, err := counterItems(ctx, db, heartbeats, queues)
		if err != nil {
			return res, err
		}
		res.Busy = nil
		for _, q := range queues {
			if only != nil && !only[q] {
				continue
			}
			rev := stringOfN(after[q], revAttr)
			if stringOfN(before[q], revAttr) != rev {
				res.Busy = append(res.Busy, q)
				continue
			}
			if sameCounts(after[q], counts[q]) {
				res.Checked = append(res.Checked, q)
				continue
			}
			written, err := writeCounts(ctx, db, heartbeats, q, after[q], counts[q])
			if err != nil {
				return res, err
			}
			if !written {
				res.Busy = append(res.Busy, q)
				continue
			}
			res.Mended = append(res.Mended, q)
		}
		if len(res.Busy) == 0 {
			break
		}
		only = map[string]bool{}
		for _, q := range res.Busy {
			only[q] = true
		}
	}
	slices.Sort(res.Mended)
	slices.Sort(res.Checked)
	return res, nil
}

// counterItems reads the counter items of queues consistently, by queue;
// a queue without one is missing.
func counterItems(ctx context.Context, db RecountDB, table string, queues []string) (map[string]map[string]types.AttributeValue, error) {
	got, err := batchGetItems(ctx, db, table,
		uniqueKeys(queues, func(q string) map[string]types.AttributeValue { return agentKey(queueCounterPrefix + q) }), "", nil)
	if err != nil {
		return nil, fmt.Errorf("read queue counters: %w", err)
	}
	out := make(map[string]map[string]types.AttributeValue, len(got))
	for _, item := range got {
		if q, ok := strings.CutPrefix(stringAttr(item, "agent_id"), queueCounterPrefix); ok {
			out[q] = item
		}
	}
	return out, nil
}

// countTasks reads every task of table (a consistent Scan) and counts
// them per queue, as the stream's counters do (stateOf), and how many.
func countTasks(ctx context.Context, db RecountDB, table string) (map[string]queueCount, int, error) {
	expr, err := expression.NewBuilder().WithProjection(expression.NamesList(
		expression.Name("task_id"), expression.Name("status"), expression.Name("queue"), expression.Name("priority"))).Build()
	if err != nil {
		return nil, 0, err
	}
	in := &dynamodb.ScanInput{TableName: &table, ConsistentRead: aws.Bool(true),
		ProjectionExpression: expr.Projection(), ExpressionAttributeNames: expr.Names()}
	counts := map[string]queueCount{}
	tasks := 0
	for p := dynamodb.NewScanPaginator(db, in); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("recount: read %s: %w", table, err)
		}
		for _, item := range page.Items {
			st, ok, err := stateOf(item)
			if err != nil {
				return nil, 0, fmt.Errorf("recount: %w", err)
			}
			if !ok || strings.Contains(stringAttr(item, "task_id"), "#") {
				continue // a body, an error, a marker: not a task
			}
			c := counts[st.queue]
			if c == nil {
				c = queueCount{}
				counts[st.queue] = c
			}
			c[countAttr+string(st.status)]++
			if st.status == StatusTodo {
				c[todoPrioAttr+strconv.Itoa(st.priority)]++
			}
			tasks++
		}
	}
	return counts, tasks, nil
}

// stringOfN is a number attribute's text, "" when absent.
func stringOfN(item map[string]types.AttributeValue, name string) string {
	if v, ok := item[name].(*types.AttributeValueMemberN); ok {
		return v.Value
	}
	return ""
}

// isCountAttr reports whether an attribute of a counter item is a count.
func isCountAttr(k string) bool {
	return strings.HasPrefix(k, countAttr) || strings.HasPrefix(k, todoPrioAttr)
}

// sameCounts reports whether a counter item holds the counts c: every
// count of c, and 0 (or nothing) for every other.
func sameCounts(item map[string]types.AttributeValue, c queueCount) bool {
	for k, n := range c {
		if numberAttr(item, k) != n {
			return false
		}
	}
	for k := range item {
		if isCountAttr(k) && c[k] == 0 && numberAttr(item, k) != 0 {
			return false
		}
	}
	return true
}

// samePositions reports whether two counter items hold the same stream
// positions: each write of the stream moves one (queuecounts.go), a
// recount's none.
func samePositions(a, b map[string]types.AttributeValue) bool {
	for _, item := range []map[string]types.AttributeValue{a, b} {
		for k := range item {
			if !strings.HasPrefix(k, seqAttr) && !strings.HasPrefix(k, seqAtAttr) {
				continue
			}
			if stringAttr(a, k) != stringAttr(b, k) || stringOfN(a, k) != stringOfN(b, k) {
				return false
			}
		}
	}
	return true
}

// writeCounts writes the counts c over queue q's counter item, as read
// (item), conditioned on its rev being unchanged, and moves rev on; false
// when a write of the stream came first.
func writeCounts(ctx context.Context, db RecountDB, table, q string, item map[string]types.AttributeValue, c queueCount) (bool, error) {
	upd := expression.Add(expression.Name(revAttr), expression.Value(1))
	for _, k := range slices.Sorted(maps.Keys(c)) {
		upd = upd.Set(expression.NameNoDotSplit(k), expression.Value(c[k]))
	}
	for _, k := range slices.Sorted(maps.Keys(item)) {
		if isCountAttr(k) && c[k] == 0 {
			upd = upd.Remove(expression.NameNoDotSplit(k))
		}
	}
	cond := expression.AttributeNotExists(expression.Name(revAttr))
	var n int64 // the rev read
	if rev := stringOfN(item, revAttr); rev != "" {
		var err error
		if n, err = strconv.ParseInt(rev, 10, 64); err != nil {
			return false, fmt.Errorf("queue %s counter: rev %q: %w", q, rev, err)
		}
		cond = expression.Name(revAttr).Equal(expression.Value(n))
	}
	expr, err := expression.NewBuilder().WithUpdate(upd).WithCondition(cond).Build()
	if err != nil {
		return false, err
	}
	_, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: &table, Key: agentKey(queueCounterPrefix + q),
		UpdateExpression:                    expr.Update(),
		ConditionExpression:                 expr.Condition(),
		ExpressionAttributeNames:            expr.Names(),
		ExpressionAttributeValues:           expr.Values(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if cur, failed := conditionFailed(err); failed {
		// This very write, sent again by the SDK when the answer to its
		// first sending was lost, finds the rev that sending moved on,
		// the counts it wrote and the stream's positions as read. A write
		// of the stream in between moves rev too, and its changes may
		// move the counts read by just what the counter missed, but it
		// moves a position. Emulators that return no item are read.
		if len(cur) == 0 {
			out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: agentKey(queueCounterPrefix + q), ConsistentRead: aws.Bool(true)})
			if err != nil {
				return false, fmt.Errorf("recount queue %s: %w", q, err)
			}
			cur = out.Item
		}
		return stringOfN(cur, revAttr) == strconv.FormatInt(n+1, 10) && sameCounts(cur, c) && samePositions(cur, item), nil
	}
	if err != nil {
		return false, fmt.Errorf("recount queue %s: %w", q, err)
	}
	return true, nil
}

// refuseUnmigrated returns ErrMigrationNeeded while a tasks table of the
// earlier schema exists without the marker of a finished migration (read
// with one consistent GetItem; no such table: nil).
func refuseUnmigrated(ctx context.Context, db interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}, names schema.Names) error {
	old := names.Table(schema.TasksTableV1)
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &old, Key: taskKey(migratedMarker), ConsistentRead: aws.Bool(true)})
	var notFound *types.ResourceNotFoundException
	switch {
	case errors.As(err, &notFound):
		return nil
	case err != nil:
		return fmt.Errorf("read %s: %w", old, err)
	case len(out.Item) == 0:
		return fmt.Errorf("%w: the table %s of an earlier version has not been copied into %s; run `checkout-server migrate` first",
			ErrMigrationNeeded, old, names.Table(schema.TasksTable))
	}
	return nil
}
