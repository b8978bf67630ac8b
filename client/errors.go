package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"syscall"
	"time"

	"github.com/checkout-dev/checkout/errcode"
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
	// ErrTooManyWatchers is a 409: the task has as many watchers as it may
	// have.
	ErrTooManyWatchers = errors.New("checkout: task has too many watchers")
	// ErrCannotRemoveAdmin is a 409: the built-in admin cannot be removed.
	ErrCannotRemoveAdmin = errors.New("checkout: the built-in admin cannot be removed")
	// ErrBlocked is a 409 blocked: the task waits for blockers that are
	// not done (a *BlockedError names them).
	ErrBlocked = errors.New("checkout: task is blocked")
	// ErrNotReady is a 409 not_ready: the task may not be granted before
	// its not_before (a *NotReadyError gives it), typically the retry delay
	// after a failed attempt.
	ErrNotReady = errors.New("checkout: task is not ready yet")
	// ErrInvalidDependency is a 400 invalid_dependency: blocked_by names an
	// unknown task, the task itself, or more than 20 tasks. It matches
	// ErrInvalid too.
	ErrInvalidDependency = fmt.Errorf("checkout: invalid dependency: %w", ErrInvalid)
	// ErrDependencyCycle is a 400 dependency_cycle: blocked_by would close
	// a cycle of dependencies. It matches ErrInvalid too.
	ErrDependencyCycle = fmt.Errorf("checkout: dependency cycle: %w", ErrInvalid)
	// ErrUnavailable matches every 429 and 5xx but a 500 internal (the
	// server's bug): the service cannot answer now. A checkout server answers 503 unavailable while it cannot reach
	// its database; a gateway or proxy in front of it answers 429 when it
	// throttles, and 502, 503 or 504 (often without the API's error form)
	// while the server is down, restarting or at its concurrency limit.
	//
	// The client retries a 429 on every call, waiting at least the
	// answer's Retry-After (up to MaxRetryAfter). It retries a 5xx only on
	// a call that is safe to repeat: reads, Checkout, Claim, Renew,
	// Heartbeat, Watch, CreateTasks with every task id given, and Release,
	// Fail and Complete naming their lease (RunID or Fence). The others
	// (CreateTask, UpdateTask, CancelTask, CreateAgent, RemoveAgent,
	// DeleteMessage, and Release, Fail and Complete naming no lease) are
	// sent once on a 5xx, as the server may have acted on them: check
	// before sending them again. Either way, try again a little later,
	// after APIError.RetryAfter when it is set.
	ErrUnavailable = errors.New("checkout: service unavailable")

	// ErrInvalidBaseURL matches the *BaseURLError of every call on a
	// client whose base URL is not an absolute http:// or https:// URL.
	ErrInvalidBaseURL = errors.New("checkout: server URL is not an absolute http:// or https:// URL")

	// ErrUndecided matches the error of a request whose outcome is not
	// known: it was sent, and no answer says what became of it, so the
	// server may have acted on it. That is an *UnreachableError whose
	// request was sent (the connection closed or timed out before the
	// answer came), the context's error when it ended the request after
	// it was sent (matching context.Canceled or
	// context.DeadlineExceeded as well), and a 5xx (a gateway whose server did not answer in
	// time, or the server losing its database in the middle of the
	// request). A call that is safe to repeat (see ErrUnavailable) is
	// retried first, and matches it only once its retries are spent:
	// sending it again, with the same run id or lease, answers what the
	// first did. Any other call (CreateTask, UpdateTask, and a Release,
	// Fail or Complete naming no lease) may have taken effect: read the
	// task (GetTask, Status) before sending it again.
	ErrUndecided = errors.New("checkout: the request's answer was lost: it may have taken effect")

	// ErrLeaseLost is returned by WorkOn and reported by ClaimLoop when the
	// lease ended (expired, was force-released, or the agent was declared
	// dead) before the work finished.
	ErrLeaseLost = errors.New("checkout: lease lost")
)

