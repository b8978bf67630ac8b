package lease

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"iter"
	"log/slog"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease/schema"
)

// DB lists the DynamoDB calls the store makes. *dynamodb.Client satisfies it.
// There is deliberately no Scan.
type DB interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error)
	BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error)
}

var _ DB = (*dynamodb.Client)(nil)

// Config wires a Store.
type Config struct {
	DB     DB
	Tables schema.Names
	// Now is the clock. Every lease decision compares expiry times with it.
	Now func() time.Time
	// Notifier hears about ended leases and freed tasks. Default: logs.
	Notifier Notifier
	Logger   *slog.Logger
	// ReadAfterFailedCondition is for DynamoDB-compatible servers that ignore
	// ReturnValuesOnConditionCheckFailure: a failed condition that comes back
	// without the item is followed by a consistent read. DynamoDB, and the
	// project's own local server, return the item (none means there is
	// none), so the default is false. See ReturnsItemOnConditionFailure.
	ReadAfterFailedCondition bool
	// EventRetention sets the TTL of audit events and inbox messages
	// (default 30 days for events, 7 days for messages).
	EventRetention time.Duration
	// FeedSettle is how far behind now the fleet feed is read (default
	// DefaultFeedSettle; negative: not at all), so that a cursor never
	// passes an event the change stream has not archived yet. See feed.go.
	FeedSettle time.Duration
	// FeedAtLanding keys each event in the fleet feed no earlier than the
	// second its write landed in the table (Change.Landed), not only at
	// its write's own time, which was read before the write was sent: a
	// write the SDK retried for seconds would otherwise be keyed behind
	// the cursors that passed that time meanwhile. It also keys an event
	// archived late (more than FeedSettle/2 after that time: a batch of
	// the stream retried) at when it is archived, written only if not
	// archived already (FeedLate). Only where the store's clock is the
	// wall clock, as the stream record's is (the functions in AWS). See
	// feed.go.
	FeedAtLanding bool
	// FeedLate keys an event archived late at when it is archived, as
	// FeedAtLanding does, without reading when the write landed: for a
	// store on the wall clock that applies changes another process left
	// (checkout-server recount, migrate).
	FeedLate bool
	// FeedPassed, when set, replaces FeedLate's judgement of lateness by
	// time: it says up to what feed time (Unix ms) a cursor handed out may
	// have passed events still to be archived, and an event of that time
	// or earlier is archived late. For the local server, whose clock a
	// test may move, and whose reads keep the settle time only while it
	// cannot apply the change stream first (see feed.go).
	FeedPassed func() int64
	// TrailWait is how long a read of a task's events waits for a hole
	// in its trail to fill (0: it answers at once, counting what is
	// held back as pending). A hole is almost always the change stream's
	// lag behind transitions already answered (about a second in AWS), so
	// the functions wait a little, and a client sees its own transitions.
	TrailWait time.Duration
	// Shards are the indexes' shard counts (a zero count: its default,
	// schema.DefaultShards). Every process of a deployment must use the
	// same, and they may grow between deploys but never shrink (see
	// schema.ShardCounts). New panics on a count out of bounds: the
	// settings are checked where they are read (schema.ShardsFromEnv).
	Shards schema.ShardCounts
	// ReRegisterAfter is how long after an agent's removal its id may not
	// be registered again (RegisterAgent answers a *RemovedRecentlyError).
	// In AWS it is the authorizer's cache time: until it has passed, the
	// removed agent's key may still pass as the id, and would act as the
	// new agent. 0 (the local server, which forgets a removed key at once):
	// an id may be registered again at once.
	ReRegisterAfter time.Duration
}

