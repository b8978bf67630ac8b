package client

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// The work graph (API 1.1) as the client sends and reads it, against
// scripted answers; server_test.go runs it against the real local server.

const graphTaskJSON = `{"task_id":"task-2","title":"Deploy","description":"","queue":"default","priority":5,"metadata":{},` +
	`"version":3,"status":"blocked","created_at":"2026-03-20T14:30:00.000Z","started_at":null,"completed_at":null,` +
	`"duration_seconds":null,"checkout":null,` +
	`"blocked_by":[{"task_id":"task-1","status":"in_progress"},{"task_id":"task-0","status":"done"}],"blocks":["task-3"],` +
	`"max_attempts":3,"attempts":2,"retry_delay_seconds":30,"not_before":"2026-03-20T14:31:00.000Z","last_error":"exit status 1"}`

func TestCreateTaskSendsTheWorkGraphFields(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(int, recorded) (int, string) { return 201, graphTaskJSON })
	c := New(s.URL, "k")
	three, zero := 3, time.Duration(0)
	nb := time.Date(2026, 3, 20, 15, 0, 0, 0, time.UTC)
	task, err := c.CreateTask(context.Background(), CreateTaskRequest{TaskID: "task-2", Title: "Deploy",
		BlockedBy: []string{"task-0", "task-1"}, MaxAttempts: &three, RetryDelay: &zero, NotBefore: &nb})
	if err != nil {
		t.Fatal(err)
	}
	body := s.requests()[0].Body
	want := map[string]any{"task_id": "task-2", "title": "Deploy", "blocked_by": []any{"task-0", "task-1"},
		"max_attempts": 3.0, "retry_delay": "0s", "not_before": "2026-03-20T15:00:00Z"}
	if !reflect.DeepEqual(body, want) {
		t.Errorf("create body %v\nwant %v", body, want)
	}
	if task.Status != StatusBlocked || len(task.BlockedBy) != 2 || task.BlockedBy[0] != (Blocker{"task-1", StatusInProgress}) ||
		!reflect.DeepEqual(task.Blocks, []string{"task-3"}) || task.Attempts != 2 || task.MaxAttempts != 3 ||
		task.RetryDelay() != 30*time.Second || task.NotBefore == nil || !task.NotBefore.Equal(time.Date(2026, 3, 20, 14, 31, 0, 0, time.UTC)) ||
		task.LastError != "exit status 1" {
		t.Errorf("task %+v", task)
	}

	// Without them, none is sent: the server's defaults apply.
	if _, err := c.CreateTask(context.Background(), CreateTaskRequest{Title: "x"}); err != nil {
		t.Fatal(err)
	}
	if body := s.requests()[1].Body; !reflect.DeepEqual(body, map[string]any{"title": "x"}) {
		t.Errorf("plain create body %v", body)
	}
	// A batch carries them per task.
	if _, err := c.CreateTasks(context.Background(), []CreateTaskRequest{{TaskID: "a", BlockedBy: []string{"b"}, RetryDelay: &zero}}); err != nil {
		t.Fatal(err)
	}
	tasks := s.requests()[2].Body["tasks"].([]any)
	if got := tasks[0].(map[string]any); got["retry_delay"] != "0s" || !reflect.DeepEqual(got["blocked_by"], []any{"b"}) {
		t.Errorf("batch task %v", got)
	}
}

func TestUpdateTaskSetsAndClearsTheWorkGraphFields(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(int, recorded) (int, string) { return 200, graphTaskJSON })
	c := New(s.URL, "k")
	ctx := context.Background()
	none := []string{}
	some := []string{"task-1"}
	one, delay := 1, 90*time.Second
	nb := time.Date(2026, 3, 20, 15, 0, 0, 0, time.UTC)
	cases := []struct {
		req  UpdateTaskRequest
		want map[string]any
	}{
		{UpdateTaskRequest{BlockedBy: &none, ClearNotBefore: true}, map[string]any{"blocked_by": []any{}, "not_before": nil}},
		{UpdateTaskRequest{BlockedBy: &some, MaxAttempts: &one, RetryDelay: &delay, NotBefore: &nb},
			map[string]any{"blocked_by": []any{"task-1"}, "max_attempts": 1.0, "retry_delay": "1m30s", "not_before": "2026-03-20T15:00:00Z"}},
		{UpdateTaskRequest{NotBefore: &nb, ClearNotBefore: true}, map[string]any{"not_before": nil}},
		{UpdateTaskRequest{Status: StatusTodo}, map[string]any{"status": "todo"}},
	}
	for i, tc := range cases {
		if _, err := c.UpdateTask(ctx, "task-2", tc.req); err != nil {
			t.Fatal(err)
		}
		r := s.requests()[i]
		if r.Method != "PATCH" || !reflect.DeepEqual(r.Body, tc.want) {
			t.Errorf("case %d: %s body %v, want %v", i, r.Method, r.Body, tc.want)
		}
	}
}

