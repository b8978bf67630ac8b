package lease_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// r10Hook is a second store over e's tables whose client, once armed,
// calls f after its next read of task id (a BatchGetItem or GetItem of
// the tasks table naming it) has been answered: the moment between a
// writer's read of a blocker and its own write.
type r10Hook struct {
	store *lease.Store
	id    string
	f     atomic.Pointer[func()]
}

func newR10Hook(t testing.TB, e *env) *r10Hook {
	t.Helper()
	h := &r10Hook{}
	tasks := e.names.Table(schema.TasksTable)
	names := func(keys []map[string]types.AttributeValue) bool {
		for _, k := range keys {
			if v, ok := k["task_id"].(*types.AttributeValueMemberS); ok && v.Value == h.id {
				return true
			}
		}
		return false
	}
	hook := func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("r10Hook",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				hit := false
				switch q := in.Parameters.(type) {
				case *dynamodb.BatchGetItemInput:
					if ka, ok := q.RequestItems[tasks]; ok {
						hit = names(ka.Keys)
					}
				case *dynamodb.GetItemInput:
					hit = aws.ToString(q.TableName) == tasks && names([]map[string]types.AttributeValue{q.Key})
				}
				if hit {
					if f := h.f.Swap(nil); f != nil {
						(*f)()
					}
				}
				return out, md, err
			}), middleware.After)
	}
	db := lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, hook) })
	h.store = lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	return h
}

// arm makes h call f once, after its next read of task id.
func (h *r10Hook) arm(id string, f func()) {
	h.id = id
	h.f.Store(&f)
}

// reopenDoneBlocker is the setup of the tests below: b done, with a
// dependent x (so b carries has_dependents), and d a task of its own. It
// returns the function that reopens b and lets the stream pass that on.
func reopenDoneBlocker(t *testing.T, e *env) func() {
	t.Helper()
	e.task(t, "b", "d")
	e.create(t, lease.CreateTaskParams{TaskID: "x", BlockedBy: []string{"b"}})
	e.complete(t, "b", "agent-b")
	e.drain(t)
	if st := e.get(t, "x").Status; st != lease.StatusTodo {
		t.Fatalf("x after b completed: %s, want todo", st)
	}
	return func() {
		must[lease.Task](t)(e.store.UpdateTask(ctx(t), lease.UpdateTaskParams{TaskID: "b", AgentID: "admin", Status: new(lease.StatusTodo)}))
		e.drain(t)
		if st := e.get(t, "x").Status; st != lease.StatusBlocked {
			t.Fatalf("x after b was reopened: %s, want blocked", st)
		}
	}
}

// wantBlockedOnB checks that d, which names b, is blocked once the stream
// has caught up, b being todo (reopened).
func wantBlockedOnB(t *testing.T, e *env, what string) {
	t.Helper()
	e.drain(t)
	e.drain(t)
	if st := e.get(t, "b").Status; st != lease.StatusTodo {
		t.Fatalf("b: %s, want todo (reopened)", st)
	}
	d := e.get(t, "d")
	if d.Status != lease.StatusBlocked {
		t.Errorf("%s: d is %s, blocked_by %v, with b reopened; want blocked", what, d.Status, blockerIDs(d.BlockedBy))
	}
}

// A PATCH that names a done blocker reads it done; when the blocker is
// reopened between that read and the PATCH's write, the reopen's pass over
// the blocker's dependents finds the task not naming it yet, and the
// PATCH leaves it todo: nothing blocks it again.
func TestAPatchNamingABlockerReopenedMeanwhileLeavesTheTaskBlocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reopen := reopenDoneBlocker(t, e)
	h := newR10Hook(t, e)
	h.arm("b", reopen)
	must[lease.Task](t)(h.store.UpdateTask(ctx(t), lease.UpdateTaskParams{TaskID: "d", AgentID: "admin", BlockedBy: &[]string{"b"}}))
	wantBlockedOnB(t, e, "d PATCHed blocked_by [b] while b was reopened")
}

