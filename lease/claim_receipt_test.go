package lease_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// receiptLossDB fails every write that would keep a named claim's grant in
// its receipt, as a throttled or unreachable table would.
type receiptLossDB struct{ lease.DB }

func (d receiptLossDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	// The write that keeps a grant names it; a note (which sets created)
	// names it too, in its condition (the receipt keeps none yet).
	names := slices.Collect(maps.Values(in.ExpressionAttributeNames))
	if slices.Contains(names, "granted") && !slices.Contains(names, "created") {
		return nil, errors.New("throttled")
	}
	return d.DB.UpdateItem(ctx, in, opt...)
}

// lossyStore is a store of e whose every grant write fails
// (receiptLossDB). Its claims try to keep a grant for 100 ms, not the 2 s
// a store tries for: the write never succeeds, and no other attempt keeps
// a grant meanwhile, so the longer wait would only make the test slower.
func (e *env) lossyStore() *lease.Store {
	s := lease.New(lease.Config{DB: receiptLossDB{e.db}, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	lease.KeepGrantsFor(s, 100*time.Millisecond)
	return s
}

// unkeptClaim claims with s, whose every grant write fails: the claim
// answers an error that says its grant was not kept, and the lease it got
// stays on its task, one of tasks, where it is found and returned.
func unkeptClaim(t testing.TB, s *lease.Store, p lease.ClaimParams, tasks ...string) lease.Checkout {
	t.Helper()
	if _, err := s.Claim(ctx(t), p); !errors.Is(err, lease.ErrGrantNotKept) {
		t.Fatalf("claim whose grant could not be kept: err %v, want one that says so", err)
	}
	for _, task := range tasks {
		if lock := must[*lease.Checkout](t)(s.LockStatus(ctx(t), task)); lock != nil && lock.AgentID == p.AgentID && lock.RunID == p.RunID {
			return *lock
		}
	}
	t.Fatalf("no lease of %s on %v", p.RunID, tasks)
	return lease.Checkout{}
}

// A named claim whose grant could not be kept in its receipt, retried after
// its task has moved on (its lease force-released, the task checked out and
// released by another), gets the same lease, not a second one under the
// same run id: the task's trail still has the grant.
func TestClaimRetryWithItsReceiptLostGetsTheSameLease(t *testing.T) {
	t.Parallel()
	for _, archived := range []string{"before the retry", "while the retry waits"} {
		t.Run(archived, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "x")
			e.caughtUp(t) // the claim finds x through an index
			lossy := e.lossyStore()
			first := unkeptClaim(t, lossy, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute}, "x")
			e.clock.Advance(time.Second)
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "admin", Force: true}))
			e.clock.Advance(time.Second)
			e.checkout(t, "x", "b", time.Minute)
			e.clock.Advance(time.Second)
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "b"}))
			polled := make(chan struct{})
			if archived == "before the retry" {
				e.drain(t)
				close(polled)
			} else {
				go func() {
					defer close(polled)
					time.Sleep(300 * time.Millisecond)
					_, _ = e.poller.Poll(context.Background())
				}()
			}
			again, err := e.store.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute})
			<-polled // the poller is one process's: one poll at a time
			if err != nil {
				t.Fatalf("retry: %v", err)
			}
			if again.TaskID != first.TaskID || again.Fence != first.Fence || !again.LockedAt.Equal(first.LockedAt) {
				t.Fatalf("retry got %+v, want the first lease %+v", again, first)
			}
			if again.ExpiresAt.After(first.LockedAt.Add(time.Second)) {
				t.Fatalf("retry got the lease as live until %v; it was force-released at %v", again.ExpiresAt, first.LockedAt.Add(time.Second))
			}
			if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, "x")); lock != nil {
				t.Fatalf("the retry was granted a second lease: %+v", lock)
			}
			var runs []int64
			for _, ev := range e.events(t, "x") {
				if ev.Type == lease.EventCheckout && ev.RunID == "run-1" {
					runs = append(runs, ev.Fence)
				}
			}
			if !slices.Equal(runs, []int64{first.Fence}) {
				t.Fatalf("run-1 granted fences %v, want only %d", runs, first.Fence)
			}
		})
	}
}

