package lease_test

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

const racers = 32

// race runs fn on n goroutines released at the same instant.
// raceLag is the index lag the race and linearizability tests run under:
// the decisions must hold while the indexes trail the table, as DynamoDB's
// do. CHECKOUT_TEST_INDEX_LAG sets another (make chaos runs several).
var raceLag = func() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("CHECKOUT_TEST_INDEX_LAG")); err == nil {
		return d
	}
	return 150 * time.Millisecond
}()

func race(n int, fn func(i int)) {
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range n {
		done.Add(1)
		go func() {
			defer done.Done()
			start.Wait()
			fn(i)
		}()
	}
	start.Done()
	done.Wait()
}

// retryingTask creates a task that may be granted as often as the work
// graph allows (MaxMaxAttempts), for races that end its leases round
// after round by expiry, each a failed attempt.
func (e *env) retryingTask(t testing.TB, id string) {
	t.Helper()
	e.create(t, lease.CreateTaskParams{TaskID: id, Title: "title of " + id, MaxAttempts: new(lease.MaxMaxAttempts)})
}

// Mutual exclusion: 32 agents race for one task, round after round. Exactly
// one wins each round; every other is told who won.
func TestRaceCheckout(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.lag(t, "", raceLag)
	c := ctx(t)
	e.retryingTask(t, "hot")
	var lastFence int64
	for round := range 15 {
		results := make([]error, racers)
		grants := make([]lease.Checkout, racers)
		race(racers, func(i int) {
			grants[i], results[i] = e.store.Checkout(c, lease.CheckoutParams{TaskID: "hot", AgentID: fmt.Sprintf("agent-%02d", i), Timeout: time.Minute})
		})
		winner := -1
		for i, err := range results {
			if err == nil {
				if winner >= 0 {
					t.Fatalf("round %d: agents %d and %d both won", round, winner, i)
				}
				winner = i
			}
		}
		if winner < 0 {
			t.Fatalf("round %d: nobody won: %v", round, results)
		}
		for i, err := range results {
			var ce *lease.ConflictError
			if i != winner && (!errors.As(err, &ce) || ce.Holder != grants[winner]) {
				t.Fatalf("round %d: loser %d got %v, want conflict naming %+v", round, i, err, grants[winner])
			}
		}
		if grants[winner].Fence <= lastFence {
			t.Fatalf("round %d: fence %d after %d", round, grants[winner].Fence, lastFence)
		}
		lastFence = grants[winner].Fence
		// End the round alternately by release and by expiry.
		if round%2 == 0 {
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "hot", AgentID: grants[winner].AgentID}))
		} else {
			e.clock.Advance(time.Minute)
		}
	}
	assertOneEndPerLease(t, e, "hot")
}

// assertOneEndPerLease checks the audit trail: every granted fence has one
// checkout event and at most one ending event, and fences increase.
func assertOneEndPerLease(t *testing.T, e *env, taskID string) {
	t.Helper()
	checkouts, ends := map[int64]int{}, map[int64]int{}
	var last int64
	for _, ev := range e.events(t, taskID) {
		switch {
		case ev.Type == lease.EventCheckout:
			checkouts[ev.Fence]++
			if ev.Fence <= last {
				t.Fatalf("checkout fence %d after %d", ev.Fence, last)
			}
			last = ev.Fence
		case ev.EndsLease():
			ends[ev.Fence]++
			if ev.Held == nil {
				t.Fatalf("ending event without held: %+v", ev)
			}
		}
	}
	for f, n := range checkouts {
		if n != 1 || ends[f] > 1 {
			t.Fatalf("fence %d: %d checkout events, %d ending events", f, n, ends[f])
		}
	}
	for f := range ends {
		if checkouts[f] != 1 {
			t.Fatalf("ending event for fence %d that was never granted", f)
		}
	}
}

