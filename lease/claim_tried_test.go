package lease_test

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// racedDB has a claimer of another process (rival) take the task of each
// of the first `lose` grant writes sent through it just before the write
// lands: each of those writes is refused, a race lost.
type racedDB struct {
	lease.DB
	tasks string // the tasks table's name
	rival *lease.Store
	lose  atomic.Int32
}

func (d *racedDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	grant := false
	for _, name := range in.ExpressionAttributeNames {
		grant = grant || name == "prev_agent"
	}
	if aws.ToString(in.TableName) == d.tasks && grant && d.lose.Add(-1) >= 0 {
		task := in.Key["task_id"].(*types.AttributeValueMemberS).Value
		_, _ = d.rival.Checkout(ctx, lease.CheckoutParams{TaskID: task, AgentID: "rival", Timeout: time.Hour})
	}
	return d.DB.UpdateItem(ctx, in, opt...)
}

// A named claim that loses races to claimers of other processes lists in
// its receipt only the task it got: a task whose grant write was refused
// is dropped by the claim's next note. So its receipt does not grow with
// the races it lost, and neither does what its retry reads (the retry of
// one whose grant could not be kept reads every task the receipt lists,
// and their trails).
func TestNamedClaimReceiptListsNoLostRaces(t *testing.T) {
	t.Parallel()
	type cost struct {
		ops  int
		read float64
	}
	costs := map[int]cost{}
	for _, lose := range []int{1, 6} {
		e := newEnv(t)
		c := ctx(t)
		var ids []string
		for i := range lose + 3 {
			ids = append(ids, "task-"+string(rune('a'+i)))
		}
		e.task(t, ids...)
		e.caughtUp(t) // the claim finds the tasks through an index
		raced := &racedDB{DB: receiptLossDB{e.db}, tasks: e.names.Table(schema.TasksTable), rival: e.store}
		raced.lose.Store(int32(lose))
		claimer := lease.New(lease.Config{DB: raced, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
		first := unkeptClaim(t, claimer, lease.ClaimParams{AgentID: "c", RunID: "run-1", Timeout: time.Minute}, ids...)
		if raced.lose.Load() >= 0 {
			t.Fatalf("lose %d: the claim made %d grant writes, want more than %d", lose, lose-int(raced.lose.Load()), lose)
		}
		if tried := must[[]string](t)(lease.ReceiptTried(c, e.store, "c", "run-1")); !slices.Equal(tried, []string{first.TaskID}) {
			t.Errorf("after %d lost races the receipt lists %v, want only the task granted, %s", lose, tried, first.TaskID)
		}

		// The task moves on: the retry reads the tasks listed, then trails.
		e.clock.Advance(time.Second)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: first.TaskID, AgentID: "admin", Force: true}))
		e.clock.Advance(time.Second)
		e.checkout(t, first.TaskID, "b", time.Minute)
		e.clock.Advance(time.Second)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: first.TaskID, AgentID: "b"}))
		e.drain(t)

		meter := testenv.NewMeter(t, e.names.Prefix)
		e.count.Take()
		again := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "c", RunID: "run-1", Timeout: time.Minute}))
		ops, units := e.count.Take(), meter.Take().Total()
		t.Logf("retry after %d lost races: %v, %g read units", lose, ops, units.Read)
		if again.TaskID != first.TaskID || again.Fence != first.Fence || !again.LockedAt.Equal(first.LockedAt) {
			t.Fatalf("lose %d: retry got %+v, want the first lease %+v", lose, again, first)
		}
		costs[lose] = cost{ops: ops.Total(), read: units.Read}
	}
	if few, many := costs[1], costs[6]; many != few {
		t.Errorf("the retry cost %d requests and %g read units after 6 lost races, %d and %g after 1: it grows with the races lost",
			many.ops, many.read, few.ops, few.read)
	}
}

