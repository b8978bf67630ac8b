package lease

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Callers test with errors.Is; the typed errors below carry
// the data a caller needs and match their sentinel.
var (
	ErrTaskNotFound    = errors.New("lease: task not found")
	ErrTaskExists      = errors.New("lease: task already exists")
	ErrAgentNotFound   = errors.New("lease: agent not found")
	ErrAgentExists     = errors.New("lease: agent already exists")
	ErrCheckedOut      = errors.New("lease: task is checked out")
	ErrStatusMismatch  = errors.New("lease: task status not expected")
	ErrNotHolder       = errors.New("lease: caller does not hold the lease")
	ErrNotCheckedOut   = errors.New("lease: task is not checked out")
	ErrNoTaskAvailable = errors.New("lease: no task available")
	ErrMessageNotFound = errors.New("lease: message not found")
	ErrUnauthorized    = errors.New("lease: unknown or revoked api key")
	ErrInvalid         = errors.New("lease: invalid input")
	// ErrBusy: too many changes of the same kind ran at once (changes of
	// blocked_by, which take the graph's lock; or writes of one item that
	// kept losing to others for retryBudget, 10 s). The caller may retry. Nothing was changed,
	// but for a create or PATCH whose own write was made before its
	// blockers' settling gave up (the change stream settles it then).
	ErrBusy = errors.New("lease: too many changes at once; retry")
	// ErrStopping: the process is stopping (Store.EndWaits), so a claim
	// that would wait is answered at once instead. Nothing was changed;
	// the caller may retry (another process will serve it).
	ErrStopping = errors.New("lease: the service is stopping; retry")
	// ErrGrantNotKept: a named claim got a lease but could not record it
	// as its run's (the receipt's write kept failing for grantWait, and
	// the receipt keeps no grant). The lease stays on its task; the caller
	// may retry with the same run id, which finds it.
	ErrGrantNotKept = errors.New("could not be kept as the run's lease; retry with the same run id")
	// ErrTooManyWatchers: the task already has MaxWatchers watchers.
	ErrTooManyWatchers = errors.New("lease: task has too many watchers")
	// ErrVersionMismatch: an If-Match version is not the task's.
	ErrVersionMismatch = errors.New("lease: task version does not match")
)

// TransitionError is a status change the task's status does not allow
// (409 invalid_transition).
type TransitionError struct {
	TaskID   string
	From, To Status
	// Field, when set, is the field whose change the status refuses
	// (blocked_by, on a task that is neither todo nor blocked).
	Field string
}

func (e *TransitionError) Error() string {
	if e.Field != "" {
		return fmt.Sprintf("task %s is %s: %s may change only while it is todo or blocked", e.TaskID, e.From, e.Field)
	}
	return fmt.Sprintf("task %s cannot go from %s to %s", e.TaskID, e.From, e.To)
}

func (e *TransitionError) Unwrap() error { return ErrInvalidTransition }

var (
	ErrInvalidTransition = errors.New("lease: invalid status transition")
	// ErrBlocked: a checkout of a blocked task (BlockedError).
	ErrBlocked = errors.New("lease: task is blocked")
	// ErrNotReady: a checkout before the task's not_before (NotReadyError).
	ErrNotReady = errors.New("lease: task is not ready yet")
)

// BlockedError answers a checkout of a blocked task: the blockers that
// are not done, with their statuses.
type BlockedError struct {
	TaskID    string
	BlockedBy []Blocker
	// Watching is as ConflictError's.
	Watching *bool
}

func (e *BlockedError) Error() string {
	return fmt.Sprintf("task %s is blocked by %d task(s) not done", e.TaskID, len(e.BlockedBy))
}

func (e *BlockedError) Unwrap() error { return ErrBlocked }

// NotReadyError answers a checkout before the task's not_before.
type NotReadyError struct {
	TaskID    string
	NotBefore time.Time
}

func (e *NotReadyError) Error() string {
	return fmt.Sprintf("task %s is not ready before %s", e.TaskID, e.NotBefore.UTC().Format(time.RFC3339))
}

