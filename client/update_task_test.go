package client

import (
	"context"
	"encoding/json"
	"testing"
)

// A pointer to a nil list of blockers clears them, as a pointer to an
// empty one does: the server takes null for "no change".
func TestUpdateTaskClearsBlockersWithANilList(t *testing.T) {
	t.Parallel()
	var none []string
	for _, tc := range []struct {
		req  UpdateTaskRequest
		want string
	}{
		{UpdateTaskRequest{BlockedBy: &none}, `{"blocked_by":[]}`},
		{UpdateTaskRequest{BlockedBy: &[]string{}}, `{"blocked_by":[]}`},
		{UpdateTaskRequest{BlockedBy: &[]string{"a"}}, `{"blocked_by":["a"]}`},
		{UpdateTaskRequest{}, `{}`},
	} {
		b, err := json.Marshal(tc.req)
		if err != nil || string(b) != tc.want {
			t.Errorf("%s, %v; want %s", b, err, tc.want)
		}
	}
	if none != nil {
		t.Fatal("marshalling changed the caller's list")
	}
}

// Against the real server, a pointer to a nil list unblocks the task.
func TestAgainstServerNilBlockersClearThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, admin := startServer(t, nil)
	a := agent(t, admin, "agent-a1b2", "researcher")
	if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: "build"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateTask(ctx, CreateTaskRequest{TaskID: "deploy", BlockedBy: []string{"build"}}); err != nil {
		t.Fatal(err)
	}
	var none []string
	got, err := a.UpdateTask(ctx, "deploy", UpdateTaskRequest{BlockedBy: &none})
	if err != nil || got.Status != StatusTodo || len(got.BlockedBy) != 0 {
		t.Fatalf("update: %+v %v, want todo without blockers", got, err)
	}
}
