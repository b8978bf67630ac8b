package client

import (
	"context"
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
