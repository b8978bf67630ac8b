package client

// The audit-trail routes: a task's trail, and the fleet feed of every
// task's.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Trail is a task's audit trail, or a page of it, as it can be read now:
// Events, oldest first, with no event missing between two it shows;
// NextCursor, on a page that more events follow, goes on to them; and on
// the last page Pending, the later events already known that wait for the
// ones before them to be recorded (about a second).
type Trail struct {
	Events     []Event `json:"events"`
	Pending    int     `json:"pending"`
	NextCursor string  `json:"next_cursor,omitempty"`
}

// TrailRequest selects a page of a task's trail (GET
// /api/tasks/{task_id}/events). Give Cursor to continue.
type TrailRequest struct {
	Cursor string
	Limit  int // 1 to 1000 (0: the server's default, 1000)
}

// TrailPage reads one page of a task's trail.
func (c *Client) TrailPage(ctx context.Context, taskID string, req TrailRequest) (Trail, error) {
	q := url.Values{}
	if req.Cursor != "" {
		q.Set("cursor", req.Cursor)
	}
	if req.Limit != 0 {
		q.Set("limit", strconv.Itoa(req.Limit))
	}
	path := taskPath(taskID, "/events")
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var r Trail
	err := c.do(ctx, idempotent, http.MethodGet, path, nil, &r)
	return r, wrap("events", taskID, err)
}

// errCursorRepeated stops a trail whose server handed back the cursor it
// was given, which would never end.
var errCursorRepeated = errors.New("the server answered a page with the cursor it was asked for")

// Trail reads a task's whole audit trail, page after page, with what is
// still being recorded (the last page's Pending). NextCursor is empty.
// Under RecordResponse, the answer recorded is the whole trail in the form
// of one page, its events as the server wrote them (or the failing page's
// answer).
func (c *Client) Trail(ctx context.Context, taskID string) (Trail, error) {
	outer, _ := ctx.Value(recorderKey{}).(*Response)
	var whole Trail
	var raw struct {
		Events  []json.RawMessage `json:"events"`
		Pending int               `json:"pending"`
	}
	var req TrailRequest
	for pages := 1; ; pages++ {
		var rec Response
		page, err := c.TrailPage(RecordResponse(ctx, &rec), taskID, req)
		if outer != nil {
			*outer = rec
		}
		if err != nil {
			return whole, err
		}
		whole.Events = append(whole.Events, page.Events...)
		whole.Pending = page.Pending
		if outer != nil {
			var p struct {
				Events []json.RawMessage `json:"events"`
			}
			if err := json.Unmarshal(rec.Body, &p); err != nil {
				return whole, wrap("events", taskID, err)
			}
			raw.Events = append(raw.Events, p.Events...)
		}
		if page.NextCursor == "" {
			if outer != nil && pages > 1 {
				raw.Pending = page.Pending
				if outer.Body, err = json.Marshal(raw); err != nil {
					return whole, wrap("events", taskID, err)
				}
			}
			return whole, nil
		}
		if page.NextCursor == req.Cursor {
			return whole, wrap("events", taskID, errCursorRepeated)
		}
		req.Cursor = page.NextCursor
	}
}

// Events returns a task's whole audit trail, oldest first.
func (c *Client) Events(ctx context.Context, taskID string) ([]Event, error) {
	tr, err := c.Trail(ctx, taskID)
	return tr.Events, err
}

// FeedRequest selects a page of the fleet feed (GET /api/events). Give
// Cursor to continue, or Since to start (zero: the server's default, the
// last hour; the server starts no earlier than its events' retention, 30
// days ago).
type FeedRequest struct {
	Since  time.Time
	Cursor string
	Limit  int      // 1 to 1000 (0: the server's default, 100)
	Types  []string // keep only these event types (empty: all)
}

// FeedPage is a page of the fleet feed, oldest first. NextCursor is always
// set: ask again with it later to get what happened since. CaughtUp says
// the page reached the feed's settled end (about 5 s ago in AWS): until a page
// is caught up, ask again at once, even after an empty page, which is
// what a page that read its most hours without finding an event is.
type FeedPage struct {
	Events     []Event `json:"events"`
	NextCursor string  `json:"next_cursor"`
	CaughtUp   bool    `json:"caught_up"`
}

