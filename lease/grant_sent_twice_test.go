package lease_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// An agent that checks a task out in the very millisecond it came back
// from the dead is granted a lease already ended (alive.go: a lease locked
// at or before its holder's alive_since stays ended), which its first
// renewal tells it. When the grant's answer was lost, so that the SDK sent
// it again, the second sending failed its condition on the first's own
// lease; the checkout took it for a same-run lease ended by death, took it
// over, and answered a second grant (fence 2): a lease granted that no
// request was answered, one more attempt counted, and its ending recorded
// as a death. A grant sent again now knows its own lease by its write's id.
func TestAGrantSentTwiceAtAReturnFromTheDeadIsAnsweredOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Second))
	e.clock.Advance(2 * time.Second)
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Minute)) // back from the dead, in this millisecond

	tasks := e.names.Table(schema.TasksTable)
	doer := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-a"`)
		},
		race:    func() {},
		applied: true,
	}
	s := e.over(doer)
	co := must[lease.Checkout](t)(s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Hour}))
	if !doer.lost.Load() {
		t.Fatal("no grant was sent twice")
	}
	got := e.get(t, "t")
	if co.Fence != 1 || co.Attempt != 1 || got.Attempts != 1 {
		t.Errorf("a checkout whose grant's answer was lost answered fence %d, attempt %d; the task has had %d attempts; want fence 1, attempt 1, 1 attempt: one grant", co.Fence, co.Attempt, got.Attempts)
	}
	if evs := e.events(t, "t"); len(evs) != 1 || evs[0].Type != lease.EventCheckout || evs[0].Fence != 1 {
		t.Errorf("events after one checkout: %v, want one checkout (fence 1)", kinds(evs))
	}
}

// A checkout by an agent that is dead (its heartbeat ran out) is granted
// a lease that any other checkout may take over at once. When the grant's
// answer was lost and another agent took that lease over before the SDK
// sent the grant again, the second sending failed its condition on the
// other agent's lease and the checkout answered 409 conflict: a lease
// granted (an attempt counted, a checkout and an agent_death in the trail)
// that no request was answered. The grant that took it over records the
// id of the grant it replaced, by which the first is known.
func TestAGrantSentTwiceAfterItsLeaseWasTakenOverIsAnswered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Second))
	e.clock.Advance(2 * time.Second) // a is dead

	tasks := e.names.Table(schema.TasksTable)
	var taken lease.Checkout
	var takeErr error
	doer := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-a"`)
		},
		race: func() {
			// b finds a's lease, its holder dead, and takes it over.
			taken, takeErr = e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r-b", Timeout: time.Hour})
		},
		applied: true,
	}
	s := e.over(doer)
	co, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Hour})
	if !doer.lost.Load() {
		t.Fatal("no grant was sent twice")
	}
	if takeErr != nil || taken.Fence != 2 {
		t.Fatalf("b's takeover of a's lease: %+v, %v; want fence 2", taken, takeErr)
	}
	if evs := e.events(t, "t"); len(evs) != 3 || evs[0].Type != lease.EventCheckout || evs[0].AgentID != "a" || evs[0].Fence != 1 {
		t.Fatalf("events: %v, want a's checkout (fence 1), its agent_death, b's checkout", kinds(evs))
	}
	if err != nil || co.Fence != 1 || co.AgentID != "a" || co.Attempt != 1 {
		t.Errorf("a's checkout, whose grant (fence 1, attempt 1) applied and was taken over before it was sent again: %+v, %v; want that grant", co, err)
	}
}

