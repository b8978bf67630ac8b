package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A force release cancels WorkOn's work long before its next renewal, when
// it looks for lease_lost messages (CheckLossEvery); the error says why,
// and the message is deleted once read.
func TestAgainstServerWorkOnHearsOfAForceRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, admin := startServer(t, nil)
	a := agent(t, admin, "agent-a", "researcher")
	if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: "task-1"}); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- a.WorkOn(ctx, "task-1", func(ctx context.Context, l *Lease) error {
			close(started)
			<-ctx.Done()
			return context.Cause(ctx) // the loss itself, as work often returns it
		}, LeaseTimeout(time.Hour), NoHeartbeats(), CheckLossEvery(100*time.Millisecond))
	}()
	<-started
	if _, err := admin.Release(ctx, "task-1", ReleaseRequest{Force: true, Reason: "stuck"}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrLeaseLost) || !strings.Contains(err.Error(), "force_release") {
			t.Fatalf("WorkOn = %v, want lease lost by force_release", err)
		}
		if n := strings.Count(err.Error(), "force_release"); n != 1 {
			t.Errorf("WorkOn = %q: the loss told %d times, want once", err, n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WorkOn did not hear of the force release (its next renewal is 20 minutes away)")
	}
	msgs, err := a.Inbox(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if m.Type == MessageLeaseLost {
			t.Fatalf("the lease_lost message was left in the inbox: %+v", m)
		}
	}
	evs, err := a.Events(ctx, "task-1")
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	if got := strings.Join(types, " "); got != "checkout force_release" {
		t.Fatalf("events %s: nothing may be completed or released after the loss", got)
	}
}

// The former holder's inbox has the lease_lost message, with the lease's
// fence and run id.
func TestAgainstServerLeaseLostMessage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, a, _, co := heldTask(t)
	if _, err := New(srv.URL(), srv.AdminKey()).Release(ctx, co.TaskID, ReleaseRequest{Force: true}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		msgs, err := a.Inbox(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(msgs) == 1 {
			m := msgs[0]
			if m.Type != MessageLeaseLost || m.TaskID != co.TaskID || m.Fence != co.Fence || m.RunID != co.RunID || m.Reason != "force_release" {
				t.Fatalf("message %+v, want lease_lost of fence %d run %s", m, co.Fence, co.RunID)
			}
			return
		}
		if len(msgs) > 1 || time.Now().After(deadline) {
			t.Fatalf("inbox %+v, want one lease_lost message", msgs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
