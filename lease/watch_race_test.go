package lease_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A checkout refused with watch:true ("watching": true) whose holder
// releases the task between the refusal and the watch's write, the change
// stream handling that release before the watch item lands, is never told
// of that release: the watch sits at a place (eseq) before the freeing,
// but the freeing's watchers were read before it existed. The task is
// free and the watcher waits for a message that never comes.
func TestAWatchRacingAReleaseIsTold(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := e.checkout(t, "t", "a", time.Hour)
	db := &beforeWatchWriteDB{DB: e.db}
	db.hook = func() {
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID}))
		e.drain(t)
	}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	_, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "w", Watch: true, Timeout: time.Hour})
	var ce *lease.ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("checkout: %v, want a conflict", err)
	}
	if ce.Watching == nil || !*ce.Watching {
		t.Fatalf("conflict says watching %v, want true", ce.Watching)
	}
	if !db.done.Load() {
		t.Fatal("the watch was never written")
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "t")); got.Status != lease.StatusTodo || got.Checkout != nil {
		t.Fatalf("task after the release: %+v, want free", got)
	}
	msgs := e.inbox(t, "w")
	if len(msgs) != 1 || msgs[0].Type != lease.MessageTaskAvailable || msgs[0].Fence != co.Fence {
		t.Fatalf("w (told watching:true, the task then released) has inbox %+v; want one task_available for the release of fence %d", msgs, co.Fence)
	}
}

// beforeMarkWatchedDB runs hook once, just before the write that sets a
// task's watched flag (watch.go, markWatched: the first watch of a task).
type beforeMarkWatchedDB struct {
	lease.DB
	hook func()
	done atomic.Bool
}

func (d *beforeMarkWatchedDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if slices.Contains(mapValues(in.ExpressionAttributeNames), "watched") && !slices.Contains(mapValues(in.ExpressionAttributeNames), "holder") && d.done.CompareAndSwap(false, true) {
		d.hook()
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}

// The first watcher of a task, refused with watch:true, whose holder
// releases in the moment between the refusal and the watch: no stream
// timing needed. The watch is placed at the eseq markWatched returns,
// which is already past the release, so the release never tells it,
// although the checkout's 409 ("watching": true) was decided while the
// lease was live, before the release.
func TestAWatchRefusedJustBeforeAReleaseIsTold(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := e.checkout(t, "t", "a", time.Hour)
	db := &beforeMarkWatchedDB{DB: e.db}
	db.hook = func() {
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID}))
	}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	_, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "w", Watch: true, Timeout: time.Hour})
	var ce *lease.ConflictError
	if !errors.As(err, &ce) || ce.Watching == nil || !*ce.Watching {
		t.Fatalf("checkout: %v, want a conflict with watching true", err)
	}
	if !db.done.Load() {
		t.Fatal("the watched flag was never written")
	}
	msgs := e.inbox(t, "w")
	if len(msgs) != 1 || msgs[0].Type != lease.MessageTaskAvailable || msgs[0].Fence != co.Fence {
		t.Fatalf("w (409 watching:true while a held fence %d, then a released) has inbox %+v; want one task_available for that release", co.Fence, msgs)
	}
}

// afterWatchWriteDB runs before once just before the first write of a
// watch item, and after once just after it lands: a watcher's request
// that stalls on both sides of its write.
type afterWatchWriteDB struct {
	lease.DB
	before, after func()
	done          atomic.Bool
}

func (d *afterWatchWriteDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	k, ok := in.Key["agent_id"].(*types.AttributeValueMemberS)
	first := ok && strings.HasPrefix(k.Value, "#watch#") && d.done.CompareAndSwap(false, true)
	if first {
		d.before()
	}
	out, err := d.DB.UpdateItem(ctx, in, opts...)
	if first {
		d.after()
	}
	return out, err
}

// A watch that missed the release after its place (the stream handled it
// before the watch was written), followed by a second lease and its
// release that the stream handles while the watch stands: the watcher
// tells itself of the first, and the stream must not tell it of the
// second. Exactly one message, the first release's.
func TestAWatchRacingTwoFreeingsIsToldOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := e.checkout(t, "t", "a", time.Hour)
	db := &afterWatchWriteDB{DB: e.db}
	db.before = func() {
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID}))
		e.drain(t)
	}
	db.after = func() {
		co2 := e.checkout(t, "t", "b", time.Hour)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: co2.RunID}))
		e.drain(t)
	}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	_, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "w", Watch: true, Timeout: time.Hour})
	var ce *lease.ConflictError
	if !errors.As(err, &ce) || ce.Watching == nil || !*ce.Watching {
		t.Fatalf("checkout: %v, want a conflict with watching true", err)
	}
	if !db.done.Load() {
		t.Fatal("the watch was never written")
	}
	e.drain(t)
	msgs := e.inbox(t, "w")
	if len(msgs) != 1 || msgs[0].Fence != co.Fence {
		t.Fatalf("w has inbox %+v; want one task_available, for the release of fence %d", msgs, co.Fence)
	}
	// Its watch is used up: the next release tells it nothing more.
	co3 := e.checkout(t, "t", "a", time.Hour)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co3.RunID}))
	if msgs := e.inbox(t, "w"); len(msgs) != 1 {
		t.Fatalf("w has inbox %+v after a later release; want its one message only", msgs)
	}
}