// Store is the lease engine on DynamoDB. It is safe for concurrent use.
type Store struct {
	db        DB
	now       func() time.Time
	notifier  Notifier
	log       *slog.Logger
	retention time.Duration
	// feedSettle, feedLanded, feedLate, feedPassed: see
	// Config.FeedSettle, FeedAtLanding, FeedLate and FeedPassed.
	feedSettle           time.Duration
	feedLanded, feedLate bool
	feedPassed           func() int64
	// lateFeed holds the feed times of the late events this process
	// archived, a while, per task (feed.go).
	lateFeed lateFeedTimes
	// shards: see Config.Shards, defaults filled in.
	shards schema.ShardCounts

	tasks, agents, heartbeats, events, inbox string

	alive  aliveCache
	deaths deathCache
	claims claimSpread
	// enlisted holds the queues this process has found in the queue
	// registry (enlistQueues).
	enlisted sync.Map
	// listed is this process's copy of the queue registry for listings
	// (registry.go).
	listed listedQueues
	// graphWait is how long a change of blocked_by waits for the graph's
	// lock (deps.go) before it answers ErrBusy.
	graphWait time.Duration
	// archiveWait is how long a task's first watch waits for the change
	// stream to archive a freeing hidden from it (watch.go,
	// hiddenFreeing): retryBudget (shorter in tests).
	archiveWait time.Duration
	// grantWait is how long a claim tries to keep a grant whose write
	// fails (settleGrant): grantWait (shorter in tests).
	grantWait time.Duration
	// walked, when set (in tests), is called after each level of a
	// cycle walk has been read.
	walked func()
	// patched, when set, is told of each PATCH whose write applied on its
	// sending: the task as patch foresaw it, and as the write left it.
	patched func(foreseen, written Task)
	// maxDependents is MaxDependents (lower in tests).
	maxDependents int
	// registryPage is RegistryPage (lower in tests).
	registryPage int
	// queueReads is MaxQueueListingReads (lower in tests).
	queueReads int
	// claimPoll is claimPoll (longer in tests, so that only a wake makes
	// a waiting claim look again).
	claimPoll time.Duration
	// noTurns: a named claim's attempts take no turns (noteClaim), as
	// those of a version before turns did (tests of the give-back).
	noTurns bool

	// fallbackReads counts reads made because the server did not return the
	// item with a failed condition (ReturnValuesOnConditionCheckFailure is
	// ignored by some emulators). DynamoDB itself never needs them.
	readAfterFailed bool
	fallbackReads   atomic.Int64
	trailWait       time.Duration
	// reRegisterAfter: see Config.ReRegisterAfter.
	reRegisterAfter time.Duration
}

