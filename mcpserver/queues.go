package mcpserver

import (
	"context"
	"fmt"
	"strings"

	"github.com/checkout-dev/checkout/client"
)

const descListQueues = `List the queues, in name order, up to limit per page (default {max_queues_listed}): for each, its number of tasks by status (todo = open, blocked = waiting for other tasks, in_progress, done, cancelled, failed = used up its attempts) and when its oldest todo task was created. Use it to choose which queues to claim_task from, or to see how much work is waiting. Counts follow each change within about a second. Pass next_cursor as cursor for the next page. Read-only.`

// queuesPerCall bounds a page of list_queues, below the HTTP listing's
// lease.MaxQueuesListed, so that one result stays small in an agent's
// context.
const queuesPerCall = 100

// ListQueuesInput is list_queues' input.
type ListQueuesInput struct {
	Limit  *int   `json:"limit,omitempty" jsonschema:"page size, 1 to {max_queues_listed}; default {max_queues_listed}"`
	Cursor string `json:"cursor,omitempty" jsonschema:"next_cursor of the previous page"`
}

// ListQueuesResult is the answer of list_queues: one page of the queues.
type ListQueuesResult struct {
	Outcome
	Queues     []client.Queue `json:"queues,omitempty"`
	NextCursor string         `json:"next_cursor,omitempty"`
}

// listQueues answers one page, so that however many queues there are, one
// call's result stays the size of a page.
func (t *tools) listQueues(ctx context.Context, in ListQueuesInput) (ListQueuesResult, error) {
	limit := queuesPerCall
	if in.Limit != nil {
		if limit = *in.Limit; limit < 1 || limit > queuesPerCall {
			return ListQueuesResult{}, &argError{fmt.Sprintf("limit %d is out of range: give 1 to %d, or leave it out for %d", limit, queuesPerCall, queuesPerCall)}
		}
	}
	p, err := t.c.QueuePage(ctx, limit, in.Cursor)
	if err != nil {
		return ListQueuesResult{}, err
	}
	qs := p.Queues
	r := ListQueuesResult{Queues: qs, NextCursor: p.NextCursor}
	if len(qs) == 0 && in.Cursor == "" {
		r.Message = "No queues yet: no task has been created since the service began counting queues."
		return r, nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d queue(s) on this page.", len(qs))
	for _, q := range qs {
		fmt.Fprintf(&b, "\n- %s: %d todo, %d blocked, %d in progress, %d done, %d cancelled, %d failed", q.Queue,
			q.Counts[client.StatusTodo], q.Counts[client.StatusBlocked], q.Counts[client.StatusInProgress],
			q.Counts[client.StatusDone], q.Counts[client.StatusCancelled], q.Counts[client.StatusFailed])
		if q.OldestTodoAt != nil {
			fmt.Fprintf(&b, "; oldest todo created %s", stamp(*q.OldestTodoAt))
		}
	}
	if p.NextCursor != "" {
		b.WriteString("\nMore queues: call list_queues with cursor=next_cursor.")
	}
	r.Message = b.String()
	return r, nil
}
