package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A not_before PATCHed onto a held task keeps its ready claim key (fix
// 4f0a99e). After a plain release the task is todo, not ready for an
// hour, yet ranked among the ready tasks at priority 9: enough of them
// fill the head a claim reads and hide a ready task behind them.
func TestAHeldNotBeforeHidesNoReadyTask(t *testing.T) {
	t.Parallel()
	s, clock := newShardEnv(t)
	c := ctx(t)
	nine, zero := 9, 0
	nb := clock.Now().Add(time.Hour)
	for i := range 51 {
		id := fmt.Sprintf("later-%02d", i)
		must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: id, Priority: &nine}))
		co := must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: id, AgentID: "a", Timeout: time.Hour}))
		must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: id, AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
		must[lease.Released](t)(s.Release(c, lease.ReleaseParams{TaskID: id, AgentID: "a", RunID: co.RunID}))
	}
	clock.Advance(time.Millisecond)
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "ready", Priority: &zero}))
	must[lease.SweepResult](t)(s.Sweep(c))
	got, err := s.Claim(c, lease.ClaimParams{AgentID: "b"})
	if err != nil || got.TaskID != "ready" {
		t.Fatalf("claim = %s, %v; want the one ready task, \"ready\" (51 tasks not ready for an hour rank ahead of it)", got.TaskID, err)
	}
}

// The same, seen by a listing: README says todo is listed in claim order,
// tasks waiting for their not_before after the ready ones.
func TestAHeldNotBeforeIsListedAfterTheReady(t *testing.T) {
	t.Parallel()
	s, clock := newShardEnv(t)
	c := ctx(t)
	nine, zero := 9, 0
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "later", Priority: &nine}))
	co := must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "later", AgentID: "a", Timeout: time.Hour}))
	nb := clock.Now().Add(time.Hour)
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "later", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	must[lease.Released](t)(s.Release(c, lease.ReleaseParams{TaskID: "later", AgentID: "a", RunID: co.RunID}))
	clock.Advance(time.Millisecond)
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "ready", Priority: &zero}))
	page := must[lease.TaskPage](t)(s.ListTasks(c, lease.ListTasksParams{Status: lease.StatusTodo}))
	var ids []string
	for _, tk := range page.Tasks {
		ids = append(ids, tk.TaskID)
	}
	if len(ids) != 2 || ids[0] != "ready" {
		t.Fatalf("todo listed %v; want [ready later]: later waits for its not_before an hour ahead", ids)
	}
}

// delHookDB is a hookDB that also runs a function, once armed, just before
// the next DeleteItem reaches the database.
type delHookDB struct {
	*hookDB
	mu  sync.Mutex
	del func()
}

func (d *delHookDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	d.mu.Lock()
	f := d.del
	d.del = nil
	d.mu.Unlock()
	if f != nil {
		f()
	}
	return d.hookDB.DeleteItem(ctx, in, opt...)
}

// A refused blocked_by PATCH takes its edge back (b4b7266) after checking
// its write window once: the take-back's own read and delete are not held
// to the window. Stalled past the graph lock's 10 s, another PATCH takes
// the lock over and names the same blocker; the stalled take-back then
// deletes the edge that PATCH needs. x is left blocked by b with no edge
// from b, and b's completion never unblocks it.
func TestATakeBackPastItsWindowKeepsANeededEdge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x", "b")
	h := &hookDB{DB: e.db}
	db := &delHookDB{hookDB: h}
	slow := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	h.armAfter(func() { // the graph's lock taken: another PATCH of x lands, so the write is refused
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "b", Title: new("another")}); err != nil {
			t.Errorf("the other PATCH: %v", err)
		}
	})
	db.mu.Lock()
	db.del = func() { // the take-back read x (no blocker) and stalled past the lock's 10 s
		e.clock.Advance(11 * time.Second)
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "c", BlockedBy: &[]string{"b"}}); err != nil {
			t.Errorf("the PATCH that takes the lock over: %v", err)
		}
	}
	db.mu.Unlock()
	_, err := slow.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", BlockedBy: &[]string{"b"}, IfVersion: 1})
	if !errors.Is(err, lease.ErrVersionMismatch) {
		t.Fatalf("the stalled PATCH: %v, want version_mismatch", err)
	}
	if got := e.get(t, "x"); len(got.BlockedBy) != 1 || got.Status != lease.StatusBlocked {
		t.Fatalf("x after the second PATCH: blocked_by %v, status %s", got.BlockedBy, got.Status)
	}
	e.drain(t) // the changes so far, b not done yet
	e.complete(t, "b", "w")
	e.drain(t)
	e.drain(t)
	x := e.get(t, "x")
	if x.Status != lease.StatusTodo {
		t.Fatalf("x is %s (blocked_by %v) after its one blocker b was completed; b blocks %v", x.Status, x.BlockedBy, e.get(t, "b").Blocks)
	}
}

