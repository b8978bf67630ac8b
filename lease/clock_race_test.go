package lease_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
)

// Invariant 10 under load: many agents on a handful of tasks, on the real
// clock, with heartbeats lapsing on purpose, short leases and claims, a
// sweeper, and parallel renewals of one lease, all against the local
// DynamoDB with index lag until it is saturated, so that requests wait
// between reading their time and their write landing. Per task, the whole
// trail afterwards must show: fences and locked_at in the same order; no
// lease live after the next grant's locked_at; events in time order; no
// death stamped inside a life its holder's heartbeat answer stated, but
// where its next heartbeat cut that life short (cutShort). And no
// grant was answered expired. CHECKOUT_CHAOS=1 runs 48 agents for 60 s.
//
// It saturates the local DynamoDB on purpose, so it runs alone, before the
// parallel tests, whose own deadlines it would otherwise eat into.
func TestRaceTimeOnlyMovesForward(t *testing.T) {
	agents, tasks, run := 16, 6, 4*time.Second
	if os.Getenv("CHECKOUT_CHAOS") != "" {
		agents, tasks, run = 48, 12, 60*time.Second
	} else if testing.Short() {
		run = 2 * time.Second
	}
	e := newEnv(t)
	e.lag(t, "", raceLag)
	c, cancel := context.WithTimeout(context.Background(), run+5*time.Minute)
	defer cancel()
	store := lease.New(lease.Config{DB: e.db, Tables: e.names, Now: time.Now, Notifier: e.notes})
	ids := make([]string, tasks)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%02d", i)
		must[lease.Task](t)(store.CreateTask(c, lease.CreateTaskParams{TaskID: ids[i], MaxAttempts: new(lease.MaxMaxAttempts)}))
	}
	const ttl = time.Second

	var mu sync.Mutex
	lives := map[string][]hbLife{} // each agent's heartbeat answers
	grants := 0
	var expired []string
	var failures []error
	answered := func(co lease.Checkout, at time.Time, how string) {
		mu.Lock()
		defer mu.Unlock()
		grants++
		if !at.Before(co.ExpiresAt) {
			expired = append(expired, fmt.Sprintf("%s %s fence %d expires %v, answered %v", how, co.TaskID, co.Fence, co.ExpiresAt, at))
		}
	}
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, err)
	}
	allowed := func(err error) bool {
		var ce *lease.ConflictError
		var sm *lease.StatusMismatchError
		var nh *lease.NotHolderError
		return err == nil || errors.As(err, &ce) || errors.As(err, &sm) || errors.As(err, &nh) ||
			errors.Is(err, lease.ErrNotCheckedOut) || errors.Is(err, lease.ErrNoTaskAvailable)
	}

	deadline := time.Now().Add(run)
	var wg sync.WaitGroup
	for a := range agents {
		wg.Go(func() {
			id := fmt.Sprintf("agent-%02d", a)
			r := rand.New(rand.NewPCG(uint64(a), 7))
			var held *lease.Checkout
			for time.Now().Before(deadline) {
				switch n := r.IntN(10); {
				case n < 3: // heartbeat, or let it lapse
					if r.IntN(4) == 0 {
						time.Sleep(ttl + time.Duration(r.IntN(300))*time.Millisecond)
						continue
					}
					sent := time.Now()
					hb, err := store.Heartbeat(c, id, ttl)
					if err != nil {
						fail(fmt.Errorf("heartbeat %s: %w", id, err))
						continue
					}
					mu.Lock()
					lives[id] = append(lives[id], hbLife{sent, hb.ExpiresAt.Add(-ttl), hb.ExpiresAt})
					mu.Unlock()
				case held != nil && n < 6:
					co, err := store.Renew(c, lease.RenewParams{TaskID: held.TaskID, AgentID: id, Fence: held.Fence})
					if !allowed(err) {
						fail(fmt.Errorf("renew %s: %w", id, err))
					}
					if err != nil {
						held = nil
					} else {
						held = &co
					}
				case held != nil && n < 8:
					if _, err := store.Release(c, lease.ReleaseParams{TaskID: held.TaskID, AgentID: id, Fence: held.Fence}); !allowed(err) {
						fail(fmt.Errorf("release %s: %w", id, err))
					}
					held = nil
				default:
					var co lease.Checkout
					var err error
					how := "checkout"
					timeout := time.Duration(1+r.IntN(2)) * time.Second
					if r.IntN(2) == 0 {
						how = "claim"
						co, err = store.Claim(c, lease.ClaimParams{AgentID: id, Timeout: time.Second})
					} else {
						co, err = store.Checkout(c, lease.CheckoutParams{TaskID: ids[r.IntN(len(ids))], AgentID: id, Timeout: timeout})
					}
					at := time.Now()
					if !allowed(err) {
						fail(fmt.Errorf("%s %s: %w", how, id, err))
					}
					if err == nil {
						answered(co, at, how)
						held = &co
					}
				}
			}
		})
	}
	wg.Go(func() { // the sweeper
		for time.Now().Before(deadline) {
			if _, err := store.Sweep(c); err != nil {
				fail(fmt.Errorf("sweep: %w", err))
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	wg.Go(func() { // parallel renewals of one lease, round after round
		must[lease.Task](t)(store.CreateTask(c, lease.CreateTaskParams{TaskID: "renewed", Queue: "renewals"}))
		co, err := store.Checkout(c, lease.CheckoutParams{TaskID: "renewed", AgentID: "renewer", Timeout: time.Hour})
		if err != nil {
			fail(err)
			return
		}
		for time.Now().Before(deadline) {
			race(20, func(int) {
				if _, err := store.Renew(c, lease.RenewParams{TaskID: "renewed", AgentID: "renewer", Fence: co.Fence}); err != nil {
					fail(fmt.Errorf("parallel renewal: %w", err))
				}
			})
		}
	})
	wg.Wait()
	for _, err := range failures {
		t.Error(err)
	}
	for _, x := range expired {
		t.Errorf("grant answered expired: %s", x)
	}

	e.drain(t)
	total := 0
	for _, id := range append(ids, "renewed") {
		tr := must[lease.Trail](t)(store.Trail(c, id))
		if tr.Pending != 0 {
			t.Errorf("%s: %d events pending after the stream was drained", id, tr.Pending)
		}
		total += len(tr.Events)
		checkTimeForward(t, id, tr.Events, lives)
	}
	t.Logf("%d agents, %v: %d events, %d grants", agents, run, total, grants)
	if total < 30 || grants < 10 {
		t.Errorf("only %d events and %d grants: the race did too little to show anything", total, grants)
	}
}

// hbLife is the life a heartbeat's answer states: from its time
// (expires_at - ttl) until its expires_at; sent is when it was asked for.
type hbLife struct{ sent, from, until time.Time }

// cutShort says a death at d, inside the life l states, is where the
// agent's next heartbeat ended that life: a heartbeat landing within
// clockMargin of the expiry is made a return from the dead, which ends the
// agent's leases when it lands (README, Known limits), up to clockMargin
// before the expiry the answer before it stated. So d is no earlier than
// that, and that heartbeat was on its way at d (asked for at or before
// it, its own life starting at or after it).
func cutShort(l hbLife, d time.Time, lives []hbLife) bool {
	if d.Before(l.until.Add(-lease.ClockMargin)) {
		return false
	}
	for _, next := range lives {
		if !next.sent.Truncate(time.Millisecond).After(d) && !next.from.Before(d) {
			return true
		}
	}
	return false
}

// checkTimeForward checks one task's whole trail against invariant 10.
func checkTimeForward(t *testing.T, taskID string, evs []lease.Event, lives map[string][]hbLife) {
	t.Helper()
	type grant struct {
		at  time.Time
		end *time.Time
	}
	grants := map[int64]*grant{}
	var fences []int64
	for i, ev := range evs {
		if i > 0 && ev.At.Before(evs[i-1].At) {
			t.Errorf("%s: %s of fence %d at %v is earlier than the %s before it at %v", taskID, ev.Type, ev.Fence, ev.At, evs[i-1].Type, evs[i-1].At)
		}
		switch {
		case ev.Type == lease.EventCheckout:
			grants[ev.Fence] = &grant{at: ev.At}
			fences = append(fences, ev.Fence)
		case ev.EndsLease() && ev.Held != nil:
			if g := grants[ev.Fence]; g != nil {
				end := g.at.Add(*ev.Held)
				g.end = &end
			}
		}
		if ev.Type == lease.EventAgentDeath {
			for _, l := range lives[ev.AgentID] {
				if ev.At.After(l.from) && ev.At.Before(l.until) && !cutShort(l, ev.At, lives[ev.AgentID]) {
					t.Errorf("%s: agent_death of %s (fence %d) at %v, while its heartbeat answered at %v was current until %v",
						taskID, ev.AgentID, ev.Fence, ev.At, l.from, l.until)
				}
			}
		}
	}
	for i := 1; i < len(fences); i++ {
		prev, next := grants[fences[i-1]], grants[fences[i]]
		if fences[i] <= fences[i-1] {
			t.Errorf("%s: fence %d after %d", taskID, fences[i], fences[i-1])
		}
		if next.at.Before(prev.at) {
			t.Errorf("%s: fence %d locked at %v, before fence %d's %v", taskID, fences[i], next.at, fences[i-1], prev.at)
		}
		if prev.end == nil {
			t.Errorf("%s: fence %d was granted after fence %d, which has no ending", taskID, fences[i], fences[i-1])
		} else if prev.end.After(next.at) {
			t.Errorf("%s: fence %d live until %v, after fence %d was locked at %v", taskID, fences[i-1], *prev.end, fences[i], next.at)
		}
	}
}
