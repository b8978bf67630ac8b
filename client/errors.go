package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"syscall"
)

// Sentinel errors. Every error the server answers with is an *APIError (or
// one of the typed errors below, which carry one) that matches the sentinel
// of its code with errors.Is.
var (
	// ErrNotFound matches every 404, whatever its code.
	ErrNotFound        = errors.New("checkout: not found")
	ErrTaskNotFound    = errors.New("checkout: task not found")
	ErrAgentNotFound   = errors.New("checkout: agent not found")
	ErrMessageNotFound = errors.New("checkout: message not found")
	ErrNotCheckedOut   = errors.New("checkout: task is not checked out")
	ErrNoTaskAvailable = errors.New("checkout: no task available")

	ErrCheckedOut     = errors.New("checkout: task is checked out")
	ErrStatusMismatch = errors.New("checkout: task status not expected")
	ErrNotHolder      = errors.New("checkout: caller does not hold the lease")
	ErrTaskExists     = errors.New("checkout: task already exists")
	ErrAgentExists    = errors.New("checkout: agent already exists")
	ErrUnauthorized   = errors.New("checkout: unauthorized")
	ErrForbidden      = errors.New("checkout: forbidden")
	ErrInvalid        = errors.New("checkout: invalid request")
	// ErrVersionMismatch is a 412: the task changed since the version an
	// UpdateTask gave as IfVersion.
	ErrVersionMismatch = errors.New("checkout: task version does not match")
	// ErrInvalidTransition is a 409: the task's status does not allow the
	// status change asked for.
	ErrInvalidTransition = errors.New("checkout: invalid status transition")

	// ErrLeaseLost is returned by WorkOn and reported by ClaimLoop when the
	// lease ended (expired, was force-released, or the agent was declared
	// dead) before the work finished.
	ErrLeaseLost = errors.New("checkout: lease lost")
)

var codeSentinels = map[string]error{
	"task_not_found":     ErrTaskNotFound,
	"agent_not_found":    ErrAgentNotFound,
	"message_not_found":  ErrMessageNotFound,
	"not_checked_out":    ErrNotCheckedOut,
	"no_task_available":  ErrNoTaskAvailable,
	"checked_out":        ErrCheckedOut,
	"status_mismatch":    ErrStatusMismatch,
	"not_holder":         ErrNotHolder,
	"task_exists":        ErrTaskExists,
	"agent_exists":       ErrAgentExists,
	"unauthorized":       ErrUnauthorized,
	"forbidden":          ErrForbidden,
	"invalid_id":         ErrInvalid,
	"invalid_timeout":    ErrInvalid,
	"invalid_request":    ErrInvalid,
	"not_found":          ErrNotFound,
	"version_mismatch":   ErrVersionMismatch,
	"invalid_transition": ErrInvalidTransition,
	"method_not_allowed": nil,
}

// APIError is an error answer from the server.
type APIError struct {
	Status  int    // HTTP status
	Code    string // machine code, e.g. "task_not_found"
	Message string // the server's sentence for a person
	// Body is the answer's raw JSON.
	Body []byte
}

func (e *APIError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%d %s", e.Status, http.StatusText(e.Status))
	}
	return e.Message
}

// Is matches the sentinel of the error's code, and ErrNotFound for any 404.
func (e *APIError) Is(target error) bool {
	if target == ErrNotFound && e.Status == http.StatusNotFound {
		return true
	}
	s, ok := codeSentinels[e.Code]
	return ok && s != nil && s == target
}

// ConflictError is a 409 checked_out: another live lease holds the task.
type ConflictError struct {
	*APIError
	Holder Checkout
	// SameAgent reports that the holder is the agent the checkout was for,
	// under another run: the lease is the caller's own (adopt it by giving
	// Holder.Fence to Renew, Release or Complete).
	SameAgent bool
}

func (e *ConflictError) Unwrap() error { return e.APIError }

// NotHolderError is a 403 not_holder: the caller does not hold the task's
// live lease; Holder does.
type NotHolderError struct {
	*APIError
	Holder Checkout
}

func (e *NotHolderError) Unwrap() error { return e.APIError }

// StatusMismatchError is a 409 status_mismatch: the task's status was not
// one the checkout expected.
type StatusMismatchError struct {
	*APIError
	Status string
}

func (e *StatusMismatchError) Unwrap() error { return e.APIError }

// NotServerError is an answer that is not the checkout API's: the URL
// answers HTTP, but GET /healthz there does not answer as a checkout server
// does (a wrong CHECKOUT_URL, a proxy, another service).
type NotServerError struct {
	URL string // the client's base URL
	// Detail says what GET /healthz answered instead.
	Detail string
}

func (e *NotServerError) Error() string {
	return fmt.Sprintf("not a checkout server at %s (GET /healthz answered %s)", e.URL, e.Detail)
}

// UnreachableError is a request that got no answer from the server.
type UnreachableError struct {
	URL string // the client's base URL
	Err error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the server at %s: %s", e.URL, reason(e.Err))
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// reason is the shortest useful description of a network error.
func reason(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	return err.Error()
}

// decodeError turns an error answer into the typed error for its code.
func decodeError(status int, body []byte) error {
	var b struct {
		Error     string    `json:"error"`
		Code      string    `json:"code"`
		Holder    *Checkout `json:"holder"`
		SameAgent bool      `json:"same_agent"`
		Status    string    `json:"status"`
	}
	_ = json.Unmarshal(body, &b)
	apiErr := &APIError{Status: status, Code: b.Code, Message: b.Error, Body: body}
	switch {
	case b.Code == "checked_out" && b.Holder != nil:
		return &ConflictError{APIError: apiErr, Holder: *b.Holder, SameAgent: b.SameAgent}
	case b.Code == "not_holder":
		e := &NotHolderError{APIError: apiErr}
		if b.Holder != nil {
			e.Holder = *b.Holder
		}
		return e
	case b.Code == "status_mismatch":
		return &StatusMismatchError{APIError: apiErr, Status: b.Status}
	}
	return apiErr
}