// A blocked_by PATCH that stalls past its write window after recording its
// edge walks again (0c36a38) and forgets that edge (added is reset at the
// top of the loop): when the next round is refused (here its If-Match, the
// task having moved on meanwhile), the edge stays, b listing x in blocks
// for good though x names no blocker: what b4b7266 set out to prevent.
func TestAStalledPatchLeavesNoEdge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x", "b")
	slow, h := delayed(e)
	h.armAfter(func() { // after the lock: arm after link's has_dependents write
		h.armAfter(func() {
			e.clock.Advance(6 * time.Second) // stalled past the 5 s window, edge recorded
			if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "b", Title: new("another")}); err != nil {
				t.Errorf("the other PATCH: %v", err)
			}
		})
	})
	_, err := slow.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", BlockedBy: &[]string{"b"}, IfVersion: 1})
	if !errors.Is(err, lease.ErrVersionMismatch) {
		t.Fatalf("the stalled PATCH: %v, want version_mismatch", err)
	}
	if got := e.get(t, "x"); len(got.BlockedBy) != 0 {
		t.Fatalf("x blocked by %v after the refused PATCH", got.BlockedBy)
	}
	if got := e.get(t, "b").Blocks; len(got) != 0 {
		t.Fatalf("b blocks %v after x's refused PATCH, want none", got)
	}
}

// A create whose put applied and whose answer was lost, sent again by the
// SDK after another client's PATCH of the new task (a title fix, say): the
// PATCH wrote its own patch id over the create's, so the create no longer
// knows its item (5a5e876 covers a checkout or a watch in between, not a
// PATCH) and answers task_exists to the client whose create made the task.
func TestACreateSentTwiceAfterAPatchIsCreated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	var raceErr error
	db := &putTwiceDB{DB: e.db, name: "created_key", race: func() {
		_, raceErr = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "n1", AgentID: "other", Title: new("fixed title")})
	}}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	_, err := s.CreateTask(c, lease.CreateTaskParams{TaskID: "n1", Title: "t"})
	if !db.sent.Load() || raceErr != nil {
		t.Fatalf("sent twice %v, the PATCH: %v", db.sent.Load(), raceErr)
	}
	if err != nil {
		t.Fatalf("the create, whose first sending created the task: %v; want the task created (201)", err)
	}
}

// 4f0a99e pins a failed release to the decision it read (last attempt or
// not) but not to the wait it read: a PATCH of retry_delay answered before
// the release's write landed is ignored, the task waiting the old 10 s
// instead of the hour the PATCH set.
func TestAFailedReleaseAfterRetryDelayRaisedWaitsTheNewDelay(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := e.checkout(t, "t", "a", time.Hour)
	slow, db := delayed(e)
	hour := time.Hour
	db.armBefore(func() {
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, RetryDelay: &hour}); err != nil {
			t.Errorf("raise retry_delay: %v", err)
		}
	})
	start := e.clock.Now()
	must[lease.Released](t)(slow.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	got := e.get(t, "t")
	if got.NotBefore == nil || got.NotBefore.Before(start.Add(time.Hour)) {
		t.Fatalf("not_before %v after a failed release landed after retry_delay was set to 1h (at %v); want an hour on", got.NotBefore, start)
	}
}

// A failed release sets not_before to its retry wait, over a later
// not_before the task was PATCHed to while held: a task PATCHed not to run
// for a day becomes claimable 10 s after a failed attempt. (Present before
// today's commits too.)
func TestAFailedReleaseKeepsALaterPatchedNotBefore(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	co := e.checkout(t, "t", "a", time.Hour)
	nb := e.clock.Now().Add(24 * time.Hour)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	got := e.get(t, "t")
	if got.NotBefore == nil || got.NotBefore.Before(nb) {
		t.Fatalf("not_before %v after a failed release; the task was PATCHed not to run before %v", got.NotBefore, nb)
	}
}