// New returns a Store.
func New(cfg Config) *Store {
	if err := cfg.Shards.Validate(); err != nil {
		panic("lease.New: " + err.Error())
	}
	s := &Store{
		graphWait:     2 * graphLockTTL,
		archiveWait:   retryBudget,
		grantWait:     grantWait,
		maxDependents: MaxDependents,
		registryPage:  RegistryPage,
		queueReads:    MaxQueueListingReads,
		claimPoll:     claimPoll,
		shards:        cfg.Shards.OrDefault(),
		db:            cfg.DB,
		now:           cfg.Now,
		notifier:      cfg.Notifier,
		log:           cfg.Logger,
		retention:     cfg.EventRetention,

		feedSettle: cfg.FeedSettle,
		feedLanded: cfg.FeedAtLanding,
		feedLate:   cfg.FeedAtLanding || cfg.FeedLate,
		feedPassed: cfg.FeedPassed,
		trailWait:  cfg.TrailWait,

		reRegisterAfter: cfg.ReRegisterAfter,

		readAfterFailed: cfg.ReadAfterFailedCondition,
		tasks:           cfg.Tables.Table(schema.TasksTable),
		agents:          cfg.Tables.Table(schema.AgentsTable),
		heartbeats:      cfg.Tables.Table(schema.HeartbeatsTable),
		events:          cfg.Tables.Table(schema.EventsTable),
		inbox:           cfg.Tables.Table(schema.InboxTable),
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.notifier == nil {
		s.notifier = LogNotifier(s.log)
	}
	switch {
	case s.feedSettle == 0:
		s.feedSettle = DefaultFeedSettle
	case s.feedSettle < 0:
		s.feedSettle = 0
	}
	if s.retention <= 0 {
		s.retention = 30 * 24 * time.Hour
	}
	return s
}

// FallbackReads reports how many reads were made only because the server
// ignored ReturnValuesOnConditionCheckFailure.
func (s *Store) FallbackReads() int64 { return s.fallbackReads.Load() }

// clock returns the current time truncated to milliseconds, the precision
// items store.
func (s *Store) clock() time.Time { return s.now().UTC().Truncate(time.Millisecond) }

// clockAfter is the clock, or floor (Unix ms) when the clock reads earlier:
// the time of a transition on an item whose latest transition was at floor.
func (s *Store) clockAfter(floor int64) time.Time {
	now := s.clock()
	if ms(now) < floor {
		return fromMS(floor)
	}
	return now
}

// nameLastAt is the time of a task item's latest transition.
var nameLastAt = expression.Name("last_at")

// timeCond is the time rule in a transition's condition: the item's latest
// transition is not later than now. A write whose time was read before a
// later write landed fails it, and is tried again at a time not before
// that write's (lostToLater, clockAfter).
func timeCond(now time.Time) expression.ConditionBuilder {
	return expression.Not(nameLastAt.GreaterThan(expression.Value(ms(now))))
}

// lostToLater reports whether a transition at now failed on cur because a
// transition later than now had landed first.
func lostToLater(cur *taskItem, now time.Time) bool { return cur != nil && cur.LastAt > ms(now) }

// The writes that move a lease. A lease's state is the task item (taskItem,
// with its endRecord and prevRecord, in item.go); every write of it is
// update, a conditional UpdateItem built from the pieces below: holderCond
// for "the caller holds it", clearLease and endUpdate for an ending. The
// operations (checkout.go, claim.go, update.go, sweep.go) only decide which
// condition and which update to send.

// maxAttempts bounds the retries of a transition whose condition failed for a
// reason that vanished by the time it was read (the lease ended in between),
// where it cannot lose to other writers for long (retries).
const maxAttempts = 8

// Writers of one item that keep losing to each other (a PATCH without
// If-Match, checkouts and cancels of one task) are each tried again until
// they win: maxAttempts at once, as before, then after a pause that
// doubles from retryPause up to retryPauseMax, with jitter so that the
// losers spread out, for up to retryBudget in all. Only then, or when the
// request's context ends, does the caller answer ErrBusy: a request with a
// deadline (a Lambda's) stops retryMargin before it, so that its answer
// is ErrBusy rather than the function's timeout.
const (
	retryPause    = 2 * time.Millisecond
	retryPauseMax = 100 * time.Millisecond
	retryBudget   = 10 * time.Second
	retryMargin   = 2 * time.Second
)

// retries yields the attempts of a transition that may lose to other
// writes of its item (see retryBudget).
func retries(ctx context.Context) iter.Seq[int] { return retriesFor(ctx, retryBudget) }

// retriesFor is retries for up to budget instead of retryBudget.
func retriesFor(ctx context.Context, budget time.Duration) iter.Seq[int] {
	return func(yield func(int) bool) {
		deadline := time.Now().Add(budget)
		if d, ok := ctx.Deadline(); ok && d.Add(-retryMargin).Before(deadline) {
			deadline = d.Add(-retryMargin)
		}
		pause := retryPause
		for i := 0; ; i++ {
			if i >= maxAttempts {
				if time.Now().Add(pause).After(deadline) {
					return
				}
				t := time.NewTimer(pause/2 + mrand.N(pause/2+1))
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				pause = min(2*pause, retryPauseMax)
			}
			if !yield(i) {
				return
			}
		}
	}
}

// The task item's attributes that conditions and updates name most.
var (
	nameHolder  = expression.Name("holder")
	nameExpires = expression.Name("lease_expires")
	nameStatus  = expression.Name("status")
	nameFence   = expression.Name("fence")
	nameESeq    = expression.Name("eseq")
	nameVersion = expression.Name("version")
	// nameLeaseBy names who made the lease's latest grant or renewal
	// when it is not the holder.
	nameLeaseBy = expression.Name("lease_by")
	// nameClaimShard is the claim index's partition key, present only on
	// claimable tasks.
	nameClaimShard = expression.Name("claim_shard")
	// nameStatusShard is the status index's partition key, kept with the
	// status by setStatus.
	nameStatusShard = expression.Name("status_shard")
	// The work graph's (deps.go).
	nameAttempts    = expression.Name("attempts")
	nameMaxAttempts = expression.Name("max_attempts")
	nameFailures    = expression.Name("failures")
	nameNotBefore   = expression.Name("not_before")
	nameWaitingOn   = expression.Name("waiting_on")
)

// readyCond says the task may be granted at now: no not_before, or one
// passed. (Conditions here are written as NOT of one comparison, which is
// true when the attribute is missing, rather than as an OR with
// attribute_not_exists: they nest less, and the local DynamoDB's parser
// takes time exponential in a condition's nesting.)
func readyCond(now time.Time) expression.ConditionBuilder {
	return expression.Not(nameNotBefore.GreaterThan(expression.Value(ms(now))))
}

// belowLimitCond says the task has attempts left: the attempt on it now,
// if it fails, is not its last. Every grant sets max_attempts if it is
// missing (a task from before the work graph), so a task with attempts
// has it.
func belowLimitCond() expression.ConditionBuilder {
	return expression.Not(atLimitCond())
}

// atLimitCond says the attempt on the task now is its last.
func atLimitCond() expression.ConditionBuilder {
	return nameAttempts.GreaterThanEqual(nameMaxAttempts)
}

// belowLimit is belowLimitCond on an item read.
func (t *taskItem) belowLimit() bool { return t.Attempts < t.maxAttempts() }

// update makes one conditional UpdateItem on a task. When the condition
// holds it returns the item as rv asks (ALL_OLD: as it was; ALL_NEW: as
// the write left it) and applied=true; when it fails it returns the item
// as it is (nil if there is no task).
//
// Every change of a task item goes through it, and it adds one to the
// item's version in the same write; write alone is for a write that
// changes nothing a reader of the task sees (markWatched).
func (s *Store) update(ctx context.Context, taskID string, cond terms, upd expression.UpdateBuilder, rv types.ReturnValue) (*taskItem, bool, error) {
	return s.write(ctx, taskID, cond, upd.Add(nameVersion, expression.Value(1)), rv)
}

// write is update without the version. A write made with a ctx of
// sentAgainWith is sent again here, not by the SDK.
func (s *Store) write(ctx context.Context, taskID string, cond terms, upd expression.UpdateBuilder, rv types.ReturnValue) (*taskItem, bool, error) {
	send := func(cond terms, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
		expr, err := expression.NewBuilder().WithCondition(cond.cond()).WithUpdate(upd).Build()
		if err != nil {
			return nil, fmt.Errorf("build update of %s: %w", taskID, err)
		}
		return s.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName:                           &s.tasks,
			Key:                                 taskKey(taskID),
			ConditionExpression:                 expr.Condition(),
			UpdateExpression:                    expr.Update(),
			ExpressionAttributeNames:            expr.Names(),
			ExpressionAttributeValues:           expr.Values(),
			ReturnValues:                        rv,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}, append(sendOpts(ctx), opts...)...)
	}
	var out *dynamodb.UpdateItemOutput
	var err error
	if ag := againOf(ctx); ag == nil {
		out, err = send(cond)
	} else {
		var retryer aws.Retryer
		var release func(error) error
		attempt := 1
		for ; ; attempt++ {
			c := cond
			if ag.applied.Load() {
				c = cond.and(ag.more...)
			}
			out, err = send(c, sendOnce(&retryer, attempt))
			if release != nil {
				_ = release(err)
			}
			if _, failed := conditionFailed(err); failed || err == nil {
				break
			}
			if unapplied(err) {
				unsent(ctx)
			} else {
				ag.applied.Store(true) // every later sending of the call carries the terms
			}
			var again bool
			if release, again, err = sendAgain(ctx, retryer, attempt, err); !again {
				break
			}
		}
		if _, failed := conditionFailed(err); !failed && err != nil && attempt > 1 {
			err = fmt.Errorf("sent %d times: %w", attempt, err) // each sending is an operation of one attempt
		}
	}
	if returned, failed := conditionFailed(err); failed {
		cur, err := s.currentTask(ctx, returned, taskID)
		return cur, false, err
	}
	if err != nil {
		return nil, false, fmt.Errorf("update task %s: %w", taskID, err)
	}
	var it taskItem
	if err := attributevalue.UnmarshalMap(out.Attributes, &it); err != nil {
		return nil, false, fmt.Errorf("decode task %s: %w", taskID, err)
	}
	return &it, true, nil
}

