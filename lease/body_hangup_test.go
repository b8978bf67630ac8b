package lease_test

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
)

// hangUpDB cancels the caller's context (the client hung up) right after
// the request cut names applied: a body's PutItem ("body put"), whose
// answer is then lost to the cancellation, or a PATCH's task write ("task
// write"), whose answer comes back. It keeps the keys of the bodies put.
type hangUpDB struct {
	lease.DB
	cut    string
	cancel context.CancelFunc

	mu     sync.Mutex
	bodies []string
}

func (d *hangUpDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	k, _ := in.Item["task_id"].(*types.AttributeValueMemberS)
	if k == nil || !strings.Contains(k.Value, "#body#") {
		return d.DB.PutItem(ctx, in, opts...)
	}
	d.mu.Lock()
	d.bodies = append(d.bodies, k.Value)
	d.mu.Unlock()
	out, err := d.DB.PutItem(ctx, in, opts...)
	if err != nil || d.cut != "body put" {
		return out, err
	}
	d.cancel()
	return nil, ctx.Err()
}

func (d *hangUpDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := d.DB.UpdateItem(ctx, in, opts...)
	if err == nil && d.cut == "task write" && strings.Contains(aws.ToString(in.UpdateExpression), "SET") {
		for _, v := range in.ExpressionAttributeNames {
			if v == "body" {
				d.cancel()
			}
		}
	}
	return out, err
}

// A PATCH of an 8 KiB description whose client hung up left a body that
// no task names, for good: cut after its new body was put (that put's
// answer lost), the PATCH answered the error and deleted nothing; cut
// after its task write applied, the delete of the body it replaced was
// sent with the cancelled context and never made. Only the body the task
// names is left now.
func TestAPatchWhoseClientHungUpLeavesNoBodyBehind(t *testing.T) {
	t.Parallel()
	for _, cut := range []string{"body put", "task write"} {
		t.Run(cut, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			must[lease.Task](t)(e.store.CreateTask(ctx(t), lease.CreateTaskParams{TaskID: "p", Title: "t", Description: "old"}))
			old := bodyOf(t, e, "p")
			c, cancel := context.WithCancel(ctx(t))
			defer cancel()
			db := &hangUpDB{DB: e.db, cut: cut, cancel: cancel}
			s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			desc := strings.Repeat("d", 8<<10)
			_, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", AgentID: "a", Description: &desc})
			t.Logf("the PATCH answered: %v", err)
			named := bodyOf(t, e, "p")
			for _, key := range append(db.bodies, old) {
				if key != named && itemExists(t, e, key) {
					t.Errorf("body %s is left behind; the task names %s", key, named)
				}
			}
		})
	}
}

// The same for a create cut after its body was put: no task names the
// body, and none ever will.
func TestACreateWhoseClientHungUpLeavesNoBodyBehind(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c, cancel := context.WithCancel(ctx(t))
	defer cancel()
	db := &hangUpDB{DB: e.db, cut: "body put", cancel: cancel}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	_, err := s.CreateTask(c, lease.CreateTaskParams{TaskID: "n", Title: "t", Description: strings.Repeat("d", 8<<10)})
	if err == nil {
		t.Fatal("the create whose client hung up answered no error")
	}
	if len(db.bodies) != 1 {
		t.Fatalf("bodies put: %v; want one", db.bodies)
	}
	if itemExists(t, e, db.bodies[0]) {
		t.Fatalf("body %s is left behind; no task names it", db.bodies[0])
	}
}
