package lease_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// pauseAfterGraphLockDB lets every call through, but stops the caller
// right after its first successful take of the graph's lock (the
// UpdateItem on "#graph" conditioned on attribute_not_exists(token)),
// until resume is closed: a change of blocked_by that holds the lock and
// stalls before its task write (a GC pause, a frozen Lambda, SDK retries
// backing off under throttling).
type pauseAfterGraphLockDB struct {
	lease.DB
	once   sync.Once
	paused chan struct{}
	resume chan struct{}
}

func (d *pauseAfterGraphLockDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := d.DB.UpdateItem(ctx, in, opts...)
	k, _ := in.Key["agent_id"].(*types.AttributeValueMemberS)
	if err == nil && k != nil && k.Value == "#graph" && in.ConditionExpression != nil && strings.Contains(*in.ConditionExpression, "attribute_not_exists") {
		d.once.Do(func() {
			close(d.paused)
			<-d.resume
		})
	}
	return out, err
}

// The graph's lock is taken over once its until has passed, and the
// stalled holder's task write is conditioned on the task's version only,
// not on still holding the lock. A holder that resumed after the take-over
// used to write its edge unlogged, after another PATCH walked (and wrote)
// on a graph without it: together they closed a cycle. Now a holder
// writes only within its write window, and past it walks again.
func TestAStalledGraphLockHolderDoesNotWriteAfterItsWindow(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "h", "l")
	db := &pauseAfterGraphLockDB{DB: e.db, paused: make(chan struct{}), resume: make(chan struct{})}
	sH := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	resume := sync.OnceFunc(func() { close(db.resume) })
	defer resume()

	hDone := make(chan error, 1)
	go func() {
		_, err := sH.UpdateTask(c, lease.UpdateTaskParams{TaskID: "h", AgentID: "a", BlockedBy: &[]string{"l"}})
		hDone <- err
	}()
	select {
	case <-db.paused: // h's PATCH walked (l has no blockers) and holds the lock
	case err := <-hDone:
		t.Fatalf("h's PATCH ended before taking the lock: %v", err)
	}
	e.clock.Advance(11 * time.Second) // past the lock's until (graphLockTTL 10 s)

	// l blocked by h: its walk from h sees no blocker (h's write has not
	// landed); it takes the stale lock over, walks again, writes.
	if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "l", AgentID: "b", BlockedBy: &[]string{"h"}}); err != nil {
		t.Fatalf("l blocked by h: %v", err)
	}
	resume()
	errH := <-hDone

	hb, lb := e.get(t, "h").BlockedBy, e.get(t, "l").BlockedBy
	if len(hb) == 1 && hb[0].TaskID == "l" && len(lb) == 1 && lb[0].TaskID == "h" {
		t.Fatalf("a cycle: h blocked_by [l] (its PATCH answered %v) and l blocked_by [h]; want one of them refused with dependency_cycle", errH)
	}
	if !errors.Is(errH, lease.ErrInvalid) || !strings.Contains(errH.Error(), "cycle") {
		t.Fatalf("h's PATCH, resumed past its window after l's: %v, want dependency_cycle", errH)
	}
}

// over returns a store on e's tables and clock whose requests go through
// doer (a lossyDoer, say).
func (e *env) over(doer interface {
	Do(*http.Request) (*http.Response, error)
}) *lease.Store {
	return lease.New(lease.Config{DB: lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) { o.HTTPClient = doer }), Tables: e.names, Now: e.clock.Now})
}

// attemptedOnce gives taskID one attempt, a lease of agent x granted and
// released a second later, and moves e's clock a second on.
func (e *env) attemptedOnce(t *testing.T, taskID string) {
	t.Helper()
	c := ctx(t)
	x := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: taskID, AgentID: "x", RunID: "r-x", Timeout: time.Hour}))
	e.clock.Advance(time.Second)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: taskID, AgentID: "x", RunID: "r-x", Fence: x.Fence}))
	e.clock.Advance(time.Second)
}

