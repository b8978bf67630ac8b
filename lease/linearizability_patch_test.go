package lease_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// hookedWrites runs hook, once armed, just before the next UpdateItem on
// table goes to the server: a write that lands between another's read and
// its write.
type hookedWrites struct {
	*dynamodb.Client
	table string
	armed atomic.Bool
	hook  func()
}

func (h *hookedWrites) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if *in.TableName == h.table && h.armed.CompareAndSwap(true, false) {
		h.hook()
	}
	return h.Client.UpdateItem(ctx, in, optFns...)
}

// If-Match is a compare-and-set (lease/update.go, Changing a task: "with
// If-Match it is 412 version_mismatch" when anything changed the task in
// between). A status PATCH of a task whose lease has expired first ends
// that lease as the sweep would; when a checkout takes the lease over
// first, that ending does not apply, and the PATCH must not take the
// checkout's write for its own: the version it was given is stale, and an
// admin's cancel would otherwise end the new holder's lease.
func TestLinearizabilityPatchIfMatchAgainstTakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.retryingTask(t, "t")
	e.checkout(t, "t", "a", 10*time.Second)
	e.clock.Advance(10 * time.Second) // a's lease has expired, and is still on the task
	read := must[lease.Task](t)(e.store.GetTask(c, "t"))
	h := &hookedWrites{Client: e.db, table: e.names.Table(schema.TasksTable)}
	var taken lease.Checkout
	h.hook = func() {
		taken = e.checkout(t, "t", "b", time.Hour) // takes a's expired lease over
	}
	s := lease.New(lease.Config{DB: h, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	h.armed.Store(true)
	cancelled := lease.StatusCancelled
	got, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Status: &cancelled, IfVersion: read.Version})
	if !errors.Is(err, lease.ErrVersionMismatch) {
		t.Errorf("cancel with If-Match %d after b's checkout = %+v, %v; want version_mismatch", read.Version, got, err)
	}
	now := must[lease.Task](t)(e.store.GetTask(c, "t"))
	if now.Checkout == nil || now.Checkout.AgentID != "b" || now.Checkout.Fence != taken.Fence {
		t.Errorf("b's lease (fence %d) after the stale cancel: task %+v", taken.Fence, now)
	}
}
