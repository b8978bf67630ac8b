package mcpserver

// The checks of a tool's arguments, and the mapping of every failure to
// the code and message a tool's result carries.

import (
	"errors"
	"fmt"
	"time"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/lease"
)

// The codes of failures that never reached the API; every other failure
// carries the API's own code (package errcode).
const (
	codeInvalidArguments = "invalid_arguments"
	codeUnreachable      = "unreachable"
	codeNotAServer       = "not_a_checkout_server"
	// codeError is a failure without a code of its own.
	codeError = "error"
)

// argError is a tool argument the service would refuse anyway.
type argError struct{ msg string }

func (e *argError) Error() string { return e.msg }

func parseDur(field, v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, &argError{fmt.Sprintf("invalid %s %q: use a Go duration such as 90s, 30m or 2h", field, v)}
	}
	return d, nil
}

// parseDelay reads a retry delay: a Go duration of 0s or more, or "" for
// none given.
func parseDelay(v string) (*time.Duration, error) {
	if v == "" {
		return nil, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return nil, &argError{fmt.Sprintf("invalid retry_delay %q: use a Go duration such as 0s, 30s or 5m (up to %s)", v, shortDuration(lease.MaxRetryWait))}
	}
	return &d, nil
}

func parseTime(field, v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, &argError{fmt.Sprintf("invalid %s %q: use an RFC 3339 time such as 2026-03-20T15:00:00Z", field, v)}
	}
	return t, nil
}

func limitOf(n int) (int, error) {
	switch {
	case n == 0:
		return lease.DefaultListLimit, nil
	case n < 1 || n > lease.MaxListLimit:
		return 0, &argError{fmt.Sprintf("limit %d is out of range: give 1 to %d", n, lease.MaxListLimit)}
	}
	return n, nil
}

// toolError is the failure outcome of err.
func toolError(err error) Outcome {
	var ae *client.APIError
	var ue *client.UnreachableError
	var nse *client.NotServerError
	var arg *argError
	var ne *client.NotHolderError
	var sm *client.StatusMismatchError
	var be *client.BlockedError
	var nr *client.NotReadyError
	switch {
	case errors.As(err, &arg):
		return Outcome{Code: codeInvalidArguments, Message: arg.msg}
	case errors.As(err, &ue):
		return Outcome{Code: codeUnreachable, Message: ue.Error() + "; the checkout server is down or CHECKOUT_URL is wrong: try again later"}
	case errors.As(err, &nse):
		return Outcome{Code: codeNotAServer, Message: nse.Error() + "; CHECKOUT_URL is wrong"}
	case errors.Is(err, client.ErrUnauthorized):
		return Outcome{Code: errcode.Unauthorized, Message: "unauthorized: the API key (CHECKOUT_API_KEY) is missing, wrong or revoked"}
	case errors.As(err, &ne):
		o := Outcome{Code: errcode.NotHolder, Message: "you do not hold this task's lease: stop working on it"}
		if ne.Holder.AgentID != "" {
			h := ne.Holder
			o.Holder = &h
			o.Message = fmt.Sprintf("this session does not hold the lease: the task is %s. If that is your own agent in an earlier run "+
				"(before a restart), give fence=%d to adopt it; otherwise stop working on it", holderText(h), h.Fence)
		}
		return o
	case errors.Is(err, client.ErrNotCheckedOut):
		return Outcome{Code: errcode.NotCheckedOut, Message: "no live lease holds this task: yours expired or was released, so another agent may take it. " +
			"Stop working on it, or take it again with checkout_task"}
	case errors.As(err, &be):
		return Outcome{Code: errcode.Blocked, BlockedBy: be.BlockedBy, Message: fmt.Sprintf(
			"the task is blocked: it waits for %s, which must be done first. Do not work on it; pick another task (claim_task), perhaps one of those",
			blockerText(be.BlockedBy))}
	case errors.As(err, &nr):
		nb := nr.NotBefore
		return Outcome{Code: errcode.NotReady, NotBefore: &nb, Message: fmt.Sprintf(
			"the task cannot be taken before %s (it waits after a failed attempt, or was scheduled for then). Pick another task, or try again after that time",
			stamp(nb))}
	case errors.As(err, &sm):
		return Outcome{Code: errcode.StatusMismatch, Message: fmt.Sprintf("the task has status %s and cannot be checked out; pick another task", sm.Status)}
	case errors.As(err, &ae):
		code := ae.Code
		if code == "" {
			code = codeError
		}
		msg := ae.Message
		if msg == "" {
			msg = ae.Error()
		}
		return Outcome{Code: code, Message: msg}
	}
	return Outcome{Code: codeError, Message: err.Error()}
}
