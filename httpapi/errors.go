package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/lease"
)

// apiError is an error the HTTP layer itself decided on.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.message }

// errorf is an answer with code, and the status errcode gives that code.
func errorf(code, format string, args ...any) error {
	return &apiError{status: statusOf(code), code: code, message: fmt.Sprintf(format, args...)}
}

// statusOf is the HTTP status of an error code, from errcode's list; a
// code missing from it is a bug, answered as internal.
func statusOf(code string) int {
	if c, ok := errcode.Lookup(code); ok {
		return c.Status
	}
	return http.StatusInternalServerError
}

// answer is errorResponse's result for an expected error: body, with the
// status of its code.
func answer(body errorBody) (status int, _ errorBody, internal bool) {
	return statusOf(body.Code), body, false
}

// errorBody is the body of every error answer. Holder and Status are set for
// checked_out / not_holder and status_mismatch.
type errorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
	// Holder is a *checkoutJSON (not_holder) or a *conflictHolderJSON
	// (checked_out); nil for other codes.
	Holder any `json:"holder,omitempty"`
	// SameAgent is set on a checkout's checked_out: whether the holder is
	// the agent the checkout was for, under another run.
	SameAgent *bool `json:"same_agent,omitempty"`
	// RetryAfterSeconds is set on checked_out: the whole seconds, rounded
	// up, until the lease can end without its holder. The Retry-After
	// header carries the same value.
	RetryAfterSeconds *int64       `json:"retry_after_seconds,omitempty"`
	Status            lease.Status `json:"status,omitempty"`
	// BlockedBy is set on blocked: the task's blockers that are not done,
	// with their statuses (a list, [] if the store named none).
	BlockedBy *[]blockerJSON `json:"blocked_by,omitempty"`
	// NotBefore is set on not_ready: when the task may be granted.
	NotBefore *string `json:"not_before,omitempty"`
	// Watching is set on a checkout with watch answered checked_out or
	// blocked: whether the caller is on the task's watch list (false:
	// the list is full, or the watch could not be placed just now).
	Watching *bool `json:"watching,omitempty"`
	// retryAfter, when not zero, is a Retry-After in whole seconds for an
	// answer that says when to come back without a field of its own:
	// not_ready (until not_before) and a blocked task whose blockers are
	// all done (until the change stream unblocks it).
	retryAfter int64
}

// conflictHolderJSON is the holder in a checked_out answer: the lease, and
// its holder's latest heartbeat and its expiry (null when the holder never
// sent one).
type conflictHolderJSON struct {
	checkoutJSON
	LastHeartbeatAt    *string `json:"last_heartbeat_at"`
	HeartbeatExpiresAt *string `json:"heartbeat_expires_at"`
}

// conflictBody is the checked_out answer to conflict at now.
func conflictBody(conflict *lease.ConflictError, taskID string, now time.Time) errorBody {
	h := conflictHolderJSON{checkoutJSON: toCheckout(conflict.Holder, now)}
	if conflict.LastHeartbeatAt != nil {
		last := stamp(*conflict.LastHeartbeatAt)
		h.LastHeartbeatAt = &last
	}
	if conflict.HeartbeatExpiresAt != nil {
		exp := stamp(*conflict.HeartbeatExpiresAt)
		h.HeartbeatExpiresAt = &exp
	}
	id := conflict.Holder.TaskID
	if id == "" {
		id = taskID
	}
	retry := conflict.RetryAfter(now)
	return errorBody{Error: fmt.Sprintf("task %s is already checked out", id) + notWatching(conflict.Watching), Code: errcode.CheckedOut,
		Holder: &h, RetryAfterSeconds: &retry, Watching: conflict.Watching}
}

// checkoutConflict is a checkout's error together with the agent the
// checkout was for, so that a conflict's answer can say whether the holder
// is that same agent.
type checkoutConflict struct {
	err     error
	agentID string
}

func (e *checkoutConflict) Error() string { return e.err.Error() }
func (e *checkoutConflict) Unwrap() error { return e.err }

