package mcpserver

// The checks of a tool's arguments, and the mapping of every failure to
// the code and message a tool's result carries.

import (
	"context"
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
	// codeUndecided is a request that was sent, but whose answer was
	// lost: it may have taken effect (client.ErrUndecided).
	codeUndecided  = "undecided"
	codeNotAServer = "not_a_checkout_server"
	// codeCancelled is a call the client cancelled, or whose session
	// ended, before it finished.
	codeCancelled = "cancelled"
	// codeError is a failure without a code of its own.
	codeError = "error"
)

// argError is a tool argument the service would refuse anyway.
type argError struct{ msg string }

func (e *argError) Error() string { return e.msg }

// stated is a failure whose outcome its tool states itself, knowing more
// than the API's answer says.
type stated struct{ o Outcome }

func (e *stated) Error() string { return e.o.Message }

// anotherAgent is the failure of acting on h, another agent's lease.
func anotherAgent(h client.Checkout) error {
	return &stated{Outcome{Code: errcode.NotHolder, Holder: &h, Message: fmt.Sprintf(
		"another agent holds this task: it is %s. Stop working on it and pick another task (claim_task)", holderText(h))}}
}

// leaseError is err, the failure of renew_task, complete_task,
// release_task or fail_task naming a lease of fence (0 for none) on
// taskID, as the agent should read it: whose lease is in the way of a
// not_holder (adopting it is offered only for the agent's own, or when the
// session does not know yet which agent it is), and that a task without a
// lease is done, cancelled or failed, when it is.
func (t *tools) leaseError(ctx context.Context, taskID string, fence int64, err error) error {
	var ne *client.NotHolderError
	switch {
	case errors.As(err, &ne) && ne.Holder.AgentID != "":
		h := ne.Holder
		t.mu.Lock()
		self := t.self
		mine, ours := t.leases[taskID]
		t.mu.Unlock()
		switch {
		case fence == h.Fence, self != "" && self != h.AgentID:
			// The holder's own fence is refused only to another agent.
			return anotherAgent(h)
		case ours && mine.runID == h.RunID && mine.fence == h.Fence:
			// This session's own lease, named by another fence.
			return &stated{Outcome{Code: errcode.NotHolder, Holder: &h, Message: fmt.Sprintf(
				"the fence you gave (%d) is not your lease's: this session holds the task under run %s, fence %d, until %s. "+
					"Give fence=%d, or no fence", fence, h.RunID, h.Fence, stamp(h.ExpiresAt), h.Fence)}}
		case self == h.AgentID:
			return &stated{Outcome{Code: errcode.NotHolder, Holder: &h, Message: fmt.Sprintf(
				"this session does not hold the lease: your own agent holds the task under another run (run %s, fence %d, until %s), probably from before a restart. "+
					"If you were working on it, give fence=%d to adopt it here; if another session of yours is working on it, leave it",
				h.RunID, h.Fence, stamp(h.ExpiresAt), h.Fence)}}
		}
		return &stated{Outcome{Code: errcode.NotHolder, Holder: &h, Message: fmt.Sprintf(
			"this session does not hold the lease: the task is %s. If %s is your own agent in an earlier run (before a restart), "+
				"give fence=%d to adopt it; otherwise another agent holds it: stop working on it", holderText(h), h.AgentID, h.Fence)}}
	case errors.Is(err, client.ErrNotCheckedOut):
		task, terr := t.c.GetTask(ctx, taskID)
		if terr == nil && (task.Status == client.StatusDone || task.Status == client.StatusCancelled || task.Status == client.StatusFailed) {
			return &stated{Outcome{Code: errcode.NotCheckedOut, Message: fmt.Sprintf(
				"no live lease holds this task: it is %s, so nobody works on it any more. Stop working on it and pick your next task (claim_task)", task.Status)}}
		}
	}
	return err
}

// undecided is err, the failure of a request that changes something,
// said as what it is when its answer was lost (client.ErrUndecided): it
// was sent and may have taken effect. what names the request ("The
// release of task t1"), next says what to do, after the wait the
// answer's Retry-After asks for, when it asks for one. Any other err is
// returned as it is.
func undecided(err error, what, next string) error {
	if !errors.Is(err, client.ErrUndecided) {
		return err
	}
	var why string
	var ae *client.APIError
	var ue *client.UnreachableError
	switch {
	case errors.Is(err, context.Canceled):
		why = "cancelled after it was sent"
	case errors.Is(err, context.DeadlineExceeded):
		why = "its time ran out after it was sent"
	case errors.As(err, &ae) && ae.Message != "":
		why = ae.Message
	case errors.As(err, &ae):
		why = ae.Error()
	case errors.As(err, &ue):
		why = "no answer from " + ue.URL
	default:
		why = err.Error()
	}
	if ae != nil && ae.RetryAfter > 0 {
		next += fmt.Sprintf(" (try again in %ds)", int64(ae.RetryAfter/time.Second))
	}
	return &stated{Outcome{Code: codeUndecided, Message: fmt.Sprintf("%s was sent, but no answer says whether it took effect (%s): %s.", what, why, next)}}
}

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

