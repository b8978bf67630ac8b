package lease_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/localstack"
)

// recountDB is a client of the env's tables that the Scan check of newEnv
// does not count: a recount is an operator's command, not an operation.
// scanned, when set, runs after each Scan page, before the recount goes on.
type recountDB struct {
	*dynamodb.Client
	scanned func()
}

func (d recountDB) Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error) {
	out, err := d.Client.Scan(ctx, in, optFns...)
	if err == nil && d.scanned != nil {
		d.scanned()
	}
	return out, err
}

// recount runs RecountQueues over the env's tables, its settle a drain of
// the change stream (then after, if set).
func (e *env) recount(t testing.TB, db lease.RecountDB, attempts int, after func()) lease.RecountResult {
	t.Helper()
	res, err := lease.RecountQueues(ctx(t), db, e.names, lease.RecountParams{
		Attempts: attempts,
		Settle: func(c context.Context) error {
			_, err := e.poller.Poll(c)
			if err == nil && after != nil {
				after()
			}
			return err
		},
	})
	if err != nil {
		t.Fatalf("recount: %v", err)
	}
	return res
}

// setCount writes a count of queue q's counter item directly, as a count
// gone wrong.
func (e *env) setCount(t testing.TB, q string, st lease.Status, n int) {
	t.Helper()
	_, err := e.db.UpdateItem(ctx(t), &dynamodb.UpdateItemInput{
		TableName:                 aws.String(e.names.Table(schema.HeartbeatsTable)),
		Key:                       map[string]types.AttributeValue{"agent_id": &types.AttributeValueMemberS{Value: "#queue#" + q}},
		UpdateExpression:          aws.String("SET #n = :n"),
		ExpressionAttributeNames:  map[string]string{"#n": "n#" + string(st)},
		ExpressionAttributeValues: map[string]types.AttributeValue{":n": &types.AttributeValueMemberN{Value: fmt.Sprint(n)}},
	})
	if err != nil {
		t.Fatalf("set %s's %s count: %v", q, st, err)
	}
}

// trueCounts counts each queue's tasks by status from a listing of every
// task (the stream drained and the indexes caught up).
func (e *env) trueCounts(t testing.TB) map[string]map[lease.Status]int64 {
	t.Helper()
	e.caughtUp(t)
	out := map[string]map[lease.Status]int64{}
	for cur := ""; ; {
		page := must[lease.TaskPage](t)(e.store.ListTasks(ctx(t), lease.ListTasksParams{Limit: 1000, Cursor: cur}))
		for _, task := range page.Tasks {
			if out[task.Queue] == nil {
				out[task.Queue] = map[lease.Status]int64{}
			}
			out[task.Queue][task.Status]++
		}
		if cur = page.NextCursor; cur == "" {
			return out
		}
	}
}

// A count made wrong by a direct write, counts missing a dead-lettered
// batch, and a queue whose changes were all lost (no counter item at all)
// are mended by a recount; a second recount finds them right.
func TestRecountMendsWrongCounts(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	e.queued(t, "a1", "alpha", 5)
	e.queued(t, "a2", "alpha", 5)
	e.queued(t, "a3", "alpha", 1)
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "a1", AgentID: "w"}))
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "a1", AgentID: "w"}))
	e.queued(t, "b1", "beta", 5)
	e.drain(t)
	e.setCount(t, "alpha", lease.StatusTodo, 7)
	// Dead-lettered: read from the stream and never applied.
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "b1", AgentID: "w"}))
	e.queued(t, "b2", "beta", 2)
	e.queued(t, "g1", "gamma", 5)
	e.capture(t)

	got := e.queueCounts(t)
	wantCounts(t, got["alpha"], 7, 0, 1, 0)
	wantCounts(t, got["beta"], 1, 0, 0, 0)
	wantCounts(t, got["gamma"], 0, 0, 0, 0)
	if t.Failed() {
		t.Fatal("the counts are not wrong as the test made them")
	}

	res := e.recount(t, recountDB{Client: lease.NewLocalClient(testenv.Endpoint())}, 0, nil)
	if want := []string{"alpha", "beta", "gamma"}; !slices.Equal(res.Mended, want) || len(res.Busy) > 0 || res.Tasks != 6 {
		t.Errorf("recount %+v, want %v mended of 6 tasks", res, want)
	}
	e.caughtUp(t) // oldest_todo_at is read through the claim index
	got = e.queueCounts(t)
	wantCounts(t, got["alpha"], 2, 0, 1, 0)
	wantCounts(t, got["beta"], 1, 1, 0, 0)
	wantCounts(t, got["gamma"], 1, 0, 0, 0)
	if want := epoch; !got["gamma"].OldestTodoAt.Equal(want) {
		t.Errorf("gamma oldest_todo_at %v, want %v (its todo task counted by priority)", got["gamma"].OldestTodoAt, want)
	}

	// The stream counts on from the mended counts.
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "b1", AgentID: "w"}))
	got = e.queueCounts(t)
	wantCounts(t, got["beta"], 1, 0, 1, 0)

	res = e.recount(t, recountDB{Client: lease.NewLocalClient(testenv.Endpoint())}, 0, nil)
	if want := []string{"alpha", "beta", "gamma"}; len(res.Mended) > 0 || !slices.Equal(res.Checked, want) {
		t.Errorf("second recount %+v, want %v found right", res, want)
	}
}

