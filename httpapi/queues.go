package httpapi

import (
	"context"
	"net/http"

	"github.com/checkout-dev/checkout/lease"
)

// QueueService serves GET /api/queues. The lease store implements it; a
// Service without it answers that route 404 not_found.
type QueueService interface {
	ListQueues(ctx context.Context) ([]lease.QueueStats, error)
}

var _ QueueService = (*lease.Store)(nil)

// QueueJSON is one queue of GET /api/queues.
type QueueJSON struct {
	Queue  string           `json:"queue"`
	Counts map[string]int64 `json:"counts"`
	// OldestTodoAt is RFC 3339, null when the queue has no todo task.
	OldestTodoAt *string `json:"oldest_todo_at"`
}

// ToQueueJSON is the API form of a queue's counts.
func ToQueueJSON(q lease.QueueStats) QueueJSON {
	out := QueueJSON{Queue: q.Queue, Counts: make(map[string]int64, len(lease.Statuses))}
	for _, st := range lease.Statuses {
		out.Counts[string(st)] = q.Counts[st]
	}
	if !q.OldestTodoAt.IsZero() {
		at := q.OldestTodoAt.UTC().Format(timeFormat)
		out.OldestTodoAt = &at
	}
	return out
}

func (s *server) listQueues(w http.ResponseWriter, r *http.Request, _ lease.Principal) error {
	qs, ok := s.svc.(QueueService)
	if !ok {
		return errorf(http.StatusNotFound, codeNotFound, "no such path")
	}
	list, err := qs.ListQueues(r.Context())
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
