package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/checkout-dev/checkout/client"
)

const descListQueues = `List the queues: for each, its number of tasks by status (todo = open, blocked = waiting for other tasks, in_progress, done, cancelled, failed = used up its attempts) and when its oldest todo task was created. Use it to choose which queues to claim_task from, or to see how much work is waiting. Counts follow each change within about a second. Read-only.`

// ListQueuesInput is list_queues' input: it takes none.
type ListQueuesInput struct{}

// ListQueuesResult is the answer of list_queues.
type ListQueuesResult struct {
	Outcome
	Queues []client.Queue `json:"queues,omitempty"`
}

func (t *tools) listQueues(ctx context.Context, _ ListQueuesInput) (ListQueuesResult, error) {
	qs, err := t.c.Queues(ctx)
	if err != nil {
		return ListQueuesResult{}, err
	}
	r := ListQueuesResult{Queues: qs}
	if len(qs) == 0 {
		r.Message = "No queues yet: no task has been created since the service began counting queues."
		return r, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d queue(s).", len(qs))
	for _, q := range qs {
		fmt.Fprintf(&b, "\n- %s: %d todo, %d blocked, %d in progress, %d done, %d cancelled, %d failed", q.Queue,
			q.Counts[client.StatusTodo], q.Counts[client.StatusBlocked], q.Counts[client.StatusInProgress],
			q.Counts[client.StatusDone], q.Counts[client.StatusCancelled], q.Counts[client.StatusFailed])
		if q.OldestTodoAt != nil {
			fmt.Fprintf(&b, "; oldest todo created %s", stamp(*q.OldestTodoAt))
		}
	}
	r.Message = b.String()
	return r, nil
}
