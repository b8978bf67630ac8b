package lease

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/checkout-dev/checkout/lease/schema"
)

// Deleting the bodies, and the errors, no task names.
//
// A few paths leave a body (body.go) that no task names and none ever
// will: a crash between the body's put and the task's write, a deciding
// write that fails unanswered, PATCHes lost in a row at one version, a
// best-effort delete that failed. Nothing reads such a body, and there is
// no TTL on bodies; DeleteStrayBodies finds them, in one Scan of the
// tasks table, and deletes them.
//
// It runs while the service runs. A body being written right now is not
// named yet: its task's write follows. So a body is deleted only when it
// is old, written (written_at) more than OlderThan ago, a bound far past
// any request's life, and no task named it when the Scan read the task,
// nor when it is read again, consistently, just before the delete. No
// write names an old body: a create or a PATCH names only the body it has
// just written, in that request, and never names again one its task
// stopped naming. A migration is no request: a run held up between a
// task's "migrated" body and its copy (its machine asleep) names that
// body however old it is by then, so such a body is kept while its task
// is not in the table (Uncopied); once the task is there, no copy can
// name it (the copy's put is conditioned on no task). A run again writes
// the body again before naming it, which moves its written_at, and the
// delete is conditioned on written_at as scanned, so a migration's body
// written again after the Scan is never deleted, even if it is named
// after the read.
//
// A body written before bodies carried written_at has no time: one no
// task names is given the time of the run (an UpdateItem), and a run at
// least OlderThan later deletes it if no task names it by then.
//
// A failed release's error item (body.go) that its task no longer names
// (a later failed release replaced it) or never named (the release's
// write was refused) is deleted the same way, by its written_at and the
// task's last_error_fence, but only once it is a day older than
// OlderThan: the stream reads it when it archives the release that named
// it, which it may do, or do again, until its record of the release
// expires (StrayErrorMargin after the write). A local stream outlives
// that while its server is stopped, and the server reads it on when it
// starts again: a run over its data applies the consequences first and
// keeps the errors its notices have yet to read (Unread). No write names
// an old error either: a release names only the error it has just
// written, and a release of the same lease again writes it again first.
//
// What it relies on: the clocks of the writers and of the run agree to
// well within OlderThan (a writer an hour slow would write bodies that
// look old already). A run's clock running ahead is guarded against: with
// ServerNow it judges ages by the earlier of its clock and the
// database's (ServerClock), so that its clock alone cannot make a young
// body look old.

// StrayBodyAge is how old a body no task names must be before
// DeleteStrayBodies deletes it, by default.
const StrayBodyAge = time.Hour

// MinStrayBodyAge is the least OlderThan DeleteStrayBodies takes: a
// request (a Lambda's at most 15 minutes) has long ended by then.
const MinStrayBodyAge = 15 * time.Minute

// StrayErrorMargin is how much older than OlderThan an error no task
// names must be before DeleteStrayBodies deletes it: the stream may read
// it again for as long as it keeps its record of the release.
const StrayErrorMargin = streamRetention

// StrayBodiesDB lists the calls DeleteStrayBodies makes.
type StrayBodiesDB interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// StrayBodiesParams tunes DeleteStrayBodies.
type StrayBodiesParams struct {
	// OlderThan is how old a body no task names must be to be deleted
	// (default StrayBodyAge, at least MinStrayBodyAge).
	OlderThan time.Duration
	// DryRun lists what would be deleted (or timed) and writes nothing.
	DryRun bool
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Unread lists the keys of errors a consumer of the stream has yet
	// to read (ErrorsRead), kept whatever their age: a stopped local
	// server's, whose stream keeps its records, however old, until it
	// starts again.
	Unread []string
	// ServerNow, when set, is the database's clock (ServerClock.Now of
	// the client db): ages are judged by the earlier of it and Now. The
	// zero time is no reading.
	ServerNow func() time.Time
}

// ServerClock keeps the database's time: the Date header of the latest
// answer its client got (DynamoDB and dynalite send one with each), to
// the second, so a little behind. Its Options add it to a client.
type ServerClock struct{ latest atomic.Int64 } // Unix ms; 0: no answer yet

// Options makes a client's answers set c (dynamodb.NewFromConfig(cfg,
// c.Options)).
func (c *ServerClock) Options(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
		return st.Deserialize.Add(middleware.DeserializeMiddlewareFunc("ServerClock", c.read), middleware.After)
	})
}