// reopenedByAnEarlierVersion makes taskID's item as a reopen by a version
// that kept no attempt on the grant's record (grant_write "<id>~<n>", or
// prev_write once the next grant copied it) left it: the record's id
// alone, and with inGrantWas the attempt in grant_was instead, as
// versions of 2026-12-06 kept it (which the next grant removes).
func (e *env) reopenedByAnEarlierVersion(t *testing.T, taskID string, inGrantWas bool) {
	t.Helper()
	key := map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: taskID}}
	out := must[*dynamodb.GetItemOutput](t)(e.db.GetItem(ctx(t), &dynamodb.GetItemInput{
		TableName: aws.String(e.names.Table(schema.TasksTable)), Key: key, ConsistentRead: aws.Bool(true)}))
	var sets []string
	values := map[string]types.AttributeValue{}
	kept := ""
	for _, name := range []string{"grant_write", "prev_write"} {
		v, ok := out.Item[name].(*types.AttributeValueMemberS)
		if !ok {
			continue
		}
		if id, n, marked := strings.Cut(v.Value, "~"); marked {
			sets = append(sets, name+" = :"+name)
			values[":"+name] = &types.AttributeValueMemberS{Value: id}
			kept = n
		}
	}
	if kept == "" {
		t.Fatalf("task %s keeps no attempt on a grant's record: %v, %v", taskID, out.Item["grant_write"], out.Item["prev_write"])
	}
	if inGrantWas {
		sets = append(sets, "grant_was = :was")
		values[":was"] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"a": &types.AttributeValueMemberN{Value: kept}}}
		if _, ok := out.Item["grant_was"]; ok {
			sets[len(sets)-1] = "grant_was.a = :a"
			delete(values, ":was")
			values[":a"] = &types.AttributeValueMemberN{Value: kept}
		}
	}
	must[*dynamodb.UpdateItemOutput](t)(e.db.UpdateItem(ctx(t), &dynamodb.UpdateItemInput{
		TableName: aws.String(e.names.Table(schema.TasksTable)), Key: key,
		UpdateExpression: aws.String("SET " + strings.Join(sets, ", ")), ExpressionAttributeValues: values}))
}

// aGrantSentTwice makes a's grant of task "t" (run r-a: a checkout, or
// with claim a named claim) through a store whose first sending of it
// applies and whose answer is lost, race running before the SDK sends it
// again. It returns the answer, and how many Queries of the trail (the
// events table) the store made meanwhile.
func (e *env) aGrantSentTwice(t *testing.T, claim bool, race func()) (co lease.Checkout, trailReads int32, err error) {
	t.Helper()
	tasks, events := e.names.Table(schema.TasksTable), e.names.Table(schema.EventsTable)
	var reads atomic.Int32
	doer := &lossyDoer{
		match: func(target, body string) bool {
			if strings.HasSuffix(target, ".Query") && strings.Contains(body, `"`+events+`"`) {
				reads.Add(1)
			}
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-a"`)
		},
		race:    race,
		applied: true,
	}
	s := e.over(doer)
	if claim {
		co, err = s.Claim(ctx(t), lease.ClaimParams{AgentID: "a", RunID: "r-a", Timeout: time.Hour})
	} else {
		co, err = s.Checkout(ctx(t), lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Hour})
	}
	if !doer.lost.Load() {
		t.Fatal("no grant was sent twice")
	}
	return co, reads.Load(), err
}

// lossyDoer is the HTTP client of a store whose first matching request is
// lost before DynamoDB sees it (answered 500, as a timed-out or reset
// connection would be: the SDK sends it again). With applied, the request
// reaches DynamoDB and its answer is lost instead. Before answering, it
// runs race: another writer's request landing in that gap.
type lossyDoer struct {
	match   func(target, body string) bool
	race    func()
	applied bool
	lost    atomic.Bool
}

