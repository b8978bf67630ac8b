package lease

import (
	"context"
	"log/slog"
	"time"
)

// Notice kinds.
const (
	// NoticeTaskAvailable: a task became available: a lease ended and the
	// task went back to todo, or its last blocker was completed (the
	// event's type is then unblocked). A cancel that ends a lease sends
	// one too (the event's type is cancel), as it tells the watchers,
	// though the task is cancelled, not available.
	NoticeTaskAvailable = "TaskAvailable"
	// NoticeLeaseEnded: a lease ended, for any reason.
	NoticeLeaseEnded = "LeaseEnded"
	// NoticeLeaseLost: a lease ended without its holder's consent
	// (timeout, the death of a holder that still exists, force_release,
	// a cancel by someone else, a release or completion an admin made for
	// the holder, a takeover); its former holder has a lease_lost message.
	NoticeLeaseLost = "LeaseLost"
	// NoticeTaskFailed: a task used up its attempts and became failed.
	NoticeTaskFailed = "TaskFailed"
)

// Notice is something an orchestrator may want to hear about.
type Notice struct {
	// ID is the same for every delivery of the same notice: the task, the
	// event's seq and the kind. Consumers drop duplicates by it.
	ID    string
	Kind  string
	Event Event
	// Takeover says the lease was ended by a checkout that took it over
	// (expired, or its holder dead), not by the sweep or its holder.
	Takeover bool
	// NotBefore, on a TaskAvailable, is when the freed task may be granted
	// when it waits (the retry delay after a failed release); nil when it
	// is claimable at once.
	NotBefore *time.Time
}

// Notifier hears about ended leases and freed tasks, from the change stream
// (Store.ApplyChanges in AWS; Store.PublishNotices, the local server's
// consumer of the stream for notices alone), at least once each. In AWS it
// puts EventBridge events; locally it logs. Both may add webhooks. An
// error makes the batch be delivered again.
type Notifier interface {
	Notify(ctx context.Context, n Notice) error
}

type logNotifier struct{ log *slog.Logger }

// LogNotifier returns a Notifier that logs each notice at info level.
func LogNotifier(l *slog.Logger) Notifier { return logNotifier{l} }

func (n logNotifier) Notify(ctx context.Context, nt Notice) error {
	n.log.InfoContext(ctx, "notice", "id", nt.ID, "kind", nt.Kind, "type", string(nt.Event.Type),
		"task_id", nt.Event.TaskID, "agent_id", nt.Event.AgentID, "fence", nt.Event.Fence)
	return nil
}