// read takes the Date of each answer, on every attempt, errors included.
func (c *ServerClock) read(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
	out, md, err := next.HandleDeserialize(ctx, in)
	if r, ok := out.RawResponse.(*smithyhttp.Response); ok {
		if t, perr := http.ParseTime(r.Header.Get("Date")); perr == nil {
			for at := ms(t); ; {
				seen := c.latest.Load()
				if at <= seen || c.latest.CompareAndSwap(seen, at) {
					break
				}
			}
		}
	}
	return out, md, err
}

// Now is the time of the latest answer's Date; the zero time before one.
func (c *ServerClock) Now() time.Time {
	if at := c.latest.Load(); at != 0 {
		return time.UnixMilli(at)
	}
	return time.Time{}
}

// StrayBodiesResult is what DeleteStrayBodies found and did.
type StrayBodiesResult struct {
	// Items is how many items the Scan read, Bodies how many of them
	// were bodies and Errors how many failed releases' errors.
	Items, Bodies, Errors int
	// Deleted lists the keys of the old bodies and errors no task names,
	// deleted (with DryRun, to be deleted), in key order.
	Deleted []string
	// Timed lists the keys of the bodies and errors no task names that
	// had no time of writing, given one now (with DryRun, to be given
	// one).
	Timed []string
	// Young counts the bodies no task names that are younger than
	// OlderThan, and the errors younger than a day more, kept; Changed
	// the old ones found named, written again or gone after the Scan
	// (the SDK's delete sent again finds its own delete so); Uncopied the
	// old bodies a migration wrote whose task is not in the table yet,
	// kept (a migration held up may copy it yet); Unread the old errors
	// in Unread, kept.
	Young, Changed, Uncopied, Unread int
}

// DeleteStrayBodies deletes the bodies and the failed releases' errors of
// the tasks table that no task names (see "Deleting the bodies, and the
// errors, no task names" above). Safe to run at any time and again.
func DeleteStrayBodies(ctx context.Context, db StrayBodiesDB, names schema.Names, p StrayBodiesParams) (StrayBodiesResult, error) {
	if p.OlderThan == 0 {
		p.OlderThan = StrayBodyAge
	}
	if p.OlderThan < MinStrayBodyAge {
		return StrayBodiesResult{}, fmt.Errorf("stray bodies: %v is too young to tell a stray body from one being written (at least %v)", p.OlderThan, MinStrayBodyAge)
	}
	if p.Now == nil {
		p.Now = time.Now
	}
	table := names.Table(schema.TasksTable)
	var res StrayBodiesResult
	type stray struct {
		key, taskID string
		writtenAt   int64
		age         time.Duration // how old it must be to be deleted
	}
	var found []stray
	named := map[string]bool{} // the keys of the bodies and errors tasks name
	proj := expression.NamesList(expression.Name("task_id"), expression.Name("body"), expression.Name("last_error_fence"), expression.Name("written_at"))
	expr, err := expression.NewBuilder().WithProjection(proj).Build()
	if err != nil {
		return res, err
	}
	// Not consistent (half the read units): a body found is read again
	// consistently, with its task, before anything is written.
	in := &dynamodb.ScanInput{TableName: &table, ProjectionExpression: expr.Projection(), ExpressionAttributeNames: expr.Names()}
	for pages := dynamodb.NewScanPaginator(db, in); pages.HasMorePages(); {
		page, err := pages.NextPage(ctx)
		if err != nil {
			return res, fmt.Errorf("stray bodies: read %s: %w", table, err)
		}
		for _, item := range page.Items {
			res.Items++
			key := stringAttr(item, "task_id")
			if taskID, _, ok := strings.Cut(key, "#body#"); ok {
				res.Bodies++
				found = append(found, stray{key, taskID, numberAttr(item, "written_at"), p.OlderThan})
			} else if taskID, _, ok := strings.Cut(key, "#error#"); ok {
				res.Errors++
				found = append(found, stray{key, taskID, numberAttr(item, "written_at"), p.OlderThan + StrayErrorMargin})
			} else if !strings.Contains(key, "#") {
				for _, k := range namedBy(key, item) {
					named[k] = true
				}
			}
		}
	}
	slices.SortFunc(found, func(a, b stray) int { return strings.Compare(a.key, b.key) })
	// Now, or the database's time when it is earlier (after the Scan's
	// answers): a clock running ahead must not make a young body old.
	at := p.Now()
	if p.ServerNow != nil {
		if server := p.ServerNow(); !server.IsZero() && server.Before(at) {
			at = server
		}
	}
	now := ms(at)
	unread := map[string]bool{}
	for _, key := range p.Unread {
		unread[key] = true
	}
	for _, b := range found {
		switch {
		case named[b.key]:
		case b.writtenAt == 0:
			res.Timed = append(res.Timed, b.key)
			if !p.DryRun {
				if err := timeBody(ctx, db, table, b.key, now); err != nil {
					return res, err
				}
			}
		case now-b.writtenAt < b.age.Milliseconds():
			res.Young++
		case unread[b.key]:
			res.Unread++
		default:
			fate, err := deleteStrayBody(ctx, db, table, b.taskID, b.key, b.writtenAt, p.DryRun)
			if err != nil {
				return res, err
			}
			switch fate {
			case strayDeleted:
				res.Deleted = append(res.Deleted, b.key)
			case strayUncopied:
				res.Uncopied++
			default:
				res.Changed++
			}
		}
	}
	return res, nil
}