// A change written while a recount counts leaves that queue's counts to
// the stream: written after the Scan read its task and applied in the
// settle (the Scan's counts lack it), or written after the settle (applied
// after the recount), the counts end right once the stream is drained; a
// later recount with no change under it mends the queue.
func TestRecountLeavesCountsThatMoved(t *testing.T) {
	e := newEnv(t)
	e.queued(t, "m1", "moving", 5)
	e.queued(t, "s1", "still", 5)
	e.drain(t)
	e.setCount(t, "moving", lease.StatusDone, 3)
	e.setCount(t, "still", lease.StatusDone, 3)

	n := 0
	db := recountDB{Client: lease.NewLocalClient(testenv.Endpoint()), scanned: func() {
		n++
		e.queued(t, fmt.Sprintf("m%d", n+1), "moving", 5)
	}}
	res := e.recount(t, db, 1, func() { e.queued(t, fmt.Sprintf("late%d", n), "moving", 5) })
	if !slices.Equal(res.Busy, []string{"moving"}) || !slices.Equal(res.Mended, []string{"still"}) {
		t.Errorf("recount %+v, want moving busy and still mended", res)
	}
	got := e.queueCounts(t)
	wantCounts(t, got["moving"], 3, 0, 3, 0) // the stream's counts, left as they were
	wantCounts(t, got["still"], 1, 0, 0, 0)

	// With writes after the settle only, each applied after the recount.
	res = e.recount(t, recountDB{Client: lease.NewLocalClient(testenv.Endpoint())}, 1, func() {
		n++
		e.queued(t, fmt.Sprintf("late%d", n), "moving", 5)
	})
	if !slices.Equal(res.Mended, []string{"moving"}) || len(res.Busy) > 0 {
		t.Errorf("recount %+v, want moving mended", res)
	}
	got = e.queueCounts(t)
	wantCounts(t, got["moving"], 4, 0, 0, 0)
}

