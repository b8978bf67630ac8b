package httpapi

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// pagedFake is the fake service with the trail page and feed page it
// answers set by the test.
type pagedFake struct {
	*fakeService
	trail lease.Trail
	feed  lease.FeedPage
}

func (f pagedFake) TrailPage(ctx context.Context, p lease.TrailParams) (lease.Trail, error) {
	if _, err := f.fakeService.TrailPage(ctx, p); err != nil {
		return lease.Trail{}, err
	}
	return f.trail, nil
}

func (f pagedFake) Feed(ctx context.Context, p lease.FeedParams) (lease.FeedPage, error) {
	if _, err := f.fakeService.Feed(ctx, p); err != nil {
		return lease.FeedPage{}, err
	}
	return f.feed, nil
}

func pagedHarness(t *testing.T, f pagedFake) *harness {
	t.Helper()
	hs := newHarness(t)
	f.fakeService = hs.svc
	hs.h = New(f, Options{Auth: fakeAuth{}, Now: func() time.Time { return t0 }})
	return hs
}

// A since before the epoch, Go's zero time (0001-01-01T00:00:00Z)
// included, is a since like any other: the store starts it at the events'
// retention. Only a request without since gets the default window.
func TestFeedSinceZeroTimeIsASince(t *testing.T) {
	t.Parallel()
	for _, since := range []string{"0001-01-01T00:00:00Z", "1970-01-01T00:00:00Z", "0000-01-01T00:00:00Z"} {
		hs := newHarness(t)
		hs.do("GET", "/api/events?since="+since, "ck_agent", "").expect(t, 200, "")
		if p := hs.svc.last.(lease.FeedParams); p.Since.IsZero() || p.Since.After(time.Unix(0, 0)) {
			t.Errorf("since=%s: the store was asked for since %v", since, p.Since)
		}
	}
	hs := newHarness(t)
	hs.do("GET", "/api/events", "ck_agent", "").expect(t, 200, "")
	if p := hs.svc.last.(lease.FeedParams); !p.Since.IsZero() {
		t.Errorf("no since: the store was asked for since %v", p.Since)
	}
}

// A feed page says whether it is caught up, always.
func TestFeedPageSaysWhetherCaughtUp(t *testing.T) {
	t.Parallel()
	for _, caughtUp := range []bool{false, true} {
		hs := pagedHarness(t, pagedFake{feed: lease.FeedPage{Events: nil, NextCursor: "f1.next", CaughtUp: caughtUp}})
		res := hs.do("GET", "/api/events", "ck_agent", "").expect(t, 200, "")
		if res.json["caught_up"] != caughtUp || res.json["next_cursor"] != "f1.next" || len(res.json["events"].([]any)) != 0 {
			t.Errorf("caught up %v: %s", caughtUp, res.body)
		}
	}
}

// GET /api/tasks/{task_id}/events takes limit (1 to 1000, default 1000)
// and cursor; its answer's next_cursor is null on the last page (every
// field of an answer is always present). A
// bad limit or cursor is 400 invalid_request, and the store is not asked.
func TestEventsPages(t *testing.T) {
	t.Parallel()
	held := time.Minute
	page := lease.Trail{Events: []lease.Event{{Type: lease.EventRelease, TaskID: "task-1", AgentID: "agent-1", RunID: "run-1", Fence: 1, At: t0, Held: &held, By: "agent-1"}}}

	hs := pagedHarness(t, pagedFake{trail: page})
	res := hs.do("GET", "/api/tasks/task-1/events", "ck_agent", "").expect(t, 200, "")
	if p := hs.svc.last.(lease.TrailParams); p != (lease.TrailParams{TaskID: "task-1", Limit: 1000}) {
		t.Errorf("default page: the store was asked %+v", p)
	}
	if next, ok := res.json["next_cursor"]; !ok || next != nil || res.json["pending"] != 0.0 || len(res.json["events"].([]any)) != 1 {
		t.Errorf("the last page: %s", res.body)
	}

	page.NextCursor = "t1.next"
	hs = pagedHarness(t, pagedFake{trail: page})
	res = hs.do("GET", "/api/tasks/task-1/events?limit=1&cursor=t1.prev", "ck_agent", "").expect(t, 200, "")
	if p := hs.svc.last.(lease.TrailParams); p != (lease.TrailParams{TaskID: "task-1", Limit: 1, Cursor: "t1.prev"}) {
		t.Errorf("a page after a cursor: the store was asked %+v", p)
	}
	if res.json["next_cursor"] != "t1.next" {
		t.Errorf("a page with more after it: %s", res.body)
	}

	for _, q := range []string{"limit=0", "limit=1001", "limit=-1", "limit=x", "limit=1&limit=2", "cursor=%ZZ", "cursor=" + strings.Repeat("c", lease.MaxCursorLen+1)} {
		hs := newHarness(t)
		res := hs.do("GET", "/api/tasks/task-1/events?"+q, "ck_agent", "").expect(t, 400, "invalid_request")
		if len(hs.svc.calls) != 0 {
			t.Errorf("?%s: the store was asked: %v", q, hs.svc.calls)
		}
		if msg, _ := res.json["error"].(string); !strings.Contains(msg, strings.SplitN(q, "=", 2)[0]) {
			t.Errorf("?%s: error %q does not name the parameter", q, msg)
		}
	}
	// The store's own refusal of a cursor it did not issue is 400 too.
	hs = newHarness(t)
	hs.svc.err = &lease.ValidationError{Field: "cursor", Code: "invalid_request", Message: "cursor is not one this server issued"}
	hs.do("GET", "/api/tasks/task-1/events?cursor=t1.forged", "ck_agent", "").expect(t, 400, "invalid_request")
}

// since is read as not_before is: RFC 3339 with t and z in either case,
// and nothing RFC 3339 does not allow (an offset hour of 24, a comma
// before the fraction).
func TestFeedSinceIsRFC3339(t *testing.T) {
	t.Parallel()
	for since, want := range map[string]int{
		"2026-03-20t14:35:00z":          200,
		"2026-03-20T14:35:00.5%2B05:30": 200,
		"2026-03-20T14:35:00%2B24:00":   400,
		"2026-03-20T14:35:00,5Z":        400,
	} {
		hs := newHarness(t)
		code := ""
		if want == 400 {
			code = "invalid_request"
		}
		hs.do("GET", "/api/events?since="+since, "ck_agent", "").expect(t, want, code)
	}
}
