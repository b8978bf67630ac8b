package testenv

import (
	"bytes"
	"context"
	"errors"
	"sync"

	"github.com/checkout-dev/checkout/lease"
)

// ErrBusDown is what a Recorder answers for the notices it refuses.
var ErrBusDown = errors.New("eventbridge: service unavailable")

// Recorder is a lease.Notifier that keeps every notice it takes, a stand-in
// for EventBridge. It is safe for concurrent use.
type Recorder struct {
	// Refuse is how many of the next notices are refused with ErrBusDown
	// and not kept, as a bus that is down for a while. Set it before the
	// notices flow, or under the test's own synchronization.
	Refuse int

	mu      sync.Mutex
	notices []lease.Notice
	refused int
}

// Notify keeps n, or refuses it while Refuse says so.
func (r *Recorder) Notify(_ context.Context, n lease.Notice) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.refused < r.Refuse {
		r.refused++
		return ErrBusDown
	}
	r.notices = append(r.notices, n)
	return nil
}

// Notices returns a copy of the notices kept so far, in the order they came.
func (r *Recorder) Notices() []lease.Notice {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]lease.Notice(nil), r.notices...)
}

// Refused is how many notices were refused so far.
func (r *Recorder) Refused() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refused
}

// Count is the number of notices of kind about taskID kept so far.
func (r *Recorder) Count(kind, taskID string) int {
	n := 0
	for _, x := range r.Notices() {
		if x.Kind == kind && x.Event.TaskID == taskID {
			n++
		}
	}
	return n
}

// Buffer is a log destination that servers' goroutines may write to while
// the test reads it.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Take returns everything written since the last Take and empties the
// buffer.
func (b *Buffer) Take() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.b.String()
	b.b.Reset()
	return out
}