// A recount racing creates, checkouts, completes and releases never writes
// a wrong count: once the writes stop and the stream is drained, each
// queue's counts are either mended (right) or as wrong as the test made
// them, untouched; a recount then, with nothing moving, mends the rest.
func TestRecountRacingWrites(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	queues := []string{"race1", "race2", "race3"}
	for _, q := range queues {
		e.queued(t, q+"-seed", q, 5)
	}
	e.drain(t)
	const drift = 5
	for _, q := range queues {
		e.setCount(t, q, lease.StatusCancelled, drift)
	}

	// The writers run until the last recount has returned, so that every
	// recount races them; each tells of every task it has moved through.
	var wg sync.WaitGroup
	stop := make(chan struct{})
	moved := map[string]chan struct{}{}
	for _, q := range queues {
		moved[q] = make(chan struct{}, 1)
	}
	for w, q := range queues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			agent := fmt.Sprintf("w%d", w)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprintf("%s-%d", q, i)
				if _, err := e.store.CreateTask(c, lease.CreateTaskParams{TaskID: id, Title: id, Queue: q, Priority: ptr(i % 3)}); err != nil {
					t.Errorf("create %s: %v", id, err)
					return
				}
				if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: id, AgentID: agent}); err != nil {
					t.Errorf("checkout %s: %v", id, err)
					return
				}
				var err error
				if i%2 == 0 {
					_, err = e.store.Complete(c, lease.CompleteParams{TaskID: id, AgentID: agent})
				} else {
					_, err = e.store.Release(c, lease.ReleaseParams{TaskID: id, AgentID: agent})
				}
				if err != nil {
					t.Errorf("end %s: %v", id, err)
					return
				}
				select {
				case moved[q] <- struct{}{}:
				default:
				}
				if w == 0 {
					time.Sleep(100 * time.Millisecond) // a queue with pauses: often still while counted
				}
			}
		}()
	}
	// Between each Scan and its settle, race2 and race3 take changes (the
	// settle applies them, and the Scan lacks them).
	db := recountDB{Client: lease.NewLocalClient(testenv.Endpoint()), scanned: func() {
		for _, q := range queues[1:] {
			select {
			case <-moved[q]:
			default:
			}
			<-moved[q]
		}
	}}
	mended := map[string]bool{}
	for range 10 {
		for _, q := range e.recount(t, db, 1, nil).Mended {
			mended[q] = true
		}
	}
	close(stop)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("mended during the writes: %v", mended)

	check := func(when string, untouched func(q string) bool) {
		t.Helper()
		want := e.trueCounts(t)
		got := e.queueCounts(t)
		for _, q := range queues {
			for _, st := range lease.Statuses {
				w := want[q][st]
				if st == lease.StatusCancelled && untouched(q) {
					w += drift
				}
				if got[q].Counts[st] != w {
					t.Errorf("%s: queue %s: %s = %d, want %d (mended: %v; all: %v, tasks: %v)", when, q, st, got[q].Counts[st], w, !untouched(q), got[q].Counts, want[q])
				}
			}
		}
	}
	check("after the race", func(q string) bool { return !mended[q] })
	res := e.recount(t, recountDB{Client: db.Client}, 0, nil)
	if len(res.Busy) > 0 {
		t.Errorf("recount with nothing moving: %+v", res)
	}
	check("after a quiet recount", func(string) bool { return false })
}

// TestRecountUnits measures a recount of 2 queues of 100 tasks (a Scan of
// the whole tasks table, the counters read twice, one queue mended) on
// small and large tasks.
func TestRecountUnits(t *testing.T) {
	for _, z := range taskSizes {
		t.Run(z.name, func(t *testing.T) {
			e := newEnv(t)
			c := ctx(t)
			var batch []lease.CreateTaskParams
			for i := range 100 {
				batch = append(batch, z.params(fmt.Sprintf("u-%03d", i), []string{"u1", "u2"}[i%2]))
				if len(batch) == lease.MaxBatch {
					must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
					batch = nil
				}
			}
			if len(batch) > 0 {
				must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
			}
			e.drain(t)
			e.setCount(t, "u1", lease.StatusTodo, 7)
			m := testenv.NewMeter(t, e.names.Prefix)
			m.Take()
			res := e.recount(t, recountDB{Client: lease.NewLocalClient(testenv.Endpoint())}, 0, nil)
			u := m.Take()
			t.Logf("recount %+v: %g WU %g RU (%s)", res, u.Total().Write, u.Total().Read, unitsByTable(u))
			if !slices.Equal(res.Mended, []string{"u1"}) {
				t.Errorf("recount %+v, want u1 mended", res)
			}
			// The registry and each counter twice; the one counter mended.
			if got, want := u.Tables[schema.HeartbeatsTable], units(1, 1+2*2); got != want {
				t.Errorf("heartbeats table: %v, want %v", got, want)
			}
			// The Scan: the tasks table's size in 4 KB units, whatever is
			// mended; a large task's body item is most of it.
			budget := map[string]localstack.Units{"small": units(0, 7), "large": units(0, 297)}[z.name]
			if got := u.Tables[schema.TasksTable]; got.Write != 0 || got.Read > budget.Read {
				t.Errorf("tasks table: %v, want no write and at most %g read units", got, budget.Read)
			}
			if len(u.Indexes) > 0 {
				t.Errorf("index units %v, want none", u.Indexes)
			}
		})
	}
}

