package lease_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
)

// delHookDB is a hookDB that also runs a function, once armed, just before
// the next DeleteItem reaches the database.
type delHookDB struct {
	*hookDB
	mu  sync.Mutex
	del func()
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

// A blocked_by PATCH refused after it recorded its edge, while it holds the
// graph's lock (here: status todo on a blocked task, a TransitionError from
// patch()), should take that edge back (deferred takeBackEdges). The
// deferred take-back runs after the loop's `defer cancel()` of lockCtx, so
// its read fails on a cancelled context and the edge stays: b lists x in
// blocks, and counts it toward its bound, for good.
func TestRefusedPatchUnderLockTakesBackItsEdge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a", "b")
	e.create(t, lease.CreateTaskParams{TaskID: "x", BlockedBy: []string{"a"}})
	todo := lease.StatusTodo
	_, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "u", BlockedBy: &[]string{"a", "b"}, Status: &todo})
	var te *lease.TransitionError
	if !errors.As(err, &te) {
		t.Fatalf("PATCH {status todo, blocked_by [a b]} of blocked x: %v; want a TransitionError", err)
	}
	if got := e.get(t, "x").BlockedBy; len(got) != 1 {
		t.Fatalf("x blocked by %v after the refused PATCH", got)
	}
	if got := e.get(t, "b").Blocks; len(got) != 0 {
		t.Fatalf("b blocks %v after x's refused PATCH, want none (x does not name b)", got)
	}
}

// The same with a refused not_before (year 2200), and its effect on the
// bound: b may block one task; the refused PATCH of x left b's edge to x,
// so a create naming b is refused.
func TestRefusedPatchLeavesNoEdgeCountedTowardTheBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	lease.LimitDependents(e.store, 1)
	e.task(t, "x", "b")
	nb := time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "u", BlockedBy: &[]string{"b"}, SetNotBefore: true, NotBefore: &nb}); err == nil {
		t.Fatal("PATCH with not_before in 2300 accepted")
	}
	if got := e.get(t, "x").BlockedBy; len(got) != 0 {
		t.Fatalf("x blocked by %v after the refused PATCH", got)
	}
	if _, err := e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "y", BlockedBy: []string{"b"}}); err != nil {
		t.Fatalf("create y blocked by b (b blocks nothing; bound 1): %v; b blocks %v", err, e.get(t, "b").Blocks)
	}
}

// 37df7f3's batch pre-check counts no task that exists already ("a task
// that exists already is answered as it is, and adds none"), but create
// still links the existing task's blockers before its put finds the id
// taken, and link's own checkDependents refuses a blocker at its bound:
// the commit's own case with the batch in the other order, [t2, t1], is
// refused after t2 was created (x then blocks d0 and t2, its 2; t1 exists).
func TestABatchWithAnExistingTaskLastIsNotRefusedAtTheBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	lease.LimitDependents(e.store, 2)
	e.task(t, "x", "t1")
	e.create(t, lease.CreateTaskParams{TaskID: "d0", BlockedBy: []string{"x"}})
	res, err := e.store.CreateTasks(c, []lease.CreateTaskParams{
		{TaskID: "t2", BlockedBy: []string{"x"}},
		{TaskID: "t1", BlockedBy: []string{"x"}},
	})
	if err != nil {
		t.Fatalf("batch [t2, t1 (exists)]: %v; want t2 created, t1 exists (x then blocks d0 and t2, its 2); t2 now: %+v", err, e.get(t, "t2").Status)
	}
	if len(res) != 2 || res[0].Outcome != lease.BatchCreated || res[1].Outcome != lease.BatchExists {
		t.Fatalf("batch results %+v", res)
	}
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

// pauseBeforeGraphLockDB stops the first request for the graph's lock
// before it is sent, until resume is closed.
type pauseBeforeGraphLockDB struct {
	lease.DB
	once   sync.Once
	paused chan struct{}
	resume chan struct{}
}

func (d *pauseBeforeGraphLockDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if k, _ := in.Key["agent_id"].(*types.AttributeValueMemberS); k != nil && k.Value == "#graph" {
		d.once.Do(func() {
			close(d.paused)
			<-d.resume
		})
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}

// A blocked_by PATCH whose read of its task went stale before it took the
// graph's lock (another PATCH cancelled the task and dropped its blockers
// meanwhile) records an edge for each blocker it names, and its task write
// is refused. It must take back every such edge the task, read afresh,
// does not name, also one its stale read showed named: else the blocker
// lists the task in blocks for good (API.md: blocks are the tasks that
// name it).
func TestAPatchRefusedAfterAStaleReadTakesBackEveryEdge(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a", "b")
	e.create(t, lease.CreateTaskParams{TaskID: "x", BlockedBy: []string{"a"}})
	db := &pauseBeforeGraphLockDB{DB: e.db, paused: make(chan struct{}), resume: make(chan struct{})}
	sW := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	resume := sync.OnceFunc(func() { close(db.resume) })
	defer resume()
	wDone := make(chan error, 1)
	go func() {
		_, err := sW.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "w", BlockedBy: &[]string{"a", "b"}})
		wDone <- err
	}()
	select {
	case <-db.paused: // w read x naming a, and is about to take the lock
	case err := <-wDone:
		t.Fatalf("w's PATCH ended before taking the graph's lock: %v", err)
	}
	cancelled := lease.StatusCancelled
	if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "y", BlockedBy: &[]string{}, Status: &cancelled}); err != nil {
		t.Fatalf("PATCH {blocked_by [], status cancelled} of x: %v", err)
	}
	resume()
	var te *lease.TransitionError
	if err := <-wDone; !errors.As(err, &te) {
		t.Fatalf("w's PATCH of cancelled x: %v; want a TransitionError", err)
	}
	if got := e.get(t, "x").BlockedBy; len(got) != 0 {
		t.Fatalf("x blocked by %v, want none", got)
	}
	for _, id := range []string{"a", "b"} {
		if got := e.get(t, id).Blocks; len(got) != 0 {
			t.Errorf("%s blocks %v, want none: x names no blocker", id, got)
		}
	}
}
