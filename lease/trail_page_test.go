package lease_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/httpapi"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
)

// longTrail gives task id a trail of a checkout and n renewals, archived.
func (e *env) longTrail(t *testing.T, id string, n int) {
	t.Helper()
	e.task(t, id)
	e.checkout(t, id, "a", time.Hour)
	for range n {
		e.clock.Advance(time.Millisecond)
		must[lease.Checkout](t)(e.store.Renew(ctx(t), lease.RenewParams{TaskID: id, AgentID: "a"}))
	}
	e.drain(t)
}

// followTrail reads a task's whole trail page by page, following the
// cursor, and returns it with the last page and the number of pages.
func followTrail(t *testing.T, s *lease.Store, p lease.TrailParams) ([]lease.Event, lease.Trail, int) {
	t.Helper()
	var all []lease.Event
	for pages := 1; pages <= 1000; pages++ {
		tr := must[lease.Trail](t)(s.TrailPage(ctx(t), p))
		if tr.NextCursor != "" && (tr.Pending != 0 || len(tr.Events) == 0) {
			t.Fatalf("page %d: %d events, %d pending, and a cursor", pages, len(tr.Events), tr.Pending)
		}
		all = append(all, tr.Events...)
		if tr.NextCursor == "" {
			return all, tr, pages
		}
		p.Cursor = tr.NextCursor
	}
	t.Fatal("the trail did not end")
	return nil, lease.Trail{}, 0
}

// A task's trail comes in pages of at most 1,000 events (the default) or
// limit: following the cursor gives the whole trail, each event once, in
// order; the last page has no cursor. Each page is one GetItem of the task
// and one Query of its events.
func TestTrailPagesFollowTheWholeTrail(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.longTrail(t, "long", 1100)
	whole := must[lease.Trail](t)(e.store.Trail(c, "long"))
	if len(whole.Events) != 1101 || whole.Pending != 0 {
		t.Fatalf("whole trail: %d events, %d pending", len(whole.Events), whole.Pending)
	}

	meter := testenv.NewMeter(t, e.names.Prefix)
	e.count.Take()
	first := must[lease.Trail](t)(e.store.TrailPage(c, lease.TrailParams{TaskID: "long"}))
	ops, units := e.count.Take(), meter.Take().Total()
	t.Logf("a page of %d events: %v, %g read units", len(first.Events), ops, units.Read)
	if len(first.Events) != 1000 || first.NextCursor == "" || first.Pending != 0 {
		t.Fatalf("first page: %d events, cursor %q, %d pending", len(first.Events), first.NextCursor, first.Pending)
	}
	if ops.Total() != 2 || ops["GetItem"] != 1 || ops["Query"] != 1 {
		t.Errorf("a page of 1,000 made %v, want one GetItem and one Query", ops)
	}
	if units.Read > 60 {
		t.Errorf("a page of 1,000 read %g units, budget 60", units.Read)
	}

	for _, c := range []struct{ limit, pages int }{{0, 2}, {7, 158}, {1000, 2}} {
		got, last, pages := followTrail(t, e.store, lease.TrailParams{TaskID: "long", Limit: c.limit})
		if !slices.Equal(trailKeys(got), trailKeys(whole.Events)) || last.Pending != 0 {
			t.Fatalf("limit %d: %d events over %d pages, %d pending; want the whole trail of %d", c.limit, len(got), pages, last.Pending, len(whole.Events))
		}
		if pages != c.pages {
			t.Errorf("limit %d: %d pages, want %d", c.limit, pages, c.pages)
		}
	}

	// A short trail is one page without a cursor, as before paging.
	e.task(t, "short")
	e.checkout(t, "short", "a", time.Minute)
	e.drain(t)
	if tr := must[lease.Trail](t)(e.store.TrailPage(c, lease.TrailParams{TaskID: "short"})); len(tr.Events) != 1 || tr.NextCursor != "" || tr.Pending != 0 {
		t.Fatalf("short trail: %+v", tr)
	}
}

// Paging keeps the trail's rule: no page shows an event while an older one
// is missing. Events held back behind a hole are counted as pending on the
// page that stops at the hole, which has no cursor; a page followed by
// more events that can be shown has a cursor and nothing pending.
func TestTrailPagesStopAtTheFirstHole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.longTrail(t, "t", 4) // checkout and 4 renewals: 5 events, archived
	// Two more transitions, not archived: the item holds the latest only.
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"}))
	e.checkout(t, "t", "b", time.Minute)

	page := must[lease.Trail](t)(e.store.TrailPage(c, lease.TrailParams{TaskID: "t", Limit: 3}))
	if len(page.Events) != 3 || page.NextCursor == "" || page.Pending != 0 {
		t.Fatalf("first page: %d events, cursor %q, %d pending", len(page.Events), page.NextCursor, page.Pending)
	}
	page = must[lease.Trail](t)(e.store.TrailPage(c, lease.TrailParams{TaskID: "t", Limit: 3, Cursor: page.NextCursor}))
	if len(page.Events) != 2 || page.NextCursor != "" || page.Pending != 1 {
		t.Fatalf("second page: %v, cursor %q, %d pending; want the 2 renewals left, no cursor and the checkout pending", kinds(page.Events), page.NextCursor, page.Pending)
	}
	// A page that is full just before the hole has no cursor either.
	page = must[lease.Trail](t)(e.store.TrailPage(c, lease.TrailParams{TaskID: "t", Limit: 5}))
	if len(page.Events) != 5 || page.NextCursor != "" || page.Pending != 1 {
		t.Fatalf("a page of 5: %d events, cursor %q, %d pending", len(page.Events), page.NextCursor, page.Pending)
	}
	whole := must[lease.Trail](t)(e.store.Trail(c, "t"))
	if len(whole.Events) != 5 || whole.Pending != 1 {
		t.Fatalf("whole trail: %d events, %d pending", len(whole.Events), whole.Pending)
	}

	// Once archived, the pages go on to the end.
	e.drain(t)
	got, last, _ := followTrail(t, e.store, lease.TrailParams{TaskID: "t", Limit: 3})
	if want := []lease.EventType{"checkout", "renew", "renew", "renew", "renew", "release", "checkout"}; !slices.Equal(kinds(got), want) || last.Pending != 0 {
		t.Fatalf("archived: %v, %d pending", kinds(got), last.Pending)
	}
	// The item's latest transition is shown on the last page while its
	// archive write is in flight.
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b"}))
	got, last, _ = followTrail(t, e.store, lease.TrailParams{TaskID: "t", Limit: 3})
	if len(got) != 8 || got[7].Type != lease.EventRelease || last.Pending != 0 {
		t.Fatalf("with the release on the item only: %v, %d pending", kinds(got), last.Pending)
	}
}