// terms is a condition kept as the terms it ANDs, built flat:
// "(a) AND (b) AND (c)". DynamoDB does not mind how a condition nests, but
// the local DynamoDB's parser takes time exponential in its nesting, and
// the expression builder's And nests each call in the last: four terms
// chained cost it about 3 ms a write, seven 40 ms, where the same terms
// flat cost well under 1 ms. Every conditional write of a task builds its
// condition this way.
type terms []expression.ConditionBuilder

// and is t with more terms.
func (t terms) and(more ...expression.ConditionBuilder) terms {
	return append(slices.Clip(t), more...)
}

// cond is the condition: every term, ANDed flat.
func (t terms) cond() expression.ConditionBuilder {
	if len(t) == 1 {
		return t[0]
	}
	return expression.And(t[0], t[1], t[2:]...)
}

// pinnedTo says the lease on the task is exactly it's: the same holder and
// the same grant (fence). Every write that ends or takes over a lease
// somebody else holds is pinned so, and adds what else it relies on (the
// expiry, eseq, a lock time).
func pinnedTo(it *taskItem) terms {
	return terms{nameHolder.Equal(expression.Value(it.Holder)), nameFence.Equal(expression.Value(it.Fence))}
}

// holderCond says "the caller holds this unexpired lease", with the run id and
// fence when given.
func holderCond(agentID, runID string, fence int64, now time.Time) terms {
	c := terms{nameHolder.Equal(expression.Value(agentID)), nameExpires.GreaterThan(expression.Value(ms(now)))}
	if runID != "" {
		c = c.and(expression.Name("run_id").Equal(expression.Value(runID)))
	}
	if fence != 0 {
		c = c.and(nameFence.Equal(expression.Value(fence)))
	}
	return c
}

