package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// FeedRequest selects a page of the fleet feed (GET /api/events). Give
// Cursor to continue, or Since to start (zero: the server's default, the
// last hour).
type FeedRequest struct {
	Since  time.Time
	Cursor string
	Limit  int      // 1 to 1000 (0: the server's default, 100)
	Types  []string // keep only these event types (empty: all)
}

// FeedPage is a page of the fleet feed, oldest first. NextCursor is always
// set: ask again with it later to get what happened since.
type FeedPage struct {
	Events     []Event `json:"events"`
	NextCursor string  `json:"next_cursor"`
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
	var p FeedPage
	if err := c.do(ctx, idempotent, http.MethodGet, path, nil, &p); err != nil {
		return p, fmt.Errorf("feed: %w", err)
	}
	return p, nil
}

// FollowFeed calls fn with every event of the fleet feed from req on, in
// order, polling every interval (0: 1s) once it has caught up, until ctx
// ends or fn returns an error (which it returns). A cursor carries it across
// pages and polls, so no event is skipped or repeated.
func (c *Client) FollowFeed(ctx context.Context, req FeedRequest, interval time.Duration, fn func(Event) error) error {
	if interval <= 0 {
		interval = time.Second
	}
	for {
		page, err := c.Feed(ctx, req)
		if err != nil {
			return err
		}
		for _, e := range page.Events {
			if err := fn(e); err != nil {
				return err
			}
		}
		req = FeedRequest{Cursor: page.NextCursor, Limit: req.Limit, Types: req.Types}
		if len(page.Events) == 0 {
			if err := c.sleep(ctx, interval); err != nil {
				return err
			}
		}
	}
}
