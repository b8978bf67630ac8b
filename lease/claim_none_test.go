package lease_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A named claim that answered none holds no lease: the run's next claim
// with that run id is a fresh one, not a retry. The run's claim lost b to
// another claimer and answered 404; the run then checked b out by name
// (and, in one case, released it), and claimed again once c was created.
// Before, b stayed listed in the receipt, and that claim answered the
// checkout by name (ended, in one case) as its own lease, granting none.
func TestANamedClaimAfterOneThatAnsweredNoneIsAFreshClaim(t *testing.T) {
	t.Parallel()
	for _, named := range []string{"held", "released"} {
		t.Run(named, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			p := lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute}
			e.task(t, "b")
			e.caughtUp(t) // the claim finds b through an index
			raced := &racedDB{DB: e.db, tasks: e.names.Table(schema.TasksTable), rival: e.store}
			raced.lose.Store(1)
			racing := lease.New(lease.Config{DB: raced, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
			if _, err := racing.Claim(c, p); !errors.Is(err, lease.ErrNoTaskAvailable) {
				t.Fatalf("the claim that lost b: %v, want ErrNoTaskAvailable", err)
			}

			e.clock.Advance(time.Second)
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "b", AgentID: "rival"}))
			e.clock.Advance(time.Second)
			byName := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "b", AgentID: "a", RunID: "run-1", Timeout: time.Minute}))
			if named == "released" {
				e.clock.Advance(time.Second)
				must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "b", AgentID: "a", RunID: "run-1"}))
			}
			e.clock.Advance(time.Second)
			e.task(t, "c")
			e.caughtUp(t)

			// A fresh claim takes the best task free: c, or b once released.
			want := map[string]string{"held": "c", "released": "b"}[named]
			got := must[lease.Checkout](t)(e.store.Claim(c, p))
			if got.TaskID != want || got.Fence == byName.Fence {
				t.Fatalf("the claim answered %s/%d (the checkout by name is %s/%d), want a fresh grant of %s",
					got.TaskID, got.Fence, byName.TaskID, byName.Fence, want)
			}
			if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, want)); lock == nil || lock.RunID != "run-1" || lock.Fence != got.Fence {
				t.Fatalf("%s holds %+v, want the claim's lease (fence %d)", want, lock, got.Fence)
			}
			if lock := must[*lease.Checkout](t)(e.store.LockStatus(c, "b")); named == "held" && (lock == nil || lock.Fence != byName.Fence) {
				t.Fatalf("b holds %+v, want the run's checkout by name (fence %d)", lock, byName.Fence)
			}
			again := must[lease.Checkout](t)(e.store.Claim(c, p))
			if again.TaskID != got.TaskID || again.Fence != got.Fence {
				t.Fatalf("the claim's retry answered %s/%d, want its lease %s/%d", again.TaskID, again.Fence, got.TaskID, got.Fence)
			}
		})
	}
}

// The retry of a claim made after one of its run that answered none does
// not take a lease of the run from between for the claim's: the receipt
// counts as made when the later claim began. The run's first claim lost z
// and answered 404 (its receipt made then); the run then checked a out by
// name and released it; its next claim lost a to another claimer (a,
// showing the run's ended lease, stays listed), got c, and could not keep
// that grant. Before, the receipt kept the first claim's making, and the
// retry answered a's ended lease as the claim's and gave back c.
func TestAClaimRetryAfterAClaimThatAnsweredNoneKeepsItsOwnLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	p := lease.ClaimParams{AgentID: "a", RunID: "run-1", Timeout: time.Minute}
	e.task(t, "z")
	e.caughtUp(t)
	raced := &racedDB{DB: receiptLossDB{e.db}, tasks: e.names.Table(schema.TasksTable), rival: e.store}
	raced.lose.Store(1)
	racing := lease.New(lease.Config{DB: raced, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})
	if _, err := racing.Claim(c, p); !errors.Is(err, lease.ErrNoTaskAvailable) {
		t.Fatalf("the claim that lost z: %v, want ErrNoTaskAvailable", err)
	}

	e.clock.Advance(time.Second)
	e.task(t, "a")
	e.clock.Advance(time.Millisecond)
	e.task(t, "c")
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "a", AgentID: "a", RunID: "run-1", Timeout: time.Minute}))
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "a", AgentID: "a", RunID: "run-1"}))
	e.clock.Advance(5 * time.Second)
	e.caughtUp(t)
	e.drain(t)

	raced.lose.Store(1)
	first := unkeptClaim(t, racing, p, "c")
	if tried := must[[]string](t)(lease.ReceiptTried(c, e.store, "a", "run-1")); !slices.Contains(tried, "a") {
		t.Fatalf("the receipt lists %v, want a among them", tried)
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