// The first watcher of a task, refused with watch:true, whose holder
// releases and a third agent checks the task out, both in the moment
// between the refusal and the watch. The release was written without the
// task's watched flag, so the change stream read no watches for it, and
// the flag's write shows only the later checkout: the watcher must still
// be told of that release, once, and not again at the next freeing (its
// watch was for the release).
func TestAFirstWatchIsToldOfAReleaseHiddenBehindALaterCheckout(t *testing.T) {
	t.Parallel()
	firstWatchOfAHiddenRelease(t, false, 0)
}

// As above, the change stream archiving the release only after the
// watcher's first read of the archive: the watcher reads again until the
// archive holds every event since its place.
func TestAFirstWatchWaitsForTheArchiveOfAHiddenRelease(t *testing.T) {
	t.Parallel()
	firstWatchOfAHiddenRelease(t, true, 0)
}

// As above, the change stream archiving the release a second (of real
// time: the stream's lag) after the watcher's first read of the archive,
// as it typically does: the watcher reads the archive again a few times,
// paced, not back to back until the release is there.
func TestAFirstWatchPacesItsReadsOfAHeldUpArchive(t *testing.T) {
	t.Parallel()
	if q := firstWatchOfAHiddenRelease(t, true, time.Second); q > 8 {
		t.Errorf("%d reads of the archive while the stream held the release up for a second, want at most 8", q)
	}
}

// firstWatchOfAHiddenRelease runs the case above, the release archived
// before the watcher reads the archive or, archiveLate, after its first
// read, and at least hold after it; it returns the watcher's reads of the
// archive.
func firstWatchOfAHiddenRelease(t *testing.T, archiveLate bool, hold time.Duration) int32 {
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := e.checkout(t, "t", "a", time.Hour)
	var co2 lease.Checkout
	db := &afterEventsQueryDB{beforeMarkWatchedDB: beforeMarkWatchedDB{DB: e.db}, events: e.names.Table(schema.EventsTable), hold: hold}
	db.hook = func() {
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID}))
		e.clock.Advance(time.Second)
		co2 = e.checkout(t, "t", "b", time.Hour)
		if !archiveLate {
			e.drain(t)
		}
	}
	db.after = func() {
		if archiveLate {
			e.drain(t)
		}
	}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	_, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "w", Watch: true, Timeout: time.Hour})
	var ce *lease.ConflictError
	if !errors.As(err, &ce) || ce.Watching == nil || !*ce.Watching {
		t.Fatalf("checkout: %v, want a conflict with watching true", err)
	}
	if !db.done.Load() {
		t.Fatal("the watched flag was never written")
	}
	if q := db.queries.Load(); archiveLate && q < 2 {
		t.Errorf("%d reads of the archive, want it read again once the stream archived the release", q)
	}
	msgs := e.inbox(t, "w")
	if len(msgs) != 1 || msgs[0].Type != lease.MessageTaskAvailable || msgs[0].Fence != co.Fence {
		t.Fatalf("w (409 watching:true while a held fence %d, then a released and b checked out) has inbox %+v; want one task_available for that release", co.Fence, msgs)
	}
	e.clock.Advance(time.Second)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: co2.RunID}))
	if msgs := e.inbox(t, "w"); len(msgs) != 1 {
		t.Fatalf("w has inbox %+v after b's release; want its one message only", msgs)
	}
	return db.queries.Load()
}

// afterEventsQueryDB is a beforeMarkWatchedDB that counts the Queries of
// the events table and runs after once: after the first has been
// answered or, with hold, before the first sent hold or more after it.
type afterEventsQueryDB struct {
	beforeMarkWatchedDB
	events  string
	after   func()
	hold    time.Duration
	first   time.Time
	queries atomic.Int32
	ran     bool
}

func (d *afterEventsQueryDB) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if *in.TableName != d.events {
		return d.DB.Query(ctx, in, opts...)
	}
	n := d.queries.Add(1)
	if n == 1 {
		d.first = time.Now()
	} else if !d.ran && time.Since(d.first) >= d.hold {
		d.ran = true
		d.after()
	}
	out, err := d.DB.Query(ctx, in, opts...)
	if n == 1 && d.hold == 0 {
		d.ran = true
		d.after()
	}
	return out, err
}