// The batch's dependents pre-check (763610b) counts every task of the batch
// that names a blocker and has no edge from it, a task that already exists
// included: that one is answered "exists" and adds no edge. So a batch
// that fits is refused: x has one dependent of 2, t1 exists (naming no
// blocker), and the batch [t1, t2] both naming x adds one edge (t2's).
func TestABatchWithAnExistingTaskIsNotCountedPastTheBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	lease.LimitDependents(e.store, 2)
	e.task(t, "x", "t1")
	e.create(t, lease.CreateTaskParams{TaskID: "d0", BlockedBy: []string{"x"}})
	res, err := e.store.CreateTasks(c, []lease.CreateTaskParams{
		{TaskID: "t1", BlockedBy: []string{"x"}},
		{TaskID: "t2", BlockedBy: []string{"x"}},
	})
	if err != nil {
		t.Fatalf("batch [t1 (exists), t2]: %v; want t1 exists, t2 created (x then blocks d0 and t2, its 2)", err)
	}
	if len(res) != 2 || res[0].Outcome != lease.BatchExists || res[1].Outcome != lease.BatchCreated {
		t.Fatalf("batch results %+v", res)
	}
}

// (Present before today's commits.) A PATCH that drops a blocker deletes
// its edge after its write and after giving the graph's lock back: a PATCH
// naming that blocker again in between records the edge, and the first
// PATCH's late delete removes it. x is left blocked by b with no edge, and
// b's completion never unblocks it.
func TestADroppedEdgeNamedAgainStays(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x", "b", "c2")
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", BlockedBy: &[]string{"b"}}))
	db := &delHookDB{hookDB: &hookDB{DB: e.db}}
	slow := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	again := make(chan error, 1)
	db.mu.Lock()
	db.del = func() { // x's write landed naming c2: another agent names b again
		go func() {
			_, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "c", BlockedBy: &[]string{"b"}})
			again <- err
		}()
		time.Sleep(50 * time.Millisecond) // it is on its way (it waits for the graph's lock)
	}
	db.mu.Unlock()
	must[lease.Task](t)(slow.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", BlockedBy: &[]string{"c2"}}))
	if err := <-again; err != nil {
		t.Fatalf("the PATCH naming b again: %v", err)
	}
	if got := e.get(t, "x"); len(got.BlockedBy) != 1 || got.BlockedBy[0].TaskID != "b" {
		t.Fatalf("x blocked by %v, want [b]", got.BlockedBy)
	}
	e.drain(t)
	e.complete(t, "b", "w")
	e.drain(t)
	e.drain(t)
	if x := e.get(t, "x"); x.Status != lease.StatusTodo {
		t.Fatalf("x is %s (blocked_by %v) after its one blocker b was completed; b blocks %v", x.Status, x.BlockedBy, e.get(t, "b").Blocks)
	}
}

// lateDB fails the first PATCH write (an UpdateItem that sets "patch") with
// an error while the request is still on its way: it lands just before the
// next DeleteItem, as a write whose answer the client gave up on lands
// after the client has moved on.
type lateDB struct {
	lease.DB
	mu      sync.Mutex
	armed   bool
	pending *dynamodb.UpdateItemInput
	landed  bool
}

func (d *lateDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	d.mu.Lock()
	hit := false
	if d.armed {
		for _, n := range in.ExpressionAttributeNames {
			if n == "patch" {
				hit = true
			}
		}
	}
	if hit {
		d.armed, d.pending = false, in
	}
	d.mu.Unlock()
	if hit {
		return nil, errors.New("read tcp: connection reset by peer")
	}
	return d.DB.UpdateItem(ctx, in, opt...)
}

func (d *lateDB) DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	d.mu.Lock()
	p := d.pending
	d.pending = nil
	d.mu.Unlock()
	if p != nil {
		if _, err := d.DB.UpdateItem(context.Background(), p); err == nil {
			d.mu.Lock()
			d.landed = true
			d.mu.Unlock()
		}
	}
	return d.DB.DeleteItem(ctx, in, opt...)
}