func (e *NotReadyError) Unwrap() error { return ErrNotReady }

// ConflictError is returned when another live lease holds the task. It
// says when the caller may come back: the lease can end without its
// holder's consent at the earlier of its expiry and the holder's heartbeat
// expiry (EndsBy).
type ConflictError struct {
	Holder Checkout
	// Watching, for a checkout with watch: whether the caller is on the
	// task's watch list (false: the list is full, MaxWatchers, or the
	// watch failed before it wrote a watch or a message, an
	// unwatchedError: a read failed, or the task's first watch could not
	// wait any longer for the change stream to archive its events); nil
	// when no watch was asked.
	Watching *bool
	// LastHeartbeatAt and HeartbeatExpiresAt are the holder's latest
	// heartbeat and when it runs out; both nil when the holder never sent
	// one (it is not watched, and only the lease's expiry can end it).
	LastHeartbeatAt    *time.Time
	HeartbeatExpiresAt *time.Time
}

// EndsBy is the moment the lease can end without its holder: the earlier of
// the lease's expiry and the holder's heartbeat expiry.
func (e *ConflictError) EndsBy() time.Time {
	if e.HeartbeatExpiresAt != nil && e.HeartbeatExpiresAt.Before(e.Holder.ExpiresAt) {
		return *e.HeartbeatExpiresAt
	}
	return e.Holder.ExpiresAt
}

// RetryAfter is the wait, at now, until EndsBy, in whole seconds rounded
// up, never negative: what a 409 offers as Retry-After.
func (e *ConflictError) RetryAfter(now time.Time) int64 {
	d := e.EndsBy().Sub(now)
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("task %s is already checked out", e.Holder.TaskID)
}

func (e *ConflictError) Unwrap() error { return ErrCheckedOut }

// StatusMismatchError is returned when the task's status is not one the
// caller expected.
type StatusMismatchError struct {
	TaskID string
	Status Status
}

func (e *StatusMismatchError) Error() string {
	return fmt.Sprintf("task %s has status %s", e.TaskID, e.Status)
}

func (e *StatusMismatchError) Unwrap() error { return ErrStatusMismatch }

// NotHolderError is returned when a holder-only operation comes from someone
// other than the live lease's holder.
type NotHolderError struct {
	Holder Checkout
	// Caller is the agent that asked. It may be the holder itself, naming
	// another run or fence than its lease's.
	Caller string
	// Forced is set for a force release that named (run id or fence)
	// another lease than the live one: whose lease it is does not matter
	// to a force release, only which.
	Forced bool
}

func (e *NotHolderError) Error() string {
	return fmt.Sprintf("task %s is held by %s", e.Holder.TaskID, e.Holder.AgentID)
}

func (e *NotHolderError) Unwrap() error { return ErrNotHolder }

// ValidationError is bad input (the rules are in validate.go). Field names
// the input at fault as the API spells it (timeout, tasks[2].title, ...);
// Code is the API's machine code (CodeInvalidID, CodeInvalidTimeout,
// CodeInvalidRequest); Message is the sentence the API answers with.
type ValidationError struct {
	Field   string
	Code    string
	Message string
}

func (e *ValidationError) Error() string { return "lease: " + e.Message }

func (e *ValidationError) Unwrap() error { return ErrInvalid }

func invalidField(field, code, format string, args ...any) error {
	return &ValidationError{Field: field, Code: code, Message: fmt.Sprintf(format, args...)}
}

// RemovedRecentlyError refuses the registration of an id removed less than
// Config.ReRegisterAfter ago: the removed agent's key may still pass as the
// id until Until. It is an ErrAgentExists.
type RemovedRecentlyError struct {
	AgentID string
	Until   time.Time
}

func (e *RemovedRecentlyError) Error() string {
	return fmt.Sprintf("lease: agent %s was removed moments ago; it may be registered again from %s", e.AgentID, e.Until.UTC().Format(time.RFC3339Nano))
}

// Is makes a RemovedRecentlyError an ErrAgentExists.
func (e *RemovedRecentlyError) Is(target error) bool { return target == ErrAgentExists }