// parseWait reads a claim's wait: a Go duration from 0s (no wait, as
// leaving it out is) to lease.MaxClaimWait, or "" for none.
func parseWait(v string) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > lease.MaxClaimWait {
		return 0, &argError{fmt.Sprintf("invalid wait %q: use a Go duration from 0s to %s, such as 10s", v, shortDuration(lease.MaxClaimWait))}
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

// limitOf is a list's limit: n, 1 to lease.MaxListLimit, or the default
// when n is absent. 0 is refused, as the CLI's --limit 0 is, not taken
// for the default.
func limitOf(n *int) (int, error) {
	switch {
	case n == nil:
		return lease.DefaultListLimit, nil
	case *n < 1 || *n > lease.MaxListLimit:
		return 0, &argError{fmt.Sprintf("limit %d is out of range: give 1 to %d, or leave it out for %d", *n, lease.MaxListLimit, lease.DefaultListLimit)}
	}
	return *n, nil
}

// denial is the answer to a checkout of taskID that nobody holds but that
// cannot be granted now (blocked, not ready or not open), named and worded
// like a conflict's; any other err is a tool error.
func denial(taskID string, err error) Outcome {
	var be *client.BlockedError
	var nr *client.NotReadyError
	var sm *client.StatusMismatchError
	switch {
	case errors.As(err, &be) && len(be.BlockedBy) == 0:
		return Outcome{Code: errcode.Blocked, Message: fmt.Sprintf("Checkout DENIED: task %s is still blocked, but its blockers are all done: it becomes available within about a second. "+
			"Try checkout_task again then.", taskID)}
	case errors.As(err, &be):
		return Outcome{Code: errcode.Blocked, BlockedBy: be.BlockedBy, Message: fmt.Sprintf(
			"Checkout DENIED: task %s is blocked: it waits for %s, which must be done first. Do not work on it; pick another task (claim_task), perhaps one of those.",
			taskID, blockerText(be.BlockedBy))}
	case errors.As(err, &nr):
		nb := nr.NotBefore
		return Outcome{Code: errcode.NotReady, NotBefore: &nb, Message: fmt.Sprintf(
			"Checkout DENIED: task %s cannot be taken before %s (it waits after a failed attempt, or was scheduled for then): pick another task, or try again after that time.",
			taskID, stamp(nb))}
	case errors.As(err, &sm):
		return Outcome{Code: errcode.StatusMismatch, Message: fmt.Sprintf("Checkout DENIED: task %s has status %s and cannot be checked out; pick another task.", taskID, sm.Status)}
	}
	return toolError(err)
}

// toolError is the failure outcome of err.
func toolError(err error) Outcome {
	var ae *client.APIError
	var ue *client.UnreachableError
	var nse *client.NotServerError
	var arg *argError
	var ne *client.NotHolderError
	var st *stated
	switch {
	case errors.As(err, &st):
		return st.o
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
			o.Message = fmt.Sprintf("you do not hold this task's lease: the task is %s. Stop working on it", holderText(h))
		}
		return o
	case errors.Is(err, client.ErrNotCheckedOut):
		return Outcome{Code: errcode.NotCheckedOut, Message: "no live lease holds this task: yours expired or was released, so another agent may take it. " +
			"Stop working on it, or take it again with checkout_task"}
	case errors.Is(err, client.ErrUnavailable) && errors.As(err, &ae):
		// The server without its database, or a gateway or proxy in
		// front of it (throttling, restarting), which sends no code.
		msg := ae.Message
		if msg == "" {
			msg = "the checkout service cannot answer now: " + ae.Error()
		}
		switch {
		case ae.RetryAfter > 0:
			msg += fmt.Sprintf(" (try again in %ds)", int64(ae.RetryAfter/time.Second))
		case ae.Message == "":
			msg += ": try again shortly"
		}
		return Outcome{Code: errcode.Unavailable, Message: msg}
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
