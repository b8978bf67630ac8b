package httpapi

import (
	"net/http"
	"strconv"

	"github.com/checkout-dev/checkout/lease"
)

// QueueJSON is one queue of GET /api/queues.
type QueueJSON struct {
	Queue  string          `json:"queue"`
	Counts QueueCountsJSON `json:"counts"`
	// OldestTodoAt is RFC 3339, null when the queue has no todo task.
	OldestTodoAt *string `json:"oldest_todo_at"`
}

// QueueCountsJSON is a queue's tasks by status, in the statuses' order.
type QueueCountsJSON struct {
	Todo       int64 `json:"todo"`
	Blocked    int64 `json:"blocked"`
	InProgress int64 `json:"in_progress"`
	Done       int64 `json:"done"`
	Cancelled  int64 `json:"cancelled"`
	Failed     int64 `json:"failed"`
}

// ToQueueJSON is the API form of a queue's counts.
func ToQueueJSON(q lease.QueueStats) QueueJSON {
	out := QueueJSON{Queue: q.Queue, Counts: QueueCountsJSON{
		Todo: q.Counts[lease.StatusTodo], Blocked: q.Counts[lease.StatusBlocked], InProgress: q.Counts[lease.StatusInProgress],
		Done: q.Counts[lease.StatusDone], Cancelled: q.Counts[lease.StatusCancelled], Failed: q.Counts[lease.StatusFailed],
	}}
	if !q.OldestTodoAt.IsZero() {
		at := q.OldestTodoAt.UTC().Format(timeFormat)
		out.OldestTodoAt = &at
	}
	return out
}

func (s *server) listQueues(w http.ResponseWriter, r *http.Request, _ lease.Principal) error {
	q := r.URL.Query()
	params := lease.ListQueuesParams{Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > lease.MaxQueuesListed {
			return invalid("limit", lease.CodeInvalidRequest, "limit must be a whole number from 1 to %d", lease.MaxQueuesListed)
		}
		params.Limit = n
	}
	if err := lease.CheckCursor(params.Cursor); err != nil {
		return err
	}
	page, err := s.svc.ListQueuePage(r.Context(), params)
	if err != nil {
		return err
	}
	out := make([]QueueJSON, 0, len(page.Queues))
	for _, q := range page.Queues {
		out = append(out, ToQueueJSON(q))
	}
	var next *string
	if page.NextCursor != "" {
		next = &page.NextCursor
	}
	s.writeJSON(w, http.StatusOK, struct {
		Queues     []QueueJSON `json:"queues"`
		NextCursor *string     `json:"next_cursor"`
	}{out, next})
	return nil
}
