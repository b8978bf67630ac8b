package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/checkout-dev/checkout/lease"
)

// Error codes of the API.
const (
	codeNotFound          = "not_found"
	codeMethodNotAllowed  = "method_not_allowed"
	codeUnauthorized      = "unauthorized"
	codeForbidden         = "forbidden"
	codeInvalidID         = "invalid_id"
	codeInvalidTimeout    = "invalid_timeout"
	codeInvalidRequest    = "invalid_request"
	codeInvalidJSON       = "invalid_json"
	codeTooLarge          = "payload_too_large"
	codeTaskNotFound      = "task_not_found"
	codeAgentNotFound     = "agent_not_found"
	codeNotCheckedOut     = "not_checked_out"
	codeNoTaskAvailable   = "no_task_available"
	codeCheckedOut        = "checked_out"
	codeStatusMismatch    = "status_mismatch"
	codeTaskExists        = "task_exists"
	codeVersionMismatch   = "version_mismatch"
	codeInvalidTransition = "invalid_transition"
	codeAgentExists       = "agent_exists"
	codeNotHolder         = "not_holder"
	codeTooManyWatchers   = "too_many_watchers"
	codeCannotRemoveAdmin = "cannot_remove_admin"
	codeUnavailable       = "unavailable"
	codeInternal          = "internal"
)

// apiError is an error the HTTP layer itself decided on.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string { return e.message }

func errorf(status int, code, format string, args ...any) error {
	return &apiError{status: status, code: code, message: fmt.Sprintf(format, args...)}
}

// errorBody is the body of every error answer. Holder and Status are set for
// checked_out / not_holder and status_mismatch.
type errorBody struct {
	Error  string        `json:"error"`
	Code   string        `json:"code"`
	Holder *checkoutJSON `json:"holder,omitempty"`
	// SameAgent is set on a checkout's checked_out: whether the holder is
	// the agent the checkout was for, under another run.
	SameAgent *bool        `json:"same_agent,omitempty"`
	Status    lease.Status `json:"status,omitempty"`
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
	lease.CodeInvalidID:      codeInvalidID,
	lease.CodeInvalidTimeout: codeInvalidTimeout,
	lease.CodeInvalidRequest: codeInvalidRequest,
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
		tooLarge *http.MaxBytesError
	)
	task := "the task"
	if taskID != "" {
		task = "task " + taskID
	}
	switch {
	case errors.As(err, &ae):
		return ae.status, errorBody{Error: ae.message, Code: ae.code}, false
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, errorBody{Error: "the request body is larger than 64 KiB", Code: codeTooLarge}, false
	case errors.As(err, &ve):
		code, ok := validationCodes[ve.Code]
		if !ok {
			code = codeInvalidRequest
		}
		return http.StatusBadRequest, errorBody{Error: ve.Message, Code: code}, false
	case errors.As(err, &conflict):
		h := toCheckout(conflict.Holder, now)
		id := conflict.Holder.TaskID
		if id == "" {
			id = taskID
		}
		body := errorBody{Error: fmt.Sprintf("task %s is already checked out", id), Code: codeCheckedOut, Holder: &h}
		if cc := (*checkoutConflict)(nil); errors.As(err, &cc) {
			same := conflict.Holder.AgentID == cc.agentID
			body.SameAgent = &same
		}
		return http.StatusConflict, body, false
	case errors.As(err, &mismatch):
		return http.StatusConflict, errorBody{Error: fmt.Sprintf("%s has status %s, which the request did not expect", task, mismatch.Status), Code: codeStatusMismatch, Status: mismatch.Status}, false
	case errors.As(err, &notHold):
		h := toCheckout(notHold.Holder, now)
		return http.StatusForbidden, errorBody{Error: fmt.Sprintf("%s is held by %s, not by the caller", task, notHold.Holder.AgentID), Code: codeNotHolder, Holder: &h}, false
	case errors.As(err, &trans):
		return http.StatusConflict, errorBody{Error: fmt.Sprintf("%s is %s and cannot become %s", task, trans.From, trans.To), Code: codeInvalidTransition, Status: trans.From}, false
	case errors.Is(err, lease.ErrVersionMismatch):
		return http.StatusPreconditionFailed, errorBody{Error: task + " has changed: its version is not the one If-Match gave", Code: codeVersionMismatch}, false
	case errors.Is(err, lease.ErrTaskNotFound):
		return http.StatusNotFound, errorBody{Error: task + " does not exist", Code: codeTaskNotFound}, false
	case errors.Is(err, lease.ErrAgentNotFound):
		return http.StatusNotFound, errorBody{Error: "the agent does not exist", Code: codeAgentNotFound}, false
	case errors.Is(err, lease.ErrNotCheckedOut):
		return http.StatusNotFound, errorBody{Error: task + " has no live lease", Code: codeNotCheckedOut}, false
	case errors.Is(err, lease.ErrNoTaskAvailable):
		return http.StatusNotFound, errorBody{Error: "no task is available to claim", Code: codeNoTaskAvailable}, false
	case errors.Is(err, lease.ErrMessageNotFound):
		return http.StatusNotFound, errorBody{Error: "the message does not exist", Code: codeNotFound}, false
	case errors.Is(err, lease.ErrCheckedOut):
		return http.StatusConflict, errorBody{Error: task + " is already checked out", Code: codeCheckedOut}, false
	case errors.Is(err, lease.ErrStatusMismatch):
		return http.StatusConflict, errorBody{Error: task + " does not have an expected status", Code: codeStatusMismatch}, false
	case errors.Is(err, lease.ErrNotHolder):
		return http.StatusForbidden, errorBody{Error: "the caller does not hold the lease on " + task, Code: codeNotHolder}, false
	case errors.Is(err, lease.ErrTaskExists):
		return http.StatusConflict, errorBody{Error: task + " already exists", Code: codeTaskExists}, false
	case errors.Is(err, lease.ErrAgentExists):
		return http.StatusConflict, errorBody{Error: "an agent with this id already exists", Code: codeAgentExists}, false
	case errors.Is(err, lease.ErrTooManyWatchers):
		return http.StatusConflict, errorBody{Error: fmt.Sprintf("%s already has %d watchers, the most it can have", task, lease.MaxWatchers), Code: codeTooManyWatchers}, false
	case errors.Is(err, lease.ErrUnauthorized):
		return http.StatusUnauthorized, errUnauthorizedBody, false
	case errors.Is(err, lease.ErrInvalid):
		return http.StatusBadRequest, errorBody{Error: "the request is not valid", Code: codeInvalidRequest}, false
	case Unavailable(err):
		return http.StatusServiceUnavailable, errUnavailableBody, false
	}
	return http.StatusInternalServerError, errorBody{Error: "the server failed to handle the request; it has been logged", Code: codeInternal}, true
}

var errUnauthorizedBody = errorBody{Error: "a valid API key is required: Authorization: Bearer <api_key>", Code: codeUnauthorized}

var errUnavailableBody = errorBody{Error: "the database cannot be reached; retry shortly", Code: codeUnavailable}

// RetryAfter is the Retry-After of every 503 unavailable answer, in seconds.
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