// A named claim retried gets its lease as it is now: renewed, with its
// new expiry and timeout; ended (released, force-released, timed out and
// swept, taken over, or long moved on), expiring when it ended, never
// shown as live. It is never granted a second lease.
func TestClaimRetryAnswersTheLeaseAsItIsNow(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"renewed", "released", "force-released", "swept", "taken over", "moved on"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "x")
			e.caughtUp(t) // the claim finds x through an index
			first := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute}))
			e.clock.Advance(time.Second)
			wantExp, wantTimeout := first.LockedAt.Add(time.Second), time.Second // ended a second in
			switch how {
			case "renewed":
				r := must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "x", AgentID: "a", RunID: "run-1", Timeout: 10 * time.Minute}))
				wantExp, wantTimeout = r.ExpiresAt, 10*time.Minute
			case "released":
				must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a", RunID: "run-1"}))
			case "force-released":
				must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "admin", Force: true}))
			case "swept":
				e.clock.Advance(2 * time.Minute)
				e.caughtUp(t) // the sweep finds the lease through an index
				must[lease.SweepResult](t)(e.store.Sweep(c))
				wantExp, wantTimeout = first.ExpiresAt, time.Minute
			case "taken over":
				e.clock.Advance(2 * time.Minute)
				e.checkout(t, "x", "b", time.Minute)
				wantExp, wantTimeout = first.ExpiresAt, time.Minute
			case "moved on":
				must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a", RunID: "run-1"}))
				e.clock.Advance(time.Second)
				co := e.checkout(t, "x", "b", time.Minute)
				must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "b", RunID: co.RunID}))
				e.drain(t)
			}
			e.clock.Advance(time.Second)
			again := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute}))
			if again.TaskID != first.TaskID || again.Fence != first.Fence || !again.LockedAt.Equal(first.LockedAt) ||
				again.Title != first.Title || again.Queue != first.Queue || again.Attempt != first.Attempt {
				t.Fatalf("retry got %+v, want the first lease %+v", again, first)
			}
			if !again.ExpiresAt.Equal(wantExp) || again.Timeout != wantTimeout {
				t.Fatalf("retry: expires %v, timeout %v; want %v, %v", again.ExpiresAt, again.Timeout, wantExp, wantTimeout)
			}
			var runs int
			for _, ev := range e.events(t, "x") {
				if ev.Type == lease.EventCheckout && ev.RunID == "run-1" {
					runs++
				}
			}
			if runs != 1 {
				t.Fatalf("run-1 was granted %d leases", runs)
			}
		})
	}
}

// Attempts of one named claim sent at the same time (a client retrying
// before its first answer came) hold one lease between them: each answers
// that lease, and the tasks the others got first are given back.
func TestConcurrentAttemptsOfOneClaimHoldOneLease(t *testing.T) {
	t.Parallel()
	for round := range 4 {
		e := newEnv(t)
		c := ctx(t)
		q := fmt.Sprintf("same-run-%d", round)
		for i := range 4 {
			e.create(t, lease.CreateTaskParams{TaskID: fmt.Sprintf("%s-%d", q, i), Queue: q})
		}
		e.caughtUp(t) // the claims find the tasks through an index
		const attempts = 3
		got := make([]lease.Checkout, attempts)
		errs := make([]error, attempts)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range attempts {
			wg.Go(func() {
				<-start
				got[i], errs[i] = e.store.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute, Queues: []string{q}})
			})
		}
		close(start)
		wg.Wait()
		for i := range attempts {
			if errs[i] != nil {
				t.Fatalf("round %d, attempt %d: %v", round, i, errs[i])
			}
			if got[i].TaskID != got[0].TaskID || got[i].Fence != got[0].Fence {
				t.Fatalf("round %d: attempts answered %s/%d and %s/%d, want one lease", round, got[0].TaskID, got[0].Fence, got[i].TaskID, got[i].Fence)
			}
		}
		e.caughtUp(t) // the leases are listed through an index
		live := must[[]lease.Checkout](t)(e.store.ListCheckouts(c, "a"))
		if len(live) != 1 || live[0].TaskID != got[0].TaskID || live[0].RunID != "run-1" {
			t.Fatalf("round %d: run-1 holds %+v, want only %s", round, live, got[0].TaskID)
		}
	}
}

