package lease_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
)

// putTwiceDB sends the first PutItem whose item has attribute name
// twice (the first applied, its answer lost, the SDK sending it again), and
// runs race in between: another writer's request landing in that gap.
type putTwiceDB struct {
	lease.DB
	name string
	race func()
	sent atomic.Bool
}

func (d *putTwiceDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if _, ok := in.Item[d.name]; ok && d.sent.CompareAndSwap(false, true) {
		if _, err := d.DB.PutItem(ctx, in, opts...); err != nil {
			return nil, err
		}
		d.race()
	}
	return d.DB.PutItem(ctx, in, opts...)
}

// A create whose put applied, whose answer was lost and which the SDK sent
// again after another agent checked the new task out (a waiting claimer,
// say), used to take the task for another's and drop the body that the
// task item names: the task's description was gone for good and every GET
// of it failed. A create now knows its own item by its id.
func TestACreateSentTwiceAfterACheckoutKeepsItsBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	var raceErr error
	db := &putTwiceDB{DB: e.db, name: "created_key", race: func() {
		_, raceErr = e.store.Checkout(c, lease.CheckoutParams{TaskID: "b1", AgentID: "other", Timeout: time.Hour})
	}}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	_, createErr := s.CreateTask(c, lease.CreateTaskParams{TaskID: "b1", Title: "t", Description: "the description"})
	if !db.sent.Load() {
		t.Fatal("the create was not sent twice")
	}
	if raceErr != nil {
		t.Fatalf("the other agent's checkout: %v", raceErr)
	}
	t.Logf("the create answered: %v", createErr)
	got, err := e.store.GetTask(c, "b1")
	if err != nil {
		t.Errorf("GET of the task created (its create answered %v): %v; want the task with its description", createErr, err)
	} else if got.Description != "the description" {
		t.Errorf("description %q, want %q", got.Description, "the description")
	}
	// One such task fails every listing that would show it.
	if _, err := e.store.ListTasks(c, lease.ListTasksParams{}); err != nil {
		t.Errorf("listing every task: %v", err)
	}
}

// updateTwiceDB sends the first UpdateItem that names attribute name
// twice, and runs race between the two sendings.
type updateTwiceDB struct {
	lease.DB
	name string
	race func()
	sent atomic.Bool
}

func (d *updateTwiceDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	for _, v := range in.ExpressionAttributeNames {
		if v == d.name && d.sent.CompareAndSwap(false, true) {
			if _, err := d.DB.UpdateItem(ctx, in, opts...); err != nil {
				return nil, err
			}
			d.race()
			break
		}
	}
	return d.DB.UpdateItem(ctx, in, opts...)
}

// A PATCH of the description whose write applied, whose answer was lost
// and which the SDK sent again after another client's PATCH of the title
// landed, used to take the failed second sending for not applied and
// delete the new body, which the task item names: the description was
// gone and every GET of the task failed from then on. Its new body, which
// no other write names, now says the write was its own.
func TestAPatchSentTwiceAfterAnotherPatchKeepsItsBody(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "p1", Title: "t", Description: "old"}))
	var raceErr error
	db := &updateTwiceDB{DB: e.db, name: "body", race: func() {
		title := "another title"
		_, raceErr = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p1", AgentID: "b", Title: &title})
	}}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	desc := "new"
	_, patchErr := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p1", AgentID: "a", Description: &desc})
	if !db.sent.Load() {
		t.Fatal("the PATCH was not sent twice")
	}
	if raceErr != nil {
		t.Fatalf("the other client's PATCH: %v", raceErr)
	}
	t.Logf("the PATCH answered: %v", patchErr)
	got, err := e.store.GetTask(c, "p1")
	if err != nil {
		t.Fatalf("GET after the PATCH (answered %v): %v; want the task with description %q", patchErr, err, desc)
	}
	if got.Description != desc || got.Title != "another title" {
		t.Fatalf("description %q, title %q; want %q, %q", got.Description, got.Title, desc, "another title")
	}
}

// The same lost answer on a create without a body: the SDK's second
// sending fails on the task the first one created, which a checkout moved
// on in between, and the client's own create was answered 409
// task_exists (DESIGN invariant 5: a retried request whose answer was
// lost gets the same outcome).
func TestACreateSentTwiceAfterACheckoutIsCreated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	var raceErr error
	db := &putTwiceDB{DB: e.db, name: "created_key", race: func() {
		_, raceErr = e.store.Checkout(c, lease.CheckoutParams{TaskID: "n1", AgentID: "other", Timeout: time.Hour})
	}}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	_, err := s.CreateTask(c, lease.CreateTaskParams{TaskID: "n1", Title: "t"})
	if !db.sent.Load() || raceErr != nil {
		t.Fatalf("sent twice %v, the checkout: %v", db.sent.Load(), raceErr)
	}
	if err != nil {
		t.Fatalf("the create, whose first sending created the task: %v; want the task created (201)", err)
	}
}