// Feed returns a page of every transition across the fleet, oldest first.
func (c *Client) Feed(ctx context.Context, req FeedRequest) (FeedPage, error) {
	q := url.Values{}
	if req.Cursor != "" {
		q.Set("cursor", req.Cursor)
	} else if !req.Since.IsZero() {
		q.Set("since", req.Since.UTC().Format(time.RFC3339Nano))
	}
	if req.Limit != 0 {
		q.Set("limit", strconv.Itoa(req.Limit))
	}
	if len(req.Types) > 0 {
		q.Set("type", strings.Join(req.Types, ","))
	}
	path := "/api/events"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var r struct {
		FeedPage
		CaughtUp *bool `json:"caught_up"`
	}
	if err := c.do(ctx, idempotent, http.MethodGet, path, nil, &r); err != nil {
		return r.FeedPage, fmt.Errorf("feed: %w", err)
	}
	p := r.FeedPage
	// A server from before caught_up ended its feed at an empty page.
	p.CaughtUp = len(p.Events) == 0
	if r.CaughtUp != nil {
		p.CaughtUp = *r.CaughtUp
	}
	return p, nil
}

// FollowFeed calls fn with every event of the fleet feed from req on, in
// order, asking again at once while a page is not caught up and polling
// every interval (0: 1s) once one is, until ctx ends or fn returns an error
// (which it returns). A cursor carries it across pages and polls, so no
// event is skipped or repeated.
//
// A failure that asking again can mend (the server unreachable or
// restarting, a 5xx, a 429), once the client's own retries are spent, does
// not end it: it asks again from its last cursor after a wait of 1s,
// doubling up to 30s (randomised between half and all of it), until an
// answer comes. An error that asking again cannot mend (401, 403, 400, a
// URL that is not a checkout server's) is returned, as is ctx's. With
// OnFeedOutage, the caller is told when it starts asking again, and when
// an answer comes again.
func (c *Client) FollowFeed(ctx context.Context, req FeedRequest, interval time.Duration, fn func(Event) error, opts ...FollowOption) error {
	if interval <= 0 {
		interval = time.Second
	}
	var cfg followConfig
	for _, o := range opts {
		o(&cfg)
	}
	backoff := time.Duration(0)
	for {
		page, err := c.Feed(ctx, req)
		if err != nil {
			if ctx.Err() != nil || !transient(err) {
				return err
			}
			if backoff == 0 && cfg.onOutage != nil {
				cfg.onOutage(err)
			}
			backoff = min(max(2*backoff, followRetryMin), followRetryMax)
			if err := c.sleep(ctx, backoff/2+time.Duration(c.jitter(int64(backoff/2)+1))); err != nil {
				return err
			}
			continue
		}
		if backoff > 0 && cfg.onOutage != nil {
			cfg.onOutage(nil)
		}
		backoff = 0
		for _, e := range page.Events {
			if err := fn(e); err != nil {
				return err
			}
		}
		req = FeedRequest{Cursor: page.NextCursor, Limit: req.Limit, Types: req.Types}
		if page.CaughtUp {
			if err := c.sleep(ctx, interval); err != nil {
				return err
			}
		}
	}
}

// FollowOption configures FollowFeed.
type FollowOption func(*followConfig)

type followConfig struct {
	onOutage func(err error)
}

// OnFeedOutage has FollowFeed call f with the failure when it starts
// asking again after one that asking again can mend (the server
// unreachable or restarting, a 5xx, a 429), and with nil at the first
// answer after it: a follower can say that the feed is held up, and when
// it is no longer. f runs on FollowFeed's goroutine.
func OnFeedOutage(f func(err error)) FollowOption {
	return func(c *followConfig) { c.onOutage = f }
}

// The waits of FollowFeed before it asks again after a transient failure.
const (
	followRetryMin = time.Second
	followRetryMax = 30 * time.Second
)