// conflictFor wraps a checkout's err with the agent it was for.
func conflictFor(err error, agentID string) error {
	return &checkoutConflict{err: err, agentID: agentID}
}

// validationCodes maps lease's ValidationError codes to the API's 400
// codes; any other code is invalid_request.
var validationCodes = map[string]string{
	lease.CodeInvalidID:      errcode.InvalidID,
	lease.CodeInvalidTimeout: errcode.InvalidTimeout,
	lease.CodeInvalidRequest: errcode.InvalidRequest,

	lease.CodeInvalidDependency: errcode.InvalidDependency,
	lease.CodeDependencyCycle:   errcode.DependencyCycle,
}

// errorResponse maps any error to its status and body. It is the only place
// where domain errors become HTTP answers. taskID names the task of the
// request, if any, for the sentence. internal reports that err was not
// expected: the caller logs it, and its text is never sent.
func errorResponse(err error, taskID string, now time.Time) (status int, body errorBody, internal bool) {
	var (
		ae       *apiError
		ve       *lease.ValidationError
		conflict *lease.ConflictError
		mismatch *lease.StatusMismatchError
		notHold  *lease.NotHolderError
		trans    *lease.TransitionError
		blocked  *lease.BlockedError
		notReady *lease.NotReadyError
		tooLarge *http.MaxBytesError
		recent   *lease.RemovedRecentlyError
	)
	task := "the task"
	if taskID != "" {
		task = "task " + taskID
	}
	switch {
	case errors.As(err, &ae):
		return ae.status, errorBody{Error: ae.message, Code: ae.code}, false
	case errors.As(err, &tooLarge):
		return answer(errorBody{Error: "the request body is larger than 64 KiB", Code: errcode.PayloadTooLarge})
	case errors.As(err, &ve):
		code, ok := validationCodes[ve.Code]
		if !ok {
			code = errcode.InvalidRequest
		}
		return answer(errorBody{Error: ve.Message, Code: code})
	case errors.As(err, &conflict):
		body := conflictBody(conflict, taskID, now)
		if cc := (*checkoutConflict)(nil); errors.As(err, &cc) {
			same := conflict.Holder.AgentID == cc.agentID
			body.SameAgent = &same
		}
		return answer(body)
	case errors.As(err, &blocked) && len(blocked.BlockedBy) == 0:
		// Blocked in name only: its blockers are all done, and the change
		// stream unblocks it within about a second.
		body := blockedBody(blocked, task)
		body.Error = task + " is still blocked, but its blockers are all done: it becomes todo within about a second; try again then"
		body.retryAfter = 1
		return answer(body)
	case errors.As(err, &blocked):
		return answer(blockedBody(blocked, task))
	case errors.As(err, &notReady):
		at := stamp(notReady.NotBefore)
		wait := max(1, int64(math.Ceil(notReady.NotBefore.Sub(now).Seconds())))
		return answer(errorBody{Error: fmt.Sprintf("%s may not be checked out before %s", task, at), Code: errcode.NotReady, NotBefore: &at, retryAfter: wait})
	case errors.As(err, &mismatch):
		return answer(errorBody{Error: fmt.Sprintf("%s has status %s, which the request did not expect", task, mismatch.Status), Code: errcode.StatusMismatch, Status: mismatch.Status})
	case errors.As(err, &notHold):
		h := toCheckout(notHold.Holder, now)
		msg := fmt.Sprintf("%s is held by %s, not by the caller", task, notHold.Holder.AgentID)
		switch {
		case notHold.Forced:
			msg = fmt.Sprintf("%s is held by %s under run %s, fence %d, which is not the lease the force release names", task, notHold.Holder.AgentID, notHold.Holder.RunID, notHold.Holder.Fence)
		case notHold.Caller == notHold.Holder.AgentID:
			msg = fmt.Sprintf("%s is held by %s under another run or fence than the request names", task, notHold.Holder.AgentID)
		}
		return answer(errorBody{Error: msg, Code: errcode.NotHolder, Holder: &h})
	case errors.As(err, &trans) && trans.Field != "":
		return answer(errorBody{Error: fmt.Sprintf("%s is %s: %s may change only while it is todo or blocked (reopen it first)", task, trans.From, trans.Field), Code: errcode.InvalidTransition, Status: trans.From})
	case errors.As(err, &trans):
		return answer(errorBody{Error: fmt.Sprintf("%s is %s and cannot become %s", task, trans.From, trans.To), Code: errcode.InvalidTransition, Status: trans.From})
	case errors.Is(err, lease.ErrBlocked):
		return answer(blockedBody(&lease.BlockedError{}, task))
	case errors.Is(err, lease.ErrNotReady):
		return answer(errorBody{Error: task + " may not be checked out yet", Code: errcode.NotReady})
	case errors.Is(err, lease.ErrVersionMismatch):
		return answer(errorBody{Error: task + " has changed: its version is not the one If-Match gave", Code: errcode.VersionMismatch})
	case errors.Is(err, lease.ErrTaskNotFound):
		return answer(errorBody{Error: task + " does not exist", Code: errcode.TaskNotFound})
	case errors.Is(err, lease.ErrAgentNotFound):
		return answer(errorBody{Error: "the agent does not exist", Code: errcode.AgentNotFound})
	case errors.Is(err, lease.ErrNotCheckedOut):
		return answer(errorBody{Error: task + " has no live lease", Code: errcode.NotCheckedOut})
	case errors.Is(err, lease.ErrNoTaskAvailable):
		return answer(errorBody{Error: "no task is available to claim", Code: errcode.NoTaskAvailable})
	case errors.Is(err, lease.ErrMessageNotFound):
		return answer(errorBody{Error: "the message does not exist", Code: errcode.NotFound})
	case errors.Is(err, lease.ErrCheckedOut):
		return answer(errorBody{Error: task + " is already checked out", Code: errcode.CheckedOut})
	case errors.Is(err, lease.ErrStatusMismatch):
		return answer(errorBody{Error: task + " does not have an expected status", Code: errcode.StatusMismatch})
	case errors.Is(err, lease.ErrNotHolder):
		return answer(errorBody{Error: "the caller does not hold the lease on " + task, Code: errcode.NotHolder})
	case errors.Is(err, lease.ErrTaskExists):
		return answer(errorBody{Error: task + " already exists", Code: errcode.TaskExists})
	case errors.As(err, &recent):
		// In AWS the removed agent's key may still pass the authorizer's
		// cache until then, and would act as the new agent.
		body := errorBody{Error: fmt.Sprintf("agent %s was removed moments ago and its old key may still be accepted for a few seconds; the id may be registered again from %s", recent.AgentID, stamp(recent.Until)), Code: errcode.AgentExists}
		body.retryAfter = max(1, int64(math.Ceil(recent.Until.Sub(now).Seconds())))
		return answer(body)
	case errors.Is(err, lease.ErrAgentExists):
		return answer(errorBody{Error: "an agent with this id already exists", Code: errcode.AgentExists})
	case errors.Is(err, lease.ErrTooManyWatchers):
		return answer(errorBody{Error: fmt.Sprintf("%s already has %d watchers, the most it can have", task, lease.MaxWatchers), Code: errcode.TooManyWatchers})
	case errors.Is(err, lease.ErrUnauthorized):
		return answer(errUnauthorizedBody)
	case errors.Is(err, lease.ErrInvalid):
		return answer(errorBody{Error: "the request is not valid", Code: errcode.InvalidRequest})
	case errors.Is(err, lease.ErrBusy):
		return answer(errBusyBody)
	case errors.Is(err, lease.ErrGrantNotKept):
		// Whatever the receipt's write failed with: the lease stays on its
		// task, and the retry finds it.
		return answer(errGrantNotKeptBody)
	case errors.Is(err, lease.ErrStopping):
		return answer(errorBody{Error: "the service is stopping; retry shortly", Code: errcode.Unavailable})
	case Unavailable(err):
		return answer(errUnavailableBody)
	case TablesMissing(err):
		return answer(errTablesMissingBody)
	}
	return statusOf(errcode.Internal), internalBody, true
}