// A grant of a free task whose answer was lost was sent again by the SDK;
// when the lease it made had ended in between (its holder found dead by
// the sweep, or an admin's force-release), the task was free again and
// the second sending applied as a grant of its own: a second lease (fence
// 2), a second attempt counted, and a grant no request was answered (the
// lossy linearizability campaign found a claim granted fence 21 and 22 of
// one task so). The grant now applies only to a task its write has not
// left (grant_write, or prev_write one grant on), so the second sending
// fails and knows its own grant, ended as it is.
func TestAFreeGrantSentTwiceAfterItsLeaseEndedIsMadeOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		claim bool
		dead  bool // a is dead when it asks: its lease may be ended at once
		end   func(t *testing.T, e *env)
	}{
		{"checkout, its holder swept as dead", false, true, func(t *testing.T, e *env) {
			t.Helper()
			if res := must[lease.SweepResult](t)(e.store.Sweep(ctx(t))); res.AgentDeaths != 1 {
				t.Fatalf("the sweep ended %+v, want the dead holder's lease", res)
			}
		}},
		{"checkout, force-released", false, false, func(t *testing.T, e *env) {
			t.Helper()
			must[lease.Released](t)(e.store.Release(ctx(t), lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true}))
		}},
		{"named claim, its holder swept as dead", true, true, func(t *testing.T, e *env) {
			t.Helper()
			if res := must[lease.SweepResult](t)(e.store.Sweep(ctx(t))); res.AgentDeaths != 1 {
				t.Fatalf("the sweep ended %+v, want the dead holder's lease", res)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t")
			if tc.dead {
				must[lease.Heartbeat](t)(e.store.Heartbeat(c, "a", time.Second))
				e.clock.Advance(2 * time.Second)
				e.caughtUp(t)
			}

			tasks := e.names.Table(schema.TasksTable)
			doer := &lossyDoer{
				match: func(target, body string) bool {
					return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-a"`)
				},
				race:    func() { e.caughtUp(t); tc.end(t, e) },
				applied: true,
			}
			s := e.over(doer)
			var co lease.Checkout
			var err error
			if tc.claim {
				co, err = s.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "r-a", Timeout: time.Hour})
			} else {
				co, err = s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Hour})
			}
			if !doer.lost.Load() {
				t.Fatal("no grant was sent twice")
			}
			got := e.get(t, "t")
			evs := e.events(t, "t")
			grants := 0
			for _, ev := range evs {
				if ev.Type == lease.EventCheckout {
					grants++
				}
			}
			if grants != 1 || got.Checkout != nil || got.Attempts != 1 {
				t.Errorf("after one grant, sent twice, and its lease's ending: events %v, the task leased (%v) after %d attempts; want one checkout, the task free after 1 attempt", kinds(evs), got.Checkout != nil, got.Attempts)
			}
			if err != nil || co.Fence != 1 || co.AgentID != "a" || co.Attempt != 1 {
				t.Errorf("a's grant, sent twice, its lease ended in between: %+v, %v; want that grant (fence 1, attempt 1)", co, err)
			}
		})
	}
}

