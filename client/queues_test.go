package client

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"
)

// Queues gives each queue's counts, kept from the server's change stream,
// and its oldest todo task.
func TestAgainstServerQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, admin := startServer(t, nil)
	a := agent(t, admin, "agent-q1", "researcher")
	before := time.Now().Add(-time.Second)
	for _, id := range []string{"q-1", "q-2", "q-3"} {
		if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: id, Title: id, Queue: "research"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Checkout(ctx, "q-1", CheckoutRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Complete(ctx, "q-1", CompleteRequest{}); err != nil {
		t.Fatal(err)
	}
	var qs []Queue
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		if qs, err = a.Queues(ctx); err != nil {
			t.Fatal(err)
		}
		if len(qs) == 1 && qs[0].Counts["done"] == 1 && qs[0].Counts["todo"] == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queues %+v, want research with 2 todo and 1 done", qs)
		}
	}
	q := qs[0]
	if q.Queue != "research" || q.Counts["in_progress"] != 0 || q.Counts["cancelled"] != 0 {
		t.Fatalf("queue %+v", q)
	}
	if q.OldestTodoAt == nil || q.OldestTodoAt.Before(before) || q.OldestTodoAt.After(time.Now()) {
		t.Fatalf("oldest_todo_at %v", q.OldestTodoAt)
	}
}

// Queues walks every page of the listing; QueuePage gives one.
func TestAgainstServerQueuePages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, admin := startServer(t, nil)
	a := agent(t, admin, "agent-q2", "researcher")
	var want []string
	for i := range 5 {
		q := fmt.Sprintf("pq-%d", i)
		if _, err := a.CreateTask(ctx, CreateTaskRequest{Title: q, Queue: q}); err != nil {
			t.Fatal(err)
		}
		want = append(want, q)
	}
	var names []string
	for cursor, pages := "", 0; ; pages++ {
		page, err := a.QueuePage(ctx, 2, cursor)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Queues) > 2 || pages > 3 {
			t.Fatalf("page %d: %+v", pages, page)
		}
		for _, q := range page.Queues {
			names = append(names, q.Queue)
		}
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	all, err := a.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var every []string
	for _, q := range all {
		every = append(every, q.Queue)
	}
	if !slices.Equal(names, want) || !slices.Equal(every, want) {
		t.Errorf("pages of 2: %v; every page: %v; want %v", names, every, want)
	}
	if _, err := a.QueuePage(ctx, 0, "bogus"); err == nil {
		t.Error("a cursor the server did not issue: no error")
	}
}

// Under RecordResponse, Queues records the server's answer when there is
// one page, and every page as one answer when there are more.
func TestAgainstServerQueuesRecordedAsOneAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, admin := startServer(t, nil)
	a := agent(t, admin, "agent-q3", "researcher")
	create := func(from, to int) {
		for start := from; start < to; start += 25 {
			var batch []CreateTaskRequest
			for i := start; i < min(start+25, to); i++ {
				batch = append(batch, CreateTaskRequest{TaskID: fmt.Sprintf("t-%03d", i), Title: "t", Queue: fmt.Sprintf("rq-%03d", i)})
			}
			if _, err := a.CreateTasks(ctx, batch); err != nil {
				t.Fatal(err)
			}
		}
	}
	type answer struct {
		Queues     []Queue `json:"queues"`
		NextCursor *string `json:"next_cursor"`
	}
	create(0, 3)
	var one Response
	if _, err := a.Queues(RecordResponse(ctx, &one)); err != nil {
		t.Fatal(err)
	}
	var page answer
	if err := json.Unmarshal(one.Body, &page); err != nil || len(page.Queues) != 3 || page.NextCursor != nil || one.Status != 200 {
		t.Fatalf("one page recorded: %d %s (%v)", one.Status, one.Body, err)
	}
	create(3, 130)
	var rec Response
	qs, err := a.Queues(RecordResponse(ctx, &rec))
	if err != nil || len(qs) != 130 {
		t.Fatalf("queues over two pages: %d, %v", len(qs), err)
	}
	var all answer
	if err := json.Unmarshal(rec.Body, &all); err != nil || len(all.Queues) != 130 || all.NextCursor != nil ||
		all.Queues[0].Queue != "rq-000" || all.Queues[129].Queue != "rq-129" {
		t.Fatalf("two pages recorded as %d queues, next %v (%v)", len(all.Queues), all.NextCursor, err)
	}
}