// A task last written before queues were counted, and never since (its
// change gone from the stream), is in no counter and its queue in no
// registry: a recount adds the queue and counts it.
func TestRecountCountsTasksFromBeforeCounting(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	e.drain(t) // the stream's position, which capture then moves past the task's change
	_, err := e.db.PutItem(c, &dynamodb.PutItemInput{TableName: aws.String(e.names.Table(schema.TasksTable)), Item: map[string]types.AttributeValue{
		"task_id": &types.AttributeValueMemberS{Value: "old"}, "status": &types.AttributeValueMemberS{Value: "todo"},
		"fence": &types.AttributeValueMemberN{Value: "0"}, "eseq": &types.AttributeValueMemberN{Value: "1"},
		"version": &types.AttributeValueMemberN{Value: "1"}, "created_at": &types.AttributeValueMemberN{Value: "1"},
		"created_key": &types.AttributeValueMemberS{Value: "0000000000001#old"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	e.capture(t)
	if got := e.queueCounts(t); len(got) != 0 {
		t.Fatalf("queues before the recount: %v, want none", got)
	}

	res := e.recount(t, recountDB{Client: lease.NewLocalClient(testenv.Endpoint())}, 0, nil)
	if !slices.Equal(res.Mended, []string{lease.DefaultQueue}) {
		t.Errorf("recount %+v, want %s mended", res, lease.DefaultQueue)
	}
	e.clock.Advance(lease.ListedQueuesFor) // the recount's queue, added by another process
	got := e.queueCounts(t)
	if len(got) != 1 {
		t.Fatalf("queues after the recount: %v, want %s alone", got, lease.DefaultQueue)
	}
	wantCounts(t, got[lease.DefaultQueue], 1, 0, 0, 0)
}

// recountSentTwiceDB sends each write of a queue's counter twice and
// answers with the second answer: what the SDK does when the first
// applied but its answer was lost.
type recountSentTwiceDB struct{ recountDB }

func (d recountSentTwiceDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if k, ok := in.Key["agent_id"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(k.Value, "#queue#") {
		if _, err := d.Client.UpdateItem(ctx, in, optFns...); err != nil {
			return nil, err
		}
	}
	return d.Client.UpdateItem(ctx, in, optFns...)
}

// A recount's write of a queue's counts whose answer was lost, sent again
// by the SDK, fails its condition on the rev the first sending moved: the
// queue was reported busy, not recounted, and the command failed, though
// its counts were mended.
func TestRecountWriteSentTwiceIsMended(t *testing.T) {
	e := newEnv(t)
	e.queued(t, "a1", "alpha", 5)
	e.drain(t)
	e.setCount(t, "alpha", lease.StatusTodo, 7)

	db := recountSentTwiceDB{recountDB{Client: lease.NewLocalClient(testenv.Endpoint())}}
	res := e.recount(t, db, 1, nil)
	if want := []string{"alpha"}; !slices.Equal(res.Mended, want) || len(res.Busy) > 0 {
		t.Errorf("recount %+v, want %v mended", res, want)
	}
	wantCounts(t, e.queueCounts(t)["alpha"], 1, 0, 0, 0)
}

// recountRacedDB runs race once, just before a recount's first write of a
// queue's counter: a change the stream counts between the recount's last
// read of the counter and its write.
type recountRacedDB struct {
	recountDB
	race func()
}

func (d *recountRacedDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if k, ok := in.Key["agent_id"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(k.Value, "#queue#") && d.race != nil {
		race := d.race
		d.race = nil
		race()
	}
	return d.Client.UpdateItem(ctx, in, optFns...)
}

// A recount's write refused because the stream counted a change first is
// not taken for its own write sent twice when that change happens to move
// the counts by what the counter had missed: the counter still misses it,
// and the queue is counted again.
func TestRecountWriteRefusedByALikeChangeIsNotMended(t *testing.T) {
	e := newEnv(t)
	c := ctx(t)
	e.queued(t, "r1", "alpha", 5)
	e.queued(t, "r2", "alpha", 5)
	e.drain(t)
	// Dead-lettered: read from the stream and never applied.
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "r1", AgentID: "w"}))
	e.capture(t)
	wantCounts(t, e.queueCounts(t)["alpha"], 2, 0, 0, 0)

	db := &recountRacedDB{recountDB: recountDB{Client: lease.NewLocalClient(testenv.Endpoint())}, race: func() {
		must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "r2", AgentID: "w"}))
		e.drain(t)
	}}
	res := e.recount(t, db, 2, nil)
	if want := []string{"alpha"}; !slices.Equal(res.Mended, want) || len(res.Busy) > 0 {
		t.Errorf("recount %+v, want %v mended", res, want)
	}
	wantCounts(t, e.queueCounts(t)["alpha"], 0, 2, 0, 0)
}