// blockedBody is the blocked answer: the blockers that are not done, named
// in the sentence too (the first few).
func blockedBody(b *lease.BlockedError, task string) errorBody {
	list := toBlockers(b.BlockedBy)
	msg := task + " is blocked by tasks that are not done"
	if n := len(list); n > 0 {
		var names []string
		for i, bl := range list {
			if i == 3 {
				names = append(names, fmt.Sprintf("and %d more", n-3))
				break
			}
			names = append(names, fmt.Sprintf("%s (%s)", bl.TaskID, bl.Status))
		}
		msg = task + " is blocked by " + strings.Join(names, ", ")
	}
	return errorBody{Error: msg + notWatching(b.Watching), Code: errcode.Blocked, BlockedBy: &list, Watching: b.Watching}
}

// notWatching is what a refused checkout's message adds when its watch
// could not be placed.
func notWatching(watching *bool) string {
	if watching == nil || *watching {
		return ""
	}
	return fmt.Sprintf("; its watch list is full (%d watchers) or could not take the watch just now, so the caller is not on it", lease.MaxWatchers)
}

var errUnauthorizedBody = errorBody{Error: "a valid API key is required: Authorization: Bearer <api_key>", Code: errcode.Unauthorized}

var errUnavailableBody = errorBody{Error: "the database cannot be reached; retry shortly", Code: errcode.Unavailable}

