package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// behindEmptyQueues puts two todo tasks, last-1 and last-2, in queue
// "zz-last", behind 300 queues that hold no todo task (each a task
// blocked by last-1): a page of the todo listing reads at most 256
// queues, so the first comes empty, with a cursor.
func behindEmptyQueues(t *testing.T, c *Client) {
	t.Helper()
	ctx := context.Background()
	for _, id := range []string{"last-1", "last-2"} {
		if _, err := c.CreateTask(ctx, CreateTaskRequest{TaskID: id, Queue: "zz-last"}); err != nil {
			t.Fatal(err)
		}
	}
	for b := range 12 {
		var batch []CreateTaskRequest
		for i := b * 25; i < (b+1)*25; i++ {
			batch = append(batch, CreateTaskRequest{TaskID: fmt.Sprintf("wait-%03d", i), Queue: fmt.Sprintf("q%03d", i), BlockedBy: []string{"last-1"}})
		}
		res, err := c.CreateTasks(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Outcome != "created" || r.Task.Status != StatusBlocked {
				t.Fatalf("%s: %s, %s", r.TaskID, r.Outcome, r.Task.Status)
			}
		}
	}
	p, err := c.ListTasks(ctx, ListTasksRequest{Status: StatusTodo})
	if err != nil || len(p.Tasks) != 0 || p.NextCursor == nil {
		t.Fatalf("the first todo page: %+v, %v; want it empty with a cursor", p, err)
	}
}

func taskIDs(ts []Task) []string {
	ids := []string{}
	for _, t := range ts {
		ids = append(ids, t.TaskID)
	}
	return ids
}

// FillTaskPage reads on past an empty page with a cursor to the tasks
// the listing holds, up to the limit asked, and no further than its
// bound of reads.
func TestAgainstServerFillTaskPageReadsPastEmptyPages(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, admin := startServer(t, nil)
	behindEmptyQueues(t, admin)

	p, err := admin.FillTaskPage(ctx, ListTasksRequest{Status: StatusTodo}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if ids := taskIDs(p.Tasks); !slices.Equal(ids, []string{"last-1", "last-2"}) || p.NextCursor != nil {
		t.Errorf("filled page: %v, cursor %v; want last-1 and last-2, no cursor", ids, p.NextCursor)
	}

	p, err = admin.FillTaskPage(ctx, ListTasksRequest{Status: StatusTodo, Limit: 1}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if ids := taskIDs(p.Tasks); !slices.Equal(ids, []string{"last-1"}) || p.NextCursor == nil {
		t.Fatalf("filled page of 1: %v, cursor %v; want last-1 and a cursor", ids, p.NextCursor)
	}
	p, err = admin.FillTaskPage(ctx, ListTasksRequest{Status: StatusTodo, Limit: 1, Cursor: *p.NextCursor}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if ids := taskIDs(p.Tasks); !slices.Equal(ids, []string{"last-2"}) {
		t.Errorf("the next filled page of 1: %v, want last-2", ids)
	}

	p, err = admin.FillTaskPage(ctx, ListTasksRequest{Status: StatusTodo}, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Tasks) != 0 || p.NextCursor == nil {
		t.Errorf("one read: %v, cursor %v; want the empty first page and its cursor", taskIDs(p.Tasks), p.NextCursor)
	}
}

// FillTaskPage asks each page for the tasks still wanted, and under
// RecordResponse records the pages it read as one answer.
func TestFillTaskPageAsksForWhatIsMissingAndRecordsOneAnswer(t *testing.T) {
	t.Parallel()
	var asked []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		asked = append(asked, q.Get("cursor")+"/"+q.Get("limit"))
		w.Header().Set("Content-Type", "application/json")
		task := func(id string) string { return fmt.Sprintf(`{"task_id":%q,"status":"todo"}`, id) }
		switch q.Get("cursor") {
		case "":
			fmt.Fprint(w, `{"tasks":[],"next_cursor":"c1"}`)
		case "c1":
			fmt.Fprintf(w, `{"tasks":[%s],"next_cursor":"c2"}`, task("t1"))
		case "c2":
			fmt.Fprintf(w, `{"tasks":[%s,%s],"next_cursor":"c3"}`, task("t2"), task("t3"))
		default:
			w.WriteHeader(400)
			fmt.Fprint(w, `{"error":"cursor","code":"invalid_request"}`)
		}
	}))
	defer srv.Close()
	c := New(srv.URL, "ck_key-of-sixteen-chars")
	var rec Response
	p, err := c.FillTaskPage(RecordResponse(context.Background(), &rec), ListTasksRequest{Limit: 3}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if ids := taskIDs(p.Tasks); !slices.Equal(ids, []string{"t1", "t2", "t3"}) || p.NextCursor == nil || *p.NextCursor != "c3" {
		t.Errorf("filled page: %v, cursor %v; want t1 to t3 and c3", ids, p.NextCursor)
	}
	if want := []string{"/3", "c1/3", "c2/2"}; !slices.Equal(asked, want) {
		t.Errorf("asked (cursor/limit) %v, want %v", asked, want)
	}
	var answer struct {
		Tasks      []json.RawMessage `json:"tasks"`
		NextCursor *string           `json:"next_cursor"`
	}
	if err := json.Unmarshal(rec.Body, &answer); err != nil || len(answer.Tasks) != 3 || answer.NextCursor == nil || *answer.NextCursor != "c3" {
		t.Errorf("recorded %s (%v), want the three tasks and c3 as one answer", rec.Body, err)
	}
}

// Queues reads on past a page that comes empty with a cursor.
func TestQueuesReadsPastAnEmptyPage(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Query().Get("cursor") == "" {
			fmt.Fprint(w, `{"queues":[],"next_cursor":"p2"}`)
			return
		}
		fmt.Fprint(w, `{"queues":[{"queue":"zz","counts":{"todo":1}}],"next_cursor":null}`)
	}))
	defer srv.Close()
	qs, err := New(srv.URL, "ck_key-of-sixteen-chars").Queues(context.Background())
	if err != nil || len(qs) != 1 || qs[0].Queue != "zz" {
		t.Fatalf("queues %+v, %v; want zz", qs, err)
	}
}
