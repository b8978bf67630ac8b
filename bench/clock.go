package bench

import (
	"sync"
	"time"
)

// Clock is a clock that moves only when told to.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock starts at the current time.
func NewClock() *Clock { return &Clock{t: time.Now().UTC().Truncate(time.Millisecond)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
