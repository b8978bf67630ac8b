package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease/schema"
)

// Moving a tasks table of the earlier schema (schema.TasksTableV1, whose
// indexes projected whole tasks) into today's (schema.TasksTable).
// DynamoDB cannot change an index's projection or keys in place, so the
// new indexes live on a new table, and Migrate copies every task into it:
// each item as it was (its lease, fence, eseq, end and takeover records,
// watchers, version), with the status index's new key added (for a
// status other than todo and in_progress, list.go), a task from before
// queues given its claim keys in the default queue, and its description
// and metadata moved into a body of its own (body.go); every queue named
// goes into the queue registry, which a todo listing walks. Tasks are
// never deleted, so a fence copied is a fence kept. The other tables
// (agents and keys, heartbeats and queue counts, events, inbox) keep their
// schema and are not touched. (Deleted inbox messages of earlier versions,
// kept in place and marked acked until their TTL, need no move either: an
// inbox read skips them, and reads past them until they expire.)
//
// Each copy is a PutItem conditioned on the task not being in the new table
// yet, so a migration cut short is run again safely, and a task written to
// the new table since is never overwritten: one that no migration wrote
// (no migrated_at) is a clash, reported (MigrateResult.Clashed) and
// recorded on the marker, its earlier item left only in the old table,
// which must then be kept. When every task is copied or found,
// Migrate leaves a marker item in the old table; EnsureTables refuses to
// start over an old table without that marker, naming the command, so a
// server cannot come up on an empty new table while the tasks are in the
// old one. The old table is left in place for the operator to delete.
//
// The copies carry migrated_at, and the stream function ignores a new item
// that has it: the copy is not a transition, so it archives no event again,
// tells no watcher and counts no task twice in the queue counts (which are
// kept in the heartbeats table and carry over).
//
// So the consequences of the earlier table's last transitions must come
// from its own change stream: a server stopped (or killed) before its
// stream function had applied them (the local server polls every 200 ms),
// or, in AWS, an event source mapping replaced by the upgrade deploy
// before it had, would otherwise lose those events and messages, and leave
// each such task's trail waiting for them for ever. Migrate takes a
// function that applies what that stream still holds (earlier; the
// command gives a poller that resumes at the local server's checkpoint,
// or, where none was kept, one batch before the last change whose event
// is archived: stream.Poller.ResumeAfterApplied, Store.Archived), and
// calls it after the copy, so that what a change causes in
// today's table (a dependent unblocked) lands on the copies, and before
// the marker, so that a migration whose stream could not be applied is
// run again. Every consequence is written once however often it is
// applied.

// migratedMarker is the task_id of the marker item a finished migration
// leaves in the old table. '#' cannot occur in a task id.
const migratedMarker = "#migrated"

// ErrMigrationNeeded is returned by EnsureTables when a tasks table of the
// earlier schema holds tasks that have not been copied into today's.
var ErrMigrationNeeded = errors.New("tasks of an earlier schema need migrating")

// MigrateDB lists the calls Migrate makes.
type MigrateDB interface {
	TableAdmin
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	// DeleteItem deletes the body a task copied again would have named.
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	// BatchGetItem reads the queue registry's pages (registry.go).
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
}

// MigrateResult says what Migrate did.
type MigrateResult struct {
	From, To string
	// Copied tasks, and tasks already in the new table (a migration run
	// again after it was cut short).
	Copied, Present int
	// Found is false when there is no table of the earlier schema.
	Found bool
	// AlreadyDone says a migration had finished before.
	AlreadyDone bool
	// Mended counts the delayed tasks of today's table that an earlier
	// version left without their entry in the expiry index, given it now
	// (MendDelays).
	Mended int
	// Clashed lists the tasks of the earlier table that were not copied
	// because today's table holds a task of the same id that no
	// migration wrote (one created there while it was served without the
	// earlier table: README, "Upgrading"). Their items, leases and fences
	// are only in the earlier table, which must be kept. The marker
	// records them, so a migration run again reports them too.
	Clashed []string
}