func TestFailReleasesAsAFailedAttempt(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(_ int, r recorded) (int, string) {
		if r.Path == "/api/whoami" {
			return 200, `{"agent_id":"admin","name":"admin","admin":true}`
		}
		return 200, `{"task_id":"task-1","released_by":"agent-w","held_seconds":12}`
	})
	c := New(s.URL, "k")
	long := strings.Repeat("é", MaxErrorLen) // 2 bytes each: twice too long
	r, err := c.Fail(context.Background(), "task-1", long, ReleaseRequest{RunID: "run-w", Fence: 3, AgentID: "agent-w"})
	if err != nil || r.HeldSeconds != 12 {
		t.Fatalf("Fail = %+v, %v", r, err)
	}
	req := s.requests()[1] // after the whoami that tells the admin's own id
	if req.Path != "/api/tasks/task-1/release" || req.Body["outcome"] != "failed" || req.Body["run_id"] != "run-w" ||
		req.Body["fence"] != 3.0 || req.Body["agent_id"] != "agent-w" {
		t.Errorf("fail request %s %v", req.Path, req.Body)
	}
	if e, _ := req.Body["error"].(string); len(e) > MaxErrorLen || len(e) < MaxErrorLen-1 || !utf8.ValidString(e) {
		t.Errorf("error sent is %d bytes (valid UTF-8: %v), want at most %d", len(e), utf8.ValidString(e), MaxErrorLen)
	}
	// A plain release sends no outcome.
	if _, err := c.Release(context.Background(), "task-1", ReleaseRequest{RunID: "run-w"}); err != nil {
		t.Fatal(err)
	}
	if b := s.requests()[2].Body; b["outcome"] != nil || b["error"] != nil {
		t.Errorf("plain release body %v", b)
	}
}

func TestBlockedAndNotReadyErrorsCarryTheirDetails(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(_ int, r recorded) (int, string) {
		switch {
		case strings.Contains(r.Path, "task-b"):
			return 409, `{"error":"task task-b is blocked","code":"blocked","blocked_by":[{"task_id":"task-a","status":"todo"},{"task_id":"task-z","status":"failed"}]}`
		case strings.Contains(r.Path, "task-n"):
			return 409, `{"error":"task task-n is not ready before 2026-03-20T14:35:00.000Z","code":"not_ready","not_before":"2026-03-20T14:35:00.000Z"}`
		case r.Method == "POST" && r.Path == "/api/tasks":
			return 400, `{"error":"blocked_by would close a cycle","code":"dependency_cycle"}`
		}
		return 400, `{"error":"unknown task nope","code":"invalid_dependency"}`
	})
	c := New(s.URL, "k")
	ctx := context.Background()

	_, err := c.Checkout(ctx, "task-b", CheckoutRequest{})
	var be *BlockedError
	if !errors.As(err, &be) || !errors.Is(err, ErrBlocked) || errors.Is(err, ErrCheckedOut) {
		t.Fatalf("checkout of a blocked task = %v", err)
	}
	if want := []Blocker{{"task-a", StatusTodo}, {"task-z", StatusFailed}}; !reflect.DeepEqual(be.BlockedBy, want) || be.Status != 409 {
		t.Errorf("blockers %+v (status %d)", be.BlockedBy, be.Status)
	}

	_, err = c.Checkout(ctx, "task-n", CheckoutRequest{})
	var ne *NotReadyError
	if !errors.As(err, &ne) || !errors.Is(err, ErrNotReady) || errors.Is(err, ErrBlocked) {
		t.Fatalf("checkout of a waiting task = %v", err)
	}
	if !ne.NotBefore.Equal(time.Date(2026, 3, 20, 14, 35, 0, 0, time.UTC)) {
		t.Errorf("not before %v", ne.NotBefore)
	}

	_, err = c.CreateTask(ctx, CreateTaskRequest{BlockedBy: []string{"task-2"}})
	if !errors.Is(err, ErrDependencyCycle) || !errors.Is(err, ErrInvalid) || errors.Is(err, ErrInvalidDependency) {
		t.Errorf("cycle = %v", err)
	}
	none := []string{"nope"}
	_, err = c.UpdateTask(ctx, "task-2", UpdateTaskRequest{BlockedBy: &none})
	if !errors.Is(err, ErrInvalidDependency) || !errors.Is(err, ErrInvalid) || errors.Is(err, ErrDependencyCycle) {
		t.Errorf("invalid dependency = %v", err)
	}
}

