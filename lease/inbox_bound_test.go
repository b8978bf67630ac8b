package lease_test

import (
	"fmt"
	"testing"

	"github.com/checkout-dev/checkout/lease"
)

// An inbox read answers at most MaxInbox messages, the oldest, however
// many an agent has left unread; deleting them shows the next.
func TestAnInboxReadIsBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const n = lease.MaxInbox + 30
	e.seedInbox(t, "busy", "t", epoch.UnixMilli(), n)
	msgs := must[[]lease.Message](t)(e.store.Inbox(c, "busy"))
	if len(msgs) != lease.MaxInbox || msgs[0].TaskID != "t0000" || msgs[len(msgs)-1].TaskID != fmt.Sprintf("t%04d", lease.MaxInbox-1) {
		t.Fatalf("inbox of %d messages: %d answered, %s to %s; want the oldest %d", n, len(msgs), msgs[0].TaskID, msgs[len(msgs)-1].TaskID, lease.MaxInbox)
	}
	for _, m := range msgs[:30] {
		if err := e.store.DeleteMessage(c, "busy", m.MessageID); err != nil {
			t.Fatal(err)
		}
	}
	msgs = must[[]lease.Message](t)(e.store.Inbox(c, "busy"))
	if len(msgs) != lease.MaxInbox || msgs[len(msgs)-1].TaskID != fmt.Sprintf("t%04d", n-1) {
		t.Fatalf("after 30 deleted: %d answered, last %s", len(msgs), msgs[len(msgs)-1].TaskID)
	}
}
