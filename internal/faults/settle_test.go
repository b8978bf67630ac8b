package faults_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

// hookedDB calls before (once) just before the first PutItem of a task
// item whose task_id is task, and then, unless keep, loses that write's
// answer: the item is written, the caller gets a network error.
type hookedDB struct {
	lease.DB
	table, task string
	before      func()
	keep        bool   // the answer arrives (it is lost otherwise)
	after       func() // called once the item is written, if set
	once        sync.Once
}

var errAnswerLost = errors.New("connection reset by peer (the answer was lost)")

func (h *hookedDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	id, _ := in.Item["task_id"].(*types.AttributeValueMemberS)
	hit := false
	if *in.TableName == h.table && id != nil && id.Value == h.task {
		h.once.Do(func() { hit = true })
	}
	if !hit {
		return h.DB.PutItem(ctx, in, opts...)
	}
	h.before()
	out, err := h.DB.PutItem(ctx, in, opts...)
	if err != nil {
		return nil, err
	}
	if h.after != nil {
		h.after()
	}
	if h.keep {
		return out, nil
	}
	return nil, errAnswerLost
}

// A dependent whose blocker completes between the creator's read of the
// blocker and the write of the dependent is unblocked by the creator's
// settle step (deps.go). When that write's answer is lost, the retry of
// the create (the SDK's own retry of the PutItem, or the caller's retry of
// the create) finds the task there and answers task exists without
// settling, and nothing else ever unblocks it: the blocker's completion
// was applied by the stream before the dependent existed. (A kill -9
// between the write and the settle step strands it the same way.)
func TestCreateRetriedAfterLostAnswerStillSettles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	names := testenv.Tables(t)
	ep := testenv.Endpoint()
	plain := lease.New(lease.Config{DB: lease.NewLocalClient(ep), Tables: names})
	follow := follower(t, lease.NewLocalClient(ep), names)
	if _, err := plain.CreateTask(ctx, lease.CreateTaskParams{TaskID: "b"}); err != nil {
		t.Fatal(err)
	}
	// b has a dependent already, so creating d sets no flag on b: its
	// completion is the only write between the creator's read and d's.
	if _, err := plain.CreateTask(ctx, lease.CreateTaskParams{TaskID: "first", BlockedBy: []string{"b"}}); err != nil {
		t.Fatal(err)
	}
	db := &hookedDB{DB: lease.NewLocalClient(ep), table: names.Table(schema.TasksTable), task: "d", before: func() {
		// b completes, and the stream applies it, before d is written.
		co, err := plain.Checkout(ctx, lease.CheckoutParams{TaskID: "b", AgentID: "worker", Timeout: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := plain.Complete(ctx, lease.CompleteParams{TaskID: "b", AgentID: "worker", RunID: co.RunID, Fence: co.Fence}); err != nil {
			t.Fatal(err)
		}
		follow()
	}}
	s := lease.New(lease.Config{DB: db, Tables: names})
	_, err := s.CreateTask(ctx, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"b"}})
	if !errors.Is(err, errAnswerLost) {
		t.Fatalf("first create of d: %v, want the lost answer", err)
	}
	// The caller tries again, as told to after a lost answer.
	if _, err := s.CreateTask(ctx, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"b"}}); err != nil && !errors.Is(err, lease.ErrTaskExists) {
		t.Fatalf("create of d again: %v", err)
	}
	follow()
	d, err := plain.GetTask(ctx, "d")
	if err != nil {
		t.Fatal(err)
	}
	if d.Status != lease.StatusTodo {
		t.Errorf("d, whose only blocker b is done: %s (blocked_by %v), want todo", d.Status, d.BlockedBy)
	}
}