// Checkouts race the sweep over expired leases: one grant per round, and
// each expired lease ends exactly once (timeout by the sweep or by the
// takeover, never both).
func TestRaceCheckoutAndSweep(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.lag(t, "", raceLag)
	c := ctx(t)
	e.retryingTask(t, "t")
	for round := range 10 {
		e.checkout(t, "t", "holder", time.Minute)
		e.clock.Advance(time.Minute)
		var mu sync.Mutex
		wins := 0
		race(16, func(i int) {
			if i%4 == 0 {
				must[lease.SweepResult](t)(e.store.Sweep(c))
				return
			}
			_, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: fmt.Sprintf("a%d", i), Timeout: time.Minute})
			var ce *lease.ConflictError
			switch {
			case err == nil:
				mu.Lock()
				wins++
				mu.Unlock()
			case !errors.As(err, &ce):
				t.Errorf("round %d: checkout: %v", round, err)
			}
		})
		if wins != 1 {
			t.Fatalf("round %d: %d grants", round, wins)
		}
		e.clock.Advance(time.Minute)
	}
	assertOneEndPerLease(t, e, "t")
}

// The holder releases while others take over its lease (its heartbeat has
// expired): whichever write lands first decides, and the lease ends once.
func TestRaceReleaseAndTakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.lag(t, "", raceLag)
	c := ctx(t)
	e.retryingTask(t, "t")
	for round := range 10 {
		must[lease.Heartbeat](t)(e.store.Heartbeat(c, "holder", time.Second))
		e.checkout(t, "t", "holder", time.Hour)
		e.clock.Advance(time.Second)
		var mu sync.Mutex
		grants := 0
		race(8, func(i int) {
			if i == 0 {
				// Its lease ended with its heartbeat: not_checked_out, or
				// not_holder once a takeover has landed.
				_, err := e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "holder"})
				if !errors.Is(err, lease.ErrNotCheckedOut) && !errors.Is(err, lease.ErrNotHolder) {
					t.Errorf("release by the dead holder: %v", err)
				}
				return
			}
			_, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: fmt.Sprintf("a%d", i), Timeout: time.Minute})
			var ce *lease.ConflictError
			if err == nil {
				mu.Lock()
				grants++
				mu.Unlock()
			} else if !errors.As(err, &ce) {
				t.Errorf("checkout: %v", err)
			}
		})
		if grants != 1 {
			t.Fatalf("round %d: %d grants", round, grants)
		}
		// Make room for the next round.
		e.clock.Advance(time.Minute)
		must[lease.SweepResult](t)(e.store.Sweep(c))
	}
	assertOneEndPerLease(t, e, "t")
}

// Renewals race expiry: the clock crosses the lease's expiry while the holder
// renews and others try to take over. A renewal that succeeded kept the lease
// live, so a takeover must come after the last successful renewal's expiry.
func TestRaceRenewAndExpiry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.lag(t, "", raceLag)
	c := ctx(t)
	e.retryingTask(t, "t")
	for round := range 10 {
		e.checkout(t, "t", "holder", time.Second)
		var mu sync.Mutex
		var renewedUntil time.Time
		var takenAt []time.Time
		race(12, func(i int) {
			switch {
			case i == 0:
				for range 20 {
					e.clock.Advance(100 * time.Millisecond)
				}
			case i < 4:
				for range 10 {
					if r, err := e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "holder"}); err == nil {
						mu.Lock()
						if r.ExpiresAt.After(renewedUntil) {
							renewedUntil = r.ExpiresAt
						}
						mu.Unlock()
					}
				}
			default:
				for range 10 {
					got, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: fmt.Sprintf("a%d", i), Timeout: time.Hour})
					if err == nil {
						mu.Lock()
						takenAt = append(takenAt, got.LockedAt)
						mu.Unlock()
						return
					}
				}
			}
		})
		if len(takenAt) > 1 {
			t.Fatalf("round %d: %d takeovers of one lease", round, len(takenAt))
		}
		if len(takenAt) == 1 && takenAt[0].Before(renewedUntil) {
			t.Fatalf("round %d: taken over at %v while renewed until %v", round, takenAt[0], renewedUntil)
		}
		e.clock.Advance(2 * time.Hour)
	}
	assertOneEndPerLease(t, e, "t")
}

