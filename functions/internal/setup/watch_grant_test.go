package setup

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

// watchWriteDB runs before once just before the first UpdateItem that
// match selects (nil: the write of a watch item), and after once just
// after it lands.
type watchWriteDB struct {
	lease.DB
	match         func(*dynamodb.UpdateItemInput) bool
	before, after func()
	done          atomic.Bool
}

func (d *watchWriteDB) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	match := d.match
	if match == nil {
		match = watchWrite
	}
	first := match(in) && d.done.CompareAndSwap(false, true)
	if first && d.before != nil {
		d.before()
	}
	out, err := d.DB.UpdateItem(ctx, in, opts...)
	if first && d.after != nil {
		d.after()
	}
	return out, err
}

// watchWrite selects the write of a watch item.
func watchWrite(in *dynamodb.UpdateItemInput) bool {
	k, ok := in.Key["agent_id"].(*types.AttributeValueMemberS)
	return ok && strings.HasPrefix(k.Value, "#watch#")
}

// flagWrite selects the write of a task's watched flag, a task's first
// watch's first write.
func flagWrite(in *dynamodb.UpdateItemInput) bool {
	return slices.Contains(slices.Collect(maps.Values(in.ExpressionAttributeNames)), "watched")
}

// olderRecordsDB writes freeing records ("#freed#<seq>") as the stream
// function did before they carried their freeing's message: its seq and
// ttl alone.
type olderRecordsDB struct{ lease.DB }

func (d olderRecordsDB) PutItem(ctx context.Context, in *dynamodb.PutItemInput, opts ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if k, ok := in.Item["message_id"].(*types.AttributeValueMemberS); ok && strings.HasPrefix(k.Value, "#freed#") {
		item := map[string]types.AttributeValue{}
		for _, a := range []string{"agent_id", "message_id", "seq", "ttl"} {
			item[a] = in.Item[a]
		}
		cp := *in
		cp.Item = item
		in = &cp
	}
	return d.DB.PutItem(ctx, in, opts...)
}

// drainer applies the tasks table's pending changes as the stream
// function does, with its store (its calls recorded too); wrap, when set,
// wraps its client.
func (g *grantCheck) drainer(wrap func(lease.DB) lease.DB) func() {
	g.t.Helper()
	ctx := context.Background()
	arn, err := localstack.StreamARN(ctx, lease.NewLocalClient(testenv.Endpoint()), schema.Names{Prefix: g.env.TablePrefix}.Table(schema.TasksTable))
	if err != nil {
		g.t.Fatal(err)
	}
	p := &stream.Poller{
		Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
		Handle: stream.ConsequencesHandler(g.store(deploy.Stream, wrap)),
	}
	return func() {
		g.t.Helper()
		if _, err := p.Poll(ctx); err != nil {
			g.t.Fatal(err)
		}
	}
}