// A named claim retried answers the lease it got, not a later lease of
// the same run id (a checkout may name any run id) on the same task.
// Found by TestLinearizabilityWorkGraphSlowStream.
func TestClaimRetryAnswersItsOwnGrantNotALaterLeaseOfTheRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	e.caughtUp(t) // the claim finds x through an index
	first := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute}))
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a", RunID: "run-1", Fence: first.Fence}))
	e.clock.Advance(time.Second)
	second := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "x", AgentID: "a", RunID: "run-1"}))
	for _, when := range []string{"while the later lease is live", "after it ended"} {
		if when == "after it ended" {
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a", RunID: "run-1", Fence: second.Fence}))
			e.drain(t)
		}
		again := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute}))
		if again.Fence != first.Fence || !again.LockedAt.Equal(first.LockedAt) {
			t.Fatalf("%s: the retry answered fence %d locked %v, want the claim's fence %d locked %v", when, again.Fence, again.LockedAt, first.Fence, first.LockedAt)
		}
	}
}

// grantGateDB holds the first two grant writes of a named claim's receipt
// until the test lets each go (gate, by the task it keeps), and the first
// two reads of the receipt until both have come: two attempts of the run
// then each take a task, neither having seen the other's.
type grantGateDB struct {
	lease.DB
	quit     chan struct{} // closed when the test ends: let everything go
	bothRead chan struct{}
	held     chan string // the task of each grant write held, as it arrives
	mu       sync.Mutex
	reads    int
	writes   int
	gates    map[string]chan struct{}
}

func (d *grantGateDB) gate(task string) chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.gates[task] == nil {
		d.gates[task] = make(chan struct{})
	}
	return d.gates[task]
}

func (d *grantGateDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if id, ok := in.Key["agent_id"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(id.Value, "#claim#") {
		d.mu.Lock()
		d.reads++
		n := d.reads
		if n == 2 {
			close(d.bothRead)
		}
		d.mu.Unlock()
		if n <= 2 {
			select {
			case <-d.bothRead:
			case <-d.quit:
			}
		}
	}
	return d.DB.GetItem(ctx, in, opt...)
}

func (d *grantGateDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if task := grantTask(in); task != "" {
		d.mu.Lock()
		d.writes++
		n := d.writes
		d.mu.Unlock()
		if n <= 2 {
			g := d.gate(task)
			d.held <- task
			select {
			case <-g:
			case <-d.quit:
			}
		}
	}
	return d.DB.UpdateItem(ctx, in, opt...)
}

// grantTask is the task of the grant an UpdateItem keeps in a receipt ("" for
// any other write).
func grantTask(in *dynamodb.UpdateItemInput) string {
	if !slices.Contains(slices.Collect(maps.Values(in.ExpressionAttributeNames)), "granted") {
		return ""
	}
	for _, v := range in.ExpressionAttributeValues {
		if m, ok := v.(*types.AttributeValueMemberM); ok {
			if task, ok := m.Value["task"].(*types.AttributeValueMemberS); ok {
				return task.Value
			}
		}
	}
	return ""
}

// An attempt of a named claim that finds, at its start, a lease of its run
// on a tried task while the receipt keeps no grant yet answers the lease
// the receipt keeps, not one another attempt may still give back: attempts
// A and B each took a task and have not kept their grants; C starts and
// finds one of them, X; then the grant of the other task, Y, is kept first,
// and X's attempt gives X back. Found by
// TestConcurrentAttemptsOfOneClaimHoldOneLease, once under load.
func TestClaimAttemptFindingAnUnkeptGrantAnswersTheReceiptsGrant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t0", "t1")
	e.caughtUp(t)
	db := &grantGateDB{DB: e.db, quit: make(chan struct{}), bothRead: make(chan struct{}), held: make(chan string, 2), gates: map[string]chan struct{}{}}
	t.Cleanup(func() { close(db.quit) })
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	lease.TakeNoTurns(s) // attempts that race: a version before turns (or a turn lapsed)
	claim := func() (lease.Checkout, error) {
		return s.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute})
	}
	type answer struct {
		co  lease.Checkout
		err error
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			co, err := claim()
			answers <- answer{co, err}
		}()
	}
	var took []string
	for range 2 {
		select {
		case task := <-db.held:
			took = append(took, task)
		case a := <-answers:
			t.Fatalf("an attempt answered %+v (%v) before both grants were written", a.co, a.err)
		}
	}
	if took[0] == took[1] {
		t.Fatalf("both attempts took %s, want one task each", took[0])
	}
	e.caughtUp(t) // the third attempt's index shows both tasks taken
	third := must[lease.Checkout](t)(claim())
	if !slices.Contains(took, third.TaskID) {
		t.Fatalf("the third attempt answered %s, want one of %v", third.TaskID, took)
	}
	// The grant of the task the third attempt did not answer is written
	// first, then the other.
	got := []lease.Checkout{third}
	order := []string{took[0], took[1]}
	if order[0] == third.TaskID {
		order[0], order[1] = order[1], order[0]
	}
	for _, task := range order {
		close(db.gate(task))
		a := <-answers
		if a.err != nil {
			t.Fatalf("the attempt holding %s: %v", task, a.err)
		}
		got = append(got, a.co)
	}
	for _, co := range got {
		if co.TaskID != got[0].TaskID || co.Fence != got[0].Fence {
			t.Fatalf("attempts answered %s/%d, %s/%d and %s/%d, want one lease", got[0].TaskID, got[0].Fence, got[1].TaskID, got[1].Fence, got[2].TaskID, got[2].Fence)
		}
	}
	e.caughtUp(t) // the leases are listed through an index
	live := must[[]lease.Checkout](t)(e.store.ListCheckouts(c, "a"))
	if len(live) != 1 || live[0].TaskID != got[0].TaskID || live[0].Fence != got[0].Fence {
		t.Fatalf("run-1 holds %+v, want only %s/%d", live, got[0].TaskID, got[0].Fence)
	}
}

