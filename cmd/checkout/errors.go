package main

// What fails, as one line on stderr and an exit status.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/errcode"
)

// Exit statuses.
const (
	exitOK       = 0
	exitError    = 1 // anything else: server unreachable, not a checkout server, bad key, forbidden, ...
	exitUsage    = 2 // bad flags or arguments, an unknown command, or input the server refused (errcode.Invalid)
	exitConflict = 3 // denied: the task is held by another lease, or not by you, or its state refused the request (errcode.Denied)
	exitNotFound = 4 // no such task, agent or message; nothing checked out; no task available (errcode.Missing)
)

// usageError is a mistake in the command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// restated is an error answer said again in the CLI's words, which name
// what the server's sentence leaves out ("the agent does not exist");
// its exit status is still the answer's.
type restated struct {
	msg string
	err error
}

func (e *restated) Error() string { return e.msg }
func (e *restated) Unwrap() error { return e.err }

// restate is err in the words msg when it is an answer of the error
// code's sentinel (client.ErrTaskExists, ...), else err as it is.
func restate(err, code error, msg string) error {
	if errors.Is(err, code) {
		return &restated{msg, err}
	}
	return err
}

// failure is an outcome the CLI judges a failure itself, with its exit
// status.
type failure struct {
	msg  string
	code int
}

func (e *failure) Error() string { return e.msg }

// exitStatus carries a status for an outcome already printed (a denied
// checkout prints its own report).
type exitStatus struct{ code int }

func (e *exitStatus) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func isCobraUsage(msg string) bool {
	for _, p := range []string{"unknown flag", "unknown shorthand flag", "unknown command", "flag needs an argument",
		"invalid argument", "accepts ", "requires ", "bad flag syntax", "if any flags in the group"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// exitCode is the exit status of err. An error answer's status follows
// from its code's Kind in errcode's list, so that a code added there has
// its exit status without a change here.
func exitCode(err error) int {
	var ue *usageError
	var ae *client.APIError
	var f *failure
	switch {
	case errors.As(err, &f):
		return f.code
	case errors.As(err, &ue), isCobraUsage(err.Error()), errors.Is(err, client.ErrInvalidBaseURL):
		return exitUsage
	case errors.As(err, &ae):
		return exitOfAnswer(ae)
	}
	return exitError
}

// exitOfAnswer is the exit status of an error answer.
func exitOfAnswer(ae *client.APIError) int {
	kind := errcode.Kind(0)
	if c, ok := errcode.Lookup(ae.Code); ok {
		kind = c.Kind
	}
	switch {
	case kind == errcode.Invalid, kind == 0 && ae.Status == http.StatusBadRequest:
		return exitUsage
	case kind == errcode.Denied:
		return exitConflict
	case kind == errcode.Missing, kind == 0 && ae.Status == http.StatusNotFound:
		return exitNotFound
	}
	return exitError
}

// describe is the one line printed for err. What the server wrote (an
// error answer's message, the answer of a server that is not checkout's)
// goes through oneLine: it may hold what another agent wrote.
func (a *app) describe(err error) string {
	var ue *client.UnreachableError
	var nse *client.NotServerError
	var ae *client.APIError
	var use *usageError
	var rs *restated
	var fl *failure
	switch {
	case errors.As(err, &use):
		return use.msg
	case errors.As(err, &fl):
		return fl.msg
	case errors.As(err, &rs):
		return rs.msg
	case errors.As(err, &ue):
		return ue.Error()
	case errors.As(err, &nse):
		return oneLine(nse.Error())
	case errors.Is(err, client.ErrUnauthorized):
		from := "CHECKOUT_API_KEY"
		if a.resolved != nil && a.resolved.key.from != "" {
			from = a.resolved.key.from
		}
		return "unauthorized: the server refused the API key from " + from
	case errors.Is(err, client.ErrForbidden) && errors.As(err, &ae):
		return "forbidden: " + oneLine(ae.Message)
	case errors.Is(err, client.ErrUnavailable) && errors.As(err, &ae):
		return unavailable(ae)
	case errors.As(err, &ae):
		if ae.Message != "" {
			return oneLine(ae.Message)
		}
		return oneLine(ae.Error())
	case errors.Is(err, context.Canceled):
		return "interrupted"
	}
	msg := err.Error()
	if isCobraUsage(msg) {
		return msg + " (see checkout --help)"
	}
	return msg
}

// unavailable is the line for a 429 or 5xx: the server's sentence, or for
// a gateway's or proxy's answer (which has none) that the service cannot
// answer now, with when to try again when the answer's Retry-After says.
func unavailable(ae *client.APIError) string {
	msg := oneLine(ae.Message)
	if msg == "" {
		msg = "the service cannot answer now: " + ae.Error()
	}
	switch {
	case ae.RetryAfter > 0:
		msg += fmt.Sprintf(" (try again in %s)", compact(ae.RetryAfter))
	case ae.Message == "":
		msg += ": try again shortly"
	}
	return msg
}
