package lease_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// failedWriteDB fails the first task write that names a body (a PATCH's
// UpdateItem, a create's PutItem) with a 5xx, as a timeout or a dropped
// connection ends it after the SDK's retries: with applied, after the
// write applied (its answer lost); without, before DynamoDB saw it (kept
// in lost, to be sent late). It keeps the keys of the bodies put.
type failedWriteDB struct {
	lease.DB
	applied bool
	race    func() // run after the failed write, before its error is answered
	failed  atomic.Bool

	mu     sync.Mutex
	bodies []string
	lostU  *dynamodb.UpdateItemInput
	lostP  *dynamodb.PutItemInput
}

var errAnswerLost = &types.InternalServerError{Message: aws.String("answer lost")}

func (d *failedWriteDB) fail() bool { return d.failed.CompareAndSwap(false, true) }

func (d *failedWriteDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	names := false
	for _, v := range in.ExpressionAttributeNames {
		names = names || v == "body"
	}
	if !names || !strings.Contains(aws.ToString(in.UpdateExpression), "SET") || !d.fail() {
		return d.DB.UpdateItem(ctx, in, opts...)
	}
	if d.applied {
		if _, err := d.DB.UpdateItem(ctx, in, opts...); err != nil {
			return nil, err
		}
	} else {
		d.mu.Lock()
		d.lostU = in
		d.mu.Unlock()
	}
	if d.race != nil {
		d.race()
	}
	return nil, errAnswerLost
}

func (d *failedWriteDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if k, _ := in.Item["task_id"].(*types.AttributeValueMemberS); k != nil && strings.Contains(k.Value, "#body#") {
		d.mu.Lock()
		d.bodies = append(d.bodies, k.Value)
		d.mu.Unlock()
	}
	if _, ok := in.Item["body"]; !ok || !d.fail() {
		return d.DB.PutItem(ctx, in, opts...)
	}
	if d.applied {
		if _, err := d.DB.PutItem(ctx, in, opts...); err != nil {
			return nil, err
		}
	} else {
		d.mu.Lock()
		d.lostP = in
		d.mu.Unlock()
	}
	if d.race != nil {
		d.race()
	}
	return nil, errAnswerLost
}

// lastBody is the key of the latest body put.
func (d *failedWriteDB) lastBody(t *testing.T) string {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.bodies) == 0 {
		t.Fatal("no body was put")
	}
	return d.bodies[len(d.bodies)-1]
}

// itemExists reads key from the tasks table, consistently.
func itemExists(t *testing.T, e *env, key string) bool {
	t.Helper()
	out := must[*dynamodb.GetItemOutput](t)(e.db.GetItem(ctx(t), &dynamodb.GetItemInput{TableName: aws.String(e.names.Table(schema.TasksTable)),
		Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: key}}, ConsistentRead: aws.Bool(true)}))
	return out.Item != nil
}

// A PATCH of the description whose task write failed with a 5xx before
// DynamoDB saw it left its new body behind, named by no task, for good:
// body.go promised such a body is deleted, but only did so for a refused
// condition. It is deleted now; and the lost write, landing late (sent
// before the answer was given up on), cannot name it any more.
func TestAPatchWhoseWriteWasLostLeavesNoBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "p", Title: "t", Description: "old"}))
	db := &failedWriteDB{DB: e.db}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	desc := "new"
	if _, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", AgentID: "a", Description: &desc}); err == nil {
		t.Fatal("the PATCH whose write was lost answered no error")
	}
	body := db.lastBody(t)
	if itemExists(t, e, body) {
		t.Fatalf("body %s is left behind; no task names it", body)
	}
	// The lost write lands late: refused, the task keeps its body.
	_, err := e.db.UpdateItem(c, db.lostU)
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Fatalf("the lost write, landing after its body was deleted: %v; want its condition refused", err)
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "p")); got.Description != "old" {
		t.Fatalf("description %q, want %q", got.Description, "old")
	}
}

// The same error after the write applied: the task names the new body,
// which stays.
func TestAPatchWhoseWriteAppliedWithoutAnswerKeepsItsBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "p", Title: "t", Description: "old"}))
	db := &failedWriteDB{DB: e.db, applied: true}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	desc := "new"
	if _, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", AgentID: "a", Description: &desc}); err == nil {
		t.Fatal("the PATCH whose answer was lost answered no error")
	}
	got, err := e.store.GetTask(c, "p")
	if err != nil || got.Description != desc {
		t.Fatalf("GET after the PATCH applied: %+v, %v; want description %q", got, err, desc)
	}
	// A PATCH of the title after it keeps it too.
	title := "another"
	must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", AgentID: "b", Title: &title}))
	if got := must[lease.Task](t)(e.store.GetTask(c, "p")); got.Description != desc {
		t.Fatalf("description %q after a PATCH of the title, want %q", got.Description, desc)
	}
}

