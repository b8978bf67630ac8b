package httpapi

import (
	"context"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// Service is the part of the lease store that the handlers call: every
// method a route needs, and no optional extras, so that a Service lacking
// one fails to compile rather than answering a documented route 404.
// *lease.Store satisfies it.
type Service interface {
	RegisterAgent(ctx context.Context, p lease.RegisterParams) (lease.Registration, error)
	ListAgentsPage(ctx context.Context, p lease.ListAgentsParams) (lease.AgentPage, error)
	GetAgent(ctx context.Context, agentID string) (lease.Agent, error)
	RemoveAgent(ctx context.Context, agentID string) error
	Heartbeat(ctx context.Context, agentID string, ttl time.Duration) (lease.Heartbeat, error)
	CreateTask(ctx context.Context, p lease.CreateTaskParams) (lease.Task, error)
	CreateTasks(ctx context.Context, ps []lease.CreateTaskParams) ([]lease.BatchResult, error)
	UpdateTask(ctx context.Context, p lease.UpdateTaskParams) (lease.Task, error)
	GetTask(ctx context.Context, taskID string) (lease.Task, error)
	ListTasks(ctx context.Context, p lease.ListTasksParams) (lease.TaskPage, error)
	Checkout(ctx context.Context, p lease.CheckoutParams) (lease.Checkout, error)
	Renew(ctx context.Context, p lease.RenewParams) (lease.Checkout, error)
	Release(ctx context.Context, p lease.ReleaseParams) (lease.Released, error)
	Complete(ctx context.Context, p lease.CompleteParams) (lease.Task, error)
	LockStatus(ctx context.Context, taskID string) (*lease.Checkout, error)
	ListCheckoutsPage(ctx context.Context, p lease.ListCheckoutsParams) (lease.CheckoutPage, error)
	Claim(ctx context.Context, p lease.ClaimParams) (lease.Checkout, error)
	Watch(ctx context.Context, taskID, agentID string) error
	Inbox(ctx context.Context, agentID string) ([]lease.Message, error)
	DeleteMessage(ctx context.Context, agentID, messageID string) error
	// TrailPage serves a task's events, GET /api/tasks/{task_id}/events, a
	// page at a time: the part of its trail with no hole, and how many
	// later events are held back until the archive catches up.
	TrailPage(ctx context.Context, p lease.TrailParams) (lease.Trail, error)
	// Feed serves the fleet feed, GET /api/events.
	Feed(ctx context.Context, p lease.FeedParams) (lease.FeedPage, error)
	// ListQueuePage serves GET /api/queues, a page at a time.
	ListQueuePage(ctx context.Context, p lease.ListQueuesParams) (lease.QueuePage, error)
}

var _ Service = (*lease.Store)(nil)
