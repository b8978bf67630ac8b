package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A claim over a queue whose claim shard holds a full head of delayed
// tasks (not ready yet) and nothing ready answers no_task_available at once,
// with one look: it must not read the same head again and again.
func TestAClaimOverAShardFullOfDelayedTasksDoesNotSpin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	nb := e.clock.Now().Add(time.Hour)
	var batch []lease.CreateTaskParams
	for _, id := range idsInClaimShard("later", 8, 0, schema.ClaimShards) {
		batch = append(batch, lease.CreateTaskParams{TaskID: id, Queue: "later", NotBefore: &nb})
	}
	must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	e.count.Take()
	began := time.Now()
	_, err := e.store.Claim(c, lease.ClaimParams{AgentID: "a", Queues: []string{"later"}, Timeout: time.Minute})
	took := time.Since(began)
	queries := e.count.Count("Query")
	if !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("claim: %v, want no_task_available", err)
	}
	if queries > 2*schema.ClaimShards || took > 2*time.Second {
		t.Fatalf("a claim over 8 delayed tasks in one shard (none ready) sent %d Queries and took %v before answering no_task_available (one look is %d Queries)",
			queries, took.Round(time.Millisecond), schema.ClaimShards)
	}
}

// A claim whose index shows, through index lag, a task a PATCH has moved
// to another queue learns at its write that it is not in the claim's
// queues, and does not write for it again and again until the index
// catches up: it answers no_task_available after a look or two.
func TestAClaimUnderIndexLagDoesNotSpinOnATaskMovedAway(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "moved", Queue: "from"})
	e.lag(t, schema.TasksTable, 3*time.Second)
	to := "to"
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "moved", AgentID: "admin", Admin: true, Queue: &to}))
	e.count.Take()
	began := time.Now()
	_, err := e.store.Claim(c, lease.ClaimParams{AgentID: "a", Queues: []string{"from"}, Timeout: time.Minute})
	took := time.Since(began)
	ops := e.count.Take()
	if !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("claim: %v, want no_task_available", err)
	}
	if q, u := ops["Query"], ops["UpdateItem"]; q > 3*schema.ClaimShards || u > 2 {
		t.Fatalf("a claim whose only candidate was moved to another queue (index lag) sent %d Queries and %d UpdateItems over %v before answering no_task_available",
			q, u, took.Round(time.Millisecond))
	}
}

// A task whose not_before has passed competes at its priority as soon as
// a claim sees it, and once the sweep has ranked it ready (within one
// sweep interval) no shard can hide it: until then a shard whose head
// holds more ready tasks and passed delays than a claim reads can (claim.go,
// "Delays"). Here the shard holds 7 ready tasks and two delayed tasks
// whose not_before has passed: the one of priority 9, past the head, is
// claimed before any of priority 0 once the sweep has run.
func TestALoneClaimTakesAPassedDelayOnceSwept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	ids := idsInClaimShard("dl", 9, 0, schema.ClaimShards)
	var batch []lease.CreateTaskParams
	for _, id := range ids[:7] {
		batch = append(batch, lease.CreateTaskParams{TaskID: id, Queue: "dl", Priority: new(0)})
	}
	nb1, nb2 := e.clock.Now().Add(time.Second), e.clock.Now().Add(2*time.Second)
	batch = append(batch, lease.CreateTaskParams{TaskID: ids[7], Queue: "dl", Priority: new(0), NotBefore: &nb1})
	batch = append(batch, lease.CreateTaskParams{TaskID: ids[8], Queue: "dl", Priority: new(9), NotBefore: &nb2})
	must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	e.clock.Advance(3 * time.Second)
	e.caughtUp(t) // the sweep finds the delays through an index
	if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res.Ready != 2 {
		t.Fatalf("the sweep ranked %d delayed tasks ready, want 2", res.Ready)
	}
	e.caughtUp(t) // the claim finds them ranked ready through an index
	co := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "a", Queues: []string{"dl"}, Timeout: time.Minute}))
	if co.TaskID != ids[8] {
		t.Fatalf("the claim took %s (priority %d) while %s (priority 9, its not_before passed and swept) was ready", co.TaskID, co.Priority, ids[8])
	}
}

