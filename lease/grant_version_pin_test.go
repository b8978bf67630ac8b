package lease_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A checkout's grant that changes a task's status on its own reading (the
// reopening of a finished task, the unblocking of a blocked one whose
// blockers were read done) is pinned to the task's version as read. These
// tests land PATCHes naming a blocker not done between that read and the
// grant's write: the grant must then fail, and the checkout answer
// blocked.

// Cancelled task t is read by a checkout expecting cancelled; before its
// reopening grant's write, PATCHes reopen t, name blocker b (todo) and
// cancel t again (blocked_by changes only while a task is todo or
// blocked): t is cancelled as read, but now has a blocker not done. The
// grant, pinned to t's version, fails, and the checkout is blocked by b.
func TestAReopeningIsNotGrantedPastABlockerNamedAfterItsRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	e.task(t, "b")
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "x", Status: new(lease.StatusCancelled)}))

	opener, odb := delayed(e)
	odb.armBefore(func() { // the checkout read t cancelled, with no blocker
		must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "x", Status: new(lease.StatusTodo)}))
		must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "x", BlockedBy: &[]string{"b"}}))
		must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "x", Status: new(lease.StatusCancelled)}))
	})
	co, err := opener.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "y", Timeout: time.Minute, ExpectedStatuses: []lease.Status{lease.StatusCancelled}})
	var be *lease.BlockedError
	if !errors.As(err, &be) || !slices.Equal(blockerIDs(be.BlockedBy), []string{"b=todo"}) {
		t.Fatalf("checkout of cancelled t expecting cancelled after b was named: %+v, %v; want blocked by b", co, err)
	}
	got := e.get(t, "t")
	if got.Status != lease.StatusCancelled || got.Checkout != nil || !slices.Equal(blockerIDs(got.BlockedBy), []string{"b=todo"}) {
		t.Fatalf("t: %s, holder %+v, blocked by %v; want cancelled, no lease, blocked by b", got.Status, got.Checkout, blockerIDs(got.BlockedBy))
	}
}

// A PATCH naming blocker b (todo) lands on blocked task d after a
// checkout read d waiting on done a only (the stream has not unblocked
// it yet), before the grant that would unblock it: the grant, pinned to
// d's version, fails, and the checkout is blocked by b.
func TestAnUnblockingIsNotGrantedPastABlockerNamedAfterItsRead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a")
	e.task(t, "b")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"a"}})
	e.complete(t, "a", "x") // d still blocked: the stream is not drained

	taker, tdb := delayed(e)
	tdb.armAfter(func() { // the checkout's first write read d blocked: a PATCH names b
		must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "x", BlockedBy: &[]string{"a", "b"}}))
	})
	co, err := taker.Checkout(c, lease.CheckoutParams{TaskID: "d", AgentID: "y", Timeout: time.Minute})
	var be *lease.BlockedError
	if !errors.As(err, &be) || !slices.Equal(blockerIDs(be.BlockedBy), []string{"b=todo"}) {
		t.Fatalf("checkout of d after b was named: %+v, %v; want blocked by b", co, err)
	}
	got := e.get(t, "d")
	if got.Status != lease.StatusBlocked || got.Checkout != nil || !slices.Equal(blockerIDs(got.BlockedBy), []string{"a=done", "b=todo"}) {
		t.Fatalf("d: %s, holder %+v, blocked by %v; want blocked, no lease, blocked by a (done) and b", got.Status, got.Checkout, blockerIDs(got.BlockedBy))
	}
}
