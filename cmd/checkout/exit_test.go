package main

import (
	"fmt"
	"testing"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/errcode"
)

// Every error code of the API has the exit status of its kind, and the
// statuses the help promises hold for the codes a user meets most.
func TestEveryCodeHasAnExitStatus(t *testing.T) {
	want := map[errcode.Kind]int{
		errcode.Invalid: exitUsage, errcode.Denied: exitConflict, errcode.Missing: exitNotFound,
		errcode.Refused: exitError, errcode.Failed: exitError,
	}
	for _, c := range errcode.All {
		err := fmt.Errorf("op: %w", &client.APIError{Status: c.Status, Code: c.Code, Message: "x"})
		if got, ok := want[c.Kind]; !ok || exitCode(err) != got {
			t.Errorf("%s (%d): exit %d, want %d", c.Code, c.Status, exitCode(err), got)
		}
	}
	for code, status := range map[string]int{
		errcode.CheckedOut: 3, errcode.NotHolder: 3, errcode.TaskNotFound: 4, errcode.NoTaskAvailable: 4,
		errcode.InvalidTimeout: 2, errcode.Unauthorized: 1, errcode.Forbidden: 1, errcode.Unavailable: 1,
	} {
		c, _ := errcode.Lookup(code)
		if got := exitCode(&client.APIError{Status: c.Status, Code: code}); got != status {
			t.Errorf("%s: exit %d, want %d", code, got, status)
		}
	}
	// An answer whose code this build does not know goes by its status.
	if got := exitCode(&client.APIError{Status: 404, Code: "some_new_code"}); got != exitNotFound {
		t.Errorf("unknown 404 code: exit %d", got)
	}
	if got := exitCode(&client.APIError{Status: 400, Code: "some_new_code"}); got != exitUsage {
		t.Errorf("unknown 400 code: exit %d", got)
	}
	// A server URL no request can go to is a usage error, however it
	// reached the client.
	if got := exitCode(fmt.Errorf("op: %w", client.CheckBaseURL("127.0.0.1:3100"))); got != exitUsage {
		t.Errorf("a base URL without a scheme: exit %d", got)
	}
}