// A receipt of the earlier format, which listed its tasks in one string
// set ("tried"), is still read: a retry of its run finds the lease there.
func TestClaimRetryReadsAReceiptOfTheEarlierFormat(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "w", "x")
	first := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "x", AgentID: "a", RunID: "run-1", Timeout: time.Minute}))
	now := e.clock.Now()
	if _, err := e.db.PutItem(c, &dynamodb.PutItemInput{TableName: aws.String(e.names.Table(schema.HeartbeatsTable)), Item: map[string]types.AttributeValue{
		"agent_id": &types.AttributeValueMemberS{Value: "#claim#a#run-1"},
		"tried":    &types.AttributeValueMemberSS{Value: []string{"w", "x"}},
		"created":  &types.AttributeValueMemberN{Value: strconv.FormatInt(now.UnixMilli(), 10)},
		"ttl":      &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Add(2*lease.MaxTimeout).Unix(), 10)},
	}}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	e.caughtUp(t) // a fresh claim would find w through an index
	again := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute}))
	if again.TaskID != "x" || again.Fence != first.Fence {
		t.Fatalf("retry got %s/%d, want the run's lease x/%d", again.TaskID, again.Fence, first.Fence)
	}
	if tried := must[[]string](t)(lease.ReceiptTried(c, e.store, "a", "run-1")); !slices.Equal(tried, []string{"w", "x"}) {
		t.Fatalf("the receipt lists %v, want [w x]", tried)
	}
}

// pausedGrantDB holds the first grant write sent through it until proceed
// is closed, once at is.
type pausedGrantDB struct {
	lease.DB
	tasks       string // the tasks table's name
	at, proceed chan struct{}
	once        sync.Once
}

func (d *pausedGrantDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	for _, name := range in.ExpressionAttributeNames {
		if name == "prev_agent" && aws.ToString(in.TableName) == d.tasks {
			d.once.Do(func() {
				close(d.at)
				<-d.proceed
			})
		}
	}
	return d.DB.UpdateItem(ctx, in, opt...)
}

// An attempt of a named claim drops from the receipt only its own refused
// tasks: while one attempt's grant write for t is in flight, another
// attempt of the same run whose write for t was refused, and which then
// got u, leaves t listed (the first write may yet land). Both answer the
// one lease.
func TestClaimAttemptDropsOnlyItsOwnRefusedTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t", "u")
	e.drain(t)
	e.caughtUp(t) // the claims find t and u through an index
	paused := &pausedGrantDB{DB: e.db, tasks: e.names.Table(schema.TasksTable), at: make(chan struct{}), proceed: make(chan struct{})}
	first := lease.New(lease.Config{DB: paused, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	raced := &racedDB{DB: e.db, tasks: e.names.Table(schema.TasksTable), rival: e.store}
	raced.lose.Store(1)
	second := lease.New(lease.Config{DB: raced, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	p := lease.ClaimParams{AgentID: "c", RunID: "run-1", Timeout: time.Minute}

	type answer struct {
		c   lease.Checkout
		err error
	}
	done := make(chan answer, 1)
	go func() {
		got, err := first.Claim(c, p)
		done <- answer{got, err}
	}()
	defer close(paused.proceed)
	<-paused.at // the first attempt noted t and is writing for it

	got := must[lease.Checkout](t)(second.Claim(c, p))
	if got.TaskID != "u" {
		t.Fatalf("the second attempt got %s, want u (t was taken by a rival before its write)", got.TaskID)
	}
	if tried := must[[]string](t)(lease.ReceiptTried(c, e.store, "c", "run-1")); !slices.Contains(tried, "t") {
		t.Fatalf("the receipt lists %v: the first attempt's t, whose write is in flight, is gone", tried)
	}
	paused.proceed <- struct{}{}
	a := <-done
	if a.err != nil || a.c.TaskID != got.TaskID || a.c.Fence != got.Fence {
		t.Fatalf("the first attempt answered %+v, %v; want the run's lease %s/%d", a.c, a.err, got.TaskID, got.Fence)
	}
}