// grantErrDB fails, with an error and unsent, every write that would keep
// the grant of task fail ("*": of any task) in a named claim's receipt: a
// write that timed out, or whose answer was lost, after the SDK's own
// retries. Each failed write's task is sent on failed, if set, when there
// is room.
type grantErrDB struct {
	lease.DB
	fail   atomic.Value // string
	failed chan string
}

func (d *grantErrDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if task := grantTask(in); task != "" && (task == d.fail.Load() || d.fail.Load() == "*") {
		select {
		case d.failed <- task:
		default:
		}
		return nil, errors.New("request timed out")
	}
	return d.DB.UpdateItem(ctx, in, opt...)
}

// Attempts of one named claim sent at the same time hold one lease even
// when the grant write of one of them fails with an error (no refused
// condition): attempts A and B each took a task; A's grant is kept; B's
// write times out, every time. B reads the receipt, finds A's grant, gives
// its own task back and answers A's lease.
func TestClaimAttemptWhoseGrantWriteFailsAnswersTheKeptGrant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t0", "t1")
	e.caughtUp(t)
	errs := &grantErrDB{DB: e.db}
	errs.fail.Store("")
	db := &grantGateDB{DB: errs, quit: make(chan struct{}), bothRead: make(chan struct{}), held: make(chan string, 2), gates: map[string]chan struct{}{}}
	t.Cleanup(func() { close(db.quit) })
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	lease.TakeNoTurns(s) // attempts that race: a version before turns (or a turn lapsed)
	type answer struct {
		co  lease.Checkout
		err error
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			co, err := s.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute})
			answers <- answer{co, err}
		}()
	}
	var took []string
	for range 2 {
		select {
		case task := <-db.held:
			took = append(took, task)
		case a := <-answers:
			t.Fatalf("an attempt answered %+v (%v) before both grants were written", a.co, a.err)
		}
	}
	if took[0] == took[1] {
		t.Fatalf("both attempts took %s, want one task each", took[0])
	}
	errs.fail.Store(took[1])
	var got []lease.Checkout
	for _, task := range took {
		close(db.gate(task))
		a := <-answers
		if a.err != nil {
			t.Fatalf("the attempt holding %s: %v", task, a.err)
		}
		got = append(got, a.co)
	}
	if got[0].TaskID != took[0] || got[1].TaskID != got[0].TaskID || got[1].Fence != got[0].Fence {
		t.Fatalf("attempts answered %s/%d and %s/%d, want the kept grant %s twice", got[0].TaskID, got[0].Fence, got[1].TaskID, got[1].Fence, took[0])
	}
	if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, took[1])); lock != nil {
		t.Fatalf("%s still holds %+v, a second lease of run-1", took[1], lock)
	}
}

