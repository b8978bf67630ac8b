package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// failingEnding fails the first ending of a lease it is asked to write (an
// UpdateItem of the tasks table) with cause. Once a Query of the
// lease-expiry index has found a lease, every later one waits for that
// failure and then for its context to end: the sweep reads its next shard
// only after the failure has stopped it.
type failingEnding struct {
	lease.DB
	cause         error
	found, failed atomic.Bool
	failure       chan struct{}
}

func (d *failingEnding) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if strings.HasSuffix(*in.TableName, schema.TasksTable) && d.failed.CompareAndSwap(false, true) {
		close(d.failure)
		return nil, d.cause
	}
	return d.DB.UpdateItem(ctx, in, opt...)
}

func (d *failingEnding) Query(ctx context.Context, in *dynamodb.QueryInput, opt ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	if in.IndexName == nil || *in.IndexName != schema.TasksByLeaseExpiry || !d.found.Load() {
		out, err := d.DB.Query(ctx, in, opt...)
		if err == nil && in.IndexName != nil && *in.IndexName == schema.TasksByLeaseExpiry && len(out.Items) > 0 {
			d.found.Store(true)
		}
		return out, err
	}
	for _, done := range []<-chan struct{}{d.failure, ctx.Done()} {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			return nil, errors.New("failingEnding: the sweep neither failed nor stopped within 10 s")
		}
	}
	return d.DB.Query(ctx, in, opt...)
}

// A sweep whose ending of a lease fails answers that failure, not the
// "context canceled" of the shard it was reading when the failure stopped
// it: the sweeper's line and the local server's log name the cause.
func TestASweepThatFailsAnswersItsCause(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	ids := make([]string, 20) // leases in most shards: some are read after the failure
	for i := range ids {
		ids[i] = fmt.Sprintf("t%d", i)
	}
	e.task(t, ids...)
	for _, id := range ids {
		if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: id, AgentID: "a", Timeout: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	e.clock.Advance(2 * time.Minute)
	e.caughtUp(t)
	cause := errors.New("the database refused the write")
	db := &failingEnding{DB: lease.NewLocalClient(testenv.Endpoint()), cause: cause, failure: make(chan struct{})}
	sweeper := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	for name, sweep := range map[string]func(context.Context) (lease.SweepResult, error){
		"SweepExpired": sweeper.SweepExpired, "Sweep": sweeper.Sweep,
	} {
		db.found.Store(false)
		db.failed.Store(false)
		db.failure = make(chan struct{})
		_, err := sweep(c)
		if !errors.Is(err, cause) {
			t.Errorf("%s answered %v, want the failed ending's cause (%v)", name, err, cause)
		}
	}
}
