package lease

import (
	"context"
	"log/slog"
)

// Notice kinds.
const (
	// NoticeTaskAvailable: a lease ended and its task went back to todo.
	NoticeTaskAvailable = "TaskAvailable"
	// NoticeLeaseEnded: a lease ended, for any reason.
	NoticeLeaseEnded = "LeaseEnded"
)

// Notice is something an orchestrator may want to hear about.
type Notice struct {
	Kind  string
	Event Event
}

// Notifier hears about ended leases and freed tasks, after the transition is
// recorded. In AWS it puts EventBridge events; locally it logs.
type Notifier interface {
	Notify(ctx context.Context, n Notice) error
}

type logNotifier struct{ log *slog.Logger }

// LogNotifier returns a Notifier that logs each notice at info level.
func LogNotifier(l *slog.Logger) Notifier { return logNotifier{l} }

func (n logNotifier) Notify(ctx context.Context, nt Notice) error {
	n.log.InfoContext(ctx, "notice", "kind", nt.Kind, "type", string(nt.Event.Type),
		"task_id", nt.Event.TaskID, "agent_id", nt.Event.AgentID, "fence", nt.Event.Fence)
	return nil
}
