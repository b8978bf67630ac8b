package httpapi

import (
	"context"
	"testing"

	"github.com/checkout-dev/checkout/lease"
)

func (f *fakeService) ListQueuePage(_ context.Context, p lease.ListQueuesParams) (lease.QueuePage, error) {
	if err := f.rec("ListQueuePage", p); err != nil {
		return lease.QueuePage{}, err
	}
	all := []lease.QueueStats{
		{Queue: "backend", Counts: map[lease.Status]int64{lease.StatusTodo: 3, lease.StatusInProgress: 1, lease.StatusDone: 7}, OldestTodoAt: t0},
		{Queue: "default", Counts: map[lease.Status]int64{lease.StatusDone: 2, lease.StatusCancelled: 1, lease.StatusBlocked: 4, lease.StatusFailed: 5}},
	}
	// The fake's cursor after the first queue is "next".
	switch {
	case p.Cursor == "next":
		return lease.QueuePage{Queues: all[1:]}, nil
	case p.Cursor != "":
		return lease.QueuePage{}, &lease.ValidationError{Field: "cursor", Code: lease.CodeInvalidRequest, Message: "cursor is not one this server issued"}
	case p.Limit == 1:
		return lease.QueuePage{Queues: all[:1], NextCursor: "next"}, nil
	}
	return lease.QueuePage{Queues: all}, nil
}

// GET /api/queues answers every status of every queue, and null for a
// queue with no todo task, as the contract says (the harness checks the
// answer against the OpenAPI document).
func TestListQueues(t *testing.T) {
	t.Parallel()
	hs := newHarness(t)
	res := hs.do("GET", "/api/queues", "ck_agent", "").expect(t, 200, "")
	qs, _ := res.json["queues"].([]any)
	if len(qs) != 2 {
		t.Fatalf("queues: %s", res.body)
	}
	b := qs[0].(map[string]any)
	counts := b["counts"].(map[string]any)
	if b["queue"] != "backend" || counts["todo"] != 3.0 || counts["in_progress"] != 1.0 || counts["done"] != 7.0 || counts["cancelled"] != 0.0 ||
		counts["blocked"] != 0.0 || counts["failed"] != 0.0 {
		t.Errorf("backend: %v", b)
	}
	if c := qs[1].(map[string]any)["counts"].(map[string]any); c["blocked"] != 4.0 || c["failed"] != 5.0 || c["cancelled"] != 1.0 {
		t.Errorf("default: %v", c)
	}
	if b["oldest_todo_at"] != t0.UTC().Format(timeFormat) {
		t.Errorf("backend oldest_todo_at %v, want %s", b["oldest_todo_at"], t0.UTC().Format(timeFormat))
	}
	if d := qs[1].(map[string]any); d["oldest_todo_at"] != nil {
		t.Errorf("default has no todo task: oldest_todo_at %v", d["oldest_todo_at"])
	}
	if res.json["next_cursor"] != nil {
		t.Errorf("one page: next_cursor %v, want null", res.json["next_cursor"])
	}
	hs.do("GET", "/api/queues", "", "").expect(t, 401, "")

	// A page at a time: limit, then the cursor of the page before.
	first := hs.do("GET", "/api/queues?limit=1", "ck_agent", "").expect(t, 200, "")
	if qs, _ := first.json["queues"].([]any); len(qs) != 1 || first.json["next_cursor"] != "next" {
		t.Fatalf("limit 1: %s", first.body)
	}
	second := hs.do("GET", "/api/queues?cursor=next", "ck_agent", "").expect(t, 200, "")
	if qs, _ := second.json["queues"].([]any); len(qs) != 1 || qs[0].(map[string]any)["queue"] != "default" || second.json["next_cursor"] != nil {
		t.Fatalf("the page after: %s", second.body)
	}
	hs.do("GET", "/api/queues?limit=1000", "ck_agent", "").expect(t, 200, "")
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "limit=-1", "cursor=bogus", "lmit=5"} {
		hs.do("GET", "/api/queues?"+q, "ck_agent", "").expect(t, 400, "invalid_request")
	}
}
