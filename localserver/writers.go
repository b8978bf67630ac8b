package localserver

import (
	"context"
	"sync"
	"time"
)

// writers keeps the server's writes of task items in flight (every
// request that may move a task, the sweep, the change stream's polls,
// which unblock dependents), so that a read of the fleet feed can know up
// to when every transition has been written: barrier returns a time T
// such that every write that started after it reads its clock after T,
// and waits for every write that started before it. A transition's time
// is its writer's clock, read after it started; so once barrier returns
// and the change stream is applied, every event before T is archived.
//
// Transitions are stamped in whole milliseconds, and a write that starts
// after T may still be stamped in T's millisecond, so a reader up to T
// reads only the milliseconds before T's. T is therefore taken once the
// clock has left the millisecond barrier was called in: a transition
// answered before the call, stamped in that millisecond or earlier, is
// before T's.
type writers struct {
	clock  func() time.Time
	mu     sync.Mutex
	next   uint64
	active map[uint64]chan struct{}
}

func newWriters(clock func() time.Time) *writers {
	return &writers{clock: clock, active: map[uint64]chan struct{}{}}
}

// enter marks a write as started; the function it returns marks it done.
// It must be called before the write reads its clock.
func (w *writers) enter() func() {
	w.mu.Lock()
	id, done := w.next, make(chan struct{})
	w.next++
	w.active[id] = done
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		delete(w.active, id)
		w.mu.Unlock()
		close(done)
	}
}

// barrier returns T (see writers) once the clock has left the millisecond
// it was called in (at most a millisecond) and every write in flight then
// is done, or false if ctx ends first.
func (w *writers) barrier(ctx context.Context) (time.Time, bool) {
	called := w.clock().UnixMilli()
	for now := w.clock(); now.UnixMilli() <= called; now = w.clock() {
		select {
		case <-time.After(time.UnixMilli(called + 1).Sub(now)):
		case <-ctx.Done():
			return time.Time{}, false
		}
	}
	w.mu.Lock()
	waits := make([]chan struct{}, 0, len(w.active))
	for _, done := range w.active {
		waits = append(waits, done)
	}
	// Read under the lock: a write that enters after it reads its clock
	// later than this.
	t := w.clock()
	w.mu.Unlock()
	for _, done := range waits {
		select {
		case <-done:
		case <-ctx.Done():
			return time.Time{}, false
		}
	}
	return t, true
}