// An attempt of a named claim that finds, at its start, a lease of its run
// on a tried task while the receipt keeps no grant, and whose write to keep
// that lease as the run's fails with an error, lets the receipt decide as
// an attempt whose own grant write fails does: attempts A and B each took
// a task and have not kept their grants; C starts, finds one of them, X,
// and its write fails; then the grant of the other task, Y, is kept, and
// X's attempt gives X back. C answered X, a lease the run no longer held.
func TestClaimAttemptWhoseWriteForAFoundLeaseFailsAnswersTheKeptGrant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t0", "t1")
	e.caughtUp(t)
	errs := &grantErrDB{DB: e.db, failed: make(chan string, 1)}
	errs.fail.Store("")
	db := &grantGateDB{DB: errs, quit: make(chan struct{}), bothRead: make(chan struct{}), held: make(chan string, 2), gates: map[string]chan struct{}{}}
	t.Cleanup(func() { close(db.quit) })
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	lease.TakeNoTurns(s) // attempts that race: a version before turns (or a turn lapsed)
	type answer struct {
		co  lease.Checkout
		err error
	}
	claim := func(answers chan<- answer) {
		co, err := s.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute})
		answers <- answer{co, err}
	}
	answers := make(chan answer, 2)
	for range 2 {
		go claim(answers)
	}
	var took []string
	for range 2 {
		select {
		case task := <-db.held:
			took = append(took, task)
		case a := <-answers:
			t.Fatalf("an attempt answered %+v (%v) before both grants were written", a.co, a.err)
		}
	}
	if took[0] == took[1] {
		t.Fatalf("both attempts took %s, want one task each", took[0])
	}
	e.caughtUp(t) // the third attempt's index shows both tasks taken
	errs.fail.Store("*")
	thirds := make(chan answer, 1)
	go claim(thirds)
	found := <-errs.failed
	if !slices.Contains(took, found) {
		t.Fatalf("the third attempt wrote for %s, want one of %v", found, took)
	}
	// The third attempt's write for the lease it found fails; the grant of
	// the other task is kept, then the found task's write fails too.
	errs.fail.Store(found)
	order := []string{took[0], took[1]}
	if order[0] == found {
		order[0], order[1] = order[1], order[0]
	}
	var got []lease.Checkout
	for _, task := range order {
		close(db.gate(task))
		a := <-answers
		if a.err != nil {
			t.Fatalf("the attempt holding %s: %v", task, a.err)
		}
		got = append(got, a.co)
	}
	third := <-thirds
	if third.err != nil {
		t.Fatalf("the third attempt: %v", third.err)
	}
	got = append(got, third.co)
	for _, co := range got {
		if co.TaskID != order[0] || co.Fence != got[0].Fence {
			t.Fatalf("attempts answered %s/%d, %s/%d and %s/%d (the third), want the kept grant %s", got[0].TaskID, got[0].Fence, got[1].TaskID, got[1].Fence, got[2].TaskID, got[2].Fence, order[0])
		}
	}
	if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, found)); lock != nil {
		t.Fatalf("%s still holds %+v, a second lease of run-1", found, lock)
	}
}

// receiptReadErrDB fails every read of a named claim's receipt while fail
// is set, as a throttled table would.
type receiptReadErrDB struct {
	lease.DB
	fail atomic.Bool
}