// clearLease removes the lease and its index keys from a task item; a
// delayed task keeps its expiry index keys (endUpdate sets the expiry).
// The lease's renewal write ids, its timeout and its holder's name stay
// until the next grant sets or removes them: a renewal the SDK sends again
// after the lease ended knows it was made, and answers the lease as it
// renewed it (Renew).
func clearLease(u expression.UpdateBuilder, delayed bool) expression.UpdateBuilder {
	names := []string{"holder", "run_id", "locked_at", "reason"}
	if !delayed {
		names = append(names, "lease_expires", "lease_shard")
	}
	for _, n := range names {
		u = u.Remove(expression.Name(n))
	}
	return u
}

// ending says how a lease ends.
type ending struct {
	typ    EventType
	by     string
	reason string
	status Status // todo when the task is freed, done when completed
	// failed says the ending is a failed attempt (timeout, death, a
	// release with outcome failed): it counts in failures. exhausted says
	// it is the task's last attempt: the task becomes failed instead of
	// status, with a failed event after the ending's.
	failed, exhausted bool
	// outcome and errored are a release's (errored: its error item was
	// written, under errorID).
	outcome ReleaseOutcome
	errored bool
	// errorID names the error item of an errored ending (errorID).
	errorID int64
	// notBefore (Unix ms), when set, delays the task's next grant; rank
	// is its claim_key once ready (delayedKey).
	notBefore int64
	rank      string
	// freeIf, when set, are conditions of the write that leaves the task
	// todo alone: the delay the ending was decided on (sweep.go,
	// sweepEnd). The write that makes a marked task blocked instead
	// (endLease) writes the delay of the item the first write failed on
	// (blockedEnding), and is pinned to that instead.
	freeIf terms
	// at (Unix ms), when set, is the ending's time when it is earlier than
	// its write's: the death of an agent that came back, stamped at its
	// return (sweep.go). Its write is conditioned on no transition after
	// at.
	at int64
	// write, when set, names the write (newID): a holder's ending, or an
	// admin's force release, that names no lease is known by it when sent
	// again (sentAgain).
	write string
}

// namePriorAt and priorAt record, in every transition's write, the time of
// the transition before it: SET prior_at = last_at, as the item was.
var (
	namePriorAt = expression.Name("prior_at")
	priorAt     = expression.IfNotExists(expression.Name("last_at"), expression.Value(0))
)

// null is DynamoDB's NULL, for copies of attributes that may be missing.
var null = expression.Value(&types.AttributeValueMemberNULL{Value: true})

func copyOf(name string) expression.OperandBuilder {
	return expression.IfNotExists(expression.Name(name), null)
}

