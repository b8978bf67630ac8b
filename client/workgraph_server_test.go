package client

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

// The work graph (API 1.1) against the real local server.

// A task created with blockers is blocked: a checkout is refused with the
// blockers that are not done, a claim passes it over, and once they are
// done it becomes todo by itself.
func TestAgainstServerBlockedTaskWaitsForItsBlockers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	a := agent(t, admin, "agent-a1b2", "researcher")
	for _, id := range []string{"build", "test"} {
		if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: id}); err != nil {
			t.Fatal(err)
		}
	}
	deploy, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: "deploy", BlockedBy: []string{"build", "test"}})
	if err != nil {
		t.Fatal(err)
	}
	if deploy.Status != StatusBlocked || len(deploy.BlockedBy) != 2 {
		t.Fatalf("created %+v, want blocked by build and test", deploy)
	}
	got, err := a.GetTask(ctx, "deploy")
	if err != nil || got.Status != StatusBlocked ||
		!reflect.DeepEqual(got.BlockedBy, []Blocker{{"build", StatusTodo}, {"test", StatusTodo}}) || len(got.Blocks) != 0 {
		t.Fatalf("GET deploy: %+v %v", got, err)
	}
	build, err := a.GetTask(ctx, "build")
	if err != nil || !reflect.DeepEqual(build.Blocks, []string{"deploy"}) || len(build.BlockedBy) != 0 {
		t.Fatalf("GET build: blocks %v, blocked by %v (%v)", build.Blocks, build.BlockedBy, err)
	}
	if page, err := a.ListTasks(ctx, ListTasksRequest{Status: StatusBlocked}); err != nil || len(page.Tasks) != 1 || page.Tasks[0].TaskID != "deploy" {
		t.Fatalf("blocked tasks: %+v %v", page, err)
	}

	_, err = a.Checkout(ctx, "deploy", CheckoutRequest{})
	var be *BlockedError
	if !errors.As(err, &be) || !errors.Is(err, ErrBlocked) ||
		!reflect.DeepEqual(be.BlockedBy, []Blocker{{"build", StatusTodo}, {"test", StatusTodo}}) {
		t.Fatalf("checkout of a blocked task: %v (%+v)", err, be)
	}

	// Finish the blockers (by claims, which never hand out deploy).
	for range 2 {
		co, err := a.Claim(ctx, ClaimRequest{})
		if err != nil || co.TaskID == "deploy" {
			t.Fatalf("claim %+v %v", co, err)
		}
		if _, err := a.Complete(ctx, co.TaskID, CompleteRequest{RunID: co.RunID}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if err := srv.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		if got, err = a.GetTask(ctx, "deploy"); err == nil && got.Status == StatusTodo {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("deploy after its blockers were done: %+v %v", got, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if !reflect.DeepEqual(got.BlockedBy, []Blocker{{"build", StatusDone}, {"test", StatusDone}}) {
		t.Errorf("blocked by %+v, want both done", got.BlockedBy)
	}
	co, err := a.Checkout(ctx, "deploy", CheckoutRequest{})
	if err != nil || co.Attempt != 1 {
		t.Fatalf("checkout once unblocked: %+v %v", co, err)
	}
	// The unblocking's own event is archived by the change stream, from
	// the unblocking write's change: until then the trail holds it back.
	if err := srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := a.Events(ctx, "deploy")
	if err != nil {
		t.Fatal(err)
	}
	seen := false
	for _, e := range evs {
		seen = seen || e.Type == "unblocked"
	}
	if !seen {
		t.Errorf("no unblocked event in %+v", evs)
	}

	// Blockers are checked: unknown ones, and cycles.
	if _, err := a.CreateTask(ctx, CreateTaskRequest{BlockedBy: []string{"nope"}}); !errors.Is(err, ErrInvalidDependency) {
		t.Errorf("an unknown blocker: %v", err)
	}
	blockers := []string{"deploy"}
	if _, err := a.UpdateTask(ctx, "build", UpdateTaskRequest{BlockedBy: &blockers}); !errors.Is(err, ErrInvalidTransition) && !errors.Is(err, ErrDependencyCycle) {
		t.Errorf("build (done) blocked by deploy: %v", err)
	}
}

// A failed release records the outcome and the error, holds the task back
// for its retry delay, and at max attempts fails the task; a reopen starts
// again.
func TestAgainstServerFailRecordsAFailedAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, admin := startServer(t, nil)
	a := agent(t, admin, "agent-a1b2", "researcher")
	two, hour, none := 2, time.Hour, time.Duration(0)
	if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: "flaky", MaxAttempts: &two, RetryDelay: &none}); err != nil {
		t.Fatal(err)
	}
	co, err := a.Checkout(ctx, "flaky", CheckoutRequest{RunID: "run-1"})
	if err != nil || co.Attempt != 1 {
		t.Fatalf("first checkout %+v %v", co, err)
	}
	if _, err := a.Fail(ctx, "flaky", "tests fail", ReleaseRequest{RunID: "run-1", Fence: co.Fence}); err != nil {
		t.Fatal(err)
	}
	task, err := a.GetTask(ctx, "flaky")
	if err != nil || task.Status != StatusTodo || task.Attempts != 1 || task.MaxAttempts != 2 || task.LastError != "tests fail" || task.RetryDelay() != 0 {
		t.Fatalf("after one failed attempt: %+v %v", task, err)
	}
	// The release's error is on its event once the event is archived.
	if err := srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	evs, err := a.Events(ctx, "flaky")
	if err != nil || len(evs) == 0 {
		t.Fatal(evs, err)
	}
	if last := evs[len(evs)-1]; last.Type != "release" || last.Outcome != OutcomeFailed || last.Error != "tests fail" {
		t.Errorf("release event %+v", last)
	}

	co, err = a.Checkout(ctx, "flaky", CheckoutRequest{RunID: "run-2"})
	if err != nil || co.Attempt != 2 {
		t.Fatalf("second checkout %+v %v", co, err)
	}
	if _, err := a.Fail(ctx, "flaky", "tests fail again", ReleaseRequest{RunID: "run-2"}); err != nil {
		t.Fatal(err)
	}
	if task, err = a.GetTask(ctx, "flaky"); err != nil || task.Status != StatusFailed || task.LastError != "tests fail again" {
		t.Fatalf("after the last attempt: %+v %v", task, err)
	}
	if task, err = a.UpdateTask(ctx, "flaky", UpdateTaskRequest{Status: StatusTodo, RetryDelay: &hour}); err != nil || task.Status != StatusTodo || task.Attempts != 0 {
		t.Fatalf("reopened: %+v %v", task, err)
	}

	// With a retry delay, a failed attempt makes the task wait.
	co, err = a.Checkout(ctx, "flaky", CheckoutRequest{RunID: "run-3"})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if _, err := a.Fail(ctx, "flaky", "", ReleaseRequest{RunID: "run-3"}); err != nil {
		t.Fatal(err)
	}
	_, err = a.Checkout(ctx, "flaky", CheckoutRequest{RunID: "run-4"})
	var ne *NotReadyError
	if !errors.As(err, &ne) || !errors.Is(err, ErrNotReady) || ne.NotBefore.Before(before.Add(hour-time.Minute)) {
		t.Fatalf("checkout while it waits: %v", err)
	}
	if _, err := a.Claim(ctx, ClaimRequest{}); !errors.Is(err, ErrNoTaskAvailable) {
		t.Errorf("claim while it waits: %v", err)
	}
	// Clearing not_before makes it ready at once.
	if task, err = a.UpdateTask(ctx, "flaky", UpdateTaskRequest{ClearNotBefore: true}); err != nil || task.NotBefore != nil {
		t.Fatalf("not_before cleared: %+v %v", task, err)
	}
	if _, err := a.Checkout(ctx, "flaky", CheckoutRequest{RunID: "run-4"}); err != nil {
		t.Errorf("checkout once ready: %v", err)
	}
}

// WorkOn's failing function makes the task's last error.
func TestAgainstServerWorkOnFailureIsTheLastError(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, admin := startServer(t, nil)
	a := agent(t, admin, "agent-a1b2", "researcher")
	if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: "job"}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("the build broke")
	if err := a.WorkOn(ctx, "job", func(context.Context, *Lease) error { return boom }, NoHeartbeats()); !errors.Is(err, boom) {
		t.Fatalf("WorkOn = %v", err)
	}
	task, err := a.GetTask(ctx, "job")
	if err != nil || task.LastError != "the build broke" || task.Attempts != 1 || task.Checkout != nil {
		t.Fatalf("after WorkOn failed: %+v %v", task, err)
	}
}
