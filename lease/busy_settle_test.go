package lease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// contended is a client on which every UpdateItem of one task fails its
// condition, as it would if other writes kept landing first: the
// failure carries the item as it is (as DynamoDB returns it), and the
// write is not made. after runs once, after the first PutItem of that
// task.
type contended struct {
	*dynamodb.Client
	table, taskID string
	after         func()
	once          sync.Once
	refused       atomic.Int64
}

func (c *contended) PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	out, err := c.Client.PutItem(ctx, in, optFns...)
	if err == nil && c.mine(in.TableName, in.Item) {
		c.once.Do(c.after)
	}
	return out, err
}

func (c *contended) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if !c.mine(in.TableName, in.Key) {
		return c.Client.UpdateItem(ctx, in, optFns...)
	}
	c.refused.Add(1)
	cur, err := c.GetItem(ctx, &dynamodb.GetItemInput{TableName: in.TableName, Key: in.Key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	return nil, &types.ConditionalCheckFailedException{Message: aws.String("The conditional request failed"), Item: cur.Item}
}

func (c *contended) mine(table *string, key map[string]types.AttributeValue) bool {
	id, ok := key["task_id"].(*types.AttributeValueMemberS)
	return *table == c.table && ok && id.Value == c.taskID
}

// A create whose settling gives up (its task's writes keep losing) answers
// ErrBusy, the API's 503; its own write stands, the task blocked on a
// blocker done meanwhile, and the change stream settles it: the task
// becomes todo, with one unblocked event.
func TestBusySettlingLeavesTheStreamToSettle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "b")
	db := &contended{Client: e.db, table: e.names.Table(schema.TasksTable), taskID: "d",
		// b completes right after d's write, before d is settled.
		after: func() { e.complete(t, "b", "x") }}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes})

	// A deadline 2.5 s away leaves its writes half a second of retries
	// (retryMargin).
	short, cancel := context.WithTimeout(c, 2500*time.Millisecond)
	defer cancel()
	_, err := s.CreateTask(short, lease.CreateTaskParams{TaskID: "d", Title: "d", BlockedBy: []string{"b"}})
	if !errors.Is(err, lease.ErrBusy) {
		t.Fatalf("create whose settling kept losing: %v, want ErrBusy", err)
	}
	if db.refused.Load() == 0 {
		t.Fatal("the create never tried to settle d")
	}
	if d := e.get(t, "d"); d.Status != lease.StatusBlocked {
		t.Fatalf("d before the stream: %s, want blocked (the create's own write)", d.Status)
	}
	if b := e.get(t, "b"); b.Status != lease.StatusDone {
		t.Fatalf("b: %s, want done", b.Status)
	}

	evs := e.events(t, "d") // drains the stream
	if d := e.get(t, "d"); d.Status != lease.StatusTodo {
		t.Fatalf("d after the stream: %s, want todo", d.Status)
	}
	if n := count(evs, lease.EventUnblocked); n != 1 {
		t.Fatalf("d's trail has %d unblocked events, want 1: %v", n, kinds(evs))
	}
	// The task is claimable once settled.
	e.caughtUp(t) // the claim finds d through an index
	co := must[lease.Checkout](t)(e.store.Claim(c, lease.ClaimParams{AgentID: "y"}))
	if co.TaskID != "d" {
		t.Fatalf("claim got %s, want d", co.TaskID)
	}
}