// The same for a task created naming the blocker.
func TestACreateNamingABlockerReopenedMeanwhileIsBlocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reopen := reopenDoneBlocker(t, e)
	h := newR10Hook(t, e)
	h.arm("b", reopen)
	must[lease.Task](t)(h.store.CreateTask(ctx(t), lease.CreateTaskParams{TaskID: "d2", BlockedBy: []string{"b"}}))
	e.drain(t)
	e.drain(t)
	if d := e.get(t, "d2"); d.Status != lease.StatusBlocked {
		t.Errorf("d2 created blocked_by [b] while b was reopened: %s, blocked_by %v; want blocked", d.Status, blockerIDs(d.BlockedBy))
	}
}

// The same for a reopen of the dependent: it reads its blockers done,
// the blocker is reopened before the reopen's write.
func TestAReopenOfADependentWhileItsBlockerIsReopenedIsBlocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	reopen := reopenDoneBlocker(t, e)
	must[lease.Task](t)(e.store.UpdateTask(ctx(t), lease.UpdateTaskParams{TaskID: "d", AgentID: "admin", BlockedBy: &[]string{"b"}}))
	e.drain(t)
	e.complete(t, "d", "agent-d")
	e.drain(t)
	h := newR10Hook(t, e)
	h.arm("b", reopen)
	must[lease.Task](t)(h.store.UpdateTask(ctx(t), lease.UpdateTaskParams{TaskID: "d", AgentID: "admin", Status: new(lease.StatusTodo)}))
	wantBlockedOnB(t, e, "d reopened while b was reopened")
}

// A named checkout of a blocked task whose blockers it reads done grants
// it, unblocking it in its own write. When the blocker is reopened between
// that read and the grant, the reopen's pass finds the task still waiting
// on it and does nothing; the grant then takes the waiting away, and the
// lease, once released, leaves the task todo with its blocker reopened.
func TestAnUnblockingCheckoutRacingABlockersReopenLeavesTheTaskBlockedAfterItsLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "b")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"b"}})
	e.complete(t, "b", "agent-b") // not drained: d is still blocked, waiting on b
	h := newR10Hook(t, e)
	h.arm("b", func() {
		must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "b", AgentID: "admin", Status: new(lease.StatusTodo)}))
		e.drain(t)
	})
	co, err := h.store.Checkout(c, lease.CheckoutParams{TaskID: "d", AgentID: "agent-d", Timeout: time.Minute})
	if err != nil {
		t.Fatalf("the checkout, its read of b done before b was reopened, was refused: %v", err)
	}
	e.drain(t)
	e.drain(t)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "d", AgentID: "agent-d", RunID: co.RunID}))
	wantBlockedOnB(t, e, "d released after a checkout that raced b's reopen")
}

// A create that finds its blocker not done, and then, settling, reads it
// done (completed meanwhile), unblocks the task; when the blocker is
// reopened between that read and the unblocking, the reopen's pass finds
// the task still waiting on it and does nothing, and the unblocking then
// leaves the task todo with its blocker reopened.
func TestASettlingRacingABlockersReopenLeavesTheTaskBlocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	reopen := reopenDoneBlocker(t, e)
	reopen()
	co := e.checkout(t, "b", "agent-b", time.Minute)
	h := newR10Hook(t, e)
	h.arm("b", func() { // the create's first read of b: in progress
		must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "b", AgentID: "agent-b", RunID: co.RunID}))
		h.arm("b", func() { // its settling's read of b: done
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "b", AgentID: "admin", Status: new(lease.StatusTodo)}))
			e.drain(t)
		})
	})
	must[lease.Task](t)(h.store.CreateTask(c, lease.CreateTaskParams{TaskID: "d2", BlockedBy: []string{"b"}}))
	e.drain(t)
	e.drain(t)
	if st := e.get(t, "b").Status; st != lease.StatusTodo {
		t.Fatalf("b: %s, want todo (reopened)", st)
	}
	if d := e.get(t, "d2"); d.Status != lease.StatusBlocked {
		t.Errorf("d2 settled while b was reopened: %s, blocked_by %v; want blocked", d.Status, blockerIDs(d.BlockedBy))
	}
}
