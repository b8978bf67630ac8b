package lease_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// Many writers of one task at once are served, not turned away: PATCHes
// without If-Match, checkouts and cancels racing on a few tasks each win
// or lose by the rules, and none answers ErrBusy (503) while the database
// is up. A write that loses to another is tried again after a short,
// growing pause rather than given up after a few tries.
func TestManyWritersOfOneTaskAreNeverTurnedAway(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "hot", "h0", "h1")
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for w := range 16 {
		wg.Go(func() {
			for i := range 15 {
				title := fmt.Sprintf("w%d-%d", w, i)
				if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "hot", AgentID: "admin", Admin: true, Title: &title, Priority: new(i % 10)}); err != nil {
					errs <- fmt.Errorf("patch: %w", err)
				}
			}
		})
	}
	for w := range 16 {
		wg.Go(func() {
			agent := fmt.Sprintf("a%d", w)
			for i := range 10 {
				id := fmt.Sprintf("h%d", i%2)
				switch _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: id, AgentID: agent, Timeout: time.Minute, ExpectedStatuses: []lease.Status{lease.StatusTodo, lease.StatusInProgress, lease.StatusCancelled}}); {
				case err == nil, errors.Is(err, lease.ErrCheckedOut), errors.Is(err, lease.ErrStatusMismatch):
				default:
					errs <- fmt.Errorf("checkout: %w", err)
				}
				st := lease.StatusCancelled
				switch _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: id, AgentID: agent, Admin: true, Status: &st}); {
				case err == nil, errors.Is(err, lease.ErrInvalidTransition):
				default:
					errs <- fmt.Errorf("cancel: %w", err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	busy := 0
	for err := range errs {
		if errors.Is(err, lease.ErrBusy) {
			busy++
			t.Logf("busy: %v", err)
			continue
		}
		t.Errorf("unexpected: %v", err)
	}
	if busy > 0 {
		t.Errorf("%d writes answered ErrBusy with the database up", busy)
	}
}
