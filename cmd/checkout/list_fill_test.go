package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/client"
)

// behindEmptyQueues puts two todo tasks, last-1 and last-2, in queue
// "zz-last", behind 300 queues that hold no todo task (each a task
// blocked by last-1): a page of the todo listing reads at most 256
// queues, so the first comes empty, with a cursor.
func behindEmptyQueues(t *testing.T, c *client.Client) {
	t.Helper()
	ctx := context.Background()
	for _, id := range []string{"last-1", "last-2"} {
		if _, err := c.CreateTask(ctx, client.CreateTaskRequest{TaskID: id, Title: id, Queue: "zz-last"}); err != nil {
			t.Fatal(err)
		}
	}
	for b := range 12 {
		var batch []client.CreateTaskRequest
		for i := b * 25; i < (b+1)*25; i++ {
			batch = append(batch, client.CreateTaskRequest{TaskID: fmt.Sprintf("wait-%03d", i), Queue: fmt.Sprintf("q%03d", i), BlockedBy: []string{"last-1"}})
		}
		if _, err := c.CreateTasks(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	p, err := c.ListTasks(ctx, client.ListTasksRequest{Status: client.StatusTodo})
	if err != nil || len(p.Tasks) != 0 || p.NextCursor == nil {
		t.Fatalf("the first todo page: %+v, %v; want it empty with a cursor", p, err)
	}
}

// tasks list reads on past pages that come short, even empty, with a
// cursor, until it has the tasks asked for or the listing ends. It used
// to print "No tasks." and a More: line for the empty first page.
func TestTasksListReadsPastEmptyPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	behindEmptyQueues(t, e.admin)

	r := runCLI(t, e.srv.URL(), e.keys["admin"], "tasks", "list", "--status", "todo")
	if r.code != 0 || !strings.Contains(r.stdout, "| last-1 |") || !strings.Contains(r.stdout, "| last-2 |") ||
		strings.Contains(r.stdout, "No tasks") || strings.Contains(r.stdout, "More:") {
		t.Errorf("tasks list --status todo: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	r = runCLI(t, e.srv.URL(), e.keys["admin"], "tasks", "list", "--status", "todo", "--limit", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "| last-1 |") || strings.Contains(r.stdout, "last-2") ||
		!strings.Contains(r.stdout, "More: checkout tasks list --limit 1 --cursor ") {
		t.Errorf("tasks list --status todo --limit 1: exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	r = runCLI(t, e.srv.URL(), e.keys["admin"], "--json", "tasks", "list", "--status", "todo")
	var answer struct {
		Tasks []struct {
			TaskID string `json:"task_id"`
		} `json:"tasks"`
		NextCursor *string `json:"next_cursor"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &answer); err != nil || r.code != 0 || len(answer.Tasks) != 2 || answer.NextCursor != nil {
		t.Errorf("--json tasks list --status todo: exit %d (%v), stdout:\n%s", r.code, err, r.stdout)
	}
}

// tasks list reads at most 10 pages, then shows what it has with the
// cursor to go on from, without "No tasks." above it.
func TestTasksListReadsTenPagesAtMost(t *testing.T) {
	n := 0
	s := newScriptedCLI(t, func(sent) (int, string) {
		n++
		return 200, fmt.Sprintf(`{"tasks":[],"next_cursor":"c%d"}`, n)
	})
	r := s.run("tasks", "list")
	if got := len(s.requests()); got != 10 {
		t.Errorf("%d requests, want 10", got)
	}
	if r.code != 0 || strings.Contains(r.stdout, "No tasks.") || !strings.HasSuffix(r.stdout, "\nMore: checkout tasks list --cursor c10\n") {
		t.Errorf("exit %d, stdout:\n%s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}