// As above, the change stream held up past the watcher's wait for the
// archive: the checkout still answers its conflict, with the holder it
// found, saying the caller is not watching (it cannot tell whether the
// release it cannot see told it), and leaves no watch behind that a
// later freeing would tell.
func TestACheckoutWhoseFirstWatchCannotSettleStillAnswersItsConflict(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := e.checkout(t, "t", "a", time.Hour)
	var co2 lease.Checkout
	db := &beforeMarkWatchedDB{DB: e.db}
	db.hook = func() {
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID}))
		e.clock.Advance(time.Second)
		co2 = e.checkout(t, "t", "b", time.Hour)
	}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	lease.WaitForArchive(s, 50*time.Millisecond)
	_, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "w", Watch: true, Timeout: time.Hour})
	var ce *lease.ConflictError
	if !errors.As(err, &ce) || ce.Holder.AgentID != "a" || ce.Holder.Fence != co.Fence {
		t.Fatalf("checkout: %v, want a conflict with a's lease (fence %d)", err, co.Fence)
	}
	if ce.Watching == nil || *ce.Watching {
		t.Fatalf("conflict says watching %v, want false", ce.Watching)
	}
	if !db.done.Load() {
		t.Fatal("the watched flag was never written")
	}
	for _, it := range e.inboxItems(t, "#watch#t") {
		if k := it["message_id"].(*types.AttributeValueMemberS).Value; !strings.HasPrefix(k, "#") {
			t.Errorf("a watch of %s was left on t", k)
		}
	}
	if msgs := e.inbox(t, "w"); len(msgs) != 0 {
		t.Fatalf("w (409 watching:false) has inbox %+v; want none", msgs)
	}
	e.clock.Advance(time.Second)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: co2.RunID}))
	if msgs := e.inbox(t, "w"); len(msgs) != 0 {
		t.Fatalf("w (409 watching:false) has inbox %+v after b's release; want none", msgs)
	}
}

// A watch request in the same moment (POST /api/tasks/{id}/watch), which
// does nothing else, answers busy: a retry watches from then on.
func TestAFirstWatchRequestWhoseArchiveIsHeldUpIsBusy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := e.checkout(t, "t", "a", time.Hour)
	db := &beforeMarkWatchedDB{DB: e.db}
	db.hook = func() {
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID}))
		e.clock.Advance(time.Second)
		e.checkout(t, "t", "b", time.Hour)
	}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	lease.WaitForArchive(s, 50*time.Millisecond)
	if err := s.Watch(c, "t", "w"); !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("watch: %v, want busy", err)
	}
}

// A checkout refused with watch whose watch fails before it writes
// anything (its read of the task's watches) still answers its conflict,
// not watching; one whose watch was written but could not be settled (its
// read of the freeing records) answers the failure, so that a retry
// places and settles it again: the watch stands, and may have missed a
// freeing.
func TestACheckoutWhoseWatchFailsStillAnswersItsConflict(t *testing.T) {
	for _, tc := range []struct {
		name     string
		read     string // the key prefix of the failing Query of t's watch partition
		conflict bool
	}{
		{"reading the watches", "0", true},
		{"settling", "#freed#", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t")
			co := e.checkout(t, "t", "a", time.Hour)
			db := &failWatchReadDB{DB: e.db, prefix: tc.read}
			s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			_, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "w", Watch: true, Timeout: time.Hour})
			if !db.failed.Load() {
				t.Fatal("the read was never made")
			}
			var ce *lease.ConflictError
			if !tc.conflict {
				if !errors.Is(err, errInjected) {
					t.Fatalf("checkout: %v, want the injected failure", err)
				}
				return
			}
			if !errors.As(err, &ce) || ce.Holder.AgentID != "a" || ce.Watching == nil || *ce.Watching {
				t.Fatalf("checkout: %v, want a conflict with a's lease, watching false", err)
			}
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID}))
			if msgs := e.inbox(t, "w"); len(msgs) != 0 {
				t.Fatalf("w (409 watching:false) has inbox %+v after a's release; want none", msgs)
			}
		})
	}
}

// failWatchReadDB fails, once, a Query of a task's watch partition whose
// sort key condition starts at prefix.
type failWatchReadDB struct {
	lease.DB
	prefix string
	failed atomic.Bool
}

func (d *failWatchReadDB) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	var watchPart, from bool
	for _, v := range in.ExpressionAttributeValues {
		if s, ok := v.(*types.AttributeValueMemberS); ok {
			watchPart = watchPart || strings.HasPrefix(s.Value, "#watch#")
			from = from || strings.HasPrefix(s.Value, d.prefix)
		}
	}
	if watchPart && from && d.failed.CompareAndSwap(false, true) {
		return nil, errInjected
	}
	return d.DB.Query(ctx, in, opts...)
}