// Bad limits and cursors are invalid; a cursor names its task.
func TestTrailPageRefusesBadInput(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.longTrail(t, "a", 2)
	e.task(t, "b")
	page := must[lease.Trail](t)(e.store.TrailPage(c, lease.TrailParams{TaskID: "a", Limit: 1}))
	for _, p := range []lease.TrailParams{
		{TaskID: "a", Limit: 1001}, {TaskID: "a", Limit: -1}, {TaskID: "a", Cursor: "nonsense"},
		{TaskID: "a", Cursor: "t1.bm9wZQ"}, {TaskID: "b", Cursor: page.NextCursor}, {TaskID: "a", Cursor: string(make([]byte, 5000))},
		{TaskID: "not an id"},
	} {
		if _, err := e.store.TrailPage(c, p); !errors.Is(err, lease.ErrInvalid) {
			t.Errorf("trail page %+v: %v, want invalid", p, err)
		}
	}
	// A cursor of another task's trail says so (it used to say the server
	// never issued it).
	_, err := e.store.TrailPage(c, lease.TrailParams{TaskID: "b", Cursor: page.NextCursor})
	expectRule(t, err, ruleFailure{"cursor", "invalid_request", "cursor continues the trail of task a, not of b"})
	if _, err := e.store.TrailPage(c, lease.TrailParams{TaskID: "nope"}); !errors.Is(err, lease.ErrTaskNotFound) {
		t.Errorf("unknown task: %v", err)
	}
}

// lambdaAnswerSize is the size of the Lambda answer that carries events as
// the API writes them: the JSON body, escaped again as a string in API
// Gateway's envelope.
func lambdaAnswerSize(t *testing.T, evs []lease.Event, cursor string) int {
	t.Helper()
	out := make([]httpapi.EventJSON, len(evs))
	for i, e := range evs {
		out[i] = httpapi.ToEventJSON(e)
	}
	body := must[[]byte](t)(json.Marshal(map[string]any{"events": out, "next_cursor": cursor, "pending": 0}))
	envelope := must[[]byte](t)(json.Marshal(map[string]any{"statusCode": 200, "headers": map[string]string{"Content-Type": "application/json"}, "body": string(body)}))
	return len(envelope)
}

// No events can make a page of the trail or the feed too large for
// Lambda's 6 MB answer: 1,000 events with the longest reasons, all
// escaped, would be 7.4 MB; a page holds 678 of them, with a cursor to
// the rest.
func TestPagesStayUnderLambdasAnswerLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	start := e.clock.Now()
	e.task(t, "loud")
	reason := strings.Repeat("<", lease.MaxReasonLen) // \u003c in JSON, \\u003c in the envelope
	for range 500 {
		must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "loud", AgentID: "a", Reason: reason}))
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "loud", AgentID: "a", Reason: reason}))
		e.clock.Advance(time.Millisecond)
	}
	e.drain(t)
	e.clock.Advance(lease.DefaultFeedSettle)
	const lambdaLimit = 6 << 20

	got, _, pages := followTrail(t, e.store, lease.TrailParams{TaskID: "loud"})
	if len(got) != 1000 || pages != 2 {
		t.Fatalf("the trail in %d pages of %d events", pages, len(got))
	}
	first := must[lease.Trail](t)(e.store.TrailPage(c, lease.TrailParams{TaskID: "loud"}))
	size := lambdaAnswerSize(t, first.Events, first.NextCursor)
	t.Logf("trail: the first page holds %d events, %d bytes in Lambda's answer", len(first.Events), size)
	if size > lambdaLimit || len(first.Events) >= 1000 || len(first.Events) < 600 {
		t.Errorf("the first page of the trail: %d events, %d bytes", len(first.Events), size)
	}

	var feed []lease.Event
	eventually(t, "the feed's index", func() bool {
		feed, _, _ = followFeed(t, e.store, lease.FeedParams{Since: start, Limit: 1000})
		return len(feed) == 1000
	})
	page := must[lease.FeedPage](t)(e.store.Feed(c, lease.FeedParams{Since: start, Limit: 1000}))
	size = lambdaAnswerSize(t, page.Events, page.NextCursor)
	t.Logf("feed: the first page holds %d events, %d bytes in Lambda's answer", len(page.Events), size)
	if size > lambdaLimit || len(page.Events) >= 1000 || len(page.Events) < 600 || page.CaughtUp {
		t.Errorf("the first page of the feed: %d events, %d bytes, caught up %v", len(page.Events), size, page.CaughtUp)
	}
	if !slices.EqualFunc(feed, got, func(a, b lease.Event) bool { return a.Seq == b.Seq }) {
		t.Error("the feed and the trail differ")
	}
}