func (d *receiptReadErrDB) GetItem(ctx context.Context, in *dynamodb.GetItemInput, opt ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	if id, ok := in.Key["agent_id"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(id.Value, "#claim#") && d.fail.Load() {
		return nil, errors.New("throttled")
	}
	return d.DB.GetItem(ctx, in, opt...)
}

// An attempt of a named claim whose grant the receipt refuses (another
// attempt's was kept first) gives its task back even when it cannot read
// the receipt to answer the kept grant: it read the receipt first and, on
// an error, answered it with its own lease still on its task, a second
// live lease of the run until its timeout.
func TestASupersededAttemptThatCannotReadTheReceiptGivesItsTaskBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t0", "t1")
	e.caughtUp(t)
	db := &grantGateDB{DB: e.db, quit: make(chan struct{}), bothRead: make(chan struct{}), held: make(chan string, 2), gates: map[string]chan struct{}{}}
	t.Cleanup(func() { close(db.quit) })
	reads := &receiptReadErrDB{DB: db}
	s := lease.New(lease.Config{DB: reads, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	lease.TakeNoTurns(s) // attempts that race: a version before turns (or a turn lapsed)
	type answer struct {
		co  lease.Checkout
		err error
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			co, err := s.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute})
			answers <- answer{co, err}
		}()
	}
	var took []string
	for range 2 {
		select {
		case task := <-db.held:
			took = append(took, task)
		case a := <-answers:
			t.Fatalf("an attempt answered %+v (%v) before both grants were written", a.co, a.err)
		}
	}
	if took[0] == took[1] {
		t.Fatalf("both attempts took %s, want one task each", took[0])
	}
	reads.fail.Store(true)
	close(db.gate(took[0]))
	if a := <-answers; a.err != nil || a.co.TaskID != took[0] {
		t.Fatalf("the attempt whose grant was kept answered %+v (%v), want %s", a.co, a.err, took[0])
	}
	close(db.gate(took[1]))
	a := <-answers
	t.Logf("the superseded attempt answered %+v (%v)", a.co, a.err)
	if a.err == nil && (a.co.TaskID != took[0]) {
		t.Fatalf("the superseded attempt answered %s, want the kept grant %s or an error", a.co.TaskID, took[0])
	}
	if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, took[1])); lock != nil {
		t.Fatalf("%s still holds %+v, a second live lease of run-1", took[1], lock)
	}
}

// A named claim's grant left undecided (its receipt write failing, and the
// receipt unreadable, for grantWait: the attempt answers ErrGrantNotKept)
// is given back once another attempt of the run keeps its own grant:
// attempts A and B each took a task; A's grant is left undecided; B's is
// kept. Before, A's task stayed held by the run, a second lease, and
// claimable by no one until its timeout.
func TestAnUndecidedGrantIsGivenBackWhenAnotherAttemptsIsKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t0", "t1")
	e.caughtUp(t)
	errs := &grantErrDB{DB: e.db}
	errs.fail.Store("")
	db := &grantGateDB{DB: errs, quit: make(chan struct{}), bothRead: make(chan struct{}), held: make(chan string, 2), gates: map[string]chan struct{}{}}
	t.Cleanup(func() { close(db.quit) })
	reads := &receiptReadErrDB{DB: db}
	s := lease.New(lease.Config{DB: reads, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	lease.TakeNoTurns(s) // attempts that race: a version before turns (or a turn lapsed)
	type answer struct {
		co  lease.Checkout
		err error
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			co, err := s.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute})
			answers <- answer{co, err}
		}()
	}
	var took []string
	for range 2 {
		select {
		case task := <-db.held:
			took = append(took, task)
		case a := <-answers:
			t.Fatalf("an attempt answered %+v (%v) before both grants were written", a.co, a.err)
		}
	}
	if took[0] == took[1] {
		t.Fatalf("both attempts took %s, want one task each", took[0])
	}
	undecided, kept := took[0], took[1]
	errs.fail.Store(undecided)
	reads.fail.Store(true)
	close(db.gate(undecided))
	if a := <-answers; !errors.Is(a.err, lease.ErrGrantNotKept) {
		t.Fatalf("the attempt holding %s answered %+v (%v), want ErrGrantNotKept", undecided, a.co, a.err)
	}
	if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, undecided)); lock == nil || lock.RunID != "run-1" {
		t.Fatalf("%s holds %+v, want the undecided lease of run-1", undecided, lock)
	}
	reads.fail.Store(false)
	close(db.gate(kept))
	if a := <-answers; a.err != nil || a.co.TaskID != kept {
		t.Fatalf("the attempt holding %s answered %+v (%v), want its own lease", kept, a.co, a.err)
	}
	if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, undecided)); lock != nil {
		t.Fatalf("%s still holds %+v, a second lease of run-1", undecided, lock)
	}
	co := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: undecided, AgentID: "b"}))
	if co.TaskID != undecided {
		t.Fatalf("checkout of %s by another agent: %+v", undecided, co)
	}
	again := must[lease.Checkout](t)(s.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute}))
	if again.TaskID != kept {
		t.Fatalf("a retry of run-1 answered %s, want the kept grant %s", again.TaskID, kept)
	}
}