// A grant whose answer was lost, sent again by the SDK after a PATCH of
// its task's title, queue or priority had landed on its lease (the
// PATCH's answer showing that lease), answered the lease with the
// PATCH's values: a grant made after the PATCH, which the PATCH saw
// before it; so too when the lease had ended before the PATCH (its agent
// removed). The first PATCH since the grant keeps what they were at the
// grant (grant_was), which the grant sent again answers.
func TestAGrantSentTwiceAcrossAPatchAnswersTheTaskAsGranted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                   string
		claim, ended, untitled bool
	}{
		{name: "checkout"},
		{name: "checkout of a task with no title", untitled: true},
		{name: "named claim", claim: true},
		{name: "named claim, its agent removed before the PATCH", claim: true, ended: true},
	} {
		claim := tc.claim
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t")
			if tc.untitled {
				must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "b", Title: new("")}))
			}
			if tc.ended {
				must[lease.Registration](t)(e.store.RegisterAgent(c, lease.RegisterParams{AgentID: "a", Name: "a"}))
			}
			before := e.get(t, "t")
			e.caughtUp(t)
			tasks := e.names.Table(schema.TasksTable)
			var patched []lease.Task
			patch := func(p lease.UpdateTaskParams) {
				p.TaskID, p.AgentID = "t", "b"
				patched = append(patched, must[lease.Task](t)(e.store.UpdateTask(c, p)))
			}
			title, queue := "a new title", "q2"
			doer := &lossyDoer{
				match: func(target, body string) bool {
					return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-a"`)
				},
				race: func() {
					if tc.ended {
						e.caughtUp(t) // the removal ends the leases the index shows
						if err := e.store.RemoveAgent(c, "a"); err != nil {
							t.Fatalf("remove a: %v", err)
						}
					}
					// Two PATCHes: the second finds the first's copy kept.
					patch(lease.UpdateTaskParams{Priority: new(1)})
					patch(lease.UpdateTaskParams{Title: &title, Queue: &queue, Priority: new(2)})
				},
				applied: true,
			}
			s := e.over(doer)
			var co lease.Checkout
			var err error
			if claim {
				co, err = s.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "r-a", Timeout: time.Hour})
			} else {
				co, err = s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Hour})
			}
			if !doer.lost.Load() {
				t.Fatal("no grant was sent twice")
			}
			for i, p := range patched {
				if tc.ended && (p.Checkout != nil || p.Attempts != 1) {
					t.Fatalf("PATCH %d answered %+v, want the task free after the grant's attempt (its agent removed)", i+1, p)
				}
				if !tc.ended && (p.Checkout == nil || p.Checkout.Fence != 1) {
					t.Fatalf("PATCH %d answered %+v, want the task with the grant's lease (fence 1)", i+1, p)
				}
			}
			if err != nil || co.Fence != 1 || co.Title != before.Title || co.Queue != before.Queue || co.Priority != before.Priority {
				t.Errorf("the grant, sent again after PATCHes its lease: %+v, %v; want fence 1 with the task as granted (title %q, queue %q, priority %d)", co, err, before.Title, before.Queue, before.Priority)
			}
			got := e.get(t, "t")
			if got.Title != title || got.Queue != queue || got.Priority != 2 {
				t.Errorf("the task after the PATCHes: title %q, queue %q, priority %d; want the last PATCH's", got.Title, got.Queue, got.Priority)
			}
		})
	}
}

// A grant whose answer was lost, sent again by the SDK after its lease
// was completed and its task reopened (a PATCH to todo, which counts the
// task's attempts anew), answered the lease with attempt 0, the count the
// reopen left: no grant is attempt 0. The reopen keeps the attempt of the
// task's latest grant (on its record, grant_write; in grant_was in
// versions of 2026-12-06, which a task they reopened may still keep),
// which the grant sent again answers.
func TestAGrantSentTwiceAcrossAReopenAnswersItsAttempt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		claim bool
		// before: leases of the task granted and released before this
		// grant, so that it is attempt before+1.
		before int
		// earlier: the reopens made by an earlier version, which kept
		// the attempt in grant_was.
		earlier bool
	}{
		{name: "checkout"},
		{name: "checkout, the task's third attempt", before: 2},
		{name: "named claim, the task's second attempt", claim: true, before: 1},
		{name: "checkout, the task's second attempt, reopened by an earlier version", before: 1, earlier: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t")
			for i := range tc.before {
				co := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: fmt.Sprintf("r-b%d", i), Timeout: time.Hour}))
				must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "b", RunID: co.RunID, Fence: co.Fence}))
			}
			e.caughtUp(t)
			tasks := e.names.Table(schema.TasksTable)
			var reopened lease.Task
			doer := &lossyDoer{
				match: func(target, body string) bool {
					return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-a"`)
				},
				race: func() {
					// Another worker of the run completes the lease; an
					// admin reopens the task, and reopens it again after a
					// cancel (the second reopen finds the attempt kept).
					must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "a", RunID: "r-a"}))
					todo, cancelled := lease.StatusTodo, lease.StatusCancelled
					must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Status: &todo}))
					must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Status: &cancelled}))
					reopened = must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Status: &todo}))
					if tc.earlier {
						e.reopenedByAnEarlierVersion(t, "t", true)
					}
				},
				applied: true,
			}
			s := e.over(doer)
			var co lease.Checkout
			var err error
			if tc.claim {
				co, err = s.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "r-a", Timeout: time.Hour})
			} else {
				co, err = s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Hour})
			}
			if !doer.lost.Load() {
				t.Fatal("no grant was sent twice")
			}
			if reopened.Status != lease.StatusTodo || reopened.Attempts != 0 {
				t.Fatalf("the task reopened: %+v; want todo with its attempts counted anew", reopened)
			}
			want := int64(tc.before + 1)
			if err != nil || co.Fence != want || co.Attempt != int(want) {
				t.Errorf("the grant, sent again after its completion and two reopens: %+v, %v; want fence %d, attempt %d", co, err, want, want)
			}
			// The task's next grant is its first attempt since the reopen.
			next := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r-b-next", Timeout: time.Hour}))
			if next.Attempt != 1 || next.Fence != want+1 {
				t.Errorf("the grant after the reopens: fence %d, attempt %d; want fence %d, attempt 1", next.Fence, next.Attempt, want+1)
			}
		})
	}
}

