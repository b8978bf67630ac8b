package lease_test

import (
	"encoding/base64"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A first page from a since further back than the old walk of about a day
// reaches the events after the quiet hours: it walks on until it holds one,
// rather than answer an empty page that looks like the feed's end.
func TestFeedFirstPageWalksQuietHoursToTheFirstEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	start := e.clock.Now()
	e.clock.Advance(30 * time.Hour)
	e.task(t, "late")
	e.checkout(t, "late", "a", time.Minute)
	e.drain(t)
	e.clock.Advance(lease.DefaultFeedSettle + time.Millisecond)
	var page lease.FeedPage
	eventually(t, "the checkout on the feed's first page", func() bool {
		page = must[lease.FeedPage](t)(e.store.Feed(c, lease.FeedParams{Since: start}))
		return len(page.Events) > 0
	})
	if len(page.Events) != 1 || page.Events[0].TaskID != "late" {
		t.Fatalf("first page %v", page.Events)
	}
}

// followFeed follows the feed from p by its documented rule: on at once
// while a page is not caught up, stopping at the first page that is. It
// returns the events, the pages read and the last page.
func followFeed(t *testing.T, s *lease.Store, p lease.FeedParams) ([]lease.Event, int, lease.FeedPage) {
	t.Helper()
	var all []lease.Event
	for pages := 1; pages <= 100; pages++ {
		page := must[lease.FeedPage](t)(s.Feed(ctx(t), p))
		all = append(all, page.Events...)
		if page.CaughtUp {
			return all, pages, page
		}
		p = lease.FeedParams{Cursor: page.NextCursor, Limit: p.Limit, Types: p.Types}
	}
	t.Fatal("the feed was never caught up")
	return nil, 0, lease.FeedPage{}
}

// A since older than the events' retention reads from the retention's
// start, whatever its age; a page that runs out of hours to read before
// it finds an event says it is not caught up, and a follower that goes on
// until a page is caught up misses nothing. (Two feed shards: a page reads
// 384 hours.)
func TestFeedSinceBeforeTheRetentionMissesNothing(t *testing.T) {
	t.Parallel()
	e := shardedEnv(t, schema.ShardCounts{Feed: 2})
	c := ctx(t)
	e.task(t, "first", "second")
	e.checkout(t, "first", "a", time.Minute)
	e.drain(t)
	e.clock.Advance(299 * time.Hour)
	e.checkout(t, "second", "a", time.Minute)
	e.drain(t)
	e.clock.Advance(lease.DefaultFeedSettle + time.Millisecond)
	now := e.clock.Now()
	eventually(t, "both checkouts in the feed", func() bool {
		page := must[lease.FeedPage](t)(e.store.Feed(c, lease.FeedParams{Since: epoch}))
		return len(page.Events) == 2 && page.CaughtUp
	})

	// The retention's start is 421 hours before the first event: its first
	// page reads 384 hours of nothing.
	retention := 30 * 24 * time.Hour
	var first lease.FeedPage
	for i, since := range []time.Time{
		time.Unix(0, 0), time.Date(1, 1, 1, 0, 0, 0, 1, time.UTC), now.Add(-retention - time.Hour), now.Add(-retention),
	} {
		page := must[lease.FeedPage](t)(e.store.Feed(c, lease.FeedParams{Since: since}))
		if len(page.Events) != 0 || page.CaughtUp {
			t.Fatalf("since %v: %d events, caught up %v: want an empty page that is not caught up", since, len(page.Events), page.CaughtUp)
		}
		if i == 0 {
			first = page
		} else if page.NextCursor != first.NextCursor {
			t.Fatalf("since %v reads to %s, since 1970 to %s: a since before the retention starts at it", since, page.NextCursor, first.NextCursor)
		}
	}
	evs, pages, _ := followFeed(t, e.store, lease.FeedParams{Since: time.Unix(0, 0)})
	if len(evs) != 2 || evs[0].TaskID != "first" || evs[1].TaskID != "second" || pages != 2 {
		t.Fatalf("since 1970, followed over %d pages: %v", pages, evs)
	}
	// A cursor from before the retention (this one is at 1970) reads as
	// the retention's start does.
	old := "f1." + base64.RawURLEncoding.EncodeToString([]byte("0000000000000#~"))
	if page := must[lease.FeedPage](t)(e.store.Feed(c, lease.FeedParams{Cursor: old})); page.NextCursor != first.NextCursor {
		t.Fatalf("a cursor at 1970 reads to %s, want %s", page.NextCursor, first.NextCursor)
	}
}

// One feed read makes at most 768 Queries (48 hours of 16 shards), however
// far back it starts and however empty the feed; each is an empty Query
// of the index, half a read unit. A read of the retention's 721 hours
// with nothing in them is 16 pages.
func TestFeedReadQueryBound(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.clock.Advance(lease.DefaultFeedSettle + time.Millisecond)
	meter := testenv.NewMeter(t, e.names.Prefix)
	e.count.Take()
	page := must[lease.FeedPage](t)(e.store.Feed(c, lease.FeedParams{Since: time.Unix(0, 0)}))
	ops, units := e.count.Take(), meter.Take().Total()
	t.Logf("an empty read from before the retention: %v, %g read units", ops, units.Read)
	if ops.Total() != 768 || ops["Query"] != 768 {
		t.Errorf("%v requests, want 768 Queries", ops)
	}
	if units.Read > 384 || units.Write != 0 {
		t.Errorf("%v units, want at most 384 read units", units)
	}
	if page.CaughtUp || len(page.Events) != 0 {
		t.Errorf("page %+v: want empty and not caught up", page)
	}
	// A read from within the last 48 hours is caught up in one page.
	page = must[lease.FeedPage](t)(e.store.Feed(c, lease.FeedParams{Since: e.clock.Now().Add(-47 * time.Hour)}))
	if n := e.count.Count("Query"); !page.CaughtUp || n != 48*16 {
		t.Errorf("a read of 47 hours and the current one: caught up %v after %d Queries, want 768", page.CaughtUp, n)
	}
}