// An attempt of a named claim whose grant the receipt does not keep
// answers the kept grant even when the kept attempt has given its lease
// back already (giveBackUnkept) and the task has moved on since: attempts
// A and B each took a task; A's grant is kept and A gives B's task back;
// another agent takes that task and releases it, before the change stream
// has archived the give-back; then B finds A's grant kept. B's own
// give-back was refused (its lease ended, by a release the task no longer
// shows nor the trail yet) and B answered that error, though its run held
// A's lease.
func TestASupersededAttemptWhoseTaskWasGivenBackAndMovedOnAnswersTheKeptGrant(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t0", "t1")
	e.caughtUp(t)
	db := &grantGateDB{DB: e.db, quit: make(chan struct{}), bothRead: make(chan struct{}), held: make(chan string, 2), gates: map[string]chan struct{}{}}
	t.Cleanup(func() { close(db.quit) })
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	lease.TakeNoTurns(s) // attempts that race: a version before turns (or a turn lapsed)
	type answer struct {
		co  lease.Checkout
		err error
	}
	answers := make(chan answer, 2)
	for range 2 {
		go func() {
			co, err := s.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute})
			answers <- answer{co, err}
		}()
	}
	var took []string
	for range 2 {
		select {
		case task := <-db.held:
			took = append(took, task)
		case a := <-answers:
			t.Fatalf("an attempt answered %+v (%v) before both grants were written", a.co, a.err)
		}
	}
	if took[0] == took[1] {
		t.Fatalf("both attempts took %s, want one task each", took[0])
	}
	kept, other := took[0], took[1]
	close(db.gate(kept))
	if a := <-answers; a.err != nil || a.co.TaskID != kept {
		t.Fatalf("the attempt holding %s answered %+v (%v), want its own lease", kept, a.co, a.err)
	}
	if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, other)); lock != nil {
		t.Fatalf("%s holds %+v, want it given back by the kept attempt", other, lock)
	}
	co := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: other, AgentID: "b"}))
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: other, AgentID: "b", RunID: co.RunID, Fence: co.Fence}))
	close(db.gate(other))
	if a := <-answers; a.err != nil || a.co.TaskID != kept {
		t.Fatalf("the attempt holding %s answered %+v (%v), want the kept grant %s", other, a.co, a.err, kept)
	}
	if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, other)); lock != nil {
		t.Fatalf("%s holds %+v, want it free", other, lock)
	}
}

// runsClaimLosesListedTask has the run of p (agent "a") check b out by
// name and release it, then claim with a rival taking b just before its
// grant write: b, showing the run's ended lease, stays listed in the
// receipt, and the claim gets next, created after b, but cannot keep that
// grant (ErrGrantNotKept). It returns that lease, with b held by "rival".
func runsClaimLosesListedTask(t *testing.T, e *env, p lease.ClaimParams, next string) lease.Checkout {
	t.Helper()
	c := ctx(t)
	e.task(t, "b")
	e.clock.Advance(time.Millisecond)
	e.task(t, next)
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "b", AgentID: p.AgentID, RunID: p.RunID, Timeout: time.Minute}))
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "b", AgentID: p.AgentID, RunID: p.RunID}))
	e.clock.Advance(5 * time.Second) // before the claim, by more than receiptSkew
	e.caughtUp(t)                    // the claim finds b through an index
	e.drain(t)                       // b's trail, read by the retry, has nothing pending

	raced := &racedDB{DB: receiptLossDB{e.db}, tasks: e.names.Table(schema.TasksTable), rival: e.store}
	raced.lose.Store(1)
	racing := lease.New(lease.Config{DB: raced, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	first := unkeptClaim(t, racing, p, next)
	if tried := must[[]string](t)(lease.ReceiptTried(c, e.store, p.AgentID, p.RunID)); !slices.Contains(tried, "b") {
		t.Fatalf("the receipt lists %v, want b among them", tried)
	}
	return first
}

// A run that uses one run id for its whole life keeps the lease it checked
// out by name on a task one of its claims tried: the run's claim lost
// task b to another claimer (b, showing the run's earlier lease, stays
// listed in the receipt), got a but could not keep that grant
// (ErrGrantNotKept), and the run then checked b out by name once b was
// free. The retry of the claim keeps a, the lease it finds, and gives back
// the run's undecided leases: before, b's lease, granted after a by no
// attempt of the claim, went with them.
func TestAClaimRetryKeepsTheRunsLaterNamedCheckout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	p := lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute}
	first := runsClaimLosesListedTask(t, e, p, "a")

	e.clock.Advance(time.Second)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "b", AgentID: "rival"}))
	e.clock.Advance(time.Second)
	named := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "b", AgentID: "a", RunID: "run-1", Timeout: time.Minute}))

	e.clock.Advance(time.Second)
	again := must[lease.Checkout](t)(e.store.Claim(c, p))
	if again.TaskID != "a" || again.Fence != first.Fence {
		t.Fatalf("the retry answered %s/%d, want the claim's lease a/%d", again.TaskID, again.Fence, first.Fence)
	}
	if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, "b")); lock == nil || lock.RunID != "run-1" || lock.Fence != named.Fence {
		t.Fatalf("b holds %+v, want the run's named checkout (fence %d)", lock, named.Fence)
	}
}