// A grant whose answer was lost is known, when the SDK sends it again, by
// the ids of the task's last two grants (grant_write, prev_write). With
// two more grants of the task between its sendings (its lease taken over
// twice, its holders dead; or ended, the task completed, reopened and
// granted again), the second sending was refused on the latest lease and
// answered 409 conflict (or, for a claim, another task): a lease granted,
// an attempt counted and a checkout in the trail, that no request was
// answered (the lossy heartbeat linearizability test found one so). A
// refused grant sent more than once now looks for its own checkout in the
// task's trail and is answered as granted, at the attempt it counted.
func TestAGrantSentTwiceTwoGrantsOnIsAnswered(t *testing.T) {
	t.Parallel()
	dies := func(t *testing.T, e *env, agent string) {
		t.Helper()
		must[lease.Heartbeat](t)(e.store.Heartbeat(ctx(t), agent, time.Second))
	}
	twiceOver := func(t *testing.T, e *env) {
		t.Helper()
		c := ctx(t)
		dies(t, e, "b")
		must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r-b", Timeout: time.Hour}))
		e.clock.Advance(2 * time.Second)
		must[lease.Heartbeat](t)(e.store.Heartbeat(c, "c", time.Hour))
		must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "c", RunID: "r-c", Timeout: time.Hour}))
	}
	for _, tc := range []struct {
		name  string
		claim bool
		dead  bool // a is dead when it asks, so that b may take its lease over
		late  bool // the stream archives the grants only once the refused grant has looked
		race  func(t *testing.T, e *env)
	}{
		{"checkout, taken over twice", false, true, false, twiceOver},
		{"checkout, taken over twice, archived late", false, true, true, twiceOver},
		{"named claim, taken over twice", true, true, false, twiceOver},
		{"checkout, its task completed, reopened and granted again", false, false, false, func(t *testing.T, e *env) {
			t.Helper()
			c := ctx(t)
			e.clock.Advance(time.Second)
			must[lease.Released](t)(e.store.Release(c, lease.ReleaseParams{TaskID: "t", AgentID: "admin", Force: true}))
			e.clock.Advance(time.Second)
			b := must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r-b", Timeout: time.Hour}))
			must[lease.Task](t)(e.store.Complete(c, lease.CompleteParams{TaskID: "t", AgentID: "b", RunID: "r-b", Fence: b.Fence}))
			todo := lease.StatusTodo
			must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "b", Status: &todo}))
			e.clock.Advance(time.Second)
			must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "c", RunID: "r-c", Timeout: time.Hour}))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t")
			if tc.dead {
				dies(t, e, "a")
				e.clock.Advance(2 * time.Second)
				e.caughtUp(t)
			}
			tasks, events := e.names.Table(schema.TasksTable), e.names.Table(schema.EventsTable)
			looked, archived := make(chan struct{}), make(chan struct{})
			lookedOnce := sync.OnceFunc(func() { close(looked) })
			var doer *lossyDoer
			doer = &lossyDoer{
				match: func(target, body string) bool {
					if strings.HasSuffix(target, ".Query") && strings.Contains(body, `"`+events+`"`) && doer.lost.Load() {
						lookedOnce() // the refused grant reads the trail
					}
					return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-a"`)
				},
				race: func() {
					e.caughtUp(t)
					tc.race(t, e)
					if !tc.late {
						e.drain(t)
						return
					}
					go func() { // once the refused grant has looked once
						defer close(archived)
						<-looked
						e.drain(t)
					}()
				},
				applied: true,
			}
			s := e.over(doer)
			var co lease.Checkout
			var err error
			if tc.claim {
				co, err = s.Claim(c, lease.ClaimParams{AgentID: "a", RunID: "r-a", Timeout: time.Hour})
			} else {
				co, err = s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Hour})
			}
			if !doer.lost.Load() {
				t.Fatal("no grant was sent twice")
			}
			if tc.late {
				<-archived
			}
			got := e.get(t, "t")
			if got.Checkout == nil || got.Checkout.AgentID != "c" || got.Checkout.Fence != 3 {
				t.Fatalf("the task after a's grant and two more: %+v, want c's lease, fence 3", got.Checkout)
			}
			grants := 0
			for _, ev := range e.events(t, "t") {
				if ev.Type == lease.EventCheckout {
					grants++
				}
			}
			if grants != 3 {
				t.Errorf("%d checkouts in the trail, want 3: a's grant, sent twice, made once", grants)
			}
			if err != nil || co.TaskID != "t" || co.AgentID != "a" || co.Fence != 1 || co.Attempt != 1 {
				t.Errorf("a's grant (fence 1, attempt 1), sent twice with two grants of the task in between: %+v, %v; want that grant", co, err)
			}
		})
	}
}