// A blocked_by PATCH whose write errs but lands after the take-back's
// read (b4b7266): the take-back reads x naming no blocker and deletes the
// edge; the write then lands, x names b, and a retry of the PATCH finds
// blocked_by unchanged and links nothing. b's completion never unblocks x.
func TestALateWriteStrandsNoTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x", "b")
	db := &lateDB{DB: e.db, armed: true}
	slow := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	if _, err := slow.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", BlockedBy: &[]string{"b"}}); err == nil {
		t.Fatal("the PATCH whose write errs answered no error")
	}
	db.mu.Lock()
	if p := db.pending; p != nil { // nothing was deleted: it lands now
		db.pending = nil
		if _, err := e.db.UpdateItem(c, p); err == nil {
			db.landed = true
		}
	}
	db.mu.Unlock()
	if !db.landed {
		t.Fatal("no reproduction: the late write did not land")
	}
	// The client retries its PATCH: answered 200.
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", BlockedBy: &[]string{"b"}}))
	e.drain(t)
	e.complete(t, "b", "w")
	e.drain(t)
	e.drain(t)
	if x := e.get(t, "x"); x.Status != lease.StatusTodo {
		t.Fatalf("x is %s (blocked_by %v) after its one blocker b was completed; b blocks %v", x.Status, x.BlockedBy, e.get(t, "b").Blocks)
	}
}

// The PATCH sent twice takes a failed condition for its own write when
// "its new body" is on the task (5a5e876). A PATCH that clears the
// description has no new body: its token is "", which any task without a
// body shows. Sent twice (first sending lost, never applied) after another
// client's PATCH that also left no body, it takes that write for its own.
// With If-Match: both compare-and-sets on version 1 answer 200.
func TestAnIfMatchPatchClearingTheDescriptionSentTwiceIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "x", Description: "d"})
	tasks := e.names.Table(schema.TasksTable)
	var otherErr error
	doer := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"patch"`)
		},
		race: func() {
			_, otherErr = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "b", Description: new(""), Title: new("B"), IfVersion: 1})
		},
	}
	s := lease.New(lease.Config{DB: lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) { o.HTTPClient = doer }), Tables: e.names, Now: e.clock.Now})
	got, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", Description: new(""), IfVersion: 1})
	if !doer.lost.Load() || otherErr != nil {
		t.Fatalf("lost %v, the other client's PATCH: %v", doer.lost.Load(), otherErr)
	}
	if !errors.Is(err, lease.ErrVersionMismatch) {
		t.Fatalf("If-Match: 1 after another client moved x to version 2: answered %v (version %d, title %q); want 412 version_mismatch", err, got.Version, got.Title)
	}
}

// The same without If-Match: the PATCH's title is never written, yet it is
// answered 200 (a lost update).
func TestAPatchClearingTheDescriptionSentTwiceIsWritten(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "x", Description: "d"})
	tasks := e.names.Table(schema.TasksTable)
	var otherErr error
	doer := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"patch"`)
		},
		race: func() {
			_, otherErr = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "b", Description: new("")})
		},
	}
	s := lease.New(lease.Config{DB: lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) { o.HTTPClient = doer }), Tables: e.names, Now: e.clock.Now})
	got, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", Description: new(""), Title: new("A's title")})
	if !doer.lost.Load() || otherErr != nil {
		t.Fatalf("lost %v, the other client's PATCH: %v", doer.lost.Load(), otherErr)
	}
	if err != nil {
		t.Fatalf("PATCH: %v", err)
	}
	if now := e.get(t, "x"); now.Title != "A's title" {
		t.Fatalf("PATCH answered 200 (title %q) but x's title is %q: the PATCH was never written", got.Title, now.Title)
	}
}

// 0c36a38's write window is measured (for the writes' context deadline)
// from before lockGraph, which may wait up to 20 s for the lock: a PATCH
// that waited more than 5 s for another change to give the lock back
// takes it with its deadline already passed, and its first write under
// the lock fails. It answers an error, having stalled nowhere, where it
// should write (its window, by the lock, has just begun).
func TestAPatchThatWaitedForTheGraphLockIsWritten(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "h", "l", "p", "q")
	db := &pauseAfterGraphLockDB{DB: e.db, paused: make(chan struct{}), resume: make(chan struct{})}
	sH := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	hDone := make(chan error, 1)
	go func() {
		_, err := sH.UpdateTask(c, lease.UpdateTaskParams{TaskID: "h", AgentID: "a", BlockedBy: &[]string{"l"}})
		hDone <- err
	}()
	<-db.paused // h's PATCH holds the lock
	go func() {
		time.Sleep(5500 * time.Millisecond) // held 5.5 s of real time (within the lock's 10 s)
		close(db.resume)
	}()
	_, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", AgentID: "b", BlockedBy: &[]string{"q"}})
	t.Logf("h's PATCH: %v", <-hDone)
	if err != nil {
		t.Fatalf("p blocked by q, after waiting for the graph's lock: %v; want it written", err)
	}
}
