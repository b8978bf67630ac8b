package testclock

import (
	"sync"
	"testing"
	"time"
)

func TestClockMovesOnlyWhenTold(t *testing.T) {
	t0 := time.Date(2026, 3, 20, 14, 35, 0, 0, time.UTC)
	c := New(t0)
	if first, second := c.Now(), c.Now(); !first.Equal(t0) || !second.Equal(t0) {
		t.Fatalf("clock moved by itself: %v", c.Now())
	}
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() { c.Advance(time.Second) })
	}
	wg.Wait()
	if got := c.Now(); !got.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("after 10 advances of 1s: %v", got)
	}
}