// errTablesMissingBody answers TablesMissing: the database answers, but
// without the service's tables.
var errTablesMissingBody = errorBody{Error: "the database does not have the service's tables just now (was it restarted empty?); retry shortly", Code: errcode.Unavailable}

// errBusyBody answers lease.ErrBusy: a retry shortly will most likely go
// through. Most often nothing was changed; a create or PATCH whose task
// was written before its blockers' settling gave up was, and the change
// stream settles it: a retry then finds it made (task_exists, or a
// version that moved).
var errBusyBody = errorBody{Error: "too many changes of this kind are running at once; retry shortly (a create or PATCH naming blockers may have been made: read the task to see)", Code: errcode.Unavailable}

// errGrantNotKeptBody answers lease.ErrGrantNotKept: a named claim got a
// lease but could not record it as its run's.
var errGrantNotKeptBody = errorBody{Error: "the claim got a lease but it was not kept as the run's lease; retry with the same run_id, which finds that lease", Code: errcode.Unavailable}

// RetryAfter is the Retry-After of every 503 unavailable answer (an
// unreachable database, too many changes at once, a claim's lease not
// kept as its run's), in seconds.
const RetryAfter = "1"

// Unavailable reports whether err means that the database could not be
// reached, rather than that it refused the request: the connection was
// refused or reset, the request or its answer was cut off, it timed out, or
// DynamoDB itself said it is overloaded or failing (after the SDK's own
// retries). Those are 503 unavailable, which the client may retry; the same
// errors arise on Lambda and on the local server, so the one mapping serves
// both.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var (
		send  *smithyhttp.RequestSendError
		opErr *net.OpError
		dns   *net.DNSError
		netE  net.Error
		api   smithy.APIError
	)
	switch {
	case errors.As(err, &send), errors.As(err, &opErr), errors.As(err, &dns):
		return true
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, context.DeadlineExceeded):
		return true
	case errors.As(err, &netE) && netE.Timeout():
		return true
	case errors.As(err, &api):
		switch api.ErrorCode() {
		case "ThrottlingException", "ProvisionedThroughputExceededException", "RequestLimitExceeded",
			"InternalServerError", "ServiceUnavailable":
			return true
		}
	}
	return false
}

// TablesMissing reports whether err means that the database answered
// without a table the request named (ResourceNotFoundException): it was
// deleted, or a DynamoDB-compatible server was restarted empty. The
// database is then unavailable to the service, not the request wrong: 503
// unavailable, never 500. The local server also makes sure of its tables
// again when it sees this.
func TablesMissing(err error) bool {
	var api smithy.APIError
	return errors.As(err, &api) && api.ErrorCode() == "ResourceNotFoundException"
}