// A PATCH that changes nothing visible moves no version: here a blocked
// task whose not_before has passed, before the sweep has ranked it ready,
// PATCHed with the title it has. (An If-Match PATCH of what a client read
// is then refused 412 with nothing visible changed.)
func TestANoOpPatchOfABlockedTaskPastItsDelayMovesNoVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "blocker")
	nb := e.clock.Now().Add(time.Second)
	e.create(t, lease.CreateTaskParams{TaskID: "waits", Title: "same", BlockedBy: []string{"blocker"}, NotBefore: &nb})
	e.clock.Advance(2 * time.Second)
	e.drain(t)
	before := must[lease.Task](t)(e.store.GetTask(c, "waits"))
	title := "same"
	after := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "waits", AgentID: "admin", Admin: true, Title: &title}))
	if after.Version != before.Version {
		t.Fatalf("a PATCH of the title the task has moved its version %d to %d (status %s, nothing visible changed)", before.Version, after.Version, after.Status)
	}
	// And an If-Match PATCH of what was read holds.
	other := "other"
	if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "waits", AgentID: "admin", Admin: true, Title: &other, IfVersion: before.Version}); err != nil {
		t.Fatalf("If-Match PATCH of the version read: %v", err)
	}
}

// A claim begun while a task is claimable, which stays claimable until the
// claim answers, is not answered no_task_available. Here another claim of
// the process found that task taken a moment before (its holder released
// it since), and sent the look the second claim joined: that look leaves
// out the tasks its sender found taken, and the joiner took its empty
// answer as its own.
func TestAClaimJoiningALookDoesNotInheritItsSendersTakenTasks(t *testing.T) {
	t.Parallel()
	g := newGatedStore(t, schema.ShardCounts{Claim: 1})
	c := ctx(t)
	must[lease.Task](t)(g.store.CreateTask(c, lease.CreateTaskParams{TaskID: "t", Queue: "j"}))
	g.caughtUp(t) // A's first look finds t
	var x lease.Checkout
	bDone := make(chan error, 1)
	var bGot lease.Checkout
	first := func() {
		// After A's first read, before its write: x, an agent of another
		// process, takes the task.
		x = must[lease.Checkout](t)(g.other.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "x", Timeout: time.Hour}))
		afterGrant := func() {
			// A's write failed (x holds it): A counts it taken. x gives it
			// back: claimable from now on.
			if _, err := g.other.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "x", Fence: x.Fence}); err != nil {
				t.Errorf("release: %v", err)
			}
			g.caughtUp(t) // A's second look, which B joins, finds t claimable
			second := func() {
				// A's second look is in flight: B, begun before it was sent,
				// goes on and joins it.
				close(g.open)
				time.Sleep(500 * time.Millisecond)
			}
			g.afterQuery.Store(&second)
			// B begins now, and stops after it has taken its start.
			g.gateAt = 2
			go func() {
				g.gated.Store(goid())
				co, err := g.store.Claim(c, lease.ClaimParams{AgentID: "b", Queues: []string{"j"}, Timeout: time.Hour})
				bGot = co
				bDone <- err
			}()
			<-g.atGate
		}
		g.afterUpdate.Store(&afterGrant)
	}
	g.afterQuery.Store(&first)
	_, errA := g.store.Claim(c, lease.ClaimParams{AgentID: "a", Queues: []string{"j"}, Timeout: time.Hour})
	errB := <-bDone
	if errB != nil {
		if co, err := g.other.Claim(c, lease.ClaimParams{AgentID: "c", Queues: []string{"j"}, Timeout: time.Hour}); err != nil || co.TaskID != "t" {
			t.Errorf("(and a claim after both: %+v, %v)", co, err)
		}
		t.Fatalf("claim B, begun after the task was released and with the task claimable until it answered: %v (claim A: %v)", errB, errA)
	}
	if bGot.TaskID != "t" {
		t.Fatalf("claim B got %+v, want task t", bGot)
	}
}

