package lease_test

import (
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A plain release naming no lease (no run id, no fence) of a task
// given a not_before while held: its first write (for a ready task) is
// refused on the not_before, its second (with the delay) applies but its
// answer is lost. In that gap the not_before passes and b checks the task
// out by name. The SDK's second sending is refused on b's lease; the
// refusal, found to be this very write (sentAgain), should answer the
// release as made.
func TestAReleaseSentTwiceAcrossItsDelayedWriteIsAnswered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	e.checkout(t, "x", "a", time.Hour)
	nb := e.clock.Now().Add(10 * time.Second)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	tasks := e.names.Table(schema.TasksTable)
	var raceErr error
	raced := false
	s, doer := lossyTaskStore(e, func(target, body string) bool {
		return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) &&
			strings.Contains(body, "end_type") && strings.Contains(body, "claim_rank")
	}, func() {
		raced = true
		e.clock.Advance(11 * time.Second)
		_, raceErr = e.store.Checkout(c, lease.CheckoutParams{TaskID: "x", AgentID: "b", Timeout: time.Hour})
	})
	doer.applied = true
	_, err := s.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a"})
	if !raced {
		t.Fatal("the delayed ending's write was not made")
	}
	if raceErr != nil {
		t.Fatalf("b's checkout in the gap: %v", raceErr)
	}
	if got := e.get(t, "x"); got.Checkout == nil || got.Checkout.AgentID != "b" {
		t.Fatalf("x after the race: %+v, want held by b", got.Checkout)
	}
	if err != nil {
		t.Fatalf("a's release, whose delayed ending applied (its answer lost) before b's checkout: %v; want released", err)
	}
}

// A held task whose item keeps claim_rank (as a grant of an older
// version left it: today's grant removes it), given a not_before while
// held. Its plain release's first write is refused on the not_before;
// the second is pinned to the rank in the form the item holds it
// (claim_rank = R). A PATCH of the task's queue lands between the two:
// it removes claim_rank, the rank (claim_key R) unchanged. The pinned
// write is refused on the form alone, and is made again pinned to the
// form the item holds now (rankPinned, as the sweep's ending is): the
// caller's lease ends, where it was answered not_checked_out.
func TestAReleaseOfADelayedTaskRacedByAQueuePatchEndsTheLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	co := e.checkout(t, "x", "a", time.Hour)
	nb := e.clock.Now().Add(10 * time.Minute)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	tasks := e.names.Table(schema.TasksTable)
	// As an older version's grant left it: claim_rank beside its ready key.
	if _, err := e.db.UpdateItem(c, &dynamodb.UpdateItemInput{
		TableName: &tasks, Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: "x"}},
		UpdateExpression: aws.String("SET claim_rank = claim_key"),
	}); err != nil {
		t.Fatal(err)
	}
	raced := false
	doer := &raceDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) &&
				strings.Contains(body, "end_type") && strings.Contains(body, "claim_rank")
		},
		race: func() {
			raced = true
			q := "elsewhere"
			if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "admin", Queue: &q}); err != nil {
				t.Errorf("the queue PATCH: %v", err)
			}
		},
	}
	_, err := e.over(doer).Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a", RunID: co.RunID, Fence: co.Fence})
	if !raced {
		t.Fatal("no pinned ending was written")
	}
	got := e.get(t, "x")
	if err != nil {
		t.Fatalf("a's release of its live lease, a queue PATCH between its two writes: %v (task: %s, lease %v)", err, got.Status, got.Checkout)
	}
	if got.Status != lease.StatusTodo || got.Checkout != nil {
		t.Fatalf("after the release: %s, %v", got.Status, got.Checkout)
	}
}

// takeOutOf matches the take-out write (DELETE from waiting_on) of e's tasks table.
func takeOutOf(e *env) func(target, body string) bool {
	tasks := e.names.Table(schema.TasksTable)
	return func(target, body string) bool {
		return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, "DELETE")
	}
}

// A plain release naming no lease whose ending applied, its answer
// lost. In the gap the same agent checks the task out again (another of
// its workers) and a PATCH gives the new lease a not_before ahead. The
// SDK's second sending is refused; it is this very write (sentAgain, by
// its id), and is answered as made: the new lease, granted after it,
// stays (the ending was once written again with the delay, ending it).
func TestAReleaseSentTwiceDoesNotEndTheCallersNextLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "x")
	e.checkout(t, "x", "a", time.Hour)
	tasks := e.names.Table(schema.TasksTable)
	var second lease.Checkout
	raced := false
	s, doer := lossyTaskStore(e, func(target, body string) bool {
		return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, "end_type")
	}, func() {
		raced = true
		e.clock.Advance(time.Second)
		second = e.checkout(t, "x", "a", time.Hour)
		nb := e.clock.Now().Add(10 * time.Minute)
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", SetNotBefore: true, NotBefore: &nb}); err != nil {
			t.Errorf("the PATCH of not_before: %v", err)
		}
	})
	doer.applied = true
	_, err := s.Release(c, lease.ReleaseParams{TaskID: "x", AgentID: "a"})
	if !raced {
		t.Fatal("no ending was written")
	}
	got := e.get(t, "x")
	t.Logf("release: %v; x: %s, lease %+v", err, got.Status, got.Checkout)
	if got.Checkout == nil || got.Checkout.Fence != second.Fence {
		t.Fatalf("a's second lease (fence %d), granted after the release's ending applied, was ended by that release's second sending: x is %s, lease %v", second.Fence, got.Status, got.Checkout)
	}
}
