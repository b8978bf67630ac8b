package lease_test

import (
	"testing"

	"github.com/checkout-dev/checkout/lease"
)

// Two unblockings of one task recorded in the same millisecond (the
// clock does not move here; in AWS a write whose process clock reads
// behind the item's last_at is stamped at that last_at: doc.go, "Time
// only moves forward") each tell a watcher who watched before each of them:
// two messages. An unblocked event names no lease (fence 0), so
// both freeings' message ids were "<at>.0.<task>", and putMessages wrote
// the second only if no message with that id existed.
func TestEachUnblockingInOneMillisecondTellsTheWatcher(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "b", "x")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"b"}})
	if err := e.store.Watch(c, "d", "w"); err != nil {
		t.Fatal(err)
	}
	e.complete(t, "b", "a")
	e.drain(t) // d unblocked by the stream
	e.drain(t) // and its unblocking handled: w told
	if msgs := e.inbox(t, "w"); len(msgs) != 1 || msgs[0].Reason != string(lease.EventUnblocked) {
		t.Fatalf("after the first unblocking w's inbox %+v, want one unblocked message", msgs)
	}
	// d is blocked again, w watches again, and d is unblocked again.
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "a", BlockedBy: &[]string{"x"}}))
	if err := e.store.Watch(c, "d", "w"); err != nil {
		t.Fatal(err)
	}
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "a", BlockedBy: &[]string{}}))
	evs := e.events(t, "d")
	if n := count(evs, lease.EventUnblocked); n != 2 {
		t.Fatalf("d's trail %v, want two unblocked events", kinds(evs))
	}
	msgs := e.inbox(t, "w")
	if len(msgs) != 2 {
		t.Fatalf("w watched before each of d's two unblockings; inbox %+v, want two messages", msgs)
	}
}