func TestEventsCarryTheReleaseOutcome(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(int, recorded) (int, string) {
		return 200, `{"events":[{"type":"release","task_id":"t","agent_id":"a","run_id":"r","fence":1,"at":"2026-03-20T14:30:00.000Z",` +
			`"held_seconds":5,"by":"a","outcome":"failed","error":"boom"},{"type":"unblocked","task_id":"t","agent_id":"","run_id":"","fence":0,"at":"2026-03-20T14:31:00.000Z","by":"system"}]}`
	})
	evs, err := New(s.URL, "k").Events(context.Background(), "t")
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 2 || evs[0].Outcome != OutcomeFailed || evs[0].Error != "boom" || evs[1].Type != "unblocked" || evs[1].Outcome != "" {
		t.Errorf("events %+v", evs)
	}
	b, _ := json.Marshal(evs[1])
	if strings.Contains(string(b), "outcome") || strings.Contains(string(b), `"error"`) {
		t.Errorf("an event without an outcome marshals as %s", b)
	}
}

// When the work function fails, WorkOn releases the lease as a failed
// attempt carrying the error; when it is stopped by its context, the
// release is a plain one.
func TestWorkOnReleasesAFailedAttempt(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(_ int, r recorded) (int, string) {
		switch {
		case strings.HasSuffix(r.Path, "/checkout"):
			return 200, holderJSON
		case strings.HasSuffix(r.Path, "/release"):
			return 200, `{"task_id":"task-1","released_by":"agent-w","held_seconds":1}`
		}
		return 500, `{"error":"unexpected","code":"x"}`
	})
	c := New(s.URL, "k")
	boom := errors.New("tests failed: " + strings.Repeat("x", 3*MaxErrorLen))
	err := c.WorkOn(context.Background(), "task-1", func(context.Context, *Lease) error { return boom }, NoHeartbeats())
	if !errors.Is(err, boom) {
		t.Fatalf("WorkOn = %v, want the function's error", err)
	}
	rel := s.requests()[1]
	if !strings.HasSuffix(rel.Path, "/release") || rel.Body["outcome"] != "failed" || rel.Body["run_id"] != "run-w" || rel.Body["fence"] != 3.0 {
		t.Fatalf("release %s %v", rel.Path, rel.Body)
	}
	if e, _ := rel.Body["error"].(string); len(e) != MaxErrorLen || !strings.HasPrefix(e, "tests failed: xxx") {
		t.Errorf("release error is %d bytes: %.40q", len(e), e)
	}

	ctx, cancel := context.WithCancel(context.Background())
	err = c.WorkOn(ctx, "task-1", func(ctx context.Context, _ *Lease) error { cancel(); return ctx.Err() }, NoHeartbeats())
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("WorkOn stopped = %v", err)
	}
	rel = s.requests()[3]
	if !strings.HasSuffix(rel.Path, "/release") || rel.Body["outcome"] != nil || rel.Body["error"] != nil {
		t.Errorf("release of stopped work %s %v, want a plain release", rel.Path, rel.Body)
	}
}

// A server before API 1.1 refuses the outcome as an unknown field: WorkOn
// then releases plainly rather than leave the lease to time out.
func TestWorkOnFallsBackToAPlainReleaseOnAnOlderServer(t *testing.T) {
	t.Parallel()
	s := newScripted(t, func(_ int, r recorded) (int, string) {
		switch {
		case strings.HasSuffix(r.Path, "/checkout"):
			return 200, holderJSON
		case strings.HasSuffix(r.Path, "/release") && r.Body["outcome"] != nil:
			return 400, `{"error":"unknown field \"outcome\"","code":"invalid_json"}`
		case strings.HasSuffix(r.Path, "/release"):
			return 200, `{"task_id":"task-1","released_by":"agent-w","held_seconds":1}`
		}
		return 500, `{"error":"unexpected","code":"x"}`
	})
	boom := errors.New("boom")
	err := New(s.URL, "k").WorkOn(context.Background(), "task-1", func(context.Context, *Lease) error { return boom }, NoHeartbeats())
	if err != boom { //nolint:errorlint // the very error, not one that wraps it
		t.Fatalf("WorkOn = %v, want only the function's error", err)
	}
	reqs := s.requests()
	if len(reqs) != 3 || reqs[2].Body["outcome"] != nil || reqs[2].Body["reason"] != "boom" {
		t.Errorf("requests %+v", reqs)
	}
}
