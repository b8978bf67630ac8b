package lease_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// trailKey is what identifies an event in a trail for comparing prefixes.
type trailKey struct {
	Seq   int64
	Type  lease.EventType
	Fence int64
}

func trailKeys(evs []lease.Event) []trailKey {
	out := make([]trailKey, len(evs))
	for i, e := range evs {
		out[i] = trailKey{e.Seq, e.Type, e.Fence}
	}
	return out
}

// isPrefix reports whether got is a prefix of whole.
func isPrefix(got, whole []trailKey) bool {
	return len(got) <= len(whole) && slices.Equal(got, whole[:len(got)])
}

// Seven quick transitions, read before the change stream has archived
// them: the reader sees a prefix of the final trail (here none of it, since
// nothing is archived), never the latest event with the six before it
// missing, and is told how many are pending.
func TestTrailShowsNoHoleBeforeTheArchiveCatchesUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	var seen [][]trailKey
	look := func() {
		t.Helper()
		tr, err := e.store.Trail(c, "t")
		if err != nil {
			t.Fatal(err)
		}
		seen = append(seen, trailKeys(tr.Events))
		if ev := must[[]lease.Event](t)(e.store.Events(c, "t")); !slices.Equal(trailKeys(ev), trailKeys(tr.Events)) {
			t.Fatalf("Events %v and Trail %v differ", kinds(ev), kinds(tr.Events))
		}
	}
	step := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		e.clock.Advance(time.Millisecond)
		look()
	}
	_, err := e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r1"})
	step("checkout", err)
	_, err = e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a"})
	step("renew", err)
	_, err = e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"})
	step("release", err)
	_, err = e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r2"})
	step("checkout", err)
	_, err = e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true})
	step("force release", err)
	_, err = e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r3"})
	step("checkout", err)
	_, err = e.store.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "a"})
	step("complete", err)

	tr := must[lease.Trail](t)(e.store.Trail(c, "t"))
	if len(tr.Events) != 0 || tr.Pending != 1 {
		t.Fatalf("before the stream ran: %v with %d pending, want nothing shown and the item's 1 event pending", kinds(tr.Events), tr.Pending)
	}
	final := trailKeys(e.events(t, "t"))
	want := []lease.EventType{"checkout", "renew", "release", "checkout", "force_release", "checkout", "complete"}
	if got := kinds(e.events(t, "t")); !slices.Equal(got, want) {
		t.Fatalf("final trail %v, want %v", got, want)
	}
	if tr := must[lease.Trail](t)(e.store.Trail(c, "t")); tr.Pending != 0 {
		t.Fatalf("%d pending after the stream ran", tr.Pending)
	}
	for i, got := range seen {
		if !isPrefix(got, final) {
			t.Fatalf("read %d saw %v, not a prefix of the final trail %v", i, got, final)
		}
	}
}

// The archive itself can have a hole for a moment (a batch write whose
// items land out of order, or partly): the trail stops before it, and the
// events after it are pending until it is filled.
func TestTrailStopsAtAHoleInTheArchive(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	e.checkout(t, "t", "a", time.Minute)
	e.clock.Advance(time.Second)
	must[lease.Checkout](t)(e.store.Renew(c, lease.RenewParams{TaskID: "t", AgentID: "a"}))
	e.clock.Advance(time.Second)
	must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "a"}))
	final := e.events(t, "t")
	if len(final) != 3 {
		t.Fatalf("trail %v", kinds(final))
	}
	// Take the renewal out of the archive, as if its write had not landed.
	table := e.names.Table(schema.EventsTable)
	renew := final[1]
	key := map[string]types.AttributeValue{
		"task_id": &types.AttributeValueMemberS{Value: "t"},
		"seq":     &types.AttributeValueMemberN{Value: strconv.FormatInt(renew.Seq, 10)},
	}
	if _, err := e.db.DeleteItem(c, &dynamodb.DeleteItemInput{TableName: &table, Key: key}); err != nil {
		t.Fatal(err)
	}
	tr := must[lease.Trail](t)(e.store.Trail(c, "t"))
	if got := trailKeys(tr.Events); !slices.Equal(got, trailKeys(final[:1])) || tr.Pending != 1 {
		t.Fatalf("with the renewal missing: %v and %d pending, want the checkout alone and 1 pending", kinds(tr.Events), tr.Pending)
	}
	// Once the hole is older than the events' retention, TTL may have made
	// it: the trail no longer waits for it.
	e.clock.Advance(31 * 24 * time.Hour)
	tr = must[lease.Trail](t)(e.store.Trail(c, "t"))
	if got := kinds(tr.Events); !slices.Equal(got, []lease.EventType{"checkout", "release"}) || tr.Pending != 0 {
		t.Fatalf("past retention: %v and %d pending", got, tr.Pending)
	}
}

// trailWatch reads tasks' trails over and over from its own goroutine while
// a history runs, as an auditor would, so that check can show that every
// trail a reader saw is a prefix of the final one.
type trailWatch struct {
	stop, done chan struct{}
	stopOnce   sync.Once
	mu         sync.Mutex
	seen       map[string][][]trailKey
	err        error
}

func watchTrails(c context.Context, s *lease.Store, tasks []string) *trailWatch {
	w := &trailWatch{stop: make(chan struct{}), done: make(chan struct{}), seen: map[string][][]trailKey{}}
	go func() {
		defer close(w.done)
		for {
			for _, id := range tasks {
				select {
				case <-w.stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				tr, err := s.Trail(c, id)
				w.mu.Lock()
				if err != nil && w.err == nil {
					w.err = fmt.Errorf("trail of %s: %w", id, err)
				}
				if err == nil {
					w.seen[id] = append(w.seen[id], trailKeys(tr.Events))
				}
				w.mu.Unlock()
			}
		}
	}()
	return w
}

// halt stops the reader (once the history is written: a long check of
// it must not outlast the reader's context) and waits for it.
func (w *trailWatch) halt() {
	w.stopOnce.Do(func() { close(w.stop) })
	<-w.done
}

// check stops the reader and fails the test unless every trail it read is
// a prefix of the task's final trail (the stream drained).
func (w *trailWatch) check(t *testing.T, e *env) {
	t.Helper()
	w.halt()
	if w.err != nil {
		t.Fatal(w.err)
	}
	reads := 0
	for id, seen := range w.seen {
		final := trailKeys(e.events(t, id))
		for i, got := range seen {
			if !isPrefix(got, final) {
				t.Fatalf("%s: read %d of the trail saw %v, not a prefix of the final trail %v", id, i, got, final)
			}
		}
		reads += len(seen)
	}
	t.Logf("%d trail reads, each a prefix of its final trail", reads)
}
