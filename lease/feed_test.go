package lease_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

// follow reads the whole feed from since, page by page, following the
// cursor, and returns it with the last cursor.
func follow(t *testing.T, s *lease.Store, p lease.FeedParams) ([]lease.Event, string) {
	t.Helper()
	var all []lease.Event
	for range 1000 {
		page, err := s.Feed(ctx(t), p)
		if err != nil {
			t.Fatalf("feed: %v", err)
		}
		if page.NextCursor == "" {
			t.Fatal("a feed page without a cursor")
		}
		all = append(all, page.Events...)
		if len(page.Events) == 0 {
			return all, page.NextCursor
		}
		p = lease.FeedParams{Cursor: page.NextCursor, Limit: p.Limit, Types: p.Types}
	}
	t.Fatal("the feed did not end")
	return nil, ""
}

func eventKey(e lease.Event) string { return fmt.Sprintf("%s#%d#%s", e.TaskID, e.Seq, e.Type) }

// The fleet feed holds every transition of every task exactly once, in
// order per task, across hour buckets and shards, even when the change
// stream is replayed whole; a follower with a cursor sees each once.
func TestFeedHoldsEveryTransitionOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	start := e.clock.Now()
	tasks := []string{"f-a", "f-b", "f-c", "f-d", "f-e", "f-f"}
	for _, id := range tasks {
		e.task(t, id)
	}
	// Transitions over three hours: checkouts, renewals, releases,
	// completions, timeouts swept and taken over.
	for round := range 3 {
		for i, id := range tasks {
			switch (i + round) % 4 {
			case 0:
				e.checkout(t, id, "a", time.Minute)
				e.clock.Advance(time.Second)
				must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: id, AgentID: "a"}))
				must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: id, AgentID: "a"}))
			case 1:
				e.checkout(t, id, "b", time.Second)
			case 2:
				e.checkout(t, id, "c", time.Hour)
				must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: id, AgentID: "c"}))
			case 3:
				if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: id, AgentID: "d", Timeout: time.Second}); err != nil && !errors.Is(err, lease.ErrCheckedOut) {
					t.Fatal(err)
				}
			}
		}
		e.clock.Advance(2 * time.Second)
		must[lease.SweepResult](t)(e.store.Sweep(c))
		e.clock.Advance(time.Hour)
	}
	e.drain(t)

	// A replay of the whole stream (a poller from the oldest record)
	// rewrites the same feed entries.
	arn, err := localstack.StreamARN(c, e.db, e.names.Table(schema.TasksTable))
	if err != nil {
		t.Fatal(err)
	}
	replay := &stream.Poller{Streams: stream.NewLocalClient(testenv.Endpoint()), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
		Handle: stream.Handler(lease.New(lease.Config{DB: e.db, Tables: e.names, Now: e.clock.Now, Notifier: e.notes}))}
	if _, err := replay.Poll(c); err != nil {
		t.Fatal(err)
	}

	var want []string
	perTask := map[string][]int64{}
	for _, id := range tasks {
		for _, ev := range e.events(t, id) {
			want = append(want, eventKey(ev))
			perTask[id] = append(perTask[id], ev.Seq)
		}
	}
	e.clock.Advance(lease.DefaultFeedSettle + time.Millisecond)

	for _, limit := range []int{1, 7, 1000} {
		var got []lease.Event
		eventually(t, "the feed's index", func() bool {
			got, _ = follow(t, e.store, lease.FeedParams{Since: start, Limit: limit})
			return len(got) >= len(want)
		})
		var keys []string
		seqs := map[string][]int64{}
		for i, ev := range got {
			keys = append(keys, eventKey(ev))
			seqs[ev.TaskID] = append(seqs[ev.TaskID], ev.Seq)
			if i > 0 && ev.At.Before(got[i-1].At) {
				t.Fatalf("limit %d: event %d at %v before its predecessor at %v", limit, i, ev.At, got[i-1].At)
			}
		}
		slices.Sort(keys)
		sortedWant := slices.Sorted(slices.Values(want))
		if !slices.Equal(keys, sortedWant) {
			t.Fatalf("limit %d: the feed holds\n%v\nthe tasks' trails\n%v", limit, keys, sortedWant)
		}
		for id, s := range perTask {
			if !slices.Equal(seqs[id], s) {
				t.Fatalf("limit %d: task %s in the feed %v, its trail %v", limit, id, seqs[id], s)
			}
		}
	}

	// The type filter.
	ends, _ := follow(t, e.store, lease.FeedParams{Since: start, Limit: 3, Types: []lease.EventType{lease.EventTimeout, lease.EventRelease}})
	n := 0
	for _, k := range want {
		if strings.HasSuffix(k, "#timeout") || strings.HasSuffix(k, "#release") {
			n++
		}
	}
	if len(ends) != n || len(ends) == 0 {
		t.Fatalf("type filter: %d events, want %d", len(ends), n)
	}
	for _, ev := range ends {
		if ev.Type != lease.EventTimeout && ev.Type != lease.EventRelease {
			t.Fatalf("type filter let %s through", ev.Type)
		}
	}
}