// codeSentinels gives each error code of the API (package errcode) the
// sentinel its answers match. A code without one matches only by status
// (ErrNotFound for every 404).
var codeSentinels = map[string]error{
	errcode.TaskNotFound:      ErrTaskNotFound,
	errcode.AgentNotFound:     ErrAgentNotFound,
	errcode.NotCheckedOut:     ErrNotCheckedOut,
	errcode.NoTaskAvailable:   ErrNoTaskAvailable,
	errcode.CheckedOut:        ErrCheckedOut,
	errcode.StatusMismatch:    ErrStatusMismatch,
	errcode.NotHolder:         ErrNotHolder,
	errcode.TaskExists:        ErrTaskExists,
	errcode.AgentExists:       ErrAgentExists,
	errcode.Unauthorized:      ErrUnauthorized,
	errcode.Forbidden:         ErrForbidden,
	errcode.InvalidID:         ErrInvalid,
	errcode.InvalidTimeout:    ErrInvalid,
	errcode.InvalidRequest:    ErrInvalid,
	errcode.InvalidJSON:       ErrInvalid,
	errcode.PayloadTooLarge:   ErrInvalid,
	errcode.NotFound:          ErrNotFound,
	errcode.VersionMismatch:   ErrVersionMismatch,
	errcode.InvalidTransition: ErrInvalidTransition,
	errcode.TooManyWatchers:   ErrTooManyWatchers,
	errcode.CannotRemoveAdmin: ErrCannotRemoveAdmin,
	errcode.Blocked:           ErrBlocked,
	errcode.NotReady:          ErrNotReady,
	errcode.InvalidDependency: ErrInvalidDependency,
	errcode.DependencyCycle:   ErrDependencyCycle,
	errcode.Unavailable:       ErrUnavailable,
	errcode.MethodNotAllowed:  nil,
	errcode.Internal:          nil,
}

// APIError is an error answer from the server.
type APIError struct {
	Status  int    // HTTP status
	Code    string // machine code, one of package errcode's, e.g. errcode.TaskNotFound
	Message string // the server's sentence for a person
	// Body is the answer's raw JSON (or whatever a gateway or proxy in
	// front of the server answered).
	Body []byte
	// RetryAfter is the answer's Retry-After header, as a duration (0 when
	// it has none): how long the server asks to be left alone before the
	// request is tried again. A 503 unavailable carries it (a second), as
	// may a 429 from a gateway; a 409 checked_out carries the same value
	// as its ConflictError.RetryAfter.
	RetryAfter time.Duration
	// also is a sentinel the answer matches besides its code's, set by
	// the route that knows what a plain 404 means there.
	also error
}

func (e *APIError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("%d %s", e.Status, http.StatusText(e.Status))
	}
	return e.Message
}

// Is matches the sentinel of the error's code (and what that sentinel
// matches: ErrInvalid for ErrDependencyCycle), ErrNotFound for any 404,
// ErrInvalid for any 400,
// ErrUnavailable for any 429 or 5xx, with or without a code, but the
// checkout server's own 500 internal (a bug, not an outage), and
// ErrUndecided for any 5xx (the request may have taken effect).
func (e *APIError) Is(target error) bool {
	if target == ErrNotFound && e.Status == http.StatusNotFound {
		return true
	}
	if target == ErrInvalid && e.Status == http.StatusBadRequest {
		return true
	}
	if target == ErrUnavailable && (e.Status == http.StatusTooManyRequests || e.Status >= 500 && e.Code != errcode.Internal) {
		return true
	}
	if target == ErrUndecided && e.Status >= 500 {
		return true
	}
	if e.also != nil && e.also == target {
		return true
	}
	s, ok := codeSentinels[e.Code]
	return ok && s != nil && errors.Is(s, target)
}

// ConflictError is a 409 checked_out: another live lease holds the task.
type ConflictError struct {
	*APIError
	Holder Checkout
	// SameAgent reports that the holder is the agent the checkout was for,
	// under another run: the lease is the caller's own (adopt it by giving
	// Holder.Fence to Renew, Release or Complete).
	SameAgent bool
	// LastHeartbeatAt and HeartbeatExpiresAt are the holder's latest
	// heartbeat and when it runs out; nil when the holder never sent one.
	LastHeartbeatAt    *time.Time
	HeartbeatExpiresAt *time.Time
	// RetryAfter is how long until the lease can end without its holder
	// (the earlier of its expiry and the holder's heartbeat expiry), in
	// whole seconds rounded up, as the server saw it: a checkout tried
	// again after it may succeed.
	RetryAfter time.Duration
	// Watching is the server's word on the watch a checkout with Watch
	// asked for: true when the caller is now on the task's watch list (an
	// inbox message comes when the task is released), false when the caller
	// is not on it: the list was full (100 watchers), or the watch could
	// not be placed just now (a database read failed, or the server's
	// change stream was held up). It is false for a checkout without Watch.
	Watching bool
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

// BlockedError is a 409 blocked: the task waits for other tasks. BlockedBy
// lists the blockers that are not done, with their statuses; the task can
// be checked out once they are all done.
type BlockedError struct {
	*APIError
	BlockedBy []Blocker
	// Watching is the server's word on the watch a checkout with Watch
	// asked for: true when the caller is now on the task's watch list (an
	// inbox message comes when the task is unblocked), false when the caller
	// is not on it: the list was full (100 watchers), or the watch could
	// not be placed just now (a database read failed, or the server's
	// change stream was held up). It is false for a checkout without Watch.
	Watching bool
}

func (e *BlockedError) Unwrap() error { return e.APIError }

// NotReadyError is a 409 not_ready: the task may not be granted before
// NotBefore (the retry delay after a failed attempt, or a time it was
// given). A checkout tried again after it may succeed.
type NotReadyError struct {
	*APIError
	NotBefore time.Time
}

func (e *NotReadyError) Unwrap() error { return e.APIError }

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

// BaseURLError is the error of every call on a Client whose base URL, as
// given to New, is not an absolute http:// or https:// URL with a host:
// "" (an unset CHECKOUT_URL, say), "127.0.0.1:3100" (no scheme),
// "ftp://host". The call fails at once, sending nothing. It matches
// ErrInvalidBaseURL with errors.Is.
type BaseURLError struct {
	URL string // the base URL as given to New
}

func (e *BaseURLError) Error() string {
	return fmt.Sprintf("checkout server URL %q is not an absolute http:// or https:// URL (such as http://127.0.0.1:3100)", e.URL)
}

// Is matches ErrInvalidBaseURL.
func (e *BaseURLError) Is(target error) bool { return target == ErrInvalidBaseURL }

// CheckBaseURL is nil for a base URL that requests can go to: an absolute
// http:// or https:// URL with a host. Otherwise it is the *BaseURLError
// that every call of a client New made with it returns. Tools check the
// URL they were given with it before anything else.
func CheckBaseURL(baseURL string) error {
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return &BaseURLError{URL: baseURL}
	}
	return nil
}