// The retry of a claim keeps the claim's own lease, not the run's checkout
// by name, whichever task id sorts first: the run's claim lost b (listed,
// showing the run's earlier lease), got c but could not keep that grant,
// and the run then checked b out by name (and, in one case, released it).
// Before, the retry took the first listed task showing a lease of the run,
// b: it answered the named checkout (ended, in one case) as the claim's
// lease and gave back c.
func TestAClaimRetryKeepsItsOwnLeaseOverANamedCheckoutListedFirst(t *testing.T) {
	t.Parallel()
	for _, named := range []string{"held", "released"} {
		t.Run(named, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			p := lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute}
			first := runsClaimLosesListedTask(t, e, p, "c")

			e.clock.Advance(time.Second)
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "b", AgentID: "rival"}))
			e.clock.Advance(time.Second)
			byName := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "b", AgentID: "a", RunID: "run-1", Timeout: time.Minute}))
			if named == "released" {
				e.clock.Advance(time.Second)
				must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "b", AgentID: "a", RunID: "run-1"}))
			}

			e.clock.Advance(time.Second)
			again := must[lease.Checkout](t)(e.store.Claim(c, p))
			if again.TaskID != "c" || again.Fence != first.Fence {
				t.Fatalf("the retry answered %s/%d, want the claim's lease c/%d", again.TaskID, again.Fence, first.Fence)
			}
			if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, "c")); lock == nil || lock.Fence != first.Fence {
				t.Fatalf("c holds %+v, want the claim's lease (fence %d)", lock, first.Fence)
			}
			if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, "b")); named == "held" && (lock == nil || lock.Fence != byName.Fence) {
				t.Fatalf("b holds %+v, want the run's named checkout (fence %d)", lock, byName.Fence)
			}
		})
	}
}

// The retry of a claim does not answer a lease its run held by name before
// the claim began: the run checked a out by name and released it; its
// claim then lost a to another claimer (a, showing the run's ended lease,
// stays listed), got c, and could not keep that grant. Before, the retry
// answered a's ended lease, the checkout by name, as the claim's, and gave
// back c.
func TestAClaimRetryDoesNotAnswerTheRunsCheckoutFromBeforeTheClaim(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	p := lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute}
	e.task(t, "a")
	e.clock.Advance(time.Millisecond)
	e.task(t, "c")
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "a", AgentID: "a", RunID: "run-1", Timeout: time.Minute}))
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "a", AgentID: "a", RunID: "run-1"}))
	e.clock.Advance(5 * time.Second)
	e.caughtUp(t)
	e.drain(t)

	raced := &racedDB{DB: receiptLossDB{e.db}, tasks: e.names.Table(schema.TasksTable), rival: e.store}
	raced.lose.Store(1)
	racing := lease.New(lease.Config{DB: raced, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	first := unkeptClaim(t, racing, p, "c")
	if tried := must[[]string](t)(lease.ReceiptTried(c, e.store, "a", "run-1")); !slices.Equal(tried, []string{"a", "c"}) {
		t.Fatalf("the receipt lists %v, want [a c]", tried)
	}

	e.clock.Advance(time.Second)
	again := must[lease.Checkout](t)(e.store.Claim(c, p))
	if again.TaskID != "c" || again.Fence != first.Fence {
		t.Fatalf("the retry answered %s/%d, want the claim's lease c/%d", again.TaskID, again.Fence, first.Fence)
	}
	if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, "c")); lock == nil || lock.Fence != first.Fence {
		t.Fatalf("c holds %+v, want the claim's lease (fence %d)", lock, first.Fence)
	}
}