// A checkout refused with watch whose watch write landed but whose answer
// was lost (the SDK sent it again, and that sending failed its condition
// on the first's watch) has a watch standing: when its watch then fails
// (its next read of the task's watches), the checkout answers the failure,
// so that a retry settles the watch, not its conflict with watching
// false, which would tell the caller that no message comes when one does.
func TestACheckoutWhoseWatchLandedUnansweredDoesNotSayItIsNotWatching(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := e.checkout(t, "t", "a", time.Hour)
	db := &watchSentTwiceDB{DB: e.db}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	_, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "w", Watch: true, Timeout: time.Hour})
	if !db.sent.Load() || !db.failed.Load() {
		t.Fatalf("the watch was sent twice: %v; the read after it failed: %v", db.sent.Load(), db.failed.Load())
	}
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID}))
	msgs := e.inbox(t, "w")
	if len(msgs) != 1 {
		t.Fatalf("w has inbox %+v after a's release; want the message of its watch, which landed", msgs)
	}
	var ce *lease.ConflictError
	if errors.As(err, &ce) && (ce.Watching == nil || !*ce.Watching) {
		t.Fatalf("checkout: %v, watching false, though its watch landed (w was told of a's release)", err)
	}
	if !errors.Is(err, errInjected) {
		t.Fatalf("checkout: %v, want the injected failure", err)
	}
}

// watchSentTwiceDB sends the first write of a watch twice, as the SDK does
// when the first sending landed and its answer was lost (the second fails
// its condition on the first's watch), and then fails the next read of
// the task's watches.
type watchSentTwiceDB struct {
	lease.DB
	sent, failed atomic.Bool
}

func (d *watchSentTwiceDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	k, _ := in.Key["agent_id"].(*types.AttributeValueMemberS)
	if k != nil && strings.HasPrefix(k.Value, "#watch#") && d.sent.CompareAndSwap(false, true) {
		if _, err := d.DB.UpdateItem(ctx, in, opts...); err != nil {
			return nil, err
		}
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}

func (d *watchSentTwiceDB) Query(ctx context.Context, in *dynamodb.QueryInput, opts ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	var watches bool
	for _, v := range in.ExpressionAttributeValues {
		if s, ok := v.(*types.AttributeValueMemberS); ok && strings.HasPrefix(s.Value, "#watch#") {
			watches = true
		}
	}
	if watches && d.sent.Load() && d.failed.CompareAndSwap(false, true) {
		return nil, errInjected
	}
	return d.DB.Query(ctx, in, opts...)
}

// A checkout refused with watch by an agent already on the task's watch
// list (it watched before) whose watch then fails (its read of the
// agent's heartbeat, made only for an agent with a watch) answers the
// failure, not its conflict with watching false: the agent's watch
// stands, and a message comes at the task's next freeing.
func TestACheckoutOfAnAgentAlreadyWatchingDoesNotSayItIsNotWatching(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := e.checkout(t, "t", "a", time.Hour)
	if err := e.store.Watch(c, "t", "w"); err != nil {
		t.Fatalf("w watches t: %v", err)
	}
	db := &failHeartbeatReadDB{DB: e.db, table: e.names.Table(schema.HeartbeatsTable), agentID: "w"}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	_, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "w", Watch: true, Timeout: time.Hour})
	if !db.failed.Load() {
		t.Fatal("w's heartbeat was never read")
	}
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID}))
	if msgs := e.inbox(t, "w"); len(msgs) != 1 {
		t.Fatalf("w has inbox %+v after a's release; want the message of its watch", msgs)
	}
	var ce *lease.ConflictError
	if errors.As(err, &ce) && (ce.Watching == nil || !*ce.Watching) {
		t.Fatalf("checkout: %v, watching false, though w was on the watch list (and told of a's release)", err)
	}
	if !errors.Is(err, errInjected) {
		t.Fatalf("checkout: %v, want the injected failure", err)
	}
}

// failHeartbeatReadDB fails, once, a read of agentID's heartbeat.
type failHeartbeatReadDB struct {
	lease.DB
	table, agentID string
	failed         atomic.Bool
}

func (d *failHeartbeatReadDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	k, _ := in.Key["agent_id"].(*types.AttributeValueMemberS)
	if aws.ToString(in.TableName) == d.table && k != nil && k.Value == d.agentID && d.failed.CompareAndSwap(false, true) {
		return nil, errInjected
	}
	return d.DB.GetItem(ctx, in, opts...)
}
