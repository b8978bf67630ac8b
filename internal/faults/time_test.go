package faults_test

import (
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// checkTimeForward fails the test unless a task's trail keeps invariant 10
// (time only moves forward on each item) through the faults: events in
// time order, each grant locked no earlier than the grant before it, and
// no lease live after the next grant was locked. Events the faults lost
// are counted elsewhere; only what is there is compared.
func checkTimeForward(t *testing.T, task string, evs []lease.Event) {
	t.Helper()
	locked := map[int64]time.Time{}
	ended := map[int64]time.Time{}
	var fences []int64
	for i, e := range evs {
		if i > 0 && e.At.Before(evs[i-1].At) {
			t.Errorf("%s: %s of fence %d at %v, earlier than the %s before it at %v", task, e.Type, e.Fence, e.At, evs[i-1].Type, evs[i-1].At)
		}
		switch {
		case e.Type == lease.EventCheckout:
			locked[e.Fence] = e.At
			fences = append(fences, e.Fence)
		case e.EndsLease() && e.Held != nil:
			if at, ok := locked[e.Fence]; ok {
				ended[e.Fence] = at.Add(*e.Held)
			}
		}
	}
	for i := 1; i < len(fences); i++ {
		prev, next := fences[i-1], fences[i]
		if locked[next].Before(locked[prev]) {
			t.Errorf("%s: fence %d locked at %v, before fence %d's %v", task, next, locked[next], prev, locked[prev])
		}
		if end, ok := ended[prev]; ok && end.After(locked[next]) {
			t.Errorf("%s: fence %d live until %v, after fence %d was locked at %v", task, prev, end, next, locked[next])
		}
	}
}