// A grant whose answer was lost, known when the SDK sends it again by the
// next grant's record of it (prev_write), answered the task's attempts
// less one: across a reopen between the two grants, which counts the
// attempts anew, that was 0, answered as attempt 1 where the grant had
// counted its task's second. It was then read from the trail; with the
// change stream held up past the 3 s the trail is waited for, it was
// found nowhere and answered as attempt 1 again (the lossy
// linearizability runs refused such a history). A reopen now keeps the
// attempt of the grant before it on that grant's record (grant_write,
// then prev_write), which the grant sent again reads without the trail, whether a PATCH to todo reopened the
// task or the next grant did (a checkout expecting it finished); a
// reopen by an earlier version kept none, and the trail tells it.
func TestAGrantSentTwiceOneGrantOnAcrossAReopenAnswersItsAttempt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// patch: a PATCH to todo reopens the task, else the next grant.
		// earlier: that PATCH is an earlier version's (no attempt kept),
		// and the stream archives what happened before a's grant is sent
		// again: the trail has its attempt.
		patch, earlier bool
	}{
		{name: "a PATCH to todo, the stream held up", patch: true},
		{name: "the next grant, the stream held up"},
		{name: "a PATCH to todo by an earlier version, the trail archived", patch: true, earlier: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			c := ctx(t)
			e.task(t, "t")
			e.attemptedOnce(t, "t")
			e.drain(t)

			co, n, err := e.aGrantSentTwice(t, false, func() {
				// An admin cancels the task under a's lease; it is
				// reopened, and b takes it, its first attempt since
				// the reopen.
				e.clock.Advance(time.Second)
				cancelled, todo := lease.StatusCancelled, lease.StatusTodo
				must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Status: &cancelled}))
				expect := []lease.Status{lease.StatusCancelled}
				if tc.patch {
					must[lease.Task](t)(e.store.UpdateTask(c, lease.UpdateTaskParams{TaskID: "t", AgentID: "admin", Admin: true, Status: &todo}))
					expect = nil
				}
				if tc.earlier {
					e.reopenedByAnEarlierVersion(t, "t", false)
				}
				e.clock.Advance(time.Second)
				must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "b", RunID: "r-b", Timeout: time.Hour, ExpectedStatuses: expect}))
				if tc.earlier {
					e.drain(t)
				}
			})
			if got := e.get(t, "t"); got.Checkout == nil || got.Checkout.AgentID != "b" || got.Checkout.Fence != 3 || got.Attempts != 1 {
				t.Fatalf("the task after a's grant, a reopen and b's: %+v after %d attempts, want b's lease (fence 3), its first attempt", got.Checkout, got.Attempts)
			}
			if err != nil || co.AgentID != "a" || co.Fence != 2 || co.Attempt != 2 {
				t.Errorf("a's grant (fence 2, the task's second attempt), sent twice with a reopen and a grant in between: %+v, %v; want fence 2, attempt 2", co, err)
			}
			switch {
			case tc.earlier && n == 0:
				t.Error("the grant sent twice across an earlier version's reopen read no trail; want its attempt from there")
			case !tc.earlier && n != 0:
				t.Errorf("the grant sent twice read the trail %d times; want none (the item keeps the attempt)", n)
			}
		})
	}
}

