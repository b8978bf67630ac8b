package client

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// A task's NotBefore is the server's time, and the server keeps it after
// it passes: whether it is still ahead is read against the server's clock
// (its answer's Date header), not the caller's.

// dated answers every request with body and the Date header date.
func dated(t *testing.T, date time.Time, body string) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Date", date.UTC().Format(http.TimeFormat))
		io.WriteString(w, body)
	}))
	t.Cleanup(s.Close)
	return s
}

func TestTaskNotBeforeIsReadAgainstTheServersClock(t *testing.T) {
	t.Parallel()
	// graphTaskJSON's not_before is 2026-03-20T14:31:00Z.
	notBefore := time.Date(2026, 3, 20, 14, 31, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		server time.Time
		ahead  bool
	}{
		{"a minute before", notBefore.Add(-time.Minute), true},
		{"a second before", notBefore.Add(-time.Second), true},
		{"at it", notBefore, false},
		{"a year after", notBefore.AddDate(1, 0, 0), false},
	} {
		s := dated(t, tc.server, graphTaskJSON)
		c := New(s.URL, "k")
		task, err := c.GetTask(context.Background(), "task-2")
		if err != nil {
			t.Fatal(err)
		}
		if !task.ServerTime.Equal(tc.server) {
			t.Errorf("%s: ServerTime %v, want %v", tc.name, task.ServerTime, tc.server)
		}
		if got := task.NotBeforeAhead(); got != tc.ahead {
			t.Errorf("%s: NotBeforeAhead() = %v, want %v", tc.name, got, tc.ahead)
		}
		page := dated(t, tc.server, `{"tasks":[`+graphTaskJSON+`],"next_cursor":null}`)
		p, err := New(page.URL, "k").ListTasks(context.Background(), ListTasksRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Tasks) != 1 || !p.Tasks[0].ServerTime.Equal(tc.server) || p.Tasks[0].NotBeforeAhead() != tc.ahead {
			t.Errorf("%s: listed %+v", tc.name, p.Tasks)
		}
	}
}

func TestTaskWithoutNotBeforeIsNeverAhead(t *testing.T) {
	t.Parallel()
	task := Task{ServerTime: time.Date(2026, 3, 20, 14, 0, 0, 0, time.UTC)}
	if task.NotBeforeAhead() {
		t.Error("a task without not_before waits for nothing")
	}
	// The Date header is whole seconds: the server's clock may be up to
	// a second past it, so a not_before within that second is not yet
	// known to have passed.
	half := task.ServerTime.Add(500 * time.Millisecond)
	if !(Task{NotBefore: &half, ServerTime: task.ServerTime}).NotBeforeAhead() {
		t.Error("a not_before within the Date header's second counts as ahead")
	}
	// A task not read from the server (decoded elsewhere) is read against
	// the local clock.
	future := time.Now().Add(time.Hour)
	past := time.Now().Add(-time.Hour)
	if !(Task{NotBefore: &future}).NotBeforeAhead() || (Task{NotBefore: &past}).NotBeforeAhead() {
		t.Error("without ServerTime, NotBefore is read against the local clock")
	}
}

// An inbox message's NotBefore, and a batch's tasks' NotBefore, are the
// server's time too: Inbox and CreateTasks set the answer's Date as their
// ServerTime, so NotBeforeAhead reads them against the server's clock.
func TestInboxAndBatchResultsCarryTheServersTime(t *testing.T) {
	t.Parallel()
	notBefore := time.Date(2026, 3, 20, 14, 31, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		server time.Time
		ahead  bool
	}{
		{"a minute before", notBefore.Add(-time.Minute), true},
		{"a year after", notBefore.AddDate(1, 0, 0), false},
	} {
		inbox := dated(t, tc.server, `{"messages":[{"message_id":"m1","type":"task_available","task_id":"task-2","reason":"released","at":"2026-03-20T14:30:00Z","not_before":"2026-03-20T14:31:00Z"}]}`)
		msgs, err := New(inbox.URL, "k").Inbox(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) != 1 || !msgs[0].ServerTime.Equal(tc.server) || msgs[0].NotBeforeAhead() != tc.ahead {
			t.Errorf("%s: inbox %+v, want ServerTime %v and NotBeforeAhead %v", tc.name, msgs, tc.server, tc.ahead)
		}
		batch := dated(t, tc.server, `{"results":[{"task_id":"task-2","outcome":"exists","task":`+graphTaskJSON+`}]}`)
		res, err := New(batch.URL, "k").CreateTasks(context.Background(), []CreateTaskRequest{{TaskID: "task-2"}})
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != 1 || !res[0].Task.ServerTime.Equal(tc.server) || res[0].Task.NotBeforeAhead() != tc.ahead {
			t.Errorf("%s: batch %+v, want ServerTime %v", tc.name, res, tc.server)
		}
	}
	// A message without not_before waits for nothing.
	if (Message{ServerTime: notBefore}).NotBeforeAhead() {
		t.Error("a message without not_before is ahead")
	}
}
