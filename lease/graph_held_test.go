package lease_test

import (
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/internal/testclock"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A PATCH that names the task itself in blocked_by is invalid_dependency,
// as API.md says, not a dependency_cycle: the list is refused before any
// walk of the graph.
func TestAPatchNamingTheTaskItselfIsAnInvalidDependency(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a", "b")
	_, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", BlockedBy: &[]string{"b", "a"}})
	var ve *lease.ValidationError
	if !errors.As(err, &ve) || ve.Code != errcode.InvalidDependency {
		t.Fatalf("a blocked by itself: %v, want %s", err, errcode.InvalidDependency)
	}
	if got := e.get(t, "b").Blocks; len(got) != 0 {
		t.Errorf("the refused PATCH left b blocking %v", got)
	}
}

// A task created, or PATCHed, naming a blocker that is already cancelled
// is blocked: a cancelled blocker is not done, and keeps its dependents
// blocked whether they named it before or after it was cancelled.
func TestATaskNamingACancelledBlockerIsBlocked(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a", "p")
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", Status: new(lease.StatusCancelled)}))
	if got := e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"a"}}); got.Status != lease.StatusBlocked {
		t.Errorf("d created blocked by cancelled a: %s, want blocked", got.Status)
	}
	if got := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", BlockedBy: &[]string{"a"}})); got.Status != lease.StatusBlocked {
		t.Errorf("p PATCHed blocked by cancelled a: %s, want blocked", got.Status)
	}
	e.drain(t)
	for _, id := range []string{"d", "p"} {
		if got := e.get(t, id); got.Status != lease.StatusBlocked {
			t.Errorf("%s after the stream: %s, want blocked", id, got.Status)
		}
		var be *lease.BlockedError
		if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: id, AgentID: "x", AgentName: "x"}); !errors.As(err, &be) {
			t.Errorf("checkout of %s: %v, want blocked", id, err)
		}
	}
}

// The unblocking keeps the time rule against a dependent whose latest
// transition a process with a clock ahead wrote: the stream's write, on
// a clock behind that, is made again at a time not before it, rather than
// leaving the task blocked on a done blocker.
func TestAnUnblockingBehindTheDependentsLatestWriteIsMadeAfterIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	ahead := testclock.New(e.clock.Now().Add(time.Minute))
	other := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: ahead.Now, Notifier: e.notes})
	e.task(t, "a")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"a"}})
	// d's latest transitions, a cancel and a reopen, by the process ahead.
	must[lease.Task](t)(other.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", Status: new(lease.StatusCancelled)}))
	if got := must[lease.Task](t)(other.UpdateTask(c, lease.UpdateTaskParams{TaskID: "d", Status: new(lease.StatusTodo)})); got.Status != lease.StatusBlocked {
		t.Fatalf("d reopened: %s, want blocked", got.Status)
	}
	co := e.checkout(t, "a", "x", time.Hour)
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "a", AgentID: "x", Fence: co.Fence}))
	e.drain(t)
	got := e.get(t, "d")
	if got.Status != lease.StatusTodo {
		t.Fatalf("d after a completed: %s, want todo", got.Status)
	}
	if evs := e.events(t, "d"); len(evs) == 0 || evs[len(evs)-1].Type != lease.EventUnblocked || evs[len(evs)-1].At.Before(ahead.Now()) {
		t.Errorf("d's events %v: want the unblocked event last, not before d's reopen at %v", kinds(evs), ahead.Now())
	}
}

// A blocked task left waiting on nothing (a writer took its last blocker
// out of waiting_on alone, as two blockers completing at once do, and
// stopped before the unblocking write) is unblocked by the change stream,
// from that change alone: once, with its unblocked event.
func TestTheStreamUnblocksATaskLeftBlockedWaitingOnNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "a", "b")
	e.create(t, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"a", "b"}})
	e.drain(t)
	// The stopped writer's last write: d still blocked, waiting on nothing.
	if _, err := e.db.UpdateItem(c, &dynamodb.UpdateItemInput{
		TableName:        aws.String(e.names.Table(schema.TasksTable)),
		Key:              map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: "d"}},
		UpdateExpression: aws.String("REMOVE waiting_on ADD version :one"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":one": &types.AttributeValueMemberN{Value: "1"},
		},
	}); err != nil {
		t.Fatal(err)
	}
	e.drain(t)
	if got := e.get(t, "d"); got.Status != lease.StatusTodo {
		t.Fatalf("d waiting on nothing after the stream: %s, want todo", got.Status)
	}
	e.drain(t)
	n := 0
	for _, ev := range e.events(t, "d") {
		if ev.Type == lease.EventUnblocked {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d unblocked events, want 1", n)
	}
}