// A PATCH of the description whose write applied, whose answer was lost
// and which the SDK sent again after another client's PATCH of the
// description landed, took the refused second sending for not applied:
// it wrote again, over the other client's description, and left the body
// its first write had replaced, which no task names, for good. The body
// that replaced its own now says that its write applied.
func TestAPatchSentTwiceAfterAnotherDescriptionPatchAppliesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "p1", Title: "t", Description: "old"}))
	old := bodyOf(t, e, "p1")
	var raceErr error
	db := &updateTwiceDB{DB: e.db, name: "body", race: func() {
		_, raceErr = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p1", AgentID: "b", Description: new("other")})
	}}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	if _, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p1", AgentID: "a", Description: new("new")}); err != nil {
		t.Fatalf("the PATCH whose first sending applied: %v", err)
	}
	if !db.sent.Load() || raceErr != nil {
		t.Fatalf("sent twice %v, the other client's PATCH: %v", db.sent.Load(), raceErr)
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "p1")); got.Description != "other" || got.Version != 3 {
		t.Fatalf("description %q at version %d, want %q at 3: the PATCH applied once, before the other client's", got.Description, got.Version, "other")
	}
	if itemExists(t, e, old) {
		t.Fatalf("the body %s the PATCH replaced is left behind; no task names it", old)
	}
}

// The same, behind another client's PATCH that clears the description:
// the task then names no body, so nothing said the write had applied; the
// PATCH ran again, writing its description over the cleared one, and left
// the body its first write had replaced for good.
func TestAPatchSentTwiceAfterAPatchClearingTheDescriptionAppliesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "p1", Title: "t", Description: "old"}))
	old := bodyOf(t, e, "p1")
	var raceErr error
	db := &updateTwiceDB{DB: e.db, name: "body", race: func() {
		_, raceErr = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p1", AgentID: "b", Description: new("")})
	}}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	if _, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p1", AgentID: "a", Description: new("new")}); err != nil {
		t.Fatalf("the PATCH whose first sending applied: %v", err)
	}
	if !db.sent.Load() || raceErr != nil {
		t.Fatalf("sent twice %v, the other client's PATCH: %v", db.sent.Load(), raceErr)
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "p1")); got.Description != "" || got.Version != 3 {
		t.Fatalf("description %q at version %d, want %q at 3: the PATCH applied once, before the other client's", got.Description, got.Version, "")
	}
	if itemExists(t, e, old) {
		t.Fatalf("the body %s the PATCH replaced is left behind; no task names it", old)
	}
}

// The same, behind two other PATCHes of the description: the body the
// task names now replaced the first of them, not this PATCH's.
func TestAPatchSentTwiceAfterTwoDescriptionPatchesAppliesOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "p1", Title: "t", Description: "old"}))
	old := bodyOf(t, e, "p1")
	var raceErr error
	db := &updateTwiceDB{DB: e.db, name: "body", race: func() {
		for _, d := range []string{"other", "third"} {
			if _, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p1", AgentID: "b", Description: &d}); err != nil {
				raceErr = err
			}
		}
	}}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	if _, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p1", AgentID: "a", Description: new("new")}); err != nil {
		t.Fatalf("the PATCH whose first sending applied: %v", err)
	}
	if !db.sent.Load() || raceErr != nil {
		t.Fatalf("sent twice %v, the other client's PATCHes: %v", db.sent.Load(), raceErr)
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "p1")); got.Description != "third" || got.Version != 4 {
		t.Fatalf("description %q at version %d, want %q at 4: the PATCH applied once, before the other client's", got.Description, got.Version, "third")
	}
	if itemExists(t, e, old) {
		t.Fatalf("the body %s the PATCH replaced is left behind; no task names it", old)
	}
}

// A PATCH that writes no new body (one that clears the description, or
// changes the title only), sent twice behind another client's PATCH of the
// description, took the refused second sending for not applied and ran
// again over the other client's write. The body the task names now says
// which PATCH's write it replaced.
func TestAPatchWithoutANewBodySentTwiceAfterADescriptionPatchAppliesOnce(t *testing.T) {
	t.Parallel()
	for name, p := range map[string]lease.UpdateTaskParams{
		"clear": {Description: new("")},
		"title": {Title: new("new title")},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			must[lease.Task](t)(e.store.CreateTask(c, lease.CreateTaskParams{TaskID: "p1", Title: "t", Description: "old"}))
			var raceErr error
			db := &updateTwiceDB{DB: e.db, name: "patch", race: func() {
				_, raceErr = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "p1", AgentID: "b", Description: new("other"), Title: new("other title")})
			}}
			s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
			p.TaskID, p.AgentID = "p1", "a"
			if _, err := s.UpdateTask(c, p); err != nil {
				t.Fatalf("the PATCH whose first sending applied: %v", err)
			}
			if !db.sent.Load() || raceErr != nil {
				t.Fatalf("sent twice %v, the other client's PATCH: %v", db.sent.Load(), raceErr)
			}
			got := must[lease.Task](t)(e.store.GetTask(c, "p1"))
			if got.Description != "other" || got.Title != "other title" || got.Version != 3 {
				t.Fatalf("description %q, title %q at version %d, want %q, %q at 3: the PATCH applied once, before the other client's",
					got.Description, got.Title, got.Version, "other", "other title")
			}
		})
	}
}