// Concurrent claims never hand one task to two agents.
func TestRaceClaims(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.lag(t, "", raceLag)
	c := ctx(t)
	const tasks = 40
	for i := range tasks {
		e.task(t, fmt.Sprintf("job-%02d", i))
		e.clock.Advance(time.Millisecond)
	}
	// The claim index lags: a claimer that finds nothing gives up, so the
	// race starts once the index shows every task.
	eventually(t, "every task in the claim index", func() bool { return e.claimable(t, lease.DefaultQueue) == tasks })
	var mu sync.Mutex
	owner := map[string]string{}
	race(racers, func(i int) {
		agent := fmt.Sprintf("agent-%02d", i)
		for {
			got, err := e.store.Claim(c, lease.ClaimParams{AgentID: agent, Timeout: time.Hour})
			if errors.Is(err, lease.ErrNoTaskAvailable) {
				return
			}
			if err != nil {
				t.Errorf("claim: %v", err)
				return
			}
			mu.Lock()
			if prev, dup := owner[got.TaskID]; dup {
				t.Errorf("%s claimed by %s and %s", got.TaskID, prev, agent)
			}
			owner[got.TaskID] = agent
			mu.Unlock()
		}
	})
	if len(owner) != tasks {
		t.Fatalf("%d of %d tasks claimed", len(owner), tasks)
	}
}

// claimable counts queue's entries in the claim index, every shard.
func (e *env) claimable(t testing.TB, queue string) int {
	t.Helper()
	n := 0
	for shard := range schema.ClaimShards {
		out, err := e.db.Query(ctx(t), &dynamodb.QueryInput{
			TableName: aws.String(e.names.Table(schema.TasksTable)), IndexName: aws.String(schema.TasksByClaim),
			KeyConditionExpression:    aws.String("claim_shard = :s"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: fmt.Sprintf("%s#%d", queue, shard)}},
			Select:                    types.SelectCount,
		})
		if err != nil {
			t.Fatalf("count the claim index: %v", err)
		}
		n += int(out.Count)
	}
	return n
}

// Overlapping sweeps over the same expired leases: one ending event per
// lease and one message per watcher.
func TestConcurrentSweeps(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.lag(t, "", raceLag)
	c := ctx(t)
	const leases = 20
	for i := range leases {
		id := fmt.Sprintf("t%02d", i)
		e.task(t, id)
		e.checkout(t, id, "holder", time.Minute)
		for _, w := range []string{"w1", "w2"} {
			if err := e.store.Watch(c, id, w); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The sweep reads an index that lags: it may miss a lease granted a
	// moment ago (the next sweep finds it). Here every lease must be ended
	// by these sweeps, so wait for the index to show them all first.
	eventually(t, "every lease in the index", func() bool {
		return len(must[[]lease.Checkout](t)(e.store.ListCheckouts(c, "holder"))) == leases
	})
	e.clock.Advance(time.Minute)
	var mu sync.Mutex
	var sum lease.SweepResult
	race(6, func(int) {
		res := must[lease.SweepResult](t)(e.store.Sweep(c))
		mu.Lock()
		sum.Timeouts += res.Timeouts
		mu.Unlock()
	})
	if sum.Timeouts != leases {
		t.Fatalf("sweeps ended %d leases, want %d", sum.Timeouts, leases)
	}
	for _, w := range []string{"w1", "w2"} {
		if msgs := e.inbox(t, w); len(msgs) != leases {
			t.Fatalf("%s got %d messages, want one per lease, %d", w, len(msgs), leases)
		}
	}
	for i := range leases {
		id := fmt.Sprintf("t%02d", i)
		if got := kinds(e.events(t, id)); len(got) != 2 || got[1] != lease.EventTimeout {
			t.Fatalf("%s events %v", id, got)
		}
		if n := e.noticeCount(t, lease.NoticeTaskAvailable, id); n != 1 {
			t.Fatalf("%s announced %d times", id, n)
		}
	}
	for _, w := range []string{"w1", "w2"} {
		if msgs := e.inbox(t, w); len(msgs) != leases {
			t.Fatalf("%s has %d messages, want %d", w, len(msgs), leases)
		}
	}
}