// The same when, before the error is answered, another PATCH moves the
// task on, replacing the body: the lost write can never apply, and its
// body goes; the task keeps the other's.
func TestAPatchWhoseWriteWasLostBehindAnotherLeavesNoBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "p", Title: "t", Description: "old"}))
	other := "other"
	db := &failedWriteDB{DB: e.db, race: func() {
		if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", AgentID: "b", Description: &other}); err != nil {
			t.Errorf("the other PATCH: %v", err)
		}
	}}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	desc := "new"
	if _, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", AgentID: "a", Description: &desc}); err == nil {
		t.Fatal("the PATCH whose write was lost answered no error")
	}
	if body := db.bodies[0]; itemExists(t, e, body) {
		t.Fatalf("body %s is left behind; no task names it", body)
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "p")); got.Description != other {
		t.Fatalf("description %q, want %q", got.Description, other)
	}
}

// A create whose put failed with a 5xx before DynamoDB saw it left its
// body behind, named by no task. Its put is now sent again: the task is
// made, with its body, and the create is answered as made.
func TestACreateWhosePutWasLostIsMadeWithItsBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	db := &failedWriteDB{DB: e.db}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	if _, err := s.CreateTask(c, lease.CreateTaskParams{TaskID: "n", Title: "t", Description: "the description"}); err != nil {
		t.Fatalf("create whose first put was lost: %v; want it made", err)
	}
	got, err := e.store.GetTask(c, "n")
	if err != nil || got.Description != "the description" {
		t.Fatalf("GET: %+v, %v; want the task with its description", got, err)
	}
}

// The same after the put applied: answered as made.
func TestACreateWhosePutAppliedWithoutAnswerIsMade(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	db := &failedWriteDB{DB: e.db, applied: true}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	if _, err := s.CreateTask(c, lease.CreateTaskParams{TaskID: "n", Title: "t", Description: "the description"}); err != nil {
		t.Fatalf("create whose answer was lost: %v; want it made", err)
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "n")); got.Description != "the description" {
		t.Fatalf("description %q", got.Description)
	}
}

// A create whose put was lost while another create took the id: the
// task is the other's, and this one's body goes.
func TestACreateWhosePutWasLostToAnotherLeavesNoBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	db := &failedWriteDB{DB: e.db, race: func() {
		if _, err := e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "n", Title: "t", Description: "the other's"}); err != nil {
			t.Errorf("the other create: %v", err)
		}
	}}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	_, err := s.CreateTask(c, lease.CreateTaskParams{TaskID: "n", Title: "t", Description: "mine"})
	t.Logf("the create answered: %v", err)
	if body := db.bodies[0]; itemExists(t, e, body) {
		t.Fatalf("body %s is left behind; no task names it", body)
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "n")); got.Description != "the other's" {
		t.Fatalf("description %q, want the other create's", got.Description)
	}
}

// lostWritesDB answers every task write that names a body (a PATCH of
// the description) with a 5xx before DynamoDB sees it, and keeps the
// latest such write.
type lostWritesDB struct {
	lease.DB
	last atomic.Pointer[dynamodb.UpdateItemInput]
}

