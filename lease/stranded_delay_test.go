package lease_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// Versions before 2026-12-04 left some delayed tasks (a blocked task given
// a delay, a reopen or cancel over one) with their delayed claim_key
// "~<not_before>#<rank>" and no entry in the expiry index. The sweep ranks
// a delayed task ready through that entry only, and a claim reads only the
// head of each shard, after whose ready tasks a delayed key ranks: such a
// task waited behind every ready task of its shard for good. These tests
// make one as those versions left it.

// strand writes task id of e's table as an earlier version left it: its
// delayed key, without the expiry entry.
// With more, it removes those attributes too.
func (e *env) strand(t *testing.T, id string, more ...string) {
	t.Helper()
	must[*dynamodb.UpdateItemOutput](t)(uncounted().UpdateItem(ctx(t), &dynamodb.UpdateItemInput{
		TableName:           aws.String(e.names.Table(schema.TasksTable)),
		Key:                 map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: id}},
		UpdateExpression:    aws.String("REMOVE " + strings.Join(append([]string{"lease_expires", "lease_shard"}, more...), ", ")),
		ConditionExpression: aws.String("begins_with(claim_key, :d)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":d": &types.AttributeValueMemberS{Value: "~"},
		},
	}))
}

// busyQueue fills queue q with 60 ready tasks of priority 0, more than a
// claim reads from the head of a shard, and a delayed task "urgent" of
// the highest priority, blocked by blockers.
func (e *env) busyQueue(t *testing.T, q string, blockers ...string) time.Time {
	t.Helper()
	c := ctx(t)
	low, high := 0, lease.MaxPriority
	for i := range 60 {
		must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: fmt.Sprintf("low-%02d", i), Queue: q, Priority: &low}))
	}
	nb := e.clock.Now().Add(time.Minute)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "urgent", Queue: q, Priority: &high, NotBefore: &nb, BlockedBy: blockers}))
	return nb
}

// claimsUrgent claims from q an hour on, after a sweep, and wants urgent.
func (e *env) claimsUrgent(t *testing.T, q string) {
	t.Helper()
	c := ctx(t)
	e.clock.Advance(time.Hour)
	e.caughtUp(t) // the sweep finds urgent's mended entry through an index
	must[lease.SweepResult](t)(e.store.Sweep(c))
	e.caughtUp(t) // the claim finds urgent, ranked ready, through an index
	got := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "a", Queues: []string{q}, Timeout: time.Minute}))
	if got.TaskID != "urgent" {
		t.Fatalf("a claim an hour after urgent's not_before took %s (priority %d), want urgent (priority %d, ready since)", got.TaskID, got.Priority, lease.MaxPriority)
	}
}

// `checkout-server migrate` mends every such task of the table, once.
func TestMigrateMendsADelayedTaskLeftWithoutItsEntry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.busyQueue(t, "q")
	nb := e.clock.Now().Add(2 * time.Minute)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "whole", Queue: "q", NotBefore: &nb}))
	e.strand(t, "urgent")

	res := must[lease.MigrateResult](t)(lease.Migrate(c, uncounted(), e.names, schema.ShardCounts{}, nil))
	if res.Found || res.Mended != 1 {
		t.Fatalf("migrate: %+v, want no earlier table and 1 task mended (urgent; whole has its entry)", res)
	}
	if again := must[lease.MigrateResult](t)(lease.Migrate(c, uncounted(), e.names, schema.ShardCounts{}, nil)); again.Mended != 0 {
		t.Fatalf("migrate run again mended %d, want 0", again.Mended)
	}
	e.claimsUrgent(t, "q")
}

// The change stream mends one at its next change (here, the write that
// stranded it, then its unblocking): a blocked task given its delay by an
// earlier version is ranked ready at its not_before once unblocked.
func TestAStrandedDelayIsMendedAtTheTasksNextChange(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "blocker")
	e.busyQueue(t, "q", "blocker")
	e.strand(t, "urgent")
	e.drain(t)

	co := e.checkout(t, "blocker", "b", time.Hour)
	must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "blocker", AgentID: "b", RunID: co.RunID}))
	e.drain(t) // unblocks urgent, and mends it
	if got := must[lease.Task](t)(e.store.GetTask(c, "urgent")); got.Status != lease.StatusTodo {
		t.Fatalf("urgent after its blocker completed: %s, want todo", got.Status)
	}
	e.claimsUrgent(t, "q")
}

// One without its claim_rank, the ready key the sweep gives back, is
// given that too (the delayed key's tail): else the sweep would take its
// entry and leave its delayed key, and the stream give the entry back,
// at every sweep.
func TestAStrandedDelayWithoutItsRankIsMendedWhole(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.busyQueue(t, "q")
	e.strand(t, "urgent", "claim_rank")
	e.drain(t)
	e.claimsUrgent(t, "q")
}