// endUpdate is the update of a write that ends the lease on a task: it moves
// the lease into the end_* attributes (SET end_agent = holder ... REMOVE
// holder), records the transition (last_op, last_at, eseq), drops the watch
// list (the change stream hands the old one to the messages) and sets the
// task's status.
//
// An ending that leaves the task todo puts it back in the claim index (SET
// claim_shard = claim_home, the task's own queue and shard; a task written
// before queues has none and goes to the default queue); any other ending
// leaves it out.
func endUpdate(taskID string, e ending, now time.Time, sh schema.ShardCounts) expression.UpdateBuilder {
	// An exhausted ending records two events: the ending, then failed.
	events, lastOp := 1, e.typ
	if e.exhausted {
		e.status, events, lastOp = StatusFailed, 2, EventFailed
	}
	u := setStatus(expression.UpdateBuilder{}, taskID, e.status, sh.Status).
		Set(nameESeq, nameESeq.Plus(expression.Value(events))).
		Set(expression.Name("last_op"), expression.Value(string(lastOp))).
		Set(expression.Name("last_at"), expression.Value(ms(now))).
		Set(namePriorAt, priorAt).
		Set(expression.Name("end_seq"), nameESeq.Plus(expression.Value(1))).
		Set(expression.Name("end_type"), expression.Value(string(e.typ))).
		Set(expression.Name("end_agent"), nameHolder).
		Set(expression.Name("end_run"), expression.Name("run_id")).
		Set(expression.Name("end_fence"), nameFence).
		Set(expression.Name("end_locked"), expression.Name("locked_at")).
		Set(expression.Name("end_expires"), nameExpires).
		Set(expression.Name("end_at"), expression.Value(cmp.Or(e.at, ms(now)))).
		Set(expression.Name("end_by"), expression.Value(e.by)).
		Set(expression.Name("end_lease_seq"), copyOf("lease_seq")).
		// Not the lease's reason (up to 1 KB, on its checkout event): with
		// the ending's own, it would bill twice on the next grant.
		// end_lease_reason is on items older versions ended.
		Remove(expression.Name("end_lease_reason"))
	if e.write != "" {
		u = u.Set(expression.Name("end_write"), expression.Value(e.write))
	} else {
		u = u.Remove(expression.Name("end_write"))
	}
	if e.reason != "" {
		u = u.Set(expression.Name("end_reason"), expression.Value(e.reason))
	} else {
		u = u.Remove(expression.Name("end_reason"))
	}
	if e.status == StatusDone { // a completion's alone
		u = u.Set(expression.Name("completed_at"), expression.Value(ms(now))).
			Set(expression.Name("end_version"), expression.IfNotExists(nameVersion, expression.Value(0))) // as found: the write adds one
	} else {
		u = u.Remove(expression.Name("end_version"))
	}
	if e.failed {
		u = u.Add(nameFailures, expression.Value(1))
	}
	if e.outcome != OutcomeNone {
		u = u.Set(expression.Name("end_outcome"), expression.Value(string(e.outcome)))
	} else {
		u = u.Remove(expression.Name("end_outcome"))
	}
	switch {
	case e.errored:
		u = u.Set(expression.Name("end_errored"), expression.Value(true)).
			Set(expression.Name("last_error_fence"), expression.Value(e.errorID))
	case e.outcome == OutcomeFailed:
		// The latest failed release gave no error: last_error is none.
		u = u.Remove(expression.Name("end_errored")).Remove(expression.Name("last_error_fence"))
	default:
		u = u.Remove(expression.Name("end_errored"))
	}
	delayed := e.notBefore != 0 && (e.status == StatusTodo || e.status == StatusBlocked) && !e.exhausted
	if delayed {
		// The task's entry in the expiry index stays, at its not_before:
		// the sweep ranks it as ready then (claim.go, "Delays").
		u = u.Set(nameNotBefore, expression.Value(e.notBefore)).
			Set(expression.Name("claim_key"), expression.Value(delayedKey(e.notBefore, e.rank))).
			Set(expression.Name("claim_rank"), expression.Value(e.rank)).
			Set(nameExpires, expression.Value(e.notBefore))
	}
	if e.status == StatusTodo {
		u = u.Set(nameClaimShard, expression.IfNotExists(expression.Name("claim_home"), expression.Value(claimHome(DefaultQueue, taskID, sh.Claim))))
	} else {
		u = u.Remove(nameClaimShard)
	}
	return clearLease(u, delayed).Remove(expression.Name("watchers")).Remove(expression.Name("lease_seq"))
}

// newID returns prefix + 16 random hex digits: the ids a caller sees.
func newID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// writeID returns 64 random bits in 11 base64url characters: an id the
// service keeps for itself (a write's, a body's, a PATCH's), compared only
// for equality. It is stored on the task item by every transition, where
// each byte counts against the item's 1 KB write unit.
func writeID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// setStatus sets a task's status and its status index key in one update:
// every write that moves a task's status goes through it. A todo or
// in_progress task has no status index entry (list.go lists them from
// by_claim and by_lease_expiry): the write REMOVEs its status_shard, which
// leaves an item without one untouched in the index, and takes out the
// entry of one written before. n is the status shard count.
func setStatus(u expression.UpdateBuilder, taskID string, st Status, n int) expression.UpdateBuilder {
	u = u.Set(nameStatus, expression.Value(string(st)))
	if sh := statusShard(st, taskID, n); sh != "" {
		return u.Set(nameStatusShard, expression.Value(sh))
	}
	return u.Remove(nameStatusShard)
}