func (d *lostWritesDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	for _, v := range in.ExpressionAttributeNames {
		if v == "body" && strings.Contains(aws.ToString(in.UpdateExpression), "SET") {
			d.last.Store(in)
			return nil, errAnswerLost
		}
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}

// Each PATCH whose write was lost voids its id on the task item
// (void_patches), and only an applied PATCH clears them: a run of such
// PATCHes grew the item without bound, past the kilobyte a transition's
// write is billed by (and towards DynamoDB's 400 KB item limit). A
// checkout of the task, one write unit on the table, cost more.
func TestPatchesLostInARowDoNotGrowTheTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "p", Title: "a title of usual length", Description: "old"}))
	db := &lostWritesDB{DB: e.db}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	for i := range 100 {
		desc := fmt.Sprintf("new %d", i)
		if _, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", AgentID: "a", Description: &desc}); err == nil {
			t.Fatal("a PATCH whose write was lost answered no error")
		}
	}
	m := testenv.NewMeter(t, e.names.Prefix)
	m.Take()
	e.checkout(t, "p", "a", time.Minute)
	used := m.Take()
	t.Logf("checkout: %s", unitsByTable(used))
	if got := used.Tables[schema.TasksTable]; got.Write != 1 {
		t.Fatalf("the checkout billed %g write units on the tasks table; want 1 (the item under 1 KB)", got.Write)
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "p")); got.Description != "old" {
		t.Fatalf("description %q, want %q", got.Description, "old")
	}
	// A PATCH past the bound at one version is left undecided, its body
	// kept: its write, landing late at the version it read, names a body
	// that is there. (The checkout moved the version: the ids voided
	// before it make way for four more.)
	for i := range 4 {
		desc := fmt.Sprintf("after the checkout %d", i)
		if _, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", AgentID: "a", Description: &desc}); err == nil {
			t.Fatal("a PATCH whose write was lost answered no error")
		}
	}
	desc := "late"
	if _, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", AgentID: "a", Description: &desc}); err == nil {
		t.Fatal("a PATCH whose write was lost answered no error")
	}
	must[*dynamodb.UpdateItemOutput](t)(e.db.UpdateItem(c, db.last.Load()))
	if got := must[lease.Task](t)(e.store.GetTask(c, "p")); got.Description != "late" {
		t.Fatalf("description %q after the late write, want %q", got.Description, "late")
	}
}

// bodyOf is the key of the body task id names now.
func bodyOf(t *testing.T, e *env, id string) string {
	t.Helper()
	out := must[*dynamodb.GetItemOutput](t)(e.db.GetItem(ctx(t), &dynamodb.GetItemInput{TableName: aws.String(e.names.Table(schema.TasksTable)),
		Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: id}}, ConsistentRead: aws.Bool(true)}))
	token, ok := out.Item["body"].(*types.AttributeValueMemberS)
	if !ok {
		t.Fatalf("task %s names no body", id)
	}
	return id + "#body#" + token.Value
}

// A PATCH whose write applied but whose answer was lost kept the body it
// replaced, which the task no longer names and never can again: deleted
// once its write applied when the answer comes, it stayed for good when
// the answer was lost. So did the body of a PATCH that removed it (an
// empty description).
func TestAPatchWhoseWriteAppliedWithoutAnswerLeavesNoOldBody(t *testing.T) {
	t.Parallel()
	for _, desc := range []string{"new", ""} {
		t.Run(fmt.Sprintf("to %q", desc), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "p", Title: "t", Description: "old"}))
			old := bodyOf(t, e, "p")
			db := &failedWriteDB{DB: e.db, applied: true}
			s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			if _, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", AgentID: "a", Description: &desc}); err == nil {
				t.Fatal("the PATCH whose answer was lost answered no error")
			}
			if got := must[lease.Task](t)(e.store.GetTask(c, "p")); got.Description != desc {
				t.Fatalf("description %q, want %q", got.Description, desc)
			}
			if itemExists(t, e, old) {
				t.Fatalf("the replaced body %s is left behind; no task names it", old)
			}
		})
	}
}

// The ids voided at one version stayed on the task after a checkout or a
// release moved it on (only an applied PATCH cleared them), though no
// write read at that version can apply any more: four of them filled the
// set for good, and every PATCH whose write was lost after that was left
// undecided, its body kept, named by no task. Voids of an earlier version
// now give way to the new one.
func TestOldVoidsDoNotKeepALostPatchsBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "p", Title: "t", Description: "old"}))
	db := &lostWritesDB{DB: e.db}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	lose := func(desc string) {
		t.Helper()
		if _, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", AgentID: "a", Description: &desc}); err == nil {
			t.Fatal("a PATCH whose write was lost answered no error")
		}
	}
	for i := range 4 {
		lose(fmt.Sprintf("new %d", i))
	}
	// The version moves on, with no PATCH applied.
	e.checkout(t, "p", "a", time.Minute)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "p", AgentID: "a"}))

	bodies := &failedWriteDB{DB: db}
	s = lease.New(lease.Config{DB: bodies, Tables: e.names, Now: e.clock.Now})
	desc := "lost after the release"
	if _, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", AgentID: "a", Description: &desc}); err == nil {
		t.Fatal("a PATCH whose write was lost answered no error")
	}
	if body := bodies.lastBody(t); itemExists(t, e, body) {
		t.Errorf("body %s is left behind; no task names it", body)
	}
	// Its write, landing late, is refused: the task keeps its body.
	_, err := e.db.UpdateItem(c, bodies.lostU)
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		t.Fatalf("the lost write, landing late: %v; want its condition refused", err)
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "p")); got.Description != "old" {
		t.Fatalf("description %q, want %q", got.Description, "old")
	}
	// The set stays bounded: four more lost at this version are voided,
	// the fifth is left undecided.
	for i := range 4 {
		lose(fmt.Sprintf("again %d", i))
	}
	m := testenv.NewMeter(t, e.names.Prefix)
	m.Take()
	e.checkout(t, "p", "a", time.Minute)
	if got := m.Take().Tables[schema.TasksTable]; got.Write != 1 {
		t.Fatalf("the checkout billed %g write units on the tasks table; want 1", got.Write)
	}
}