// A checkout refused with watch:true whose task is freed, and the
// freeing's message told by the stream function and deleted by the
// watcher, between the watch's write and its settling: the checkouts
// function tells the watcher itself (its watch may have been placed after
// the stream read the watches), which puts the message (PutItem on
// inbox), reads its tombstone (BatchGetItem) and deletes it again
// (DeleteItem). The checkouts function had only Query and UpdateItem on
// inbox, and AWS would have refused the rest: a 500 for a request whose
// lease conflict was already decided.
func TestCheckoutsFunctionTellsAWatcherOfAFreeingItMissed(t *testing.T) {
	ctx := context.Background()
	g := newGrantCheck(t)
	app := NewStore(lease.NewLocalClient(testenv.Endpoint()), nil, g.env, nil)
	drain := g.drainer(nil)
	if _, err := app.CreateTask(ctx, lease.CreateTaskParams{TaskID: "t"}); err != nil {
		t.Fatal(err)
	}
	co, err := app.Checkout(ctx, lease.CheckoutParams{TaskID: "t", AgentID: "a", Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	db := &watchWriteDB{after: func() {
		if _, err := app.Release(ctx, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID}); err != nil {
			t.Fatal(err)
		}
		drain()
		msgs, err := app.Inbox(ctx, "w")
		if err != nil || len(msgs) != 1 {
			t.Fatalf("w's inbox after the release: %+v, %v; want the stream function's message", msgs, err)
		}
		if err := app.DeleteMessage(ctx, "w", msgs[0].MessageID); err != nil {
			t.Fatal(err)
		}
	}}
	checkouts := g.store(deploy.Checkouts, func(d lease.DB) lease.DB { db.DB = d; return db })

	_, err = checkouts.Checkout(ctx, lease.CheckoutParams{TaskID: "t", AgentID: "w", Watch: true, Timeout: time.Hour})
	var ce *lease.ConflictError
	if !errors.As(err, &ce) || ce.Watching == nil || !*ce.Watching {
		t.Fatalf("checkout: %v, want a conflict with watching true", err)
	}
	if !db.done.Load() {
		t.Fatal("the watch was never written")
	}
	if msgs, err := app.Inbox(ctx, "w"); err != nil || len(msgs) != 0 {
		t.Errorf("w's inbox: %+v, %v; want none (w deleted the message)", msgs, err)
	}
	for _, call := range []string{"PutItem inbox", "BatchGetItem inbox", "DeleteItem inbox"} {
		if !g.made(deploy.Checkouts, call) {
			t.Errorf("the checkouts function never called %q: the test missed the path", call)
		}
	}
	g.check()
}

// A watch whose task is freed, and then taken again, between the
// watcher's read and its watch's write: the freeing is no longer the
// task's latest transition, so the watcher reads it from the archive to
// tell itself of it. Both functions that watch, the checkouts function
// (a conflict with watch:true) and the tasks function (POST
// /api/tasks/{task_id}/watch), are granted each of the two reads:
//   - a task's first watch, freed and taken again before its watched flag,
//     whose flag's write shows only the later checkout, reads the task's
//     events since its place (Query on events);
//   - a watch written after the stream function recorded the freeing, in
//     a record from before records carried their freeing's message (kept
//     up to 30 days), reads the archived event (GetItem on events).
func TestWatchingFunctionsReadAMissedFreeingFromTheArchive(t *testing.T) {
	watches := []struct {
		fn    string
		watch func(ctx context.Context, s *lease.Store) error
	}{
		{deploy.Checkouts, func(ctx context.Context, s *lease.Store) error {
			_, err := s.Checkout(ctx, lease.CheckoutParams{TaskID: "t", AgentID: "w", Watch: true, Timeout: time.Hour})
			var ce *lease.ConflictError
			if !errors.As(err, &ce) || ce.Watching == nil || !*ce.Watching {
				return fmt.Errorf("checkout: %w, want a conflict with watching true", err)
			}
			return nil
		}},
		{deploy.Tasks, func(ctx context.Context, s *lease.Store) error { return s.Watch(ctx, "t", "w") }},
	}
	paths := []struct {
		name   string
		before func(*dynamodb.UpdateItemInput) bool // the watcher's write the freeing comes before
		stream func(lease.DB) lease.DB
		call   string
	}{
		{"hidden behind a checkout", flagWrite, nil, "Query events"},
		{"recorded without its message", watchWrite, func(d lease.DB) lease.DB { return olderRecordsDB{d} }, "GetItem events"},
	}
	for _, c := range watches {
		for _, p := range paths {
			t.Run(c.fn+"/"+p.name, func(t *testing.T) {
				ctx := context.Background()
				g := newGrantCheck(t)
				app := NewStore(lease.NewLocalClient(testenv.Endpoint()), nil, g.env, nil)
				drain := g.drainer(p.stream)
				if _, err := app.CreateTask(ctx, lease.CreateTaskParams{TaskID: "t"}); err != nil {
					t.Fatal(err)
				}
				co, err := app.Checkout(ctx, lease.CheckoutParams{TaskID: "t", AgentID: "a", Timeout: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				db := &watchWriteDB{match: p.before, before: func() {
					if _, err := app.Release(ctx, lease.ReleaseParams{TaskID: "t", AgentID: "a", RunID: co.RunID}); err != nil {
						t.Fatal(err)
					}
					if _, err := app.Checkout(ctx, lease.CheckoutParams{TaskID: "t", AgentID: "b", Timeout: time.Hour}); err != nil {
						t.Fatal(err)
					}
					drain()
				}}
				s := g.store(c.fn, func(d lease.DB) lease.DB { db.DB = d; return db })
				if err := c.watch(ctx, s); err != nil {
					t.Fatal(err)
				}
				if !db.done.Load() {
					t.Fatal("the watcher's write was never made")
				}
				msgs, err := app.Inbox(ctx, "w")
				if err != nil || len(msgs) != 1 || msgs[0].Type != lease.MessageTaskAvailable || msgs[0].Fence != co.Fence {
					t.Errorf("w's inbox: %+v, %v; want one task_available for the release of fence %d", msgs, err, co.Fence)
				}
				if !g.made(c.fn, p.call) {
					t.Errorf("the %s function never called %q: the test missed the path", c.fn, p.call)
				}
				g.check()
			})
		}
	}
}
