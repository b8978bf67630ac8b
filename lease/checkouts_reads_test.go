package lease_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// taskReadsDB counts the task items read by BatchGetItem.
type taskReadsDB struct {
	lease.DB
	table string

	mu   sync.Mutex
	read int
}

func (d *taskReadsDB) BatchGetItem(ctx context.Context, in *dynamodb.BatchGetItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.BatchGetItemOutput, error) {
	d.mu.Lock()
	d.read += len(in.RequestItems[d.table].Keys)
	d.mu.Unlock()
	return d.DB.BatchGetItem(ctx, in, opts...)
}

func (d *taskReadsDB) take() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.read
	d.read = 0
	return n
}

// A page of live leases read every live lease's task item, one
// BatchGetItem of 100 after another, whatever the page's size: with a
// fleet's 100,000 leases every page (even ?limit=1) read 1,000 of them,
// past the checkouts function's 10 s and memory in AWS. A page reads the
// items of the leases it shows, and of no more than a few pages' worth
// past them; the walk still lists every lease once, oldest first.
func TestACheckoutsPageReadsTheLeasesItShows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const n, limit = 250, 10
	var want []string
	for start := 0; start < n; start += lease.MaxBatch {
		var batch []lease.CreateTaskParams
		for i := start; i < min(n, start+lease.MaxBatch); i++ {
			id := fmt.Sprintf("t-%03d", i)
			batch = append(batch, lease.CreateTaskParams{TaskID: id})
			want = append(want, id)
		}
		must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	}
	for _, id := range want {
		agent := "a"
		if id[len(id)-1] == '0' {
			agent = "b"
		}
		e.checkout(t, id, agent, time.Hour)
		e.clock.Advance(time.Millisecond)
	}
	e.caughtUp(t) // the leases are listed through an index
	db := &taskReadsDB{DB: e.db, table: e.names.Table(schema.TasksTable)}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})

	for _, agent := range []string{"", "b"} {
		var got []string
		pages := 0
		for p := (lease.ListCheckoutsParams{AgentID: agent, Limit: limit}); ; pages++ {
			page := must[lease.CheckoutPage](t)(s.ListCheckoutsPage(c, p))
			if read := db.take(); read > 2*limit {
				t.Fatalf("a page of %d of %q's leases read %d task items", limit, agent, read)
			}
			for _, co := range page.Checkouts {
				got = append(got, co.TaskID)
			}
			if page.NextCursor == "" || pages > n {
				break
			}
			p = lease.ListCheckoutsParams{Cursor: page.NextCursor, Limit: limit}
		}
		wantOf := want
		if agent != "" {
			wantOf = nil
			for _, id := range want {
				if id[len(id)-1] == '0' {
					wantOf = append(wantOf, id)
				}
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(wantOf) {
			t.Errorf("a walk of %q's leases listed %v, want %v", agent, got, wantOf)
		}
	}
}
