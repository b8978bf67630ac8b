package lease_test

import (
	"context"
	"errors"
	"fmt"
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

// joinDB is the client of one process whose grant writes and Queries of
// the claim index a test watches: granted runs after each grant write is
// answered; query, once, sends a Query of the claim index for it.
type joinDB struct {
	lease.DB
	tasks   string // the tasks table's name
	granted atomic.Pointer[func()]
	query   atomic.Pointer[func(in *dynamodb.QueryInput, send func() (*dynamodb.QueryOutput, error)) (*dynamodb.QueryOutput, error)]
}

func (d *joinDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := d.DB.UpdateItem(ctx, in, opt...)
	if f := d.granted.Load(); f != nil && aws.ToString(in.TableName) == d.tasks {
		for _, name := range in.ExpressionAttributeNames {
			if name == "prev_agent" {
				(*f)()
				break
			}
		}
	}
	return out, err
}

func (d *joinDB) Query(ctx context.Context, in *dynamodb.QueryInput, opt ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	send := func() (*dynamodb.QueryOutput, error) { return d.DB.Query(ctx, in, opt...) }
	if aws.ToString(in.IndexName) == schema.TasksByClaim {
		if f := d.query.Swap(nil); f != nil {
			return (*f)(in, send)
		}
	}
	return send()
}

// clockGate stops the goroutine id at its next reading of a store's clock
// (once): at is closed when it gets there, and it goes on once open is.
type clockGate struct {
	id       uint64
	at, open chan struct{}
}

// A claim that joins the look another claim of its process sent, when the
// process's claims are spread (the look reads one claim shard, chosen at
// random), reads the other shards when nothing in that one is for it, as
// the claim that sent the look would have: it does not answer
// no_task_available while a task of the queue is claimable in another
// shard. Here the joining claim has found every task of shards 0 to 2
// taken (granted elsewhere; the index lags), the look's sender has found
// none taken (so its look read one shard however little was in it for the
// joiner), and the sender's caller went away once its read was answered.
// Before, the joiner answered no_task_available whenever the look read
// shard 0, 1 or 2, with the free task in shard 3 throughout.
func TestAClaimJoiningASpreadLookReadsTheOtherShardsWhenItsShardHasNothingForIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	n := schema.ClaimShards
	const trials = 8
	type trial struct {
		queue, free string
		gone        []string
	}
	var ts []trial
	for i := range trials {
		tr := trial{queue: fmt.Sprintf("join%d", i)}
		var batch []lease.CreateTaskParams
		// A full head of shard 0 (the 8 a lone claim reads of each shard)
		// at priority 8, and one task at priority 9 in shards 1 and 2:
		// all taken by another process below.
		for _, id := range idsInClaimShard(tr.queue+"-s0", 8, 0, n) {
			batch = append(batch, lease.CreateTaskParams{TaskID: id, Queue: tr.queue, Priority: new(8)})
			tr.gone = append(tr.gone, id)
		}
		for s := 1; s < n-1; s++ {
			id := idsInClaimShard(fmt.Sprintf("%s-s%d", tr.queue, s), 1, s, n)[0]
			batch = append(batch, lease.CreateTaskParams{TaskID: id, Queue: tr.queue, Priority: new(9)})
			tr.gone = append(tr.gone, id)
		}
		// The free task, in the last shard, ranked after shard 0's head.
		tr.free = idsInClaimShard(tr.queue+"-free", 1, n-1, n)[0]
		batch = append(batch, lease.CreateTaskParams{TaskID: tr.free, Queue: tr.queue, Priority: new(0)})
		must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
		ts = append(ts, tr)
	}
	e.caughtUp(t) // the index shows every task; from now on it lags
	e.lag(t, schema.TasksTable, 20*time.Second)
	for _, tr := range ts {
		for _, id := range tr.gone {
			e.checkout(t, id, "elsewhere", time.Hour)
		}
	}

	db := &joinDB{DB: e.db, tasks: e.names.Table(schema.TasksTable)}
	var gate atomic.Pointer[clockGate]
	now := func() time.Time {
		if g := gate.Load(); g != nil && goid() == g.id && gate.CompareAndSwap(g, nil) {
			close(g.at)
			<-g.open
		}
		return e.clock.Now()
	}
	p := lease.New(lease.Config{DB: db, Tables: e.names, Now: now})

	var missed []string
	for _, tr := range ts {
		// The joiner's first look, before the process's claims spread,
		// reads every shard: it writes for the 10 taken tasks, best first
		// (the free one ranks past shard 0's head), and stops at its next
		// reading of the clock, just before its second look.
		lease.SpreadClaims(p, 1)
		g := &clockGate{at: make(chan struct{}), open: make(chan struct{})}
		var writes atomic.Int32
		afterWrite := func() {
			if writes.Add(1) == int32(len(tr.gone)) {
				g.id = goid()
				gate.Store(g)
			}
		}
		db.granted.Store(&afterWrite)
		type answer struct {
			co  lease.Checkout
			err error
		}
		joiner := make(chan answer, 1)
		go func() {
			co, err := p.Claim(c, lease.ClaimParams{AgentID: "joiner", Queues: []string{tr.queue}, Timeout: time.Hour})
			joiner <- answer{co, err}
		}()
		select {
		case <-g.at:
		case a := <-joiner:
			t.Fatalf("%s: the joiner answered %+v, %v before its second look", tr.queue, a.co, a.err)
		}
		db.granted.Store(nil)

		// Meanwhile the process's claims have lost races elsewhere: the
		// sender's look reads one shard. Its caller goes away once the
		// read is answered, so it writes for nothing.
		lease.SpreadClaims(p, 1000)
		sctx, hangUp := context.WithCancel(c)
		sending, answered := make(chan struct{}), make(chan struct{})
		var shard string
		read := func(in *dynamodb.QueryInput, send func() (*dynamodb.QueryOutput, error)) (*dynamodb.QueryOutput, error) {
			for _, v := range in.ExpressionAttributeValues {
				if s, ok := v.(*types.AttributeValueMemberS); ok && strings.HasPrefix(s.Value, tr.queue+"#") {
					shard = s.Value
				}
			}
			close(sending)
			<-answered
			out, err := send()
			hangUp()
			return out, err
		}
		db.query.Store(&read)
		sender := make(chan error, 1)
		go func() {
			_, err := p.Claim(sctx, lease.ClaimParams{AgentID: "sender", Queues: []string{tr.queue}, Timeout: time.Hour})
			sender <- err
		}()
		<-sending
		close(g.open)                      // the joiner goes on and joins the sender's look
		time.Sleep(100 * time.Millisecond) // while the look is in flight
		close(answered)
		a := <-joiner
		serr := <-sender
		free := must[lease.Task](t)(e.store.GetTask(c, tr.free))
		switch {
		case errors.Is(a.err, lease.ErrNoTaskAvailable) && free.Status == lease.StatusTodo && free.Checkout == nil:
			missed = append(missed, fmt.Sprintf("%s (look read %s)", tr.queue, shard))
		case a.err != nil && !errors.Is(a.err, lease.ErrNoTaskAvailable):
			t.Fatalf("%s: the joiner: %v (the sender: %v)", tr.queue, a.err, serr)
		case a.err == nil && a.co.TaskID != tr.free:
			t.Fatalf("%s: the joiner took %s, want %s", tr.queue, a.co.TaskID, tr.free)
		}
	}
	if len(missed) > 0 {
		t.Fatalf("%d of %d claims that joined a look answered no_task_available while a claimable task of their queue was in the claim index throughout: %v",
			len(missed), trials, missed)
	}
}
