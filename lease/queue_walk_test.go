package lease_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// A walk of the queue listing, with pages cut by the limit and by
// the reads bound, over names with every character an id may hold and of
// the longest length, lists every queue once, in name order, with queues
// created between pages after the cursor listed too.
func TestAQueueWalkListsEveryNameOnceInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	names := []string{
		"rv", "rv-", "rv.", "rv:", "rv_", "rv-a", "rv.a", "rv:a", "rv_a", "rv0", "rvA", "rva",
		"rv" + strings.Repeat(":", 126), "rv" + strings.Repeat("z", 126), "rv" + strings.Repeat("z", 125) + "-",
		"Rv", "0rv",
	}
	for i, q := range names {
		id := "rvt-" + string(rune('a'+i))
		e.queued(t, id, q, i%10)
		if i%3 == 0 {
			e.checkout(t, id, "agent-1", time.Hour) // no todo task: no reads
		}
	}
	e.drain(t)
	shards := schema.DefaultShards().Claim
	for _, limit := range []int{1, 2, 3, 1000} {
		for _, reads := range []int{shards, 2 * shards, lease.MaxQueueListingReads} {
			lease.LimitQueueListingReads(e.store, reads)
			var got []string
			for p := (lease.ListQueuesParams{Limit: limit}); ; {
				page := must[lease.QueuePage](t)(e.store.ListQueuePage(ctx(t), p))
				if len(page.Queues) == 0 {
					t.Fatalf("limit %d reads %d: an empty page", limit, reads)
				}
				for _, q := range page.Queues {
					got = append(got, q.Queue)
				}
				if page.NextCursor == "" {
					break
				}
				p.Cursor = page.NextCursor
			}
			want := slices.Sorted(slices.Values(names))
			if !slices.Equal(got, want) {
				t.Errorf("limit %d reads %d: walk %q, want %q", limit, reads, got, want)
			}
		}
	}

	// Queues created between pages: one after the cursor is listed, one
	// before is not, none twice.
	lease.LimitQueueListingReads(e.store, lease.MaxQueueListingReads)
	first := must[lease.QueuePage](t)(e.store.ListQueuePage(ctx(t), lease.ListQueuesParams{Limit: 2}))
	e.queued(t, "rvt-late-1", "zz-late", 5)
	e.queued(t, "rvt-late-2", "00-early", 5)
	e.drain(t)
	seen := map[string]int{}
	for _, q := range first.Queues {
		seen[q.Queue]++
	}
	for p := (lease.ListQueuesParams{Limit: 2, Cursor: first.NextCursor}); ; {
		page := must[lease.QueuePage](t)(e.store.ListQueuePage(ctx(t), p))
		for _, q := range page.Queues {
			seen[q.Queue]++
		}
		if page.NextCursor == "" {
			break
		}
		p.Cursor = page.NextCursor
	}
	for q, n := range seen {
		if n != 1 {
			t.Errorf("%s listed %d times", q, n)
		}
	}
	if seen["zz-late"] != 1 || len(seen) != len(names)+1 {
		t.Errorf("walk with queues created between pages: %v", seen)
	}
}

// Counts and oldest_todo_at of a queue holding a delayed task, a
// blocked task, a failed task and a lease expired but not yet swept
// beside one ready todo task: oldest_todo_at is the ready task's.
func TestQueueCountsBesideDelayedBlockedFailedAndExpiredTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	nb := epoch.Add(time.Hour)
	one := 1
	e.create(t, lease.CreateTaskParams{TaskID: "ot-delayed", Title: "t", Queue: "ot", NotBefore: &nb})
	e.create(t, lease.CreateTaskParams{TaskID: "ot-blocker", Title: "t", Queue: "ot-other"})
	e.create(t, lease.CreateTaskParams{TaskID: "ot-blocked", Title: "t", Queue: "ot", BlockedBy: []string{"ot-blocker"}})
	e.create(t, lease.CreateTaskParams{TaskID: "ot-failed", Title: "t", Queue: "ot", MaxAttempts: &one})
	co := e.checkout(t, "ot-failed", "agent-1", time.Hour)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "ot-failed", AgentID: "agent-1", RunID: co.RunID, Outcome: lease.OutcomeFailed}))
	e.create(t, lease.CreateTaskParams{TaskID: "ot-expired", Title: "t", Queue: "ot"})
	e.checkout(t, "ot-expired", "agent-1", time.Second)
	e.clock.Advance(2 * time.Second)
	e.create(t, lease.CreateTaskParams{TaskID: "ot-ready", Title: "t", Queue: "ot"})
	e.caughtUp(t)
	got := e.queueCounts(t)["ot"]
	want := map[lease.Status]int64{lease.StatusTodo: 2, lease.StatusBlocked: 1, lease.StatusFailed: 1, lease.StatusInProgress: 1}
	for _, st := range lease.Statuses {
		if got.Counts[st] != want[st] {
			t.Errorf("ot %s = %d, want %d (all %v)", st, got.Counts[st], want[st], got.Counts)
		}
	}
	if w := epoch.Add(2 * time.Second); !got.OldestTodoAt.Equal(w) {
		t.Errorf("ot oldest_todo_at %v, want ot-ready's creation %v", got.OldestTodoAt, w)
	}
}
