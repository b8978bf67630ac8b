package lease_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// goid is the id of the calling goroutine (for a clock that stops one
// claim at a chosen point).
func goid() uint64 {
	var buf [64]byte
	n := runtime.Stack(buf[:], false)
	var id uint64
	fmt.Sscanf(strings.TrimPrefix(string(buf[:n]), "goroutine "), "%d", &id)
	return id
}

// gatedStore is a store over tables of its own whose client calls
// afterQuery after a Query of the claim index and afterUpdate after an
// UpdateItem of the tasks table (each once, when set), and whose clock
// stops the goroutine gated at its gateAt-th reading until open is closed.
type gatedStore struct {
	store, other            *lease.Store // other: another process over the same tables
	tables                  schema.Names
	db                      lease.DB // a client of the tables without the hooks
	clock                   *testclock.Clock
	afterQuery, afterUpdate atomic.Pointer[func()]
	gated                   atomic.Uint64
	calls                   atomic.Int64
	gateAt                  int64
	atGate, open            chan struct{}
}

// caughtUp waits until the indexes of g's tables show every write
// answered so far (env.caughtUp).
func (g *gatedStore) caughtUp(t testing.TB) {
	t.Helper()
	testenv.CaughtUp(t, g.tables.Prefix)
}

func newGatedStore(t testing.TB, shards schema.ShardCounts) *gatedStore {
	t.Helper()
	g := &gatedStore{clock: testclock.New(epoch), atGate: make(chan struct{}), open: make(chan struct{})}
	tables := testenv.Tables(t)
	hook := func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("gatedHook",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				switch q := in.Parameters.(type) {
				case *dynamodb.QueryInput:
					if aws.ToString(q.IndexName) == schema.TasksByClaim {
						if f := g.afterQuery.Swap(nil); f != nil {
							(*f)()
						}
					}
				case *dynamodb.UpdateItemInput:
					if aws.ToString(q.TableName) == tables.Table(schema.TasksTable) {
						if f := g.afterUpdate.Swap(nil); f != nil {
							(*f)()
						}
					}
				}
				return out, md, err
			}), middleware.After)
	}
	db := lease.NewLocalClient(testenv.Endpoint(), func(o *dynamodb.Options) { o.APIOptions = append(o.APIOptions, hook) })
	now := func() time.Time {
		if id := g.gated.Load(); id != 0 && goid() == id && g.calls.Add(1) == g.gateAt {
			close(g.atGate)
			<-g.open
		}
		return g.clock.Now()
	}
	g.store = lease.New(lease.Config{DB: db, Tables: tables, Now: now, Shards: shards})
	g.db, g.tables = lease.NewLocalClient(testenv.Endpoint()), tables
	g.other = lease.New(lease.Config{DB: g.db, Tables: tables, Now: g.clock.Now, Shards: shards})
	return g
}

// onClaimRead makes g's client call f once, after its next Query of the
// claim index has been answered.
func (g *gatedStore) onClaimRead(f func()) { g.afterQuery.Store(&f) }

// claimShardOf is the claim shard of a task id among n (lease's shardOf:
// FNV-32a mod n).
func claimShardOf(id string, n int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % uint32(n))
}

// idsInClaimShard returns count ids "<prefix>-<k>" whose claim shard among n is
// shard, in increasing k.
func idsInClaimShard(prefix string, count, shard, n int) []string {
	var out []string
	for k := 0; len(out) < count; k++ {
		id := fmt.Sprintf("%s-%04d", prefix, k)
		if claimShardOf(id, n) == shard {
			out = append(out, id)
		}
	}
	return out
}