// UnreachableError is a request that got no answer from the server: it
// could not reach it, or (Sent) its answer was lost.
type UnreachableError struct {
	URL string // the client's base URL
	Err error
	// Sent reports that the request was written whole to a connection
	// before the answer was lost (the connection closed or timed out),
	// on this try or an earlier one of the same call (whose answer was
	// lost, or a 5xx): the server may have acted on it, and the error
	// matches ErrUndecided. A request refused a connection on every try
	// was not sent.
	Sent bool
}

func (e *UnreachableError) Error() string {
	if e.Sent {
		return fmt.Sprintf("no answer from the server at %s (the request was sent): %s", e.URL, reason(e.Err))
	}
	return fmt.Sprintf("cannot reach the server at %s: %s", e.URL, reason(e.Err))
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// Is matches ErrUndecided for a request that was sent.
func (e *UnreachableError) Is(target error) bool { return target == ErrUndecided && e.Sent }

// reason is the shortest useful description of a network error, without
// the method and URL that net/http puts before it.
func reason(err error) string {
	var errno syscall.Errno
	var ue *url.Error
	switch {
	case errors.As(err, &errno):
		return errno.Error()
	case timedOut(err):
		return "timed out"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "the connection closed without an answer"
	case errors.As(err, &ue):
		return ue.Err.Error()
	}
	return err.Error()
}

// decodeError turns an error answer into the typed error for its code.
func decodeError(status int, body []byte) error {
	var b struct {
		Error             string    `json:"error"`
		Code              string    `json:"code"`
		Holder            *Checkout `json:"holder"`
		SameAgent         bool      `json:"same_agent"`
		Status            string    `json:"status"`
		RetryAfterSeconds int64     `json:"retry_after_seconds"`
		BlockedBy         []Blocker `json:"blocked_by"`
		NotBefore         time.Time `json:"not_before"`
		Watching          bool      `json:"watching"`
	}
	_ = json.Unmarshal(body, &b)
	apiErr := &APIError{Status: status, Code: b.Code, Message: b.Error, Body: body}
	switch {
	case b.Code == errcode.CheckedOut && b.Holder != nil:
		ce := &ConflictError{APIError: apiErr, Holder: *b.Holder, SameAgent: b.SameAgent,
			RetryAfter: time.Duration(b.RetryAfterSeconds) * time.Second, Watching: b.Watching}
		var hb struct {
			Holder struct {
				LastHeartbeatAt    *time.Time `json:"last_heartbeat_at"`
				HeartbeatExpiresAt *time.Time `json:"heartbeat_expires_at"`
			} `json:"holder"`
		}
		if json.Unmarshal(body, &hb) == nil {
			ce.LastHeartbeatAt, ce.HeartbeatExpiresAt = hb.Holder.LastHeartbeatAt, hb.Holder.HeartbeatExpiresAt
		}
		return ce
	case b.Code == errcode.NotHolder:
		e := &NotHolderError{APIError: apiErr}
		if b.Holder != nil {
			e.Holder = *b.Holder
		}
		return e
	case b.Code == errcode.StatusMismatch:
		return &StatusMismatchError{APIError: apiErr, Status: b.Status}
	case b.Code == errcode.Blocked:
		return &BlockedError{APIError: apiErr, BlockedBy: b.BlockedBy, Watching: b.Watching}
	case b.Code == errcode.NotReady:
		return &NotReadyError{APIError: apiErr, NotBefore: b.NotBefore}
	}
	return apiErr
}
