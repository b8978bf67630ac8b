package httpapi

import (
	"net/http"

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
	list, err := s.svc.ListQueues(r.Context())
	if err != nil {
		return err
	}
	out := make([]QueueJSON, 0, len(list))
	for _, q := range list {
		out = append(out, ToQueueJSON(q))
	}
	s.writeJSON(w, http.StatusOK, struct {
		Queues []QueueJSON `json:"queues"`
	}{out})
	return nil
}
