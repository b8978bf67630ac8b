package lease_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
)

// The change stream reads a freed task's watches only if the task has been
// watched (its watched flag, set by its first watch without moving its
// version); a task item from before the flag is read at every freeing, so
// its watchers are still told.
func TestFreeingReadsWatchesOnlyOfAWatchedTask(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	streamCount := testenv.NewCounter()
	e.poller.Handle = stream.Handler(lease.New(lease.Config{DB: streamCount.Client(testenv.Endpoint()), Tables: e.names, Now: e.clock.Now, Notifier: e.notes}))
	raw := func(id string) map[string]types.AttributeValue {
		t.Helper()
		out, err := e.db.GetItem(c, &dynamodb.GetItemInput{TableName: aws.String(e.names.Table(schema.TasksTable)),
			Key: map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: id}}, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		return out.Item
	}
	cycle := func(id string) {
		t.Helper()
		e.clock.Advance(time.Second)
		e.checkout(t, id, "holder", time.Minute)
		must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: id, AgentID: "holder"}))
		streamCount.Take()
		e.drain(t)
	}

	e.task(t, "plain", "watched", "old")
	cycle("plain")
	if q := streamCount.Take()["Query"]; q != 0 {
		t.Errorf("the freeing of a task nobody watched made %d Queries", q)
	}

	// The first watch sets the flag; the version stays.
	before := must[lease.Task](t)(e.store.GetTask(c, "watched"))
	e.checkout(t, "watched", "holder", time.Minute)
	if err := e.store.Watch(c, "watched", "w1"); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Watch(c, "watched", "w2"); err != nil {
		t.Fatal(err)
	}
	if v, ok := raw("watched")["watched"].(*types.AttributeValueMemberBOOL); !ok || !v.Value {
		t.Fatalf("after a watch, watched = %v, want true", raw("watched")["watched"])
	}
	if got := must[lease.Task](t)(e.store.GetTask(c, "watched")).Version; got != before.Version+1 {
		t.Errorf("version %d after a checkout and two watches, want %d (the checkout's alone)", got, before.Version+1)
	}
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "watched", AgentID: "holder"}))
	for _, w := range []string{"w1", "w2"} {
		if msgs := e.inbox(t, w); len(msgs) != 1 || msgs[0].TaskID != "watched" {
			t.Errorf("%s's inbox after the freeing: %+v, want one message", w, msgs)
		}
	}
	cycle("watched") // watched once: its freeings read its (now used up) watches
	if q := streamCount.Take()["Query"]; q == 0 {
		t.Errorf("the freeing of a watched task read no watches")
	}

	// A task item from before the flag: its freeing reads its watches.
	if _, err := e.db.UpdateItem(c, &dynamodb.UpdateItemInput{TableName: aws.String(e.names.Table(schema.TasksTable)),
		Key:              map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: "old"}},
		UpdateExpression: aws.String("REMOVE watched")}); err != nil {
		t.Fatal(err)
	}
	e.drain(t)
	e.checkout(t, "old", "holder", time.Minute)
	if err := e.store.Watch(c, "old", "w3"); err != nil {
		t.Fatal(err)
	}
	if _, ok := raw("old")["watched"]; ok {
		t.Errorf("a watch of a task from before the flag set it")
	}
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "old", AgentID: "holder"}))
	if msgs := e.inbox(t, "w3"); len(msgs) != 1 || msgs[0].TaskID != "old" {
		t.Errorf("w3's inbox after the freeing of a task from before the flag: %+v, want one message", msgs)
	}
}

// A task item from before watch items may carry its watchers in a list of
// its own (watchers). The ending that frees the task hands that list to
// the change stream, which tells them, and drops it: they watched for one
// freeing, and the next one (another agent's lease, never watched) tells
// them nothing.
func TestALegacyWatchListIsToldOfOneFreeingOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "old")
	e.checkout(t, "old", "holder", time.Minute)
	key := map[string]types.AttributeValue{"task_id": &types.AttributeValueMemberS{Value: "old"}}
	table := aws.String(e.names.Table(schema.TasksTable))
	at := strconv.FormatInt(e.clock.Now().UnixMilli(), 10)
	if _, err := e.db.UpdateItem(c, &dynamodb.UpdateItemInput{TableName: table, Key: key,
		UpdateExpression:          aws.String("SET watchers = :w"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":w": &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{"w": &types.AttributeValueMemberN{Value: at}}}},
	}); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "old", AgentID: "holder"}))
	if msgs := e.inbox(t, "w"); len(msgs) != 1 || msgs[0].TaskID != "old" {
		t.Fatalf("w's inbox after the freeing: %+v, want one message", msgs)
	}
	out, err := e.db.GetItem(c, &dynamodb.GetItemInput{TableName: table, Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := out.Item["watchers"]; ok {
		t.Errorf("the ending kept the watch list: %v", w)
	}

	e.clock.Advance(time.Second)
	e.checkout(t, "old", "b", time.Minute)
	e.clock.Advance(time.Second)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "old", AgentID: "b"}))
	if msgs := e.inbox(t, "w"); len(msgs) != 1 {
		t.Fatalf("w's inbox after a second freeing it did not watch for: %+v, want the first message only", msgs)
	}
}