// N concurrent claims of one process take the best N tasks, however the
// best tasks hash over the claim shards: 20 claims at once over 20 tasks of
// priority 9, which all happen to hash to one claim shard, and 20 of
// priority 0 in the other shards, take the 20 of priority 9.
func TestConcurrentClaimsTakeTheBestWhenTheyShareAShard(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	var batch []lease.CreateTaskParams
	flush := func() {
		if len(batch) > 0 {
			must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
			batch = batch[:0]
		}
	}
	add := func(p lease.CreateTaskParams) {
		batch = append(batch, p)
		if len(batch) == lease.MaxBatch {
			flush()
		}
	}
	for _, id := range idsInClaimShard("hi", 20, 0, schema.ClaimShards) {
		add(lease.CreateTaskParams{TaskID: id, Queue: "skew", Priority: new(9)})
	}
	for s := 1; s < schema.ClaimShards; s++ {
		for _, id := range idsInClaimShard(fmt.Sprintf("lo%d", s), 10, s, schema.ClaimShards) {
			add(lease.CreateTaskParams{TaskID: id, Queue: "skew", Priority: new(0)})
		}
	}
	flush()
	e.caughtUp(t) // the claims find the tasks through an index
	got := make([]lease.Checkout, 20)
	race(20, func(i int) {
		co, err := e.store.Claim(c, lease.ClaimParams{AgentID: fmt.Sprintf("a%02d", i), Queues: []string{"skew"}, Timeout: time.Hour})
		if err != nil {
			t.Errorf("claim %d: %v", i, err)
		}
		got[i] = co
	})
	var low []string
	for _, co := range got {
		if co.Priority != 9 {
			low = append(low, fmt.Sprintf("%s (priority %d)", co.TaskID, co.Priority))
		}
	}
	if len(low) > 0 {
		sort.Strings(low)
		t.Fatalf("20 claims at once over 20 tasks of priority 9 took %d of priority 0 while tasks of priority 9 were left: %v", len(low), low)
	}
}

// A claim of a process whose claims have met claimers elsewhere (window
// of 2 candidates a shard or more: it reads one random claim shard) and
// whose shard shows, through index lag, only tasks it found taken, looks
// at the other shards before answering that there is no task: here a
// claimable task sat in another shard, in the index, throughout.
func TestASpreadClaimUnderIndexLagLooksAtTheOtherShards(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const queues = 12
	n := schema.ClaimShards
	var batch []lease.CreateTaskParams
	var gone []string
	for q := range queues {
		queue := fmt.Sprintf("lagq%02d", q)
		// One task in each shard but the last: another agent takes it by
		// id, and the index shows it for a while more.
		for s := 0; s < n-1; s++ {
			id := idsInClaimShard(fmt.Sprintf("%s-gone%d", queue, s), 1, s, n)[0]
			batch = append(batch, lease.CreateTaskParams{TaskID: id, Queue: queue})
			gone = append(gone, id)
		}
		// And the claimable one, in the last shard.
		batch = append(batch, lease.CreateTaskParams{TaskID: idsInClaimShard(queue+"-free", 1, n-1, n)[0], Queue: queue})
		must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
		batch = batch[:0]
	}
	e.caughtUp(t) // the index shows every task; from now on it lags
	e.lag(t, schema.TasksTable, 20*time.Second)
	for _, id := range gone {
		e.checkout(t, id, "elsewhere", time.Hour)
	}
	var missed []string
	for q := range queues {
		// The process has lost races lately: its claims spread over 2n.
		lease.SpreadClaims(e.store, 2*n)
		queue := fmt.Sprintf("lagq%02d", q)
		co, err := e.store.Claim(c, lease.ClaimParams{AgentID: "spread", Queues: []string{queue}, Timeout: time.Hour})
		switch {
		case errors.Is(err, lease.ErrNoTaskAvailable):
			missed = append(missed, queue)
		case err != nil:
			t.Fatalf("claim %s: %v", queue, err)
		case co.Queue != queue:
			t.Fatalf("claim %s got %s of queue %s", queue, co.TaskID, co.Queue)
		}
	}
	if len(missed) > 0 {
		t.Fatalf("%d of %d claims answered no_task_available while a claimable task of their queue was in the claim index throughout: %v", len(missed), queues, missed)
	}
}

