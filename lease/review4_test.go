package lease_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

func rawTask(t *testing.T, e *env, id string) map[string]types.AttributeValue {
	t.Helper()
	out := must[*dynamodb.GetItemOutput](t)(e.db.GetItem(ctx(t), &dynamodb.GetItemInput{TableName: aws.String(e.names.Table(schema.TasksTable)),
		Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: id}}, ConsistentRead: aws.Bool(true)}))
	return out.Item
}

// P1: a PATCH that cancels an idle delayed task and changes its not_before
// in the same request: the status rule REMOVEs lease_expires and the
// not_before rule REMOVEs (null) or SETs (later time) it again: overlapping
// paths, DynamoDB's ValidationException (a 500).
func TestACancelWithANotBeforeIsOneWrite(t *testing.T) {
	t.Parallel()
	for _, later := range []bool{false, true} {
		t.Run(fmt.Sprint("later=", later), func(t *testing.T) {
			e := newEnv(t)
			c := ctx(t)
			nb := e.clock.Now().Add(time.Hour)
			e.create(t, lease.CreateTaskParams{TaskID: "t", NotBefore: &nb})
			cancelled := lease.StatusCancelled
			p := lease.UpdateTaskParams{TaskID: "t", AgentID: "u", Status: &cancelled, SetNotBefore: true}
			if later {
				nb2 := nb.Add(time.Hour)
				p.NotBefore = &nb2
			}
			if _, err := e.store.UpdateTask(c, p); err != nil {
				t.Fatalf("PATCH {status: cancelled, not_before: %v}: %v", p.NotBefore, err)
			}
		})
	}
}

// P2: a delayed idle task cancelled, then reopened by a PATCH that sends
// its not_before back (status todo, the same not_before): the delayed
// claim key stays, no expiry-index entry is written; once not_before has
// passed nothing ranks it ready again.
func TestAReopenWithTheSameNotBeforeRanksReadyAgain(t *testing.T) {
	t.Parallel()
	s, clock := newShardEnv(t)
	c := ctx(t)
	nine, zero := 9, 0
	nb := clock.Now().Add(time.Minute)
	must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: "urgent", Priority: &nine, NotBefore: &nb}))
	cancelled, todo := lease.StatusCancelled, lease.StatusTodo
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "urgent", AgentID: "u", Status: &cancelled}))
	must[lease.Task](t)(s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "urgent", AgentID: "u", Status: &todo, SetNotBefore: true, NotBefore: &nb}))
	for i := range 12 {
		clock.Advance(time.Millisecond)
		must[lease.Task](t)(s.CreateTask(c, lease.CreateTaskParams{TaskID: fmt.Sprintf("low-%02d", i), Priority: &zero}))
	}
	clock.Advance(3 * time.Minute)
	for range 2 {
		must[lease.SweepResult](t)(s.Sweep(c))
	}
	got := must[lease.Checkout](t)(s.Claim(c, lease.ClaimParams{AgentID: "b"}))
	if got.TaskID != "urgent" {
		t.Fatalf("claim got %s; want urgent (priority 9, not_before passed 2 min ago, sweeps since)", got.TaskID)
	}
}

// beforeWriteDB runs before() once, just before the first UpdateItem that writes
// a PATCH (sets the "patch" attribute).
type beforeWriteDB struct {
	lease.DB
	once   sync.Once
	before func()
}

func (h *beforeWriteDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	for _, n := range in.ExpressionAttributeNames {
		if n == "patch" {
			h.once.Do(h.before)
		}
	}
	return h.DB.UpdateItem(ctx, in, o...)
}

// heldDelay: t checked out, PATCHed not_before an hour ahead, lease timed
// out and swept: todo, ready key, not_before to come, no entry.
func heldDelay(t *testing.T, e *env, id string, prio int) time.Time {
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: id, Priority: &prio})
	e.checkout(t, id, "a", time.Minute)
	nb := e.clock.Now().Add(time.Hour)
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: id, AgentID: "a", SetNotBefore: true, NotBefore: &nb}))
	e.clock.Advance(2 * time.Minute)
	must[lease.SweepResult](t)(e.store.Sweep(c))
	return nb
}

// P3: keepDelay no longer moves the version, so a PATCH that read the task
// before it and writes after it (pinned to the version alone) is built on
// the stale item: a cancel leaves the expiry-index entry keepDelay wrote on
// a cancelled task (the sweep then "ranks it ready": a write, a version).
func TestAPatchRacingADelayLeavesACancelledTaskNoExpiryEntry(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	heldDelay(t, e, "t", 0)
	h := &beforeWriteDB{DB: e.db, before: func() {
		if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "b"}); !errors.Is(err, lease.ErrNoTaskAvailable) {
			t.Errorf("claim in between: %v", err)
		}
	}}
	other := lease.New(lease.Config{DB: h, Tables: e.names, Now: e.clock.Now})
	cancelled := lease.StatusCancelled
	v := must[lease.Task](t)(other.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "u", Status: &cancelled})).Version
	raw := rawTask(t, e, "t")
	t.Logf("cancelled item: status=%v lease_expires=%v claim_key=%v", raw["status"], raw["lease_expires"], raw["claim_key"])
	e.clock.Advance(2 * time.Hour)
	res := must[lease.SweepResult](t)(e.store.Sweep(c))
	after := must[lease.Task](t)(e.store.GetTask(c, "t"))
	if _, ok := raw["lease_expires"]; ok || res.Ready != 0 || after.Version != v {
		t.Fatalf("cancelled task: lease_expires %v; sweep Ready %d, version %d -> %d; want no expiry entry, no ranking write", raw["lease_expires"], res.Ready, v, after.Version)
	}
}