// refusedPutDB sends every put of a task item (one that names its body)
// with an expression DynamoDB refuses (ValidationException): a request
// refused outright, every time it is sent. body is the key of the last
// body put.
type refusedPutDB struct {
	lease.DB
	body atomic.Value
}

func (d *refusedPutDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if _, ok := in.Item["body"]; ok {
		refused := *in
		refused.ConditionExpression = aws.String("attribute_not_exists(")
		return d.DB.PutItem(ctx, &refused, opts...)
	}
	if k, _ := in.Item["task_id"].(*types.AttributeValueMemberS); k != nil && strings.Contains(k.Value, "#body#") {
		d.body.Store(k.Value)
	}
	return d.DB.PutItem(ctx, in, opts...)
}

// A create whose put DynamoDB refused outright (an error that is no lost
// answer: the put did not apply) sent it again, refused again, took that
// for a write still undecided and kept its body, named by no task, for
// good. A put refused so never applies: its body is deleted.
func TestACreateRefusedOutrightLeavesNoBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	db := &refusedPutDB{DB: e.db}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	_, err := s.CreateTask(c, lease.CreateTaskParams{TaskID: "n", Title: "t", Description: "the description"})
	var invalid smithy.APIError
	if !errors.As(err, &invalid) || invalid.ErrorCode() != "ValidationException" {
		t.Fatalf("create refused: %v; want its ValidationException", err)
	}
	body, _ := db.body.Load().(string)
	if body == "" {
		t.Fatal("no body was put")
	}
	if itemExists(t, e, body) {
		t.Fatalf("body %s is left behind; no task names it", body)
	}
	if _, err := e.store.GetTask(c, "n"); !errors.Is(err, lease.ErrTaskNotFound) {
		t.Fatalf("GET of the task refused: %v; want not found", err)
	}
}

// refusedUpdateDB sends every UpdateItem with an expression DynamoDB
// refuses (ValidationException), and keeps the key of the last body put.
type refusedUpdateDB struct{ refusedPutDB }

func (d *refusedUpdateDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if k, _ := in.Item["task_id"].(*types.AttributeValueMemberS); k != nil && strings.Contains(k.Value, "#body#") {
		d.body.Store(k.Value)
	}
	return d.DB.PutItem(ctx, in, opts...)
}

func (d *refusedUpdateDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	refused := *in
	refused.ConditionExpression = aws.String("attribute_not_exists(")
	return d.DB.UpdateItem(ctx, &refused, opts...)
}

// The same for a PATCH: its write refused outright, and the write that
// would decide it refused too, it kept its new body. Its write did not
// apply: the body is deleted, and the task keeps its own.
func TestAPatchRefusedOutrightLeavesNoBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "p", Title: "t", Description: "old"}))
	db := &refusedUpdateDB{refusedPutDB{DB: e.db}}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	desc := "new"
	_, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p", AgentID: "a", Description: &desc})
	var invalid smithy.APIError
	if !errors.As(err, &invalid) || invalid.ErrorCode() != "ValidationException" {
		t.Fatalf("PATCH refused: %v; want its ValidationException", err)
	}
	body, _ := db.body.Load().(string)
	if body == "" {
		t.Fatal("no body was put")
	}
	if itemExists(t, e, body) {
		t.Fatalf("body %s is left behind; no task names it", body)
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "p")); got.Description != "old" {
		t.Fatalf("description %q, want %q", got.Description, "old")
	}
}