// Migrate copies the tasks of a table of the earlier schema into today's
// tasks table, creating today's tables first if they do not exist. It is
// safe to run again, and copies nothing when there is no earlier table.
// Then, whether or not there was one, it mends today's table (MendDelays).
// shards are the deployment's shard counts (zero: the defaults): each task
// is put in its status shard of shards.Status. earlier, when not nil,
// applies what the earlier table's change stream still holds; it runs
// after the copy and before the table is marked copied.
func Migrate(ctx context.Context, db MigrateDB, names schema.Names, shards schema.ShardCounts, earlier func(context.Context) error) (MigrateResult, error) {
	if err := shards.Validate(); err != nil {
		return MigrateResult{}, fmt.Errorf("migrate: %w", err)
	}
	shards = shards.OrDefault()
	res := MigrateResult{From: names.Table(schema.TasksTableV1), To: names.Table(schema.TasksTable)}
	if err := copyEarlier(ctx, db, names, shards, earlier, &res); err != nil {
		return res, err
	}
	var err error
	res.Mended, err = MendDelays(ctx, db, names.Table(schema.TasksTable), shards)
	return res, err
}

// copyEarlier is Migrate's copy of the earlier table, when there is one
// that has not been copied.
func copyEarlier(ctx context.Context, db MigrateDB, names schema.Names, shards schema.ShardCounts, earlier func(context.Context) error, res *MigrateResult) error {
	marker, found, err := migrationMarker(ctx, db, res.From)
	if err != nil || !found {
		return err
	}
	done := len(marker) > 0
	res.Found, res.AlreadyDone = true, done
	if done {
		if l, ok := marker["clashed"].(*types.AttributeValueMemberL); ok {
			for _, v := range l.Value {
				if s, ok := v.(*types.AttributeValueMemberS); ok {
					res.Clashed = append(res.Clashed, s.Value)
				}
			}
		}
		return nil
	}
	if err := ensureTables(ctx, db, names); err != nil {
		return err
	}
	// The copies get status shards of shards.Status: not below what the
	// deployment has used, and recorded, so that a function started with
	// a smaller count is refused rather than miss them.
	if err := RecordShards(ctx, db, names, shards); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	// Every queue a task is in goes into the queue registry, which a
	// listing of todo tasks walks (list.go): a queue whose tasks were
	// never counted (written before the counts) may be missing from it.
	queues := []string{DefaultQueue}
	in := &dynamodb.ScanInput{TableName: &res.From, ConsistentRead: aws.Bool(true)}
	for p := dynamodb.NewScanPaginator(db, in); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("migrate: read %s: %w", res.From, err)
		}
		for _, item := range page.Items {
			if q := stringAttr(item, "queue"); q != "" && !slices.Contains(queues, q) {
				queues = append(queues, q)
			}
			outcome, err := migrateTask(ctx, db, res.To, item, shards)
			if err != nil {
				return err
			}
			switch outcome {
			case taskCopied:
				res.Copied++
			case taskPresent:
				res.Present++
			case taskClashed:
				res.Clashed = append(res.Clashed, stringAttr(item, "task_id"))
			}
		}
	}
	if err := addToRegistry(ctx, db, names.Table(schema.HeartbeatsTable), RegistryPage, queues); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if earlier != nil {
		if err := earlier(ctx); err != nil {
			return fmt.Errorf("migrate: apply the changes %s's stream still holds: %w", res.From, err)
		}
	}
	slices.Sort(res.Clashed)
	mark, err := attributevalue.MarshalMap(struct {
		TaskID  string   `dynamodbav:"task_id"`
		To      string   `dynamodbav:"migrated_to"`
		Tasks   int      `dynamodbav:"tasks"`
		Clashed []string `dynamodbav:"clashed,omitempty"`
	}{migratedMarker, res.To, res.Copied + res.Present, res.Clashed})
	if err != nil {
		return err
	}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &res.From, Item: mark}); err != nil {
		return fmt.Errorf("migrate: mark %s as copied: %w", res.From, err)
	}
	return nil
}