// P4: the same race with a PATCH that clears not_before: the task, with no
// not_before, keeps the delayed key keepDelay gave it, ranked after every
// ready task for the hour its old not_before had to run.
func TestAPatchRacingADelayClearsItsDelayedKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	heldDelay(t, e, "urgent", 9)
	h := &beforeWriteDB{DB: e.db, before: func() {
		if _, err := e.store.Claim(c, lease.ClaimParams{AgentID: "b"}); !errors.Is(err, lease.ErrNoTaskAvailable) {
			t.Errorf("claim in between: %v", err)
		}
	}}
	other := lease.New(lease.Config{DB: h, Tables: e.names, Now: e.clock.Now})
	must[lease.Task](t)(other.UpdateTask(c, lease.UpdateTaskParams{TaskID: "urgent", AgentID: "u", SetNotBefore: true, NotBefore: nil}))
	raw := rawTask(t, e, "urgent")
	t.Logf("item: not_before=%v lease_expires=%v claim_key=%v", raw["not_before"], raw["lease_expires"], raw["claim_key"])
	zero := 0
	for i := range 3 {
		e.clock.Advance(time.Millisecond)
		e.create(t, lease.CreateTaskParams{TaskID: fmt.Sprintf("low-%02d", i), Priority: &zero})
	}
	e.clock.Advance(time.Minute)
	for range 2 {
		must[lease.SweepResult](t)(e.store.Sweep(c))
	}
	lease.SpreadClaims(e.store, 1)
	got := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "b"}))
	if got.TaskID != "urgent" {
		t.Fatalf("claim got %s; want urgent (priority 9, no not_before, sweeps since)", got.TaskID)
	}
}

// A cancel with a not_before, of a task with no expiry entry yet, and a
// not_before given to a finished task, used to give the finished task an
// entry: the sweep then "ranked it ready", moving its version.
func TestACancelWithANotBeforeOfAnUndelayedTaskPutsNoEntry(t *testing.T) {
	t.Parallel()
	for _, blocked := range []bool{false, true} {
		t.Run(fmt.Sprint("blocked=", blocked), func(t *testing.T) {
			e := newEnv(t)
			c := ctx(t)
			p := lease.CreateTaskParams{TaskID: "t"}
			if blocked {
				e.create(t, lease.CreateTaskParams{TaskID: "blk"})
				p.BlockedBy = []string{"blk"}
			}
			e.create(t, p)
			cancelled := lease.StatusCancelled
			nb := e.clock.Now().Add(time.Hour)
			v := must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "u", Status: &cancelled, SetNotBefore: true, NotBefore: &nb})).Version
			raw := rawTask(t, e, "t")
			e.clock.Advance(2 * time.Hour)
			res := must[lease.SweepResult](t)(e.store.Sweep(c))
			after := must[lease.Task](t)(e.store.GetTask(c, "t"))
			if _, ok := raw["lease_expires"]; ok || res.Ready != 0 {
				t.Fatalf("cancelled task: status %v lease_expires %v; sweep Ready %d (version %d -> %d); want no expiry entry, no ranking write",
					raw["status"], raw["lease_expires"], res.Ready, v, after.Version)
			}
		})
	}
}

// A PATCH {not_before: <future>} of a finished task (done, cancelled,
// failed) gives it an expiry-index entry: idle is true for any task with no
// lease, whatever its status.
func TestANotBeforeOnAFinishedTaskPutsNoEntry(t *testing.T) {
	t.Parallel()
	for _, st := range []string{"done", "cancelled", "failed"} {
		t.Run(st, func(t *testing.T) {
			e := newEnv(t)
			c := ctx(t)
			switch st {
			case "done":
				e.create(t, lease.CreateTaskParams{TaskID: "t"})
				e.complete(t, "t", "a")
			case "cancelled":
				e.create(t, lease.CreateTaskParams{TaskID: "t"})
				cancelled := lease.StatusCancelled
				must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "u", Status: &cancelled}))
			case "failed":
				e.failTask(t, "t", lease.CreateTaskParams{})
			}
			nb := e.clock.Now().Add(time.Hour)
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "u", SetNotBefore: true, NotBefore: &nb}))
			raw := rawTask(t, e, "t")
			e.clock.Advance(2 * time.Hour)
			res := must[lease.SweepResult](t)(e.store.Sweep(c))
			if _, ok := raw["lease_expires"]; ok || res.Ready != 0 {
				t.Fatalf("%s task after PATCH not_before: lease_expires %v; sweep Ready %d; want no expiry entry, no ranking write", st, raw["lease_expires"], res.Ready)
			}
		})
	}
}
