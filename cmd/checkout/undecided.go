package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/checkout-dev/checkout/client"
)

// lostAnswer is err, the failure of a request that changes something,
// said as what it is when the request's answer was lost
// (client.ErrUndecided): it was sent and may have taken effect, so it is
// no plain failure. what names the request ("the release of task t1"),
// next says what to run to find out, or to finish, after the wait the
// answer's Retry-After asks for, when it asks for one. Any other err is
// returned as it is.
func lostAnswer(err error, what, next string) error {
	if !errors.Is(err, client.ErrUndecided) {
		return err
	}
	if ae := (*client.APIError)(nil); errors.As(err, &ae) && ae.RetryAfter > 0 {
		next += fmt.Sprintf(" (try again in %s)", compact(ae.RetryAfter))
	}
	return &failure{fmt.Sprintf("%s was sent, but no answer says whether it took effect (%s): %s", what, whyLost(err), next), exitError}
}

// whyLost is what became of a lost answer: a 5xx's status or sentence,
// the connection closing without one, or the command interrupted (Ctrl-C)
// before it came.
func whyLost(err error) string {
	var ae *client.APIError
	var ue *client.UnreachableError
	switch {
	case errors.Is(err, context.Canceled):
		return "interrupted after it was sent"
	case errors.Is(err, context.DeadlineExceeded):
		return "its time ran out after it was sent"
	case errors.As(err, &ae) && ae.Message != "":
		return oneLine(ae.Message)
	case errors.As(err, &ae):
		return ae.Error()
	case errors.As(err, &ue):
		return "no answer from " + ue.URL
	}
	return err.Error()
}

// namesLease says, for a request naming its lease (a run id or a fence),
// what to run after its answer was lost: the same command, answered as
// the first was; and for one naming none, how to look first.
func namesLease(named bool, look string) string {
	if named {
		return "run the same command again: naming its lease, it is answered as the first was"
	}
	return "run " + look + " before sending it again (naming no lease, it is refused when repeated after it took effect)"
}
