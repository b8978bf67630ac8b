package lease_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// inboxDeletesDB holds each BatchWriteItem of the inbox table until want
// of them are out at once (or a second has passed, after which it holds
// none), and keeps the most that ever were.
type inboxDeletesDB struct {
	lease.DB
	table string
	want  int

	mu       sync.Mutex
	out, max int
	enough   chan struct{}
}

func (d *inboxDeletesDB) BatchWriteItem(ctx context.Context, in *dynamodb.BatchWriteItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchWriteItemOutput, error) {
	if _, ok := in.RequestItems[d.table]; !ok {
		return d.DB.BatchWriteItem(ctx, in, opts...)
	}
	d.mu.Lock()
	d.out++
	d.max = max(d.max, d.out)
	if d.out == d.want {
		close(d.enough)
	}
	d.mu.Unlock()
	select {
	case <-d.enough:
	case <-time.After(time.Second):
		d.mu.Lock()
		if d.max < d.want {
			d.want = -1 // they come one at a time: stop holding them
			close(d.enough)
		}
		d.mu.Unlock()
	}
	defer func() {
		d.mu.Lock()
		d.out--
		d.mu.Unlock()
	}()
	return d.DB.BatchWriteItem(ctx, in, opts...)
}

// Removing an agent empties its inbox, which keeps every unread message
// for 7 days: an orchestrator watching a fleet's tasks may leave tens of
// thousands. They were deleted 25 a request, one request after another
// (at 10 ms or more a request in AWS, 25,000 messages took 10 s, the
// agents function's timeout: a 5xx, the agent half removed). They are
// deleted as many requests at once as the sweep ends leases.
func TestRemovingAnAgentEmptiesABigInboxAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const batches = 8
	must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "reader", Name: "reader"}))
	e.seedInbox(t, "reader", "t", epoch.UnixMilli(), batches*25)
	db := &inboxDeletesDB{DB: e.db, table: e.names.Table(schema.InboxTable), want: batches, enough: make(chan struct{})}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	if err := s.RemoveAgent(c, "reader"); err != nil {
		t.Fatal(err)
	}
	if db.max < batches {
		t.Errorf("at most %d deletions of 25 at once, want the %d at once", db.max, batches)
	}
	if left := e.inboxItems(t, "reader"); len(left) != 0 {
		t.Errorf("%d items left in the removed agent's inbox", len(left))
	}
}
