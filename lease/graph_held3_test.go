package lease_test

import (
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A cancelled dependent stays cancelled when its last blocker completes:
// the stream takes the blocker out of what it waits on, but unblocks only
// a blocked task. Reopened, it is todo at once, with nothing to wait on.
func TestACancelledDependentStaysCancelledWhenItsBlockerCompletes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "b")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"b"}})
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "x", Status: new(lease.StatusCancelled)}))
	e.complete(t, "b", "x")
	e.drain(t)
	if got := e.get(t, "d").Status; got != lease.StatusCancelled {
		t.Fatalf("cancelled d once b completed: %s, want cancelled", got)
	}
	if n := count(e.events(t, "d"), lease.EventUnblocked); n != 0 {
		t.Errorf("cancelled d has %d unblocked events, want none", n)
	}
	if got := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", AgentID: "x", Status: new(lease.StatusTodo)})); got.Status != lease.StatusTodo {
		t.Errorf("d reopened with b done: %s, want todo", got.Status)
	}
}

// A dependent's GET shows each blocker as GET of the blocker shows it: a
// blocker whose lease has expired, not swept yet, is todo, not
// in_progress.
func TestADependentShowsABlockerWithAnExpiredLeaseAsTodo(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.task(t, "b")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"b"}})
	e.checkout(t, "b", "x", time.Minute)
	if got := blockerIDs(e.get(t, "d").BlockedBy); !slices.Equal(got, []string{"b=in_progress"}) {
		t.Fatalf("d's blockers while b is held: %v, want b in_progress", got)
	}
	e.clock.Advance(2 * time.Minute)
	if st := e.get(t, "b").Status; st != lease.StatusTodo {
		t.Fatalf("b with its lease expired: %s, want todo", st)
	}
	if got := blockerIDs(e.get(t, "d").BlockedBy); !slices.Equal(got, []string{"b=todo"}) {
		t.Errorf("d's blockers once b's lease expired: %v, want b todo, as GET of b shows it", got)
	}
}

// An edge left behind (a PATCH that dropped the blocker stopped before it
// deleted the edge) is harmless: a reopen of the blocker blocks again only
// the tasks that still name it.
func TestAReopenBlocksNoTaskThatNoLongerNamesTheBlocker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a", "d")
	e.create(t, lease.CreateTaskParams{TaskID: "n", BlockedBy: []string{"a"}})
	// The edge from a to d, left by a PATCH of d that dropped a.
	if _, err := e.db.PutItem(c, &dynamodb.PutItemInput{
		TableName: aws.String(e.names.Table(schema.InboxTable)),
		Item: map[string]types.AttributeValue{
			"agent_id":   &types.AttributeValueMemberS{Value: "#deps#a"},
			"message_id": &types.AttributeValueMemberS{Value: "d"},
			"at":         &types.AttributeValueMemberN{Value: "1"},
		},
	}); err != nil {
		t.Fatal(err)
	}
	e.complete(t, "a", "x")
	e.drain(t)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", AgentID: "x", Status: new(lease.StatusTodo)}))
	e.drain(t)
	if st := e.get(t, "n").Status; st != lease.StatusBlocked {
		t.Errorf("n, which names a, once a was reopened: %s, want blocked", st)
	}
	if got := e.get(t, "d"); got.Status != lease.StatusTodo || len(got.BlockedBy) != 0 {
		t.Errorf("d, which names no blocker, once a was reopened: %s blocked by %v, want todo", got.Status, blockerIDs(got.BlockedBy))
	}
}
