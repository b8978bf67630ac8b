package client

import (
	"context"
	"fmt"
	"net/http"
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
// in_progress, done, cancelled, failed) and the creation time of its oldest todo task, by name.
// The counts follow each change within about a second.
func (c *Client) Queues(ctx context.Context) ([]Queue, error) {
	var r struct {
		Queues []Queue `json:"queues"`
	}
	if err := c.do(ctx, idempotent, http.MethodGet, "/api/queues", nil, &r); err != nil {
		return nil, fmt.Errorf("queues: %w", err)
	}
	return r.Queues, nil
}
