package httpapi

import (
	"context"
	"errors"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

var t0 = time.Date(2026, 3, 20, 14, 35, 0, 123456789, time.UTC)

// fakeService answers every call with sample data unless a hook is set.
// It records the last params it saw.
type fakeService struct {
	err   error // returned by every call when set
	calls []string
	last  any

	checkout func(lease.CheckoutParams) (lease.Checkout, error)
	agents   []lease.Agent
	// task, when set, is the task GetTask answers; trail the events
	// TrailPage answers.
	task  func(id string) lease.Task
	trail []lease.Event
}

func (f *fakeService) rec(name string, p any) error {
	f.calls = append(f.calls, name)
	f.last = p
	return f.err
}

func sampleCheckout(taskID, agentID string) lease.Checkout {
	return lease.Checkout{
		TaskID: taskID, AgentID: agentID, AgentName: "researcher", RunID: "run-1", Fence: 3,
		LockedAt: t0, Timeout: 30 * time.Minute, ExpiresAt: t0.Add(30 * time.Minute), Reason: "",
		Title: "Fix login bug", Queue: "default", Priority: 5,
	}
}

func sampleTask(id string) lease.Task {
	started := t0
	return lease.Task{TaskID: id, Title: "Fix login bug", Queue: "default", Priority: 5, Version: 3, Status: lease.StatusInProgress, CreatedAt: t0.Add(-time.Hour), StartedAt: &started}
}

func (f *fakeService) RegisterAgent(_ context.Context, p lease.RegisterParams) (lease.Registration, error) {
	if err := f.rec("RegisterAgent", p); err != nil {
		return lease.Registration{}, err
	}
	id := p.AgentID
	if id == "" {
		id = "agent-gen"
	}
	return lease.Registration{Agent: lease.Agent{AgentID: id, Name: p.Name, Admin: p.Admin, CreatedAt: t0}, APIKey: "ck_secret"}, nil
}

func (f *fakeService) ListAgentsPage(_ context.Context, p lease.ListAgentsParams) (lease.AgentPage, error) {
	if err := f.rec("ListAgentsPage", p); err != nil {
		return lease.AgentPage{}, err
	}
	// The fake's cursor after the first agent is "next".
	switch {
	case p.Cursor == "next":
		return lease.AgentPage{Agents: f.agents[1:]}, nil
	case p.Cursor != "":
		return lease.AgentPage{}, &lease.ValidationError{Field: "cursor", Code: lease.CodeInvalidRequest, Message: "cursor is not one this server issued"}
	case p.Limit == 1 && len(f.agents) > 1:
		return lease.AgentPage{Agents: f.agents[:1], NextCursor: "next"}, nil
	}
	return lease.AgentPage{Agents: f.agents}, nil
}

func (f *fakeService) GetAgent(_ context.Context, id string) (lease.Agent, error) {
	if err := f.rec("GetAgent", id); err != nil {
		return lease.Agent{}, err
	}
	for _, a := range f.agents {
		if a.AgentID == id {
			return a, nil
		}
	}
	return lease.Agent{}, lease.ErrAgentNotFound
}

func (f *fakeService) RemoveAgent(_ context.Context, id string) error {
	return f.rec("RemoveAgent", id)
}

func (f *fakeService) Heartbeat(_ context.Context, id string, ttl time.Duration) (lease.Heartbeat, error) {
	if err := f.rec("Heartbeat", ttl); err != nil {
		return lease.Heartbeat{}, err
	}
	return lease.Heartbeat{AgentID: id, ExpiresAt: t0.Add(ttl)}, nil
}

func (f *fakeService) CreateTask(_ context.Context, p lease.CreateTaskParams) (lease.Task, error) {
	if err := f.rec("CreateTask", p); err != nil {
		return lease.Task{}, err
	}
	id := p.TaskID
	if id == "" {
		id = "task-gen"
	}
	return lease.Task{TaskID: id, Title: p.Title, Queue: "default", Priority: 5, Version: 1, Status: lease.StatusTodo, CreatedAt: t0}, nil
}

func (f *fakeService) CreateTasks(_ context.Context, ps []lease.CreateTaskParams) ([]lease.BatchResult, error) {
	if err := f.rec("CreateTasks", ps); err != nil {
		return nil, err
	}
	var out []lease.BatchResult
	for _, p := range ps {
		out = append(out, lease.BatchResult{TaskID: p.TaskID, Outcome: lease.BatchCreated,
			Task: lease.Task{TaskID: p.TaskID, Title: p.Title, Queue: "default", Priority: 5, Version: 1, Status: lease.StatusTodo, CreatedAt: t0}})
	}
	return out, nil
}

func (f *fakeService) UpdateTask(_ context.Context, p lease.UpdateTaskParams) (lease.Task, error) {
	if err := f.rec("UpdateTask", p); err != nil {
		return lease.Task{}, err
	}
	t := lease.Task{TaskID: p.TaskID, Queue: "default", Priority: 5, Version: 2, Status: lease.StatusTodo, CreatedAt: t0}
	if p.Title != nil {
		t.Title = *p.Title
	}
	return t, nil
}

func (f *fakeService) GetTask(_ context.Context, id string) (lease.Task, error) {
	if err := f.rec("GetTask", id); err != nil {
		return lease.Task{}, err
	}
	if f.task != nil {
		return f.task(id), nil
	}
	t := sampleTask(id)
	c := sampleCheckout(id, "agent-1")
	t.Checkout = &c
	return t, nil
}

func (f *fakeService) ListTasks(_ context.Context, p lease.ListTasksParams) (lease.TaskPage, error) {
	if err := f.rec("ListTasks", p); err != nil {
		return lease.TaskPage{}, err
	}
	return lease.TaskPage{Tasks: []lease.Task{sampleTask("task-1")}, NextCursor: "abc"}, nil
}

func (f *fakeService) Checkout(_ context.Context, p lease.CheckoutParams) (lease.Checkout, error) {
	if err := f.rec("Checkout", p); err != nil {
		return lease.Checkout{}, err
	}
	if f.checkout != nil {
		return f.checkout(p)
	}
	c := sampleCheckout(p.TaskID, p.AgentID)
	c.AgentName, c.Timeout, c.Reason = p.AgentName, p.Timeout, p.Reason
	c.ExpiresAt = c.LockedAt.Add(p.Timeout)
	return c, nil
}

func (f *fakeService) Renew(_ context.Context, p lease.RenewParams) (lease.Checkout, error) {
	if err := f.rec("Renew", p); err != nil {
		return lease.Checkout{}, err
	}
	return sampleCheckout(p.TaskID, p.AgentID), nil
}

func (f *fakeService) Release(_ context.Context, p lease.ReleaseParams) (lease.Released, error) {
	if err := f.rec("Release", p); err != nil {
		return lease.Released{}, err
	}
	return lease.Released{TaskID: p.TaskID, ReleasedBy: p.AgentID, Held: 310*time.Second + 900*time.Millisecond}, nil
}

func (f *fakeService) Complete(_ context.Context, p lease.CompleteParams) (lease.Task, error) {
	if err := f.rec("Complete", p); err != nil {
		return lease.Task{}, err
	}
	t := sampleTask(p.TaskID)
	done := t0.Add(90*time.Second + 500*time.Millisecond)
	t.Status, t.CompletedAt = lease.StatusDone, &done
	return t, nil
}

func (f *fakeService) LockStatus(_ context.Context, id string) (*lease.Checkout, error) {
	if err := f.rec("LockStatus", id); err != nil {
		return nil, err
	}
	if id == "free" {
		return nil, nil
	}
	c := sampleCheckout(id, "agent-1")
	return &c, nil
}

func (f *fakeService) ListCheckoutsPage(_ context.Context, p lease.ListCheckoutsParams) (lease.CheckoutPage, error) {
	if err := f.rec("ListCheckoutsPage", p); err != nil {
		return lease.CheckoutPage{}, err
	}
	return lease.CheckoutPage{Checkouts: []lease.Checkout{sampleCheckout("task-1", "agent-1")}}, nil
}

func (f *fakeService) Claim(_ context.Context, p lease.ClaimParams) (lease.Checkout, error) {
	if err := f.rec("Claim", p); err != nil {
		return lease.Checkout{}, err
	}
	c := sampleCheckout("task-old", p.AgentID)
	c.AgentName = p.AgentName
	return c, nil
}

func (f *fakeService) Watch(_ context.Context, taskID, agentID string) error {
	return f.rec("Watch", [2]string{taskID, agentID})
}

func (f *fakeService) Inbox(_ context.Context, id string) ([]lease.Message, error) {
	if err := f.rec("Inbox", id); err != nil {
		return nil, err
	}
	return []lease.Message{{MessageID: "m-1", Type: lease.MessageTaskAvailable, TaskID: "task-1", Reason: "released", At: t0}}, nil
}

func (f *fakeService) DeleteMessage(_ context.Context, agentID, id string) error {
	return f.rec("DeleteMessage", [2]string{agentID, id})
}

func (f *fakeService) Feed(_ context.Context, p lease.FeedParams) (lease.FeedPage, error) {
	if err := f.rec("Feed", p); err != nil {
		return lease.FeedPage{}, err
	}
	return lease.FeedPage{Events: []lease.Event{{Type: lease.EventCheckout, TaskID: "task-1", AgentID: "agent-1", RunID: "run-1", Fence: 1, At: t0, By: "agent-1"}}, NextCursor: "f1.next"}, nil
}

func (f *fakeService) TrailPage(_ context.Context, p lease.TrailParams) (lease.Trail, error) {
	id := p.TaskID
	if err := f.rec("Events", p); err != nil {
		return lease.Trail{}, err
	}
	if f.trail != nil {
		return lease.Trail{Events: f.trail}, nil
	}
	held := 310 * time.Second
	return lease.Trail{Events: []lease.Event{
		{Type: lease.EventCheckout, TaskID: id, AgentID: "agent-1", RunID: "run-1", Fence: 1, At: t0, By: "agent-1"},
		{Type: lease.EventRelease, TaskID: id, AgentID: "agent-1", RunID: "run-1", Fence: 1, At: t0.Add(held), Held: &held, By: "agent-1", Reason: "done for now"},
	}}, nil
}

// fakeAuth knows two keys.
type fakeAuth struct{ err error }

var (
	adminP = lease.Principal{AgentID: "admin", Name: "admin", Admin: true}
	agentP = lease.Principal{AgentID: "agent-1", Name: "researcher"}
)

func (a fakeAuth) Authenticate(_ context.Context, key string) (lease.Principal, error) {
	if a.err != nil {
		return lease.Principal{}, a.err
	}
	switch key {
	case "ck_admin":
		return adminP, nil
	case "ck_agent":
		return agentP, nil
	}
	return lease.Principal{}, lease.ErrUnauthorized
}

var errBoom = errors.New("dynamodb: connection reset by peer at 10.0.0.7")