// requestBody reads r's body and puts it back for the request's sending.
func requestBody(r *http.Request) string {
	if r.Body == nil {
		return ""
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	r.Body = io.NopCloser(bytes.NewReader(body))
	return string(body)
}

func (d *lossyDoer) Do(r *http.Request) (*http.Response, error) {
	if d.match(r.Header.Get("X-Amz-Target"), requestBody(r)) && d.lost.CompareAndSwap(false, true) {
		if d.applied {
			resp, err := http.DefaultClient.Do(r)
			if err != nil {
				return nil, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		d.race()
		return internalError(r, "answer lost"), nil
	}
	return http.DefaultClient.Do(r)
}

// internalError is DynamoDB's 500 answer to r, saying message: what a
// test's client answers for a sending it lost, so that the SDK (or the
// store) sends it again.
func internalError(r *http.Request, message string) *http.Response {
	return &http.Response{
		StatusCode: 500,
		Status:     "500 Internal Server Error",
		Header:     http.Header{"Content-Type": []string{"application/x-amz-json-1.0"}},
		Body:       io.NopCloser(strings.NewReader(`{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"` + message + `"}`)),
		Request:    r,
	}
}

// A PATCH with If-Match is a compare-and-set (README: "412 if it moved
// on"). When its write is sent twice by the SDK (the first sending lost,
// never applied) and in between another client's PATCH, also If-Match 1,
// moved the task to version 2 with a superset of its change, the second
// sending's failed condition was taken for its own write (the task one
// version on, with nothing this PATCH would change): both PATCHes with
// If-Match: 1 answered 200. A PATCH now knows its own write by its id.
func TestAnIfMatchPatchSentTwiceDoesNotTakeAnotherWritersVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	tasks := e.names.Table(schema.TasksTable)
	var otherErr error
	var other lease.Task
	doer := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"title"`)
		},
		race: func() {
			// Another client: the same title, and more, on version 1.
			title, q, prio := "T", "elsewhere", 9
			other, otherErr = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "b", Title: &title, Queue: &q, Priority: &prio, IfVersion: 1})
		},
	}
	client := lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) { o.HTTPClient = doer })
	s := lease.New(lease.Config{DB: client, Tables: e.names, Now: e.clock.Now})

	title := "T"
	got, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", Title: &title, IfVersion: 1})
	if !doer.lost.Load() {
		t.Fatal("no write was lost and sent again")
	}
	if otherErr != nil {
		t.Fatalf("the other client's PATCH: %v", otherErr)
	}
	if other.Version != 2 {
		t.Fatalf("the other client's PATCH left version %d, want 2", other.Version)
	}
	if !errors.Is(err, lease.ErrVersionMismatch) {
		t.Fatalf("If-Match: 1 after another client moved x to version 2: answered %v (version %d, queue %s, priority %d), want 412 version_mismatch; "+
			"both compare-and-sets on version 1 succeeded", err, got.Version, got.Queue, got.Priority)
	}
}

// A completion that names an old run of the caller (a stale worker of the
// same agent, fenced out by the later lease) is refused: API.md,
// "Holders": renew, release and complete need the same run_id where the
// body gives it, else 404 not_checked_out / 403 not_holder. When its write
// was sent twice by the SDK (first sending lost, never applied) and in
// that gap the agent's current run completed the task at the same
// millisecond, that completion was taken for the stale run's own (the
// check named type, agent and instant, not the run id or fence the
// request named): 200 done.
func TestACompletionOfAnOldRunSentTwiceIsNotTheNewRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-old", Timeout: time.Hour}))
	e.clock.Advance(time.Second)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: "r-old"}))
	e.clock.Advance(time.Second)
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-new", Timeout: time.Hour}))
	e.clock.Advance(time.Second)

	tasks := e.names.Table(schema.TasksTable)
	var raceErr error
	doer := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-old"`)
		},
		race: func() {
			_, raceErr = e.store.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "a", RunID: "r-new"})
		},
	}
	s := e.over(doer)
	got, err := s.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "a", RunID: "r-old"})
	if !doer.lost.Load() {
		t.Fatal("no write was lost and sent again")
	}
	if raceErr != nil {
		t.Fatalf("the current run's completion: %v", raceErr)
	}
	if err == nil {
		t.Fatalf("a completion naming run r-old (released before r-new was granted) answered 200 %s (version %d); want 404 not_checked_out: it took r-new's completion for its own", got.Status, got.Version)
	}
	if !errors.Is(err, lease.ErrNotCheckedOut) && !errors.Is(err, lease.ErrNotHolder) {
		t.Fatalf("a completion naming run r-old: %v, want not_checked_out", err)
	}
}

// The same stale completion sent once, after the current run's
// completion, is refused (the case above without the lost sending).
func TestACompletionOfAnOldRunSentOnceIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-old", Timeout: time.Hour}))
	e.clock.Advance(time.Second)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: "r-old"}))
	e.clock.Advance(time.Second)
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-new", Timeout: time.Hour}))
	e.clock.Advance(time.Second)
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "a", RunID: "r-new"}))
	if _, err := e.store.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "a", RunID: "r-old"}); !errors.Is(err, lease.ErrNotCheckedOut) && !errors.Is(err, lease.ErrNotHolder) {
		t.Fatalf("a completion naming run r-old sent once: %v, want not_checked_out", err)
	}
}

// A release that names no lease (no run id, no fence: the agent alone
// must match) ends whichever lease of the caller's is on the task. When
// its write was sent twice by the SDK (the first sending lost, never
// applied) and the caller's lease had already been ended by an earlier
// release in that same millisecond, the second sending's refusal was
// taken for its own ending (the check named type, caller and instant,
// which the earlier release had too): 200 for a task nobody held. A
// release now knows its own ending by its write's id.
func TestAReleaseNamingNoLeaseSentTwiceIsNotAnEarlierOne(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r1", Timeout: time.Hour}))
	e.clock.Advance(time.Second)
	// The release that ends the lease, in the millisecond the next one
	// is made in (the clock does not move).
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"}))

	tasks := e.names.Table(schema.TasksTable)
	doer := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks)
		},
		race: func() {},
	}
	s := e.over(doer)
	got, err := s.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"})
	if !doer.lost.Load() {
		t.Fatal("no write was lost and sent again")
	}
	if !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Fatalf("a second release naming no lease, of a task nobody holds: answered %+v, %v; want 404 not_checked_out: it took the earlier release's ending for its own", got, err)
	}
	if st := e.get(t, "t"); st.Status != lease.StatusTodo || st.Version != 3 {
		t.Fatalf("task after the refused release: %s version %d, want todo version 3 (created, granted, released)", st.Status, st.Version)
	}
}

