package localserver

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testclock"
)

// The feed reads up to the barrier's time, exclusive of its millisecond
// (a write that starts after it may still be stamped there), so the
// barrier's time is in a later millisecond than the call: a transition
// answered in the millisecond the feed was asked in is shown, and a write
// that starts in that millisecond after the call is waited for. Before,
// the barrier's time was the clock at the call, and a release answered
// in the same millisecond as the feed's request was missing from it
// (TestFeedShowsAnsweredTransitionsAtOnce failed about one run in six).
func TestBarrierCoversTheMillisecondItIsCalledIn(t *testing.T) {
	clock := testclock.New(time.UnixMilli(1_000).Add(500 * time.Microsecond))
	// asked is closed once the barrier has read the clock: it has been
	// called. The clock is read before asked is closed: closed first, the
	// test's Advance could land before the barrier's read, whose
	// millisecond, then the test clock's for good, the barrier would wait
	// to leave until its context ended.
	var watching atomic.Bool
	var once sync.Once
	asked := make(chan struct{})
	w := newWriters(func() time.Time {
		now := clock.Now()
		if watching.Load() {
			once.Do(func() { close(asked) })
		}
		return now
	})
	w.enter()() // a transition answered in millisecond 1000
	watching.Store(true)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var writeDone atomic.Bool
	type result struct {
		t        time.Time
		ok       bool
		waitedOn bool
	}
	got := make(chan result, 1)
	go func() {
		at, ok := w.barrier(ctx)
		got <- result{at, ok, writeDone.Load()}
	}()
	// A write that starts in millisecond 1000, after the feed was asked
	// for: it may be stamped in 1000.
	<-asked
	done := w.enter()
	clock.Advance(time.Millisecond)
	writeDone.Store(true)
	done()

	r := <-got
	if !r.ok {
		t.Fatal("the barrier gave up")
	}
	if ms := r.t.UnixMilli(); ms <= 1_000 {
		t.Fatalf("the barrier's time is in millisecond %d: a reader up to it misses the transitions of millisecond 1000", ms)
	}
	if !r.waitedOn {
		t.Fatal("the barrier returned before a write stamped in millisecond 1000 was done")
	}
}
