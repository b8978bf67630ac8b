package e2e

import (
	"testing"
	"time"
)

// Quick transitions read before the change stream has archived them: the
// events answer is a prefix of the final trail with no hole, and pending
// says how many later events are held back until it is whole.
func TestEventsShowNoHoleAndSayWhatIsPending(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	a := e.agent(t, "a")
	e.task(t, a, "t1")
	e.drain(t)
	for _, op := range []string{"checkout", "renew", "release", "checkout", "complete"} {
		e.must(t, 200, "POST", "/api/tasks/t1/"+op, a, nil)
		e.clock.Advance(time.Second)
	}
	early := e.must(t, 200, "GET", "/api/tasks/t1/events", a, nil)
	final := e.events(t, a, "t1")
	equal(t, "final trail", final, []string{"checkout", "renew", "release", "checkout", "complete"})
	shown := early.List("events")
	if len(shown) > len(final) {
		t.Fatalf("%d events shown before the stream ran, %d in the final trail", len(shown), len(final))
	}
	for i, ev := range shown {
		equal(t, "event shown before the stream ran", ev["type"], final[i])
	}
	equal(t, "events pending before the stream ran", early.Num("pending") > 0, true)
	equal(t, "pending after the stream ran", e.must(t, 200, "GET", "/api/tasks/t1/events", a, nil).Num("pending"), 0.0)
}