// A race a claim loses to no grant at all (the task was cancelled between
// the claim's read and its write, by this very process) teaches the
// process nothing of claimers elsewhere: the claim and the lone claims
// after it take the best tasks, in order.
func TestAClaimLosingToACancelKeepsPriorityOrder(t *testing.T) {
	t.Parallel()
	h := newGatedStore(t, schema.ShardCounts{Claim: 1})
	c := ctx(t)
	for round := range 2 {
		queue := fmt.Sprintf("ord%d", round)
		var batch []lease.CreateTaskParams
		for p := range 10 {
			batch = append(batch, lease.CreateTaskParams{TaskID: fmt.Sprintf("%s-p%d", queue, p), Queue: queue, Priority: new(p)})
		}
		must[[]lease.BatchResult](t)(h.store.CreateTasks(c, batch))
		h.caughtUp(t) // the claims find the tasks through an index
		h.onClaimRead(func() {
			// After the claim's read, before its write: an admin of this
			// process cancels the best task.
			h.clock.Advance(time.Millisecond)
			st := lease.StatusCancelled
			if _, err := h.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: queue + "-p9", AgentID: "admin", Admin: true, Status: &st}); err != nil {
				t.Errorf("cancel %s-p9: %v", queue, err)
			}
		})
		var got []int
		for range 8 {
			co := must[lease.Checkout](t)(h.store.Claim(c, lease.ClaimParams{AgentID: "lone", Queues: []string{queue}, Timeout: time.Hour}))
			got = append(got, co.Priority)
		}
		if want := "[8 7 6 5 4 3 2 1]"; fmt.Sprint(got) != want {
			t.Fatalf("round %d: lone claims, the first of which lost the best task to a cancel of this process, took priorities %v, want %s", round, got, want)
		}
	}
}

// A claim never answers no_task_available from a read sent before a task
// of its queues was freed (claimOnce: "A look sent before this claim began
// ... never its answer that there is none"). Here the task is created, the
// create answered, and only then the claim begins: it joins a read another
// claim of the process sent before the create, stamped the same millisecond
// of the store's clock.
func TestAClaimBegunAfterACreateDoesNotAnswerFromAnOlderRead(t *testing.T) {
	t.Parallel()
	h := newGatedStore(t, schema.ShardCounts{Claim: 1})
	c := ctx(t)
	var late atomic.Value
	var wg sync.WaitGroup
	h.onClaimRead(func() {
		// The first claim's read has been answered (empty): now the task
		// is created, and then a second claim begins.
		if _, err := h.store.CreateTask(c, lease.CreateTaskParams{TaskID: "fresh", Queue: "q"}); err != nil {
			t.Errorf("create: %v", err)
			return
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := h.store.Claim(c, lease.ClaimParams{AgentID: "late", Queues: []string{"q"}, Timeout: time.Hour})
			late.Store(fmt.Sprint(err))
		}()
		time.Sleep(300 * time.Millisecond) // the first read's answer is slow
	})
	if _, err := h.store.Claim(c, lease.ClaimParams{AgentID: "early", Queues: []string{"q"}, Timeout: time.Hour}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("the first claim: %v, want no task (its read was sent before the create)", err)
	}
	wg.Wait()
	if got := late.Load(); got != "<nil>" {
		t.Fatalf("a claim begun after the task was created: %v, want the task", got)
	}
}

// panicOnceDB panics at the first conditional write of a task it is
// asked to make: a bug in a grant, which the HTTP layer answers 500.
type panicOnceDB struct {
	lease.DB
	armed *atomic.Bool
}

func (d panicOnceDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if in.ConditionExpression != nil && strings.HasSuffix(aws.ToString(in.TableName), schema.TasksTable) && d.armed.Swap(false) {
		panic("a bug in the grant")
	}
	return d.DB.UpdateItem(ctx, in, opt...)
}

// A claim that panics in its grant lets its task go: the process's next
// claim takes it, rather than passing it by as held by another claim and
// waiting for it to be let go until its request ends.
func TestAClaimThatPanicsLetsItsTaskGo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	armed := &atomic.Bool{}
	store := lease.New(lease.Config{DB: panicOnceDB{DB: e.db, armed: armed}, Tables: e.names, Now: e.clock.Now})
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "only", Queue: "p"})
	e.caughtUp(t) // the claim finds it through an index
	armed.Store(true)
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("the grant did not panic")
			}
		}()
		_, _ = store.Claim(c, lease.ClaimParams{AgentID: "a", Queues: []string{"p"}, Timeout: time.Minute})
	}()
	short, cancel := context.WithTimeout(c, 3*time.Second)
	defer cancel()
	co, err := store.Claim(short, lease.ClaimParams{AgentID: "b", Queues: []string{"p"}, Timeout: time.Minute})
	if err != nil || co.TaskID != "only" {
		t.Fatalf("the claim after a panicked one: %+v, %v; want the task", co, err)
	}
}
