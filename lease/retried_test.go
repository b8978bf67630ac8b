package lease_test

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// An agent that is dead by heartbeat may still check out (a lease it takes
// while dead can be taken over at once), and a retry of that checkout by
// the same run, its answer lost, gets the same lease: not a second grant
// that takes the first over, as each retry used to, using up an attempt
// each time until the task failed with nobody else involved.
func TestDeadAgentsRetryGetsTheSameLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "d", MaxAttempts: ptr(3)})
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "h", time.Second))
	e.clock.Advance(2 * time.Second) // h is dead
	p := lease.CheckoutParams{TaskID: "d", AgentID: "h", RunID: "r1", Timeout: time.Hour}
	first := must[lease.Checkout](t)(e.store.Checkout(c, p))
	for range 4 {
		again := must[lease.Checkout](t)(e.store.Checkout(c, p))
		if again.Fence != first.Fence || again.RunID != first.RunID || again.Attempt != first.Attempt {
			t.Fatalf("a retry of the same run got fence %d, attempt %d; want the first: fence %d, attempt %d", again.Fence, again.Attempt, first.Fence, first.Attempt)
		}
	}
	// The lease ended with h's death: the task is shown as that ending
	// leaves it, with the one attempt.
	if got := e.get(t, "d"); got.Attempts != 1 || got.Status != lease.StatusTodo || got.Checkout != nil {
		t.Fatalf("d after the retries: %s with %d attempts and lease %+v, want todo with 1 and none", got.Status, got.Attempts, got.Checkout)
	}
	// Another agent takes it over at once: h is dead.
	b := e.checkout(t, "d", "b", time.Hour)
	if b.Fence != first.Fence+1 {
		t.Fatalf("b's takeover: fence %d, want %d", b.Fence, first.Fence+1)
	}
	if got := kinds(e.events(t, "d")); len(got) != 3 || got[1] != lease.EventAgentDeath {
		t.Fatalf("d's trail: %v, want checkout, agent_death, checkout", got)
	}
	// An agent back from the dead gets a new lease for the same run: its
	// lease ended with its death.
	e.task(t, "d2")
	p.TaskID = "d2"
	old := must[lease.Checkout](t)(e.store.Checkout(c, p))
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "h", time.Minute))
	if back := must[lease.Checkout](t)(e.store.Checkout(c, p)); back.Fence != old.Fence+1 {
		t.Fatalf("checkout by the same run after a return: fence %d, want a new grant, fence %d", back.Fence, old.Fence+1)
	}
}

// A completion repeated after the task moved on (reopened, taken by
// another agent) is answered as the first one was: done, with the
// version the completion left. It used to pair today's version with a
// done status the task never had at that version, so that a PATCH with
// If-Match of it could act on a task its caller believed done.
func TestRepeatedCompletionAnswersTheCompletionsVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "cp")
	co := e.checkout(t, "cp", "a", time.Hour)
	p := lease.CompleteParams{TaskID: "cp", AgentID: "a", RunID: co.RunID}
	first := must[lease.Task](t)(e.store.Complete(c, p))
	todo := lease.StatusTodo
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "cp", AgentID: "a", Status: &todo}))
	e.checkout(t, "cp", "b", time.Hour)
	again := must[lease.Task](t)(e.store.Complete(c, p))
	if again.Status != lease.StatusDone || again.Version != first.Version || again.Checkout != nil || !again.CompletedAt.Equal(*first.CompletedAt) {
		t.Fatalf("the repeated completion: %s, version %d, lease %+v, completed %v; want the first: done, version %d, no lease, completed %v",
			again.Status, again.Version, again.Checkout, again.CompletedAt, first.Version, first.CompletedAt)
	}
	if now := e.get(t, "cp"); now.Status != lease.StatusInProgress || now.Version == first.Version {
		t.Fatalf("cp now: %s, version %d", now.Status, now.Version)
	}
}

// A task without a version (copied by a migration from before versions
// were given to such tasks) is completed like any other: the completion
// used to read its version with SET end_version = version + 1, which
// DynamoDB refuses for a missing attribute (a 5xx for a completion).
func TestCompletionOfATaskWithoutAVersion(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "nv")
	co := e.checkout(t, "nv", "a", time.Hour)
	table := e.names.Table(schema.TasksTable)
	must[*dynamodb.UpdateItemOutput](t)(e.db.UpdateItem(c, &dynamodb.UpdateItemInput{TableName: &table,
		Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: "nv"}}, UpdateExpression: aws.String("REMOVE version")}))
	p := lease.CompleteParams{TaskID: "nv", AgentID: "a", RunID: co.RunID}
	done := must[lease.Task](t)(e.store.Complete(c, p))
	if done.Status != lease.StatusDone || done.Version != 1 {
		t.Fatalf("completed: %s, version %d; want done, version 1", done.Status, done.Version)
	}
	if again := must[lease.Task](t)(e.store.Complete(c, p)); again.Version != 1 {
		t.Fatalf("the completion repeated: version %d, want 1", again.Version)
	}
}

// An admin's checkout or claim for another agent leaves a checkout event
// by the admin, with the lease's holder as its agent: the trail used to
// name the holder as by, hiding who acted. A checkout the holder asks for
// itself is by the holder.
func TestCheckoutForAnotherAgentIsByTheAdmin(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "ob", "ob2")
	co := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "ob", AgentID: "erin", By: "admin", Timeout: time.Hour}))
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "ob", AgentID: "erin", RunID: co.RunID}))
	e.checkout(t, "ob", "erin", time.Hour)
	evs := e.events(t, "ob")
	if len(evs) != 3 || evs[0].By != "admin" || evs[0].AgentID != "erin" || evs[2].By != "erin" {
		t.Fatalf("ob's trail: %+v; want a checkout for erin by admin, a release, a checkout by erin", evs)
	}
	e.caughtUp(t) // the claim finds ob2 through an index
	must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "erin", By: "admin", Timeout: time.Hour}))
	if evs := e.events(t, "ob2"); len(evs) != 1 || evs[0].By != "admin" || evs[0].AgentID != "erin" {
		t.Fatalf("ob2's trail after a claim for erin: %+v", evs)
	}
}
