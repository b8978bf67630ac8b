package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// A feed page read with a type filter handed out a cursor that forgot it:
// followed alone, as a cursor is meant to be, the next pages held every
// type (a probe: 1,825 events after type=checkout, 1,353 of them
// checkouts). The cursor now keeps the types; a type given with it still
// decides.
func TestFeedCursorKeepsItsTypeFilter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	start := e.clock.Now()
	for _, id := range []string{"a", "b", "c"} {
		e.task(t, id)
		e.checkout(t, id, "x", time.Minute)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: id, AgentID: "x"}))
	}
	e.drain(t)
	e.clock.Advance(lease.DefaultFeedSettle + time.Millisecond)
	checkouts := []lease.EventType{lease.EventCheckout}
	var first lease.FeedPage
	eventually(t, "the feed's index", func() bool {
		first = must[lease.FeedPage](t)(e.store.Feed(c, lease.FeedParams{Since: start, Types: checkouts, Limit: 1}))
		return len(first.Events) == 1
	})
	rest, _ := follow(t, e.store, lease.FeedParams{Cursor: first.NextCursor})
	if len(rest) != 2 {
		t.Errorf("following the cursor alone: %d events, want the 2 other checkouts", len(rest))
	}
	for _, ev := range rest {
		if ev.Type != lease.EventCheckout {
			t.Errorf("following a cursor of type=checkout: a %s event of %s", ev.Type, ev.TaskID)
		}
	}
	// A type given with the cursor decides.
	releases, _ := follow(t, e.store, lease.FeedParams{Cursor: first.NextCursor, Types: []lease.EventType{lease.EventRelease}})
	if len(releases) != 3 {
		t.Errorf("type=release with the cursor: %d events, want the 3 releases", len(releases))
	}
	for _, ev := range releases {
		if ev.Type != lease.EventRelease {
			t.Errorf("type=release with the cursor: a %s event", ev.Type)
		}
	}
	// A cursor whose types were tampered with is refused.
	if _, err := e.store.Feed(c, lease.FeedParams{Cursor: first.NextCursor + "x"}); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("a tampered cursor: %v, want invalid", err)
	}
}