// namedBy is the keys of the body and the error that task taskID (item,
// with its body and last_error_fence) names.
func namedBy(taskID string, item map[string]types.AttributeValue) []string {
	var keys []string
	if token := stringAttr(item, "body"); token != "" {
		keys = append(keys, bodyKey(taskID, token))
	}
	if fence := numberAttr(item, "last_error_fence"); fence != 0 {
		keys = append(keys, errorKey(taskID, fence))
	}
	return keys
}

// timeBody gives body key, which has no time of writing, the time at.
// Whether or not it exists or has one by then.
func timeBody(ctx context.Context, db StrayBodiesDB, table, key string, at int64) error {
	cond := expression.AttributeExists(expression.Name("task_id")).And(expression.AttributeNotExists(expression.Name("written_at")))
	expr, err := expression.NewBuilder().WithCondition(cond).WithUpdate(expression.Set(expression.Name("written_at"), expression.Value(at))).Build()
	if err != nil {
		return err
	}
	_, err = db.UpdateItem(ctx, &dynamodb.UpdateItemInput{TableName: &table, Key: taskKey(key),
		UpdateExpression: expr.Update(), ConditionExpression: expr.Condition(),
		ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()})
	if _, failed := conditionFailed(err); err != nil && !failed {
		return fmt.Errorf("stray bodies: time %s: %w", key, err)
	}
	return nil
}

// strayFate is what deleteStrayBody did with a body or an error.
type strayFate int

const (
	strayDeleted  strayFate = iota
	strayChanged            // named, written again or gone since the Scan: kept
	strayUncopied           // a migration's body, its task not copied yet: kept
)

// deleteStrayBody deletes key, taskID's body or error written at
// writtenAt, unless its task names it, read consistently, or it was
// written again since, or it is a migration's body and its task is not
// there (see above). With dryRun it only reads.
func deleteStrayBody(ctx context.Context, db StrayBodiesDB, table, taskID, key string, writtenAt int64, dryRun bool) (strayFate, error) {
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &table, Key: taskKey(taskID), ConsistentRead: aws.Bool(true),
		ProjectionExpression: aws.String("task_id, #b, #e"), ExpressionAttributeNames: map[string]string{"#b": "body", "#e": "last_error_fence"}})
	if err != nil {
		return strayChanged, fmt.Errorf("stray bodies: read task %s: %w", taskID, err)
	}
	switch {
	case slices.Contains(namedBy(taskID, out.Item), key):
		return strayChanged, nil
	case len(out.Item) == 0 && key == bodyKey(taskID, migratedBody):
		return strayUncopied, nil
	case dryRun:
		return strayDeleted, nil
	}
	expr, err := expression.NewBuilder().WithCondition(expression.Name("written_at").Equal(expression.Value(writtenAt))).Build()
	if err != nil {
		return strayChanged, err
	}
	_, err = db.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: &table, Key: taskKey(key),
		ConditionExpression: expr.Condition(), ExpressionAttributeNames: expr.Names(), ExpressionAttributeValues: expr.Values()})
	if _, failed := conditionFailed(err); failed {
		return strayChanged, nil // written again since the Scan, or gone
	}
	if err != nil {
		return strayChanged, fmt.Errorf("stray bodies: delete %s: %w", key, err)
	}
	return strayDeleted, nil
}

var _ StrayBodiesDB = (*dynamodb.Client)(nil)