// MendDelays gives every delayed task of the tasks table that lacks its
// entry in the expiry index (taskItem.strandedDelay: left so by a version
// before 2026-12-04) that entry, so that the sweep ranks it ready at its
// not_before; it returns how many it mended. One consistent Scan of the
// table, keeping only such tasks, and a conditional write each: safe to
// run again and while the service runs. The change stream mends a task
// at its next change; this mends the tasks that change no more.
func MendDelays(ctx context.Context, db MigrateDB, table string, shards schema.ShardCounts) (int, error) {
	shards = shards.OrDefault()
	filt := expression.Name("claim_key").BeginsWith("~").
		And(expression.AttributeNotExists(nameExpires)).
		And(expression.AttributeNotExists(nameHolder))
	expr, err := expression.NewBuilder().WithFilter(filt).Build()
	if err != nil {
		return 0, err
	}
	in := &dynamodb.ScanInput{TableName: &table, ConsistentRead: aws.Bool(true),
		FilterExpression: expr.Filter(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()}
	mended := 0
	for p := dynamodb.NewScanPaginator(db, in); p.HasMorePages(); {
		page, err := p.NextPage(ctx)
		var notFound *types.ResourceNotFoundException
		if errors.As(err, &notFound) {
			return 0, nil // no table of today's yet: nothing to mend
		}
		if err != nil {
			return mended, fmt.Errorf("mend delays: read %s: %w", table, err)
		}
		for _, item := range page.Items {
			var it taskItem
			if err := attributevalue.UnmarshalMap(item, &it); err != nil {
				return mended, fmt.Errorf("mend delays: decode a task: %w", err)
			}
			if !it.strandedDelay() {
				continue
			}
			ok, err := mendDelay(ctx, db, table, &it, shards.Lease)
			if err != nil {
				return mended, fmt.Errorf("mend delays: %w", err)
			}
			if ok {
				mended++
			}
		}
	}
	return mended, nil
}

// copyOutcome is what migrateTask did with a task.
type copyOutcome int

const (
	taskSkipped copyOutcome = iota // not a task (the marker)
	taskCopied                     // copied now
	taskPresent                    // copied by an earlier run
	taskClashed                    // not copied: today's table holds another task of its id
)

// presentOutcome is the outcome for a task whose id today's table holds
// (existing: that item, or nil when the answer carried none, then read):
// a migration's copy (migrated_at) is present; anything else a clash.
func presentOutcome(ctx context.Context, db MigrateDB, table, id string, existing map[string]types.AttributeValue) (copyOutcome, error) {
	if existing == nil {
		out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: taskKey(id), ConsistentRead: aws.Bool(true),
			ProjectionExpression: aws.String("task_id, migrated_at")})
		if err != nil {
			return taskSkipped, fmt.Errorf("migrate: read task %s: %w", id, err)
		}
		existing = out.Item
	}
	if _, ok := existing["migrated_at"]; ok || len(existing) == 0 {
		return taskPresent, nil
	}
	return taskClashed, nil
}

