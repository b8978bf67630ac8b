package mcpserver

import (
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/client"
	"github.com/checkout-dev/checkout/errcode"
)

// A blocked answer that names no blocker is a task whose blockers are all
// done, about to be unblocked by the change stream: the agent is told to
// try again shortly, not that it waits for nothing.
func TestBlockedByNoneSaysTryAgain(t *testing.T) {
	t.Parallel()
	o := denial("d", &client.BlockedError{APIError: &client.APIError{Code: errcode.Blocked}})
	if o.Code != errcode.Blocked || !strings.Contains(o.Message, "blockers are all done") || !strings.Contains(o.Message, "again") {
		t.Fatalf("blocked by none: %+v", o)
	}
	o = denial("d", &client.BlockedError{APIError: &client.APIError{Code: errcode.Blocked}, BlockedBy: []client.Blocker{{TaskID: "b", Status: "todo"}}})
	if !strings.Contains(o.Message, "waits for") {
		t.Fatalf("blocked by b: %+v", o)
	}
}