// beforeTaskUpdateDB runs hook once, before the first UpdateItem of the
// tasks table goes out: another request landing between a read of the
// task and the write pinned to it.
type beforeTaskUpdateDB struct {
	lease.DB
	table string
	hook  func()
	done  bool
}

func (d *beforeTaskUpdateDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if !d.done && in.TableName != nil && *in.TableName == d.table {
		d.done = true
		d.hook()
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}

// A failed release (outcome failed) that names no lease reads the task,
// then writes pinned to the lease it read. When another failed release
// of the same agent, also naming no lease, ended that lease in between,
// the write's refusal was taken for a repeat of its own (the ending of
// the lease read, by the caller, failed): both answered 200, and one
// failed attempt was counted. A request that names no lease is never a
// repeat: the second answers 404 not_checked_out.
func TestAFailedReleaseNamingNoLeaseIsNotAnotherOnesRepeat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r1", Timeout: time.Hour}))
	e.clock.Advance(time.Second)
	fail := lease.ReleaseParams{TaskID: "t", AgentID: "a", Outcome: lease.OutcomeFailed}
	var otherErr error
	db := &beforeTaskUpdateDB{DB: e.db, table: e.names.Table(schema.TasksTable), hook: func() {
		_, otherErr = e.store.Release(c, fail)
	}}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	got, err := s.Release(c, fail)
	if !db.done {
		t.Fatal("the failed release wrote nothing")
	}
	if otherErr != nil {
		t.Fatalf("the failed release that landed first: %v", otherErr)
	}
	if !errors.Is(err, lease.ErrNotCheckedOut) {
		t.Fatalf("a second failed release naming no lease, after the first ended the lease: answered %+v, %v; want 404 not_checked_out", got, err)
	}
}

// The same release, its first sending applied and its answer lost, with
// another agent's checkout of the freed task landing before the SDK sent
// it again: the second sending failed on the new lease, and the ending on
// the item, though its write's own id, was no longer the item's latest
// transition, so the release answered 404 not_checked_out for the lease it
// ended. An ending known by its write's id is its own whatever came after.
func TestAReleaseNamingNoLeaseSentTwiceAfterANewGrantIsItsOwn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r1", Timeout: time.Hour}))
	e.clock.Advance(time.Second)

	tasks := e.names.Table(schema.TasksTable)
	var taken lease.Checkout
	var takeErr error
	doer := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, "end_write")
		},
		race: func() {
			taken, takeErr = e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r-b", Timeout: time.Hour})
		},
		applied: true,
	}
	s := e.over(doer)
	got, err := s.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"})
	if !doer.lost.Load() {
		t.Fatal("no write was lost and sent again")
	}
	if takeErr != nil || taken.Fence != 2 {
		t.Fatalf("b's checkout of the freed task: %+v, %v; want fence 2", taken, takeErr)
	}
	if err != nil || got.ReleasedBy != "a" || got.Held != time.Second {
		t.Errorf("a's release, which ended its lease (held 1s) before b's checkout: %+v, %v; want released by a, held 1s", got, err)
	}
}

// An admin's force release, its first sending applied and its answer
// lost, with another agent's checkout of the freed task landing before
// the SDK sent it again: the second sending failed on the new lease, and
// the ending, no longer the item's latest transition, was not taken for
// its own: 404 not_checked_out for the lease it ended. A force release
// now knows its ending by its write's id, as a release naming no lease
// does.
func TestAForceReleaseSentTwiceAfterANewGrantIsItsOwn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r1", Timeout: time.Hour}))
	e.clock.Advance(time.Minute)

	tasks := e.names.Table(schema.TasksTable)
	var taken lease.Checkout
	var takeErr error
	doer := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, string(lease.EventForceRelease))
		},
		race: func() {
			taken, takeErr = e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r-b", Timeout: time.Hour})
		},
		applied: true,
	}
	s := e.over(doer)
	got, err := s.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true})
	if !doer.lost.Load() {
		t.Fatal("no write was lost and sent again")
	}
	if takeErr != nil || taken.Fence != 2 {
		t.Fatalf("b's checkout of the freed task: %+v, %v; want fence 2", taken, takeErr)
	}
	if err != nil || got.ReleasedBy != "admin" || got.Held != time.Minute {
		t.Errorf("the force release, which ended a's lease (held 1m) before b's checkout: %+v, %v; want released by admin, held 1m", got, err)
	}
}