// follower returns a function that applies the tasks table's change
// stream up to now with the stream function's handler over db, carrying
// on from where its last call stopped, as the server's poller does (drain,
// which starts from the oldest record each time, would apply every
// completion again).
func follower(t *testing.T, db lease.DB, names schema.Names) func() {
	t.Helper()
	arn, err := localstack.StreamARN(context.Background(), lease.NewLocalClient(testenv.Endpoint()), names.Table(schema.TasksTable))
	if err != nil {
		t.Fatal(err)
	}
	p := &stream.Poller{
		Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
		Handle: stream.Handler(lease.New(lease.Config{DB: db, Tables: names, Notifier: &testenv.Recorder{}})),
	}
	return func() {
		for {
			n, err := p.Poll(context.Background())
			if err != nil {
				t.Errorf("apply the change stream: %v", err)
				return
			}
			if n == 0 {
				return
			}
		}
	}
}

// barrierDB holds the answers of the first two UpdateItems of task's item
// until both have come, so that two writers each see the other's
// condition fail before either writes again.
type barrierDB struct {
	lease.DB
	table, task string
	mu          sync.Mutex
	n           int
	both        chan struct{}
}

func (b *barrierDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	out, err := b.DB.UpdateItem(ctx, in, opts...)
	id, _ := in.Key["task_id"].(*types.AttributeValueMemberS)
	if *in.TableName != b.table || id == nil || id.Value != b.task {
		return out, err
	}
	b.mu.Lock()
	b.n++
	n := b.n
	if n == 2 {
		close(b.both)
	}
	b.mu.Unlock()
	if n <= 2 {
		select {
		case <-b.both:
		case <-time.After(5 * time.Second):
		}
	}
	return out, err
}

// A dependent waiting on two blockers that complete at once: the creator's
// settle step takes one out while the stream takes the other. Each first
// tries the write that unblocks the task (condition: the blocker is the
// last one waited on), which fails for both since two are waited on; each
// then deletes its own blocker from waiting_on, conditioned only on that
// blocker being there, and both apply: waiting_on is empty, the task is
// still blocked, and no later change can unblock it (every blocker is
// done and waited on by nobody). The same race is open to two stream
// batches of different shards in AWS.
func TestTwoBlockersCompletingAtOnceUnblock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	names := testenv.Tables(t)
	ep := testenv.Endpoint()
	plain := lease.New(lease.Config{DB: lease.NewLocalClient(ep), Tables: names})
	for _, id := range []string{"b1", "b2"} {
		if _, err := plain.CreateTask(ctx, lease.CreateTaskParams{TaskID: id}); err != nil {
			t.Fatal(err)
		}
	}
	// Both have a dependent already, so creating d sets no flag on them.
	if _, err := plain.CreateTask(ctx, lease.CreateTaskParams{TaskID: "first", BlockedBy: []string{"b1", "b2"}}); err != nil {
		t.Fatal(err)
	}
	db := &barrierDB{DB: lease.NewLocalClient(ep), table: names.Table(schema.TasksTable), task: "d", both: make(chan struct{})}
	follow := follower(t, db, names)
	follow()
	var streamDone sync.WaitGroup
	hook := &hookedDB{DB: db, table: names.Table(schema.TasksTable), task: "d", before: func() {
		// Between the creator's read of the blockers and its write of d,
		// b2 then b1 complete; the stream applies them once d is there.
		for _, b := range []string{"b2", "b1"} {
			co, err := plain.Checkout(ctx, lease.CheckoutParams{TaskID: b, AgentID: "worker", Timeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := plain.Complete(ctx, lease.CompleteParams{TaskID: b, AgentID: "worker", RunID: co.RunID, Fence: co.Fence}); err != nil {
				t.Fatal(err)
			}
		}
	}, keep: true, after: func() { streamDone.Go(follow) }}
	s := lease.New(lease.Config{DB: hook, Tables: names})
	if _, err := s.CreateTask(ctx, lease.CreateTaskParams{TaskID: "d", BlockedBy: []string{"b1", "b2"}}); err != nil {
		t.Fatalf("create d: %v", err)
	}
	streamDone.Wait()
	follow()
	for _, id := range []string{"first", "d"} {
		tk, err := plain.GetTask(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if tk.Status != lease.StatusTodo {
			t.Errorf("%s, whose blockers b1 and b2 are done: %s (blocked_by %v), want todo", id, tk.Status, tk.BlockedBy)
		}
	}
}
