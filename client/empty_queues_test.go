package client

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// A claim given an empty list of queues (a computed list that filtered to
// nothing) was sent without any, and so took a task of the default queue:
// the work of another queue. It is refused, as the server, the CLI and
// the MCP server refuse it, naming the field; nil still means the default
// queue. ClaimLoop with Queues() naming none is refused the same way
// before it claims anything.
func TestAgainstServerAnEmptyQueueListIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, admin := startServer(t, nil)
	a := agent(t, admin, "agent-eq1", "researcher")
	if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: "deploy", Title: "deploy"}); err != nil {
		t.Fatal(err)
	}
	refused := func(what string, err error) {
		t.Helper()
		var ae *APIError
		if !errors.Is(err, ErrInvalid) || !errors.As(err, &ae) || ae.Code != "invalid_request" || !strings.Contains(err.Error(), "queues") {
			t.Errorf("%s: %v, want invalid_request naming queues", what, err)
		}
	}
	co, err := a.Claim(ctx, ClaimRequest{Queues: []string{}, Timeout: time.Minute})
	refused("Claim", err)
	if err == nil {
		t.Fatalf("Claim with no queues took %s of queue %s", co.TaskID, co.Queue)
	}
	_, err = a.ClaimOrGiveBack(ctx, ClaimRequest{Queues: []string{}})
	refused("ClaimOrGiveBack", err)
	var none []string
	ran := false
	err = a.ClaimLoop(ctx, func(context.Context, *Lease) error { ran = true; return nil }, Queues(none...), NoHeartbeats())
	refused("ClaimLoop", err)
	if ran {
		t.Fatal("ClaimLoop with no queues worked on a task")
	}
	if s, err := a.Status(ctx, "deploy"); err != nil || s.Locked {
		t.Fatalf("deploy: %+v %v, want it open", s, err)
	}
	// Left out, the queues are the server's default.
	if co, err := a.Claim(ctx, ClaimRequest{}); err != nil || co.TaskID != "deploy" {
		t.Fatalf("Claim with no queues given: %+v %v", co, err)
	}
}