// Two checkouts of one run at once: one is granted, and the other, its
// grant's first sending lost, is refused on that lease when the SDK sends
// it again, and answers it as a same-run checkout does, as it is (its
// timeout the grant's). A grant looked for in the trail (two grants on)
// is known by its write's id, not by agent, run and time, which the
// other's grant shares when both are made in one millisecond: the lossy
// heartbeat test caught one answered with its own timeout so.
func TestASameRunCheckoutSentTwiceAnswersTheRunsLeaseAsItIs(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	tasks := e.names.Table(schema.TasksTable)
	var first lease.Checkout
	doer := &lossyDoer{
		match: func(target, body string) bool {
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-a"`)
		},
		race: func() {
			// The run's other checkout, in the same millisecond.
			first = must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: 30 * time.Second}))
			e.drain(t)
		},
	}
	s := e.over(doer)
	co, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: 10 * time.Second})
	if !doer.lost.Load() {
		t.Fatal("no grant was sent twice")
	}
	if err != nil || co.Fence != first.Fence || !co.ExpiresAt.Equal(first.ExpiresAt) || co.Timeout != first.Timeout {
		t.Errorf("a same-run checkout refused on the run's lease (fence %d, expiring %v, timeout %v): %+v, %v; want that lease as it is",
			first.Fence, first.ExpiresAt, first.Timeout, co, err)
	}
	if got := e.get(t, "t"); got.Checkout == nil || got.Checkout.Fence != 1 || got.Attempts != 1 {
		t.Errorf("the task: %+v after %d attempts, want the run's one lease (fence 1)", got.Checkout, got.Attempts)
	}
}

// A grant sent again and refused looks in the trail for its own only when
// it could have made one there: not when the lease on the task was
// granted before the grant's time (every grant after it would be locked
// at or after it). Such a checkout, racing a holder, its first sending
// lost before DynamoDB saw it, read the trail and waited for the stream's
// archive (up to 3 s) before answering its 409.
func TestARefusedGrantSentAgainOnAnEarlierLeaseAnswersAtOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "t")
	e.checkout(t, "t", "b", time.Hour)
	e.clock.Advance(time.Second)

	tasks, events := e.names.Table(schema.TasksTable), e.names.Table(schema.EventsTable)
	var trailReads atomic.Int32
	doer := &lossyDoer{
		match: func(target, body string) bool {
			if strings.HasSuffix(target, ".Query") && strings.Contains(body, `"`+events+`"`) {
				trailReads.Add(1)
			}
			return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks) && strings.Contains(body, `"r-a"`)
		},
		race: func() {},
	}
	s := e.over(doer)
	_, err := s.Checkout(c, lease.CheckoutParams{TaskID: "t", AgentID: "a", RunID: "r-a", Timeout: time.Hour})
	if !doer.lost.Load() {
		t.Fatal("no grant was sent twice")
	}
	if !errors.Is(err, lease.ErrCheckedOut) {
		t.Errorf("a checkout of b's task, its grant sent twice: %v, want checked_out", err)
	}
	if n := trailReads.Load(); n != 0 {
		t.Errorf("it read the trail %d times; want none: b's lease was granted before the grant's time", n)
	}
}
