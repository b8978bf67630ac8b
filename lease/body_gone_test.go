package lease_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// deleteBody deletes item key of the tasks table directly, as an
// operator's mistake would.
func deleteBody(t *testing.T, e *env, key string) {
	t.Helper()
	must[*dynamodb.DeleteItemOutput](t)(e.db.DeleteItem(ctx(t), &dynamodb.DeleteItemInput{TableName: aws.String(e.names.Table(schema.TasksTable)),
		Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: key}}}))
}

// namesBody reads task id's item: the body it names ("" for none).
func namesBody(t *testing.T, e *env, id string) string {
	t.Helper()
	out := must[*dynamodb.GetItemOutput](t)(e.db.GetItem(ctx(t), &dynamodb.GetItemInput{TableName: aws.String(e.names.Table(schema.TasksTable)),
		Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: id}}, ConsistentRead: aws.Bool(true)}))
	if token, ok := out.Item["body"].(*types.AttributeValueMemberS); ok {
		return id + "#body#" + token.Value
	}
	return ""
}

// A task whose body is gone for good (deleted by hand, say: no write of
// the service deletes one its task names) is read with an empty
// description and metadata, and an error logged naming the task and the
// body; a listing shows it so beside the others, whole. Before, GET and
// every listing page it fell on failed, "replaced again and again", and
// so did any PATCH of it.
func TestAGoneBodyReadsEmpty(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	var logs bytes.Buffer
	s := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	e.create(t, lease.CreateTaskParams{TaskID: "lost", Title: "lost", Queue: "gone", Description: "what to do", Metadata: json.RawMessage(`{"k":1}`)})
	e.create(t, lease.CreateTaskParams{TaskID: "whole", Title: "whole", Queue: "gone", Description: "kept", Metadata: json.RawMessage(`{"k":2}`)})
	e.caughtUp(t) // the listing finds them through an index
	key := bodyOf(t, e, "lost")
	deleteBody(t, e, key)

	got, err := s.GetTask(c, "lost")
	if err != nil || got.Title != "lost" || got.Description != "" || len(got.Metadata) != 0 {
		t.Fatalf("GET of the task whose body is gone: %+v, %v; want it, with no description or metadata", got, err)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "lost") || !strings.Contains(l, key) {
		t.Errorf("the log after the GET: %q; want an error naming the task and %s", l, key)
	}
	page, err := s.ListTasks(c, lease.ListTasksParams{Queue: "gone"})
	if err != nil || len(page.Tasks) != 2 {
		t.Fatalf("listing: %+v, %v; want both tasks", page, err)
	}
	for _, task := range page.Tasks {
		want := map[string]string{"lost": "", "whole": "kept"}[task.TaskID]
		if task.Description != want || (want == "") != (len(task.Metadata) == 0) {
			t.Errorf("listed %s: description %q, metadata %s; want description %q", task.TaskID, task.Description, task.Metadata, want)
		}
	}
	if namesBody(t, e, "lost") != key {
		t.Fatalf("after the reads the task names %q, want still %s", namesBody(t, e, "lost"), key)
	}
}

// A PATCH of a task whose body is gone for good: one that sets neither
// the description nor the metadata changes what it sets and leaves the
// task naming the body it names; one that sets either writes a new body
// (none when both are empty), which the task names from then on.
// Before, every PATCH of it failed.
func TestAGoneBodyIsReplacedByAPatch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	for _, id := range []string{"a", "b"} {
		e.create(t, lease.CreateTaskParams{TaskID: id, Title: id, Description: "what to do", Metadata: json.RawMessage(`{"k":1}`)})
	}
	lostA, lostB := bodyOf(t, e, "a"), bodyOf(t, e, "b")
	deleteBody(t, e, lostA)
	deleteBody(t, e, lostB)

	title := "renamed"
	got, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", Title: &title})
	if err != nil || got.Title != title || got.Description != "" || len(got.Metadata) != 0 {
		t.Fatalf("PATCH of the title: %+v, %v; want the title changed, no description or metadata", got, err)
	}
	if namesBody(t, e, "a") != lostA {
		t.Fatalf("after a PATCH of the title the task names %q, want still %s", namesBody(t, e, "a"), lostA)
	}

	desc := "anew"
	e.clock.Advance(time.Second)
	got, err = e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "a", Description: &desc})
	if err != nil || got.Description != desc || len(got.Metadata) != 0 {
		t.Fatalf("PATCH of the description: %+v, %v; want %q, no metadata", got, err, desc)
	}
	if now := namesBody(t, e, "a"); now == "" || now == lostA {
		t.Fatalf("after a PATCH of the description the task names %q, want a new body", now)
	}
	if got := e.get(t, "a"); got.Description != desc || got.Title != title {
		t.Fatalf("GET after the PATCHes: %+v; want title %q, description %q", got, title, desc)
	}

	empty := ""
	if got, err := e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "b", Description: &empty}); err != nil || got.Description != "" || len(got.Metadata) != 0 {
		t.Fatalf("PATCH of an empty description: %+v, %v; want no description or metadata", got, err)
	}
	if now := namesBody(t, e, "b"); now != "" {
		t.Fatalf("after a PATCH of an empty description the task names %q, want none", now)
	}
	if got := e.get(t, "b"); got.Description != "" || len(got.Metadata) != 0 {
		t.Fatalf("GET after the PATCH: %+v; want no description or metadata", got)
	}
}
