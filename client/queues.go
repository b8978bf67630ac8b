package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Queue is one queue's tasks by status and the creation time of its oldest
// todo task (nil when it has none), as GET /api/queues gives them.
type Queue struct {
	Queue        string           `json:"queue"`
	Counts       map[string]int64 `json:"counts"`
	OldestTodoAt *time.Time       `json:"oldest_todo_at"`
}

// Queues lists every queue with its tasks by status (todo, blocked,
// in_progress, done, cancelled, failed) and the creation time of its
// oldest todo task, by name: every page of GET /api/queues. The counts
// follow each change within about a second. Under RecordResponse the
// answer recorded is the whole listing, as one page would give it.
func (c *Client) Queues(ctx context.Context) ([]Queue, error) {
	return allPages(ctx, "queues", func(ctx context.Context, cursor string) ([]Queue, string, error) {
		p, err := c.QueuePage(ctx, 0, cursor)
		return p.Queues, p.NextCursor, err
	})
}

// allPages reads every page of a listing whose answer holds its items
// under key: read returns the page after cursor ("" for the first) and
// the cursor of the next ("" after the last). Under RecordResponse the
// answer recorded is the whole listing, as one page would give it.
func allPages[T any](ctx context.Context, key string, read func(ctx context.Context, cursor string) ([]T, string, error)) ([]T, error) {
	outer, _ := ctx.Value(recorderKey{}).(*Response)
	var rec Response
	if outer != nil {
		ctx = RecordResponse(ctx, &rec)
	}
	all := []T{}
	var raw []json.RawMessage
	pages := 0
	for cursor := ""; ; pages++ {
		items, next, err := read(ctx, cursor)
		if outer != nil {
			*outer = rec
		}
		if err != nil {
			return nil, err
		}
		all = append(all, items...)
		if outer != nil {
			var p map[string]json.RawMessage
			var items []json.RawMessage
			if json.Unmarshal(rec.Body, &p) == nil && json.Unmarshal(p[key], &items) == nil {
				raw = append(raw, items...)
			}
		}
		if next == "" {
			break
		}
		if next == cursor {
			return nil, fmt.Errorf("%s: %w", key, errCursorRepeated)
		}
		cursor = next
	}
	if outer != nil && pages > 0 && len(raw) == len(all) {
		// More than one page: recorded as the one answer they make.
		items, _ := json.Marshal(raw)
		outer.Body = fmt.Appendf(nil, `{%q:%s,"next_cursor":null}`, key, items)
	}
	return all, nil
}

// QueuePage is one page of the queue listing, and the cursor of the next
// ("" after the last).
type QueuePage struct {
	Queues     []Queue `json:"queues"`
	NextCursor string  `json:"next_cursor"`
}

// QueuePage returns the page of the queue listing after cursor ("" for the
// first), of at most limit queues (1 to 1,000; 0 for the server's 1,000),
// fewer when the server's reads for their oldest todo tasks would pass its
// bound (the next page goes on).
func (c *Client) QueuePage(ctx context.Context, limit int, cursor string) (QueuePage, error) {
	q := url.Values{}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	path := "/api/queues"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var p QueuePage
	if err := c.do(ctx, idempotent, http.MethodGet, path, nil, &p); err != nil {
		return QueuePage{}, fmt.Errorf("queues: %w", err)
	}
	return p, nil
}