// A claim that finds its candidate not ready at the grant gives it its
// delayed key (keepDelay) only as it read it: a write in between leaves it
// to the next. Here the task is cancelled between the claim's failed grant
// and that write: the cancelled task must not be given a delayed key and an
// entry in the expiry index (the sweep then ranks a cancelled task ready,
// and a repeated cancel moves its version with nothing visible changed).
func TestKeepDelayLeavesATaskCancelledMeanwhile(t *testing.T) {
	t.Parallel()
	g := newGatedStore(t, schema.ShardCounts{Claim: 1})
	c := ctx(t)
	must[lease.Task](t)(g.store.CreateTask(c, lease.CreateTaskParams{TaskID: "k", Queue: "kq"}))
	must[lease.Checkout](t)(g.other.Checkout(c, lease.CheckoutParams{TaskID: "k", AgentID: "x", Timeout: time.Minute}))
	nb := g.clock.Now().Add(time.Hour)
	must[lease.Task](t)(g.other.UpdateTask(c, lease.UpdateTaskParams{TaskID: "k", AgentID: "x", SetNotBefore: true, NotBefore: &nb}))
	g.clock.Advance(2 * time.Minute)
	g.caughtUp(t)                                // the sweep finds the lease through an index
	must[lease.SweepResult](t)(g.other.Sweep(c)) // ends x's lease: todo, not before nb
	leaveReadyKeyed(t, g.db, g.tables.Table(schema.TasksTable), "k")
	g.caughtUp(t) // the claim finds k, ready keyed, through an index
	cancelled := lease.StatusCancelled
	tried := false
	cancel := func() {
		tried = true
		must[lease.Task](t)(g.other.UpdateTask(c, lease.UpdateTaskParams{TaskID: "k", AgentID: "admin", Admin: true, Status: &cancelled}))
	}
	g.afterUpdate.Store(&cancel)
	if _, err := g.store.Claim(c, lease.ClaimParams{AgentID: "a", Queues: []string{"kq"}, Timeout: time.Minute}); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("claim: %v, want no_task_available", err)
	}
	if !tried {
		t.Fatal("the claim wrote nothing for the task")
	}
	first := must[lease.Task](t)(g.other.GetTask(c, "k"))
	if first.Status != lease.StatusCancelled {
		t.Fatalf("status %s", first.Status)
	}
	again := must[lease.Task](t)(g.other.UpdateTask(c, lease.UpdateTaskParams{TaskID: "k", AgentID: "admin", Admin: true, Status: &cancelled}))
	g.clock.Advance(2 * time.Hour)
	g.caughtUp(t) // the sweep would find a delayed key the claim wrote
	res := must[lease.SweepResult](t)(g.other.Sweep(c))
	if again.Version != first.Version || res.Ready != 0 {
		t.Fatalf("a cancel of the cancelled task moved its version %d to %d, and a sweep after its not_before ranked %d task(s) ready: the claim's keepDelay wrote a delayed key and an expiry entry onto the task cancelled after its read",
			first.Version, again.Version, res.Ready)
	}
}

func TestAClaimReadsPastAHeadOfLaggingGrants(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	ids := idsInClaimShard("deep", 51, 0, schema.ClaimShards)
	for start := 0; start < len(ids); start += lease.MaxBatch {
		var batch []lease.CreateTaskParams
		for _, id := range ids[start:min(len(ids), start+lease.MaxBatch)] {
			batch = append(batch, lease.CreateTaskParams{TaskID: id, Queue: "deep"})
		}
		must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	}
	// The index shows all 51; from now on it lags.
	e.caughtUp(t)
	e.lag(t, schema.TasksTable, 20*time.Second)
	for _, id := range ids[:50] {
		e.checkout(t, id, "x", time.Hour)
	}
	e.count.Take()
	co, err := e.store.Claim(c, lease.ClaimParams{AgentID: "a", Queues: []string{"deep"}, Timeout: time.Minute})
	ops := e.count.Take()
	if err != nil {
		t.Fatalf("claim: %v (%d Queries, %d UpdateItems), while %s was claimable throughout", err, ops["Query"], ops["UpdateItem"], ids[50])
	}
	if co.TaskID != ids[50] {
		t.Fatalf("claim took %s, want %s", co.TaskID, ids[50])
	}
}

// A claim over shards whose heads hold only tasks whose not_before has
// passed (the sweep has not ranked them ready yet) takes one with one
// look: a head ending in a passed delay bounds the look as any head does.
func TestAClaimOverPassedDelaysTakesOneWithOneLook(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	nb := e.clock.Now().Add(time.Second)
	for shard := range schema.ClaimShards {
		var batch []lease.CreateTaskParams
		for _, id := range idsInClaimShard("pd", 20, shard, schema.ClaimShards) {
			batch = append(batch, lease.CreateTaskParams{TaskID: id, Queue: "pd", NotBefore: &nb})
		}
		must[[]lease.BatchResult](t)(e.store.CreateTasks(c, batch))
	}
	e.clock.Advance(2 * time.Second)
	e.caughtUp(t) // the claim finds the tasks through an index
	e.count.Take()
	must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "a", Queues: []string{"pd"}, Timeout: time.Minute}))
	if q := e.count.Count("Query"); q > 2*schema.ClaimShards {
		t.Fatalf("a claim over 80 ready tasks (their not_before passed, not yet ranked ready by the sweep) sent %d Queries (one look is %d)", q, schema.ClaimShards)
	}
}