// A follower's cursor never passes an event still on its way: the feed is
// read up to now minus the settle time, and what happens later is on the
// next page.
func TestFeedCursorFollows(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	start := e.clock.Now()
	e.task(t, "g")
	e.checkout(t, "g", "a", time.Minute)
	e.drain(t)
	page := must[lease.FeedPage](t)(e.store.Feed(c, lease.FeedParams{Since: start}))
	if len(page.Events) != 0 {
		t.Fatalf("an event younger than the settle time is in the feed: %v", page.Events)
	}
	e.clock.Advance(lease.DefaultFeedSettle + time.Millisecond)
	var got []lease.Event
	eventually(t, "the feed's index", func() bool {
		got, _ = follow(t, e.store, lease.FeedParams{Cursor: page.NextCursor})
		return len(got) == 1
	})
	if got[0].Type != lease.EventCheckout || got[0].TaskID != "g" {
		t.Fatalf("feed %v", got)
	}
	_, cur := follow(t, e.store, lease.FeedParams{Cursor: page.NextCursor})
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "g", AgentID: "a"}))
	e.drain(t)
	e.clock.Advance(lease.DefaultFeedSettle + time.Millisecond)
	eventually(t, "the release in the feed", func() bool {
		got, _ = follow(t, e.store, lease.FeedParams{Cursor: cur})
		return len(got) > 0
	})
	if len(got) != 1 || got[0].Type != lease.EventRelease {
		t.Fatalf("after the cursor: %v", got)
	}

	for _, p := range []lease.FeedParams{
		{Cursor: "nonsense"}, {Cursor: "f1.bm9wZQ"}, {Limit: 1001}, {Limit: -1},
		{Types: []lease.EventType{"explode"}},
		// Positions hold 13 digits of milliseconds: a since past 2286
		// read from the retention's start.
		{Since: time.Date(2290, 1, 1, 0, 0, 0, 0, time.UTC)}, {Since: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)},
	} {
		if _, err := e.store.Feed(c, p); !errors.Is(err, lease.ErrInvalid) {
			t.Fatalf("feed %+v: %v, want invalid", p, err)
		}
	}
}

// A follower sees the death of an agent that came back before the death
// was recorded. That agent_death is stamped at the return at the latest
// (its time must not fall in the agent's new life), and the feed used to
// list it there, which the follower's cursor had passed by the time the
// sweep (or a takeover) recorded it: a read by since found it, a cursor
// never did. The feed lists an event when it was recorded.
func TestFeedFollowerSeesADeathRecordedAfterTheReturn(t *testing.T) {
	t.Parallel()
	for _, how := range []string{"sweep", "takeover", "takeover at the last attempt", "cancel"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			p := lease.CreateTaskParams{TaskID: "r"}
			if how == "takeover at the last attempt" {
				p.MaxAttempts = ptr(1)
			}
			e.create(t, p)
			must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Second))
			e.checkout(t, "r", "a", time.Hour)
			e.drain(t)
			e.clock.Advance(lease.DefaultFeedSettle + time.Millisecond)
			var cur string
			eventually(t, "the checkout in the feed", func() bool {
				var got []lease.Event
				got, cur = follow(t, e.store, lease.FeedParams{Since: e.clock.Now().Add(-time.Hour)})
				return len(got) == 1
			})
			// a dies, comes back, and its death is recorded a while after.
			e.clock.Advance(2 * time.Second)
			back := must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Minute))
			returned := back.ExpiresAt.Add(-time.Minute)
			e.clock.Advance(lease.DefaultFeedSettle + time.Millisecond)
			_, cur = follow(t, e.store, lease.FeedParams{Cursor: cur}) // the follower reads on meanwhile
			e.clock.Advance(10 * time.Second)
			want := []lease.EventType{lease.EventAgentDeath}
			switch how {
			case "sweep":
				if res := must[lease.SweepResult](t)(e.store.Sweep(c)); res.AgentDeaths != 1 {
					t.Fatalf("the sweep ended %d leases by death, want 1", res.AgentDeaths)
				}
			case "takeover":
				e.checkout(t, "r", "b", time.Hour)
				want = append(want, lease.EventCheckout)
			case "takeover at the last attempt":
				if _, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "r", AgentID: "b"}); err == nil {
					t.Fatal("a checkout of a task whose last attempt died was granted")
				}
				want = append(want, lease.EventFailed)
			case "cancel":
				cancelled := lease.StatusCancelled
				must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "r", AgentID: "b", Status: &cancelled}))
				want = append(want, lease.EventCancel) // the task's, after the death that ended the lease
			}
			death := deathOf(t, e, "r", 1)
			if death.At.After(returned) {
				t.Fatalf("agent_death stamped at %v, inside a's life from its return at %v", death.At, returned)
			}
			e.clock.Advance(lease.DefaultFeedSettle + time.Millisecond)
			var got []lease.Event
			eventually(t, "the death in the follower's feed", func() bool {
				got, _ = follow(t, e.store, lease.FeedParams{Cursor: cur})
				return len(got) >= len(want)
			})
			if !slices.Equal(kinds(got), want) {
				t.Fatalf("after the cursor: %v, want %v", kinds(got), want)
			}
		})
	}
}
