package lease_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A create whose put applied and whose answer was lost, sent again by the
// SDK after another client's PATCH of the new task (a title fix, say): the
// PATCH wrote its own patch id over the create's, so the create no longer
// knows its item (5a5e876 covers a checkout or a watch in between, not a
// PATCH) and answers task_exists to the client whose create made the task.
func TestACreateSentTwiceAfterAPatchIsCreated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	var raceErr error
	db := &putTwiceDB{DB: e.db, name: "created_key", race: func() {
		_, raceErr = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "n1", AgentID: "other", Title: new("fixed title")})
	}}
	s := lease.New(lease.Config{DB: db, Tables: e.names, Now: e.clock.Now})
	_, err := s.CreateTask(c, lease.CreateTaskParams{TaskID: "n1", Title: "t"})
	if !db.sent.Load() || raceErr != nil {
		t.Fatalf("sent twice %v, the PATCH: %v", db.sent.Load(), raceErr)
	}
	if err != nil {
		t.Fatalf("the create, whose first sending created the task: %v; want the task created (201)", err)
	}
}

// The PATCH sent twice takes a failed condition for its own write when
// "its new body" is on the task (5a5e876). A PATCH that clears the
// description has no new body: its token is "", which any task without a
// body shows. Sent twice (first sending lost, never applied) after another
// client's PATCH that also left no body, it takes that write for its own.
// With If-Match: both compare-and-sets on version 1 answer 200.
func TestAnIfMatchPatchClearingTheDescriptionSentTwiceIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "x", Description: "d"})
	tasks := e.names.Table(schema.TasksTable)
	var otherErr error
	doer := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"patch"`)
		},
		race: func() {
			_, otherErr = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "b", Description: new(""), Title: new("B"), IfVersion: 1})
		},
	}
	s := e.over(doer)
	got, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", Description: new(""), IfVersion: 1})
	if !doer.lost.Load() || otherErr != nil {
		t.Fatalf("lost %v, the other client's PATCH: %v", doer.lost.Load(), otherErr)
	}
	if !errors.Is(err, lease.ErrVersionMismatch) {
		t.Fatalf("If-Match: 1 after another client moved x to version 2: answered %v (version %d, title %q); want 412 version_mismatch", err, got.Version, got.Title)
	}
}

// The same without If-Match: the PATCH's title is never written, yet it is
// answered 200 (a lost update).
func TestAPatchClearingTheDescriptionSentTwiceIsWritten(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.create(t, lease.CreateTaskParams{TaskID: "x", Description: "d"})
	tasks := e.names.Table(schema.TasksTable)
	var otherErr error
	doer := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"patch"`)
		},
		race: func() {
			_, otherErr = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "b", Description: new("")})
		},
	}
	s := e.over(doer)
	got, err := s.UpdateTask(c, lease.UpdateTaskParams{TaskID: "x", AgentID: "a", Description: new(""), Title: new("A's title")})
	if !doer.lost.Load() || otherErr != nil {
		t.Fatalf("lost %v, the other client's PATCH: %v", doer.lost.Load(), otherErr)
	}
	if err != nil {
		t.Fatalf("PATCH: %v", err)
	}
	if now := e.get(t, "x"); now.Title != "A's title" {
		t.Fatalf("PATCH answered 200 (title %q) but x's title is %q: the PATCH was never written", got.Title, now.Title)
	}
}
