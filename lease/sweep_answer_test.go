package lease_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// endingsDoer is the HTTP client of a store that notes the ReturnValues of
// each UpdateItem of table and runs before, once, ahead of the first.
type endingsDoer struct {
	table  string
	before func()
	once   sync.Once
	mu     sync.Mutex
	asked  []string
}

func (d *endingsDoer) Do(r *http.Request) (*http.Response, error) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".UpdateItem") {
		var in struct{ TableName, ReturnValues string }
		if err := json.Unmarshal(body, &in); err == nil && in.TableName == d.table {
			if d.before != nil {
				d.once.Do(d.before)
			}
			rv := in.ReturnValues
			if rv == "" {
				rv = "NONE"
			}
			d.mu.Lock()
			d.asked = append(d.asked, rv)
			d.mu.Unlock()
		}
	}
	return http.DefaultClient.Do(r)
}

func (d *endingsDoer) returnValues() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.asked...)
}

// The sweep's ending of an expired lease asked the freed item's written
// attributes back (UPDATED_NEW) only to learn which queue's waiting claims
// to wake, also where no claim waits, as in the sweep's Lambda, always: a
// larger answer for the local DynamoDB to write on every ending (about a
// tenth of its CPU an ending, measured under load). With no claim of the
// process waiting it now asks nothing back.
func TestASweepWithNoClaimWaitingAsksNoItemBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	const n = 3
	for _, id := range []string{"t0", "t1", "t2"} {
		e.queued(t, id, "q", 5)
		e.checkout(t, id, "a", time.Minute)
	}
	doer := &endingsDoer{table: e.names.Table(schema.TasksTable)}
	s := e.over(doer)
	e.clock.Advance(2 * time.Minute)
	e.caughtUp(t)
	if res := must[lease.SweepResult](t)(s.Sweep(c)); res.Timeouts != n {
		t.Fatalf("sweep %+v, want %d timeouts", res, n)
	}
	asked := doer.returnValues()
	if len(asked) != n {
		t.Fatalf("%d writes of tasks (ReturnValues %v), want %d: one ending a lease", len(asked), asked, n)
	}
	for i, rv := range asked {
		if rv != "NONE" {
			t.Errorf("ending %d asked ReturnValues %s, want NONE: no claim of the process waits", i, rv)
		}
	}
	for _, id := range []string{"t0", "t1", "t2"} {
		if got := e.get(t, id); got.Status != lease.StatusTodo {
			t.Errorf("%s is %s after its lease expired, want todo", id, got.Status)
		}
	}
}

// A claim that starts to wait while the sweep's ending is on its way (the
// ending asked nothing back, no claim waiting when it was sent) is still
// woken by it, and takes the task: the ending, not knowing the task's
// queue, wakes every waiting claim.
func TestAClaimWaitingFromDuringASweepsEndingIsWoken(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.queued(t, "t", "q", 5)
	e.checkout(t, "t", "a", time.Minute)
	doer := &endingsDoer{table: e.names.Table(schema.TasksTable)}
	s := e.over(doer)
	lease.PollClaims(s, time.Hour) // only a wake makes the waiting claim look again
	got := make(chan lease.Checkout, 1)
	var started atomic.Bool
	doer.before = func() {
		// The ending is about to be sent: a claim starts to wait, looks
		// (the task is held: nothing) and sleeps, before it lands.
		started.Store(true)
		go func() {
			co, err := s.Claim(c, lease.ClaimParams{AgentID: "b", Queues: []string{"q"}, Wait: 20 * time.Second, Timeout: time.Hour})
			if err != nil {
				t.Errorf("waiting claim: %v", err)
			}
			got <- co
		}()
		// Not asleep: t.Fatalf is for the test's goroutine, and this is
		// the sweep's.
		for deadline := time.Now().Add(15 * time.Second); lease.ClaimsAsleep(s) < 1; time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Error("the claim never waited")
				return
			}
		}
	}
	e.clock.Advance(2 * time.Minute)
	e.caughtUp(t)
	if res := must[lease.SweepResult](t)(s.Sweep(c)); res.Timeouts != 1 {
		t.Fatalf("sweep %+v, want one timeout", res)
	}
	if !started.Load() {
		t.Fatal("the sweep wrote no task")
	}
	if rv := doer.returnValues()[0]; rv != "NONE" {
		t.Errorf("the ending asked ReturnValues %s, want NONE: no claim waited when it was sent", rv)
	}
	select {
	case co := <-got:
		if co.TaskID != "t" || co.AgentID != "b" {
			t.Fatalf("claimed %+v, want t for b", co)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the claim that started waiting during the ending was not woken by it")
	}
}