// statusShard is a task's partition in the status index: its status group
// and a shard chosen by its id, so that no partition takes every
// transition of the fleet; "" for todo and in_progress, which are not in
// the status index. n is the status shard count.
func statusShard(st Status, taskID string, n int) string {
	if st == StatusTodo || st == StatusInProgress {
		return ""
	}
	return statusGroup(st) + "#" + shardOf(taskID, n)
}

// statusGroup is the status index's name for st's partitions. blocked's
// is "open", where todo and in_progress were too before they left the
// index: entries of theirs written before stay there until the task's next
// write.
func statusGroup(st Status) string {
	if st == StatusTodo || st == StatusInProgress || st == StatusBlocked {
		return "open"
	}
	return string(st)
}

// shardOf is id's shard of n: its FNV-1a hash modulo n. Every sharded
// key is this, so an item's shard depends only on its id and the count it
// was written with, and the default counts give the shards they always
// have. An item keeps the shard it was written with until its key is
// written again; readers query every shard below the count, which is why
// counts may grow but never shrink.
func shardOf(id string, n int) string {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return strconv.Itoa(int(h.Sum32() % uint32(n)))
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

// conditionFailed is the one place that recognises a failed condition. It
// returns the item as it was when the condition failed, when the server sent
// it (ReturnValuesOnConditionCheckFailure: ALL_OLD).
func conditionFailed(err error) (item map[string]types.AttributeValue, ok bool) {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item, true
	}
	return nil, false
}

// currentTask returns the task item after a failed condition: the one the
// server returned, or else a strongly consistent read. nil means no task.
func (s *Store) currentTask(ctx context.Context, returned map[string]types.AttributeValue, taskID string) (*taskItem, error) {
	if len(returned) == 0 {
		if !s.readAfterFailed {
			return nil, nil // ALL_OLD with no item: there is none
		}
		s.fallbackReads.Add(1)
		return s.getTask(ctx, taskID)
	}
	var it taskItem
	if err := attributevalue.UnmarshalMap(returned, &it); err != nil {
		return nil, fmt.Errorf("decode task %s: %w", taskID, err)
	}
	return &it, nil
}

func (s *Store) getTask(ctx context.Context, taskID string) (*taskItem, error) {
	it, err := getItem[taskItem](ctx, s.db, s.tasks, taskKey(taskID))
	if err != nil {
		return nil, fmt.Errorf("get task %s: %w", taskID, err)
	}
	return it, nil
}

func taskKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: id}}
}

func agentKey(id string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{"agent_id": &types.AttributeValueMemberS{Value: id}}
}

// ReturnsItemOnConditionFailure reports whether the server at db honours
// ReturnValuesOnConditionCheckFailure: ALL_OLD. It makes a write that cannot
// succeed (delete the item key from table on condition that it does not
// exist), so it changes nothing; the item must exist. Servers that answer
// false need Config.ReadAfterFailedCondition.
func ReturnsItemOnConditionFailure(ctx context.Context, db DB, table string, key map[string]types.AttributeValue) (bool, error) {
	var keyName string
	for k := range key {
		keyName = k
	}
	expr, err := expression.NewBuilder().WithCondition(expression.AttributeNotExists(expression.Name(keyName))).Build()
	if err != nil {
		return false, err
	}
	_, err = db.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: &table, Key: key,
		ConditionExpression:                 expr.Condition(),
		ExpressionAttributeNames:            expr.Names(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	returned, failed := conditionFailed(err)
	if !failed {
		if err == nil {
			return false, fmt.Errorf("probe %s: the item to probe with does not exist", table)
		}
		return false, fmt.Errorf("probe %s: %w", table, err)
	}
	return len(returned) > 0, nil
}

// AgentKey is the agents-table key of an agent, for ReturnsItemOnConditionFailure.
func AgentKey(agentID string) map[string]types.AttributeValue { return agentKey(agentID) }