// migrateTask copies one task item into table unless it is there already.
func migrateTask(ctx context.Context, db MigrateDB, table string, item map[string]types.AttributeValue, shards schema.ShardCounts) (copyOutcome, error) {
	var it taskItem
	if err := attributevalue.UnmarshalMap(item, &it); err != nil {
		return taskSkipped, fmt.Errorf("migrate: decode a task: %w", err)
	}
	if it.TaskID == migratedMarker || it.TaskID == "" {
		return taskSkipped, nil
	}
	st := it.Status
	if st == "" {
		st = StatusTodo
	}
	// todo and in_progress are listed from the claim and lease indexes
	// (list.go); the other statuses from the status index.
	delete(item, "status_shard")
	if sh := statusShard(st, it.TaskID, shards.Status); sh != "" {
		item["status_shard"] = &types.AttributeValueMemberS{Value: sh}
	}
	if it.ClaimHome == "" {
		// A task from before queues: in the default queue at the default
		// priority, and claimable (and so listed as todo) at once.
		rank := claimKey(it.priority(), it.CreatedAt, it.TaskID)
		home := claimHome(DefaultQueue, it.TaskID, shards.Claim)
		item["claim_home"] = &types.AttributeValueMemberS{Value: home}
		item["claim_key"] = &types.AttributeValueMemberS{Value: rank}
		if st == StatusTodo && !it.hasLease() {
			item["claim_shard"] = &types.AttributeValueMemberS{Value: home}
		}
	}
	item["migrated_at"] = &types.AttributeValueMemberN{Value: fmt.Sprint(it.LastAt)}
	if it.Version == 0 {
		// A task from before versions: every write reads it (a
		// completion keeps it as end_version), so it starts at 1.
		item["version"] = &types.AttributeValueMemberN{Value: "1"}
	}
	if it.Holder != "" && it.Attempts == 0 {
		// A lease from before attempts were counted is the task's first,
		// of the default limit, which every grant sets (the sweep's
		// ending compares the two on the item).
		item["attempts"] = &types.AttributeValueMemberN{Value: "1"}
		if it.MaxAttempts == 0 {
			item["max_attempts"] = &types.AttributeValueMemberN{Value: fmt.Sprint(DefaultMaxAttempts)}
		}
	}
	b := splitBody(&it, ms(time.Now()))
	if b != nil {
		// The body as an item of its own (body.go), written before the
		// task that names it, under the same key at every run: a copy cut
		// short between the two leaves it unnamed, and the copy run again
		// writes it again, for its task to name. A task copied already is
		// left as it is, its body not written again.
		if existing, err := copiedAlready(ctx, db, table, it.TaskID); err != nil {
			return taskSkipped, err
		} else if existing != nil {
			return presentOutcome(ctx, db, table, it.TaskID, existing)
		}
		it.BodyToken, b.Key = migratedBody, bodyKey(it.TaskID, migratedBody)
		body, err := attributevalue.MarshalMap(b)
		if err != nil {
			return taskSkipped, err
		}
		if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: &table, Item: body}); err != nil {
			return taskSkipped, fmt.Errorf("migrate: copy the body of %s: %w", it.TaskID, err)
		}
		delete(item, "description")
		delete(item, "metadata")
		item["body"] = &types.AttributeValueMemberS{Value: it.BodyToken}
	}
	expr, _ := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name("task_id"))).Build()
	_, err := db.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: &table, Item: item,
		ConditionExpression:                 expr.Condition(),
		ExpressionAttributeNames:            expr.Names(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if returned, failed := conditionFailed(err); failed {
		if b != nil && sameAttr(returned, item, "body") {
			// This very copy (it was not there when the body was
			// written): it applied, its answer was lost, and the SDK
			// sent it again.
			return taskCopied, nil
		}
		// Another's task, written since it was looked for: this body is
		// named by none. Unless the task was not returned to say so.
		if b != nil && returned != nil {
			if _, err := db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &table, Key: taskKey(b.Key)}); err != nil {
				return taskSkipped, fmt.Errorf("migrate: delete the body of %s copied again: %w", it.TaskID, err)
			}
		}
		return presentOutcome(ctx, db, table, it.TaskID, returned)
	}
	if err != nil {
		return taskSkipped, fmt.Errorf("migrate: copy task %s: %w", it.TaskID, err)
	}
	return taskCopied, nil
}

// migratedBody is the token of the body a task's copy writes: the same at
// every run, and in no other write (a create's and a PATCH's are newID's).
const migratedBody = "migrated"

// copiedAlready reads task id in table consistently (its task_id and
// migrated_at): nil when it is not there.
func copiedAlready(ctx context.Context, db MigrateDB, table, id string) (map[string]types.AttributeValue, error) {
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: taskKey(id), ConsistentRead: aws.Bool(true),
		ProjectionExpression: aws.String("task_id, migrated_at")})
	if err != nil {
		return nil, fmt.Errorf("migrate: read task %s: %w", id, err)
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	return out.Item, nil
}

// migrationState says whether a tasks table of the earlier schema exists
// (found) and whether a migration has finished copying it (done).
func migrationState(ctx context.Context, db TableAdmin, old string) (done, found bool, err error) {
	marker, found, err := migrationMarker(ctx, db, old)
	return len(marker) > 0, found, err
}

// migrationMarker is migrationState with the marker item itself (nil
// while there is none).
func migrationMarker(ctx context.Context, db TableAdmin, old string) (marker map[string]types.AttributeValue, found bool, err error) {
	_, err = db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &old})
	var notFound *types.ResourceNotFoundException
	if errors.As(err, &notFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("describe %s: %w", old, err)
	}
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &old, Key: taskKey(migratedMarker), ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, true, fmt.Errorf("read %s: %w", old, err)
	}
	if len(out.Item) == 0 {
		return nil, true, nil
	}
	return out.Item, true, nil
}
