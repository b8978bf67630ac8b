package lease_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// attemptHist drives one task ("x", in queue attemptQ) through a history of grants,
// endings, reopens, takeovers, failures and cancels, with named claims of
// agent "a" whose receipts never keep their grant (their first answer
// lost), and remembers the attempt each of those grants counted (the
// task's attempts right after the grant, which is what the grant
// answered).
type attemptHist struct {
	t     *testing.T
	e     *env
	lossy *lease.Store
	runs  []string
	want  map[string]lease.Checkout // run -> the lease its grant made, as granted
	n     int
}

const attemptQ = "q-retry-trail"

func newAttemptHist(t *testing.T) *attemptHist {
	e := newEnv(t)
	e.create(t, lease.CreateTaskParams{TaskID: "x", Title: "retry x", Queue: attemptQ, Priority: new(6)})
	return &attemptHist{t: t, e: e, want: map[string]lease.Checkout{},
		lossy: e.lossyStore()}
}

func (h *attemptHist) params(run string) lease.ClaimParams {
	return lease.ClaimParams{AgentID: "a", AgentName: "Agent A", RunID: run, Timeout: time.Minute, Queues: []string{attemptQ}}
}

func (h *attemptHist) tick() { h.e.clock.Advance(time.Second) }

// claim: an unkept named claim of a, with a run of its own.
func (h *attemptHist) claim() {
	h.t.Helper()
	h.n++
	run := fmt.Sprintf("run-%d", h.n)
	h.e.caughtUp(h.t)
	first := unkeptClaim(h.t, h.lossy, h.params(run), "x")
	task := must[lease.Task](h.t)(h.e.store.GetTask(ctx(h.t), "x"))
	if first.Attempt != task.Attempts {
		h.t.Fatalf("%s: the lease shows attempt %d, the task %d", run, first.Attempt, task.Attempts)
	}
	h.runs = append(h.runs, run)
	h.want[run] = first
	h.tick()
}

// co: a named checkout by agent (a grant that is not a's claim).
func (h *attemptHist) co(agent string, statuses ...lease.Status) lease.Checkout {
	h.t.Helper()
	c := must[lease.Checkout](h.t)(h.e.store.Checkout(ctx(h.t), lease.CheckoutParams{TaskID: "x", AgentID: agent, AgentName: "name-" + agent,
		Timeout: time.Minute, ExpectedStatuses: statuses}))
	h.tick()
	return c
}

func (h *attemptHist) held() lease.Checkout {
	h.t.Helper()
	l := must[*lease.Checkout](h.t)(h.e.store.LockStatus(ctx(h.t), "x"))
	if l == nil {
		h.t.Fatal("x holds no lease")
	}
	return *l
}

func (h *attemptHist) release(outcome lease.ReleaseOutcome) {
	h.t.Helper()
	l := h.held()
	must[lease.Released](h.t)(h.e.store.Release(ctx(h.t), lease.ReleaseParams{TaskID: "x", AgentID: l.AgentID, RunID: l.RunID, Fence: l.Fence, Outcome: outcome}))
	h.tick()
	if outcome == lease.OutcomeFailed {
		h.e.clock.Advance(5 * time.Minute) // past the retry delay
	}
}

func (h *attemptHist) complete() {
	h.t.Helper()
	l := h.held()
	must[lease.Task](h.t)(h.e.store.Complete(ctx(h.t), lease.CompleteParams{TaskID: "x", AgentID: l.AgentID, RunID: l.RunID, Fence: l.Fence}))
	h.tick()
}

func (h *attemptHist) patch(p lease.UpdateTaskParams) {
	h.t.Helper()
	p.TaskID, p.AgentID, p.Admin = "x", "admin", true
	must[lease.Task](h.t)(h.e.store.UpdateTask(ctx(h.t), p))
	h.tick()
}

func (h *attemptHist) reopen() { st := lease.StatusTodo; h.patch(lease.UpdateTaskParams{Status: &st}) }
func (h *attemptHist) cancel() {
	st := lease.StatusCancelled
	h.patch(lease.UpdateTaskParams{Status: &st})
}

// expire lets the lease expire and the sweep end it.
func (h *attemptHist) expire() {
	h.t.Helper()
	h.e.clock.Advance(2 * time.Minute)
	h.e.caughtUp(h.t)
	must[lease.SweepResult](h.t)(h.e.store.Sweep(ctx(h.t)))
	h.tick()
}

func (h *attemptHist) status() lease.Status {
	return must[lease.Task](h.t)(h.e.store.GetTask(ctx(h.t), "x")).Status
}

// check retries every run's claim, twice, after draining the stream: each
// must answer its own lease with the attempt its grant counted.
func (h *attemptHist) check() {
	h.t.Helper()
	h.e.drain(h.t)
	h.e.clock.Advance(time.Second)
	for _, run := range h.runs {
		want := h.want[run]
		for _, retry := range []string{"retry", "further retry"} {
			got, err := h.e.store.Claim(ctx(h.t), h.params(run))
			if err != nil {
				h.t.Errorf("%s, %s: %v", run, retry, err)
				continue
			}
			if got.Fence != want.Fence || got.Attempt != want.Attempt || got.AgentName != "Agent A" {
				h.t.Errorf("%s, %s: fence %d attempt %d name %q; want fence %d attempt %d name %q",
					run, retry, got.Fence, got.Attempt, got.AgentName, want.Fence, want.Attempt, "Agent A")
			}
		}
	}
}

// renew renews l, a lease of x, n times, 10 ms apart.
func (h *attemptHist) renew(l lease.Checkout, n int) {
	h.t.Helper()
	for i := 0; i < n; i++ {
		h.e.clock.Advance(10 * time.Millisecond)
		must[lease.Checkout](h.t)(h.e.store.Renew(ctx(h.t), lease.RenewParams{TaskID: "x", AgentID: l.AgentID, RunID: l.RunID, Fence: l.Fence}))
	}
}

// claimAttempt2: a's unkept claim (a's grant), which must count attempt 2
// (one grant before it); it returns the claim's run and the lease granted.
func (h *attemptHist) claimAttempt2() (string, lease.Checkout) {
	h.t.Helper()
	h.claim()
	run := h.runs[len(h.runs)-1]
	want := h.want[run]
	if want.Attempt != 2 {
		h.t.Fatalf("a's grant: attempt %d, want 2", want.Attempt)
	}
	return run, want
}

// reopenedGrantedTwice: the lease held is completed, x reopened, then
// granted to b and to d, each released.
func (h *attemptHist) reopenedGrantedTwice() {
	h.t.Helper()
	h.complete()
	h.reopen()
	h.co("b")
	h.release("")
	h.co("d")
	h.release("")
}

// reopenedGrantedTakenOver: the lease held is completed, x reopened, then
// granted to b (renewed `renewals` times), whose lease expires and d
// takes over. A takeover writes no ending, so the completion stays the
// task's record of the last ending and the item cannot tell the attempt
// of the grant it ended: the trail must.
func (h *attemptHist) reopenedGrantedTakenOver(renewals int) {
	h.t.Helper()
	h.complete()
	h.reopen()
	b := h.co("b")
	h.renew(b, renewals)
	h.e.clock.Advance(2 * time.Minute) // b's lease expires
	h.co("d")
}

// loggedStore is a store on h's tables and clock that logs to the buffer
// it returns.
func (h *attemptHist) loggedStore() (*lease.Store, *syncBuffer) {
	logs := &syncBuffer{}
	return lease.New(lease.Config{DB: h.e.db, Tables: h.e.names, Now: h.e.clock.Now, Notifier: h.e.notes,
		Logger: slog.New(slog.NewTextHandler(logs, nil))}), logs
}

// retryNotKeptYet retries run's claim through s while the trail cannot
// tell the attempt of its grant yet (what names the retry): it may answer
// ErrGrantNotKept (logged), else the grant with the attempt it counted,
// never another lease nor a guessed attempt. logs, if not nil, is s's
// log, shown with a wrong attempt.
func (h *attemptHist) retryNotKeptYet(s *lease.Store, run, what string, logs *syncBuffer) {
	h.t.Helper()
	want := h.want[run]
	began := time.Now()
	got, err := s.Claim(ctx(h.t), h.params(run))
	took := time.Since(began)
	log := ""
	if logs != nil {
		log = "; log: " + strings.TrimSpace(logs.String())
	}
	switch {
	case errors.Is(err, lease.ErrGrantNotKept):
		h.t.Logf("%s: %v (after %v)", what, err, took)
	case err != nil:
		h.t.Fatalf("%s: %v (after %v), want ErrGrantNotKept", what, err, took)
	case got.Fence != want.Fence:
		h.t.Fatalf("the retry answered fence %d, want a's %d", got.Fence, want.Fence)
	case got.Attempt != want.Attempt:
		h.t.Errorf("%s (after %v): attempt %d, want %d or ErrGrantNotKept%s", what, took, got.Attempt, want.Attempt, log)
	}
}

// retryWhile retries run's claim while meanwhile, run wait after the
// retry began (once it has looked), completes the trail: the retry must
// answer the grant with the attempt it counted (what names the retry).
func (h *attemptHist) retryWhile(run string, wait time.Duration, meanwhile func(), what string) {
	h.t.Helper()
	want := h.want[run]
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(wait)
		meanwhile()
	}()
	got, err := h.e.store.Claim(ctx(h.t), h.params(run))
	<-done
	if err != nil || got.Fence != want.Fence || got.Attempt != want.Attempt {
		h.t.Errorf("%s: fence %d attempt %d, %v; want fence %d attempt %d",
			what, got.Fence, got.Attempt, err, want.Fence, want.Attempt)
	}
}

// retryAnswersGrant retries run's claim a second on: it must answer the
// grant with the attempt it counted (what names the retry, why what a
// wrong answer shows).
func (h *attemptHist) retryAnswersGrant(run, what, why string) {
	h.t.Helper()
	want := h.want[run]
	h.tick()
	again := must[lease.Checkout](h.t)(h.e.store.Claim(ctx(h.t), h.params(run)))
	if again.Fence != want.Fence || again.Attempt != want.Attempt {
		h.t.Errorf("%s: fence %d attempt %d, want fence %d attempt %d (%s)",
			what, again.Fence, again.Attempt, want.Fence, want.Attempt, why)
	}
}

// newAttempt2Hist: b's grant and release, then a's unkept claim, which
// must count attempt 2; it returns the claim's run and the lease granted.
func newAttempt2Hist(t *testing.T) (*attemptHist, string, lease.Checkout) {
	t.Helper()
	h := newAttemptHist(t)
	h.co("b")
	h.release("")
	run, want := h.claimAttempt2()
	return h, run, want
}

// countBoundHistory: b's grant (attempt 1), renewed `renewals` times and
// released; a's unkept claim (attempt 2); then x completed, reopened and
// granted twice, and every event archived. It returns a's claim's run.
func countBoundHistory(t *testing.T, renewals int) (*attemptHist, string) {
	t.Helper()
	h := newAttemptHist(t)
	b := h.co("b")
	h.renew(b, renewals)
	h.tick()
	h.release("")
	run, _ := h.claimAttempt2()
	h.reopenedGrantedTwice()
	h.e.drain(t)
	h.tick()
	return h, run
}

// A table of histories: each run's claim retried answers the attempt its
// grant counted (attemptOf, or the trail where the item cannot tell).
func TestRetriedClaimsAnswerTheirAttemptAcrossHistories(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		run  func(h *attemptHist)
	}{
		{"grants and releases", func(h *attemptHist) {
			h.claim()
			h.release("")
			h.co("b")
			h.release("")
			h.claim()
			h.release("")
			h.co("b")
			h.release("")
			h.co("d")
		}},
		{"reopened by PATCH, then granted three times", func(h *attemptHist) {
			h.co("b")
			h.release("")
			h.claim()
			h.complete()
			h.reopen()
			h.claim()
			h.release("")
			h.co("b")
			h.release("")
			h.claim()
			h.release("")
		}},
		{"reopened by a checkout", func(h *attemptHist) {
			h.claim()
			h.complete()
			h.co("b", lease.StatusDone)
			h.release("")
			h.claim()
			h.complete()
			h.co("b", lease.StatusDone)
			h.release("")
			h.co("d")
			h.release("")
		}},
		{"reopened by a checkout, then a PATCH reopen", func(h *attemptHist) {
			h.claim()
			h.release("")
			h.claim()
			h.complete()
			h.co("b", lease.StatusDone)
			h.complete()
			h.reopen()
		}},
		{"failed at max_attempts by failed releases, reopened", func(h *attemptHist) {
			two := 2
			h.patch(lease.UpdateTaskParams{MaxAttempts: &two})
			h.claim()
			h.release(lease.OutcomeFailed)
			h.claim()
			h.release(lease.OutcomeFailed)
			if st := h.status(); st != lease.StatusFailed {
				h.t.Fatalf("status %s, want failed", st)
			}
			h.reopen()
			h.claim()
			h.release(lease.OutcomeFailed)
			h.co("b")
			h.release(lease.OutcomeFailed)
			h.reopen()
		}},
		{"failed at max_attempts by the sweep, reopened by a checkout", func(h *attemptHist) {
			two := 2
			h.patch(lease.UpdateTaskParams{MaxAttempts: &two})
			h.claim()
			h.expire()
			h.claim()
			h.expire()
			if st := h.status(); st != lease.StatusFailed {
				h.t.Fatalf("status %s, want failed", st)
			}
			h.co("b", lease.StatusFailed)
			h.expire()
			h.claim()
			h.expire()
		}},
		{"cancelled while held, reopened", func(h *attemptHist) {
			h.co("b")
			h.release("")
			h.claim()
			h.cancel()
			h.reopen()
			h.claim()
			h.cancel()
			h.reopen()
			h.co("b")
			h.release("")
		}},
		{"cancelled while todo, reopened twice", func(h *attemptHist) {
			h.claim()
			h.release("")
			h.cancel()
			h.reopen()
			h.cancel()
			h.reopen()
			h.claim()
			h.release("")
			h.co("b")
		}},
		{"taken over", func(h *attemptHist) {
			h.claim()
			h.e.clock.Advance(2 * time.Minute)
			h.co("b")
			h.release("")
			h.claim()
			h.e.clock.Advance(2 * time.Minute)
			h.co("d")
			h.complete()
			h.reopen()
			h.co("b")
		}},
		{"reopened by an earlier version", func(h *attemptHist) {
			h.co("b")
			h.release("")
			h.claim()
			h.complete()
			h.reopen()
			h.e.reopenedByAnEarlierVersion(h.t, "x", false)
			h.claim()
			h.release("")
		}},
		{"reopened by a version of 2026-12-06 (grant_was.a)", func(h *attemptHist) {
			h.co("b")
			h.release("")
			h.claim()
			h.release("")
			h.claim()
			h.complete()
			h.reopen()
			h.e.reopenedByAnEarlierVersion(h.t, "x", true)
		}},
		{"reopened by a version of 2026-12-06, then granted", func(h *attemptHist) {
			h.claim()
			h.release("")
			h.claim()
			h.complete()
			h.reopen()
			h.e.reopenedByAnEarlierVersion(h.t, "x", true)
			h.co("b")
			h.release("")
		}},
		{"reopened by a version of 2026-12-06, PATCHed, cancelled and reopened", func(h *attemptHist) {
			h.claim()
			h.release("")
			h.claim()
			h.complete()
			h.reopen()
			h.e.reopenedByAnEarlierVersion(h.t, "x", true)
			title := "patched"
			h.patch(lease.UpdateTaskParams{Title: &title})
			h.cancel()
			h.reopen()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newAttemptHist(t)
			tc.run(h)
			h.check()
		})
	}
}

// A named claim's retry that finds its ended lease on the task, whose
// attempt the item cannot tell (a reopen since, then two grants: here a
// takeover, which leaves the task's record of a's ending in place; or a
// reopen by an earlier version), while the change stream has not yet
// archived the task's events: asGranted waits trailWait and, the grant
// not found in a trail that is not archived whole, fails the retry with
// ErrGrantNotKept (503, retry with the same run id) and keeps nothing, so
// the retry once the stream has caught up answers the grant's attempt.
// Before, it answered attempt 1, and keepFound kept that guess in the
// receipt for every later retry.
func TestClaimRetryBeforeTheTrailIsArchivedKeepsNoGuessedAttempt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		after func(h *attemptHist)
	}{
		{"reopened, granted, taken over", func(h *attemptHist) { h.reopenedGrantedTakenOver(0) }},
		{"reopened by an earlier version", func(h *attemptHist) {
			h.complete()
			h.reopen()
			h.e.reopenedByAnEarlierVersion(h.t, "x", false)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h, run, _ := newAttempt2Hist(t)
			tc.after(h)
			// The stream has archived nothing yet (no drain).
			h.retryNotKeptYet(h.e.store, run, "the retry before the stream caught up", nil)
			h.e.drain(t)
			h.retryAnswersGrant(run, "a retry once the stream has archived every event", "the receipt kept the guess")
		})
	}
}

// A receipt whose grant keeps no attempt (kept by keepFound before this
// change, which kept attempt 0) is answered with the attempt the task
// tells (receiptsGrant, the commit's claim), live, ended, or past a reopen
// and two grants (the trail).
func TestClaimRetryOfAReceiptWithoutAttemptAnswersTheTasks(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		after func(h *attemptHist)
	}{
		{"held", func(h *attemptHist) {}},
		{"released", func(h *attemptHist) { h.release("") }},
		{"completed, reopened, granted twice", func(h *attemptHist) { h.reopenedGrantedTwice() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newAttemptHist(t)
			h.co("b")
			h.release("")
			h.claim() // attempt 2
			run := h.runs[0]
			// A retry keeps the lease it found (keepFound); then the receipt
			// is made as the code before kept it: no attempt.
			must[lease.Checkout](t)(h.e.store.Claim(ctx(t), h.params(run)))
			must[*dynamodb.UpdateItemOutput](t)(h.e.db.UpdateItem(ctx(t), &dynamodb.UpdateItemInput{
				TableName:        aws.String(h.e.names.Table(schema.HeartbeatsTable)),
				Key:              map[string]types.AttributeValue{"agent_id": &types.AttributeValueMemberS{Value: "#claim#a#" + run}},
				UpdateExpression: aws.String("REMOVE granted.attempt"), ConditionExpression: aws.String("attribute_exists(granted.attempt)")}))
			tc.after(h)
			h.e.drain(t)
			h.tick()
			got := must[lease.Checkout](t)(h.e.store.Claim(ctx(t), h.params(run)))
			if got.Fence != h.want[run].Fence || got.Attempt != 2 {
				t.Errorf("retry of a receipt without attempt: fence %d attempt %d, want fence %d attempt 2", got.Fence, got.Attempt, h.want[run].Fence)
			}
		})
	}
}

// The count of a grant's attempt in the trail (grantInTrailAt) reads up
// to 1,000 events before the grant, wherever the grant is: a grant found
// a few events back whose earlier grant (back to the finish before it)
// lies 997 events before it, but more than 1,000 from the trail's newest,
// is answered with its attempt, 2. Before, the count stopped 1,000 events
// from the newest and answered 1, unlogged, which keepFound kept. With
// that earlier grant past 1,000 events before it, the attempt is not
// known: answered as attempt 1, and logged (README, "Known limits").
func TestClaimRetryCountsItsAttemptFromTheGrantNotTheTrailsNewest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		renewals int
		want     int
	}{{995, 2}, {1005, 1}} {
		t.Run(fmt.Sprintf("%d renewals", tc.renewals), func(t *testing.T) {
			t.Parallel()
			// b's grant renewed up to the count's bound or past it.
			h, run := countBoundHistory(t, tc.renewals)
			s, logs := h.loggedStore()
			for _, retry := range []string{"retry", "further retry"} {
				got := must[lease.Checkout](t)(s.Claim(ctx(t), h.params(run)))
				if got.Fence != h.want[run].Fence || got.Attempt != tc.want || got.AgentName != "Agent A" {
					t.Errorf("%s: fence %d attempt %d name %q; want fence %d attempt %d name %q",
						retry, got.Fence, got.Attempt, got.AgentName, h.want[run].Fence, tc.want, "Agent A")
				}
			}
			warned := strings.Contains(logs.String(), "answered as attempt 1")
			if warned != (tc.want == 1) {
				t.Errorf("warning logged: %v, want %v; log:\n%s", warned, tc.want == 1, logs.String())
			}
		})
	}
}

// A retry whose first look at the trail finds the events before a's grant
// archived but not the grant and what followed it, which the stream
// archives while the retry waits: a later look reads only the events
// archived since the one before, finds the grant among them and counts
// its attempt on into the events the first look read (b's grant before
// it): attempt 2.
func TestClaimRetryFindsItsGrantArchivedWhileItWaitsAndCountsOnIntoWhatItRead(t *testing.T) {
	t.Parallel()
	h := newAttemptHist(t)
	h.co("b")
	h.release("")
	h.e.drain(t) // b's grant and release archived; what follows not yet
	h.claim()    // a's grant: attempt 2
	run := h.runs[0]
	h.reopenedGrantedTakenOver(0) // a's ending stays the task's record
	// 500 ms on, the retry has looked once.
	h.retryWhile(run, 500*time.Millisecond, func() { h.e.drain(t) }, "the retry, the stream catching up while it waits")
}

// The cost of the attempt's trail read when the grant is past the bound
// (README's claim entry): Queries of 100 events, 10 at most, to look for
// it; not found, a GetItem of the task and a Query of its latest 10
// events to check that none is left to archive (lookInTrail); then a last
// look, which reads the 1,000 events again (a look cannot read only the
// events archived since the one before: the stream may archive them out
// of order). The task here still records a's ending (its later grants: a
// plain one, then a takeover), so the retry answers a's lease, as attempt
// 1 (more than 1,000 events back: README, "Known limits").
func TestClaimRetryPastTheTrailBoundCostsWhatREADMESays(t *testing.T) {
	t.Parallel()
	h := newAttemptHist(t)
	c := ctx(t)
	h.co("b")
	h.release("")
	h.claim() // a's grant: attempt 2
	run := h.runs[0]
	h.reopenedGrantedTakenOver(1005) // a's ending stays the task's record
	h.e.drain(t)
	h.tick()
	h.e.count.Take()
	got := must[lease.Checkout](t)(h.e.store.Claim(c, h.params(run)))
	ops := h.e.count.Take()
	t.Logf("the retry: fence %d attempt %d (a's: fence %d attempt %d); requests %v", got.Fence, got.Attempt, h.want[run].Fence, h.want[run].Attempt, ops)
	if got.Fence != h.want[run].Fence {
		t.Fatalf("the retry answered fence %d, want a's %d", got.Fence, h.want[run].Fence)
	}
	if got.Attempt != 1 {
		t.Errorf("the retry answered attempt %d; a grant more than 1,000 events back is answered as attempt 1", got.Attempt)
	}
	// grantsReason's read of the trail since the grant: 2 Queries (10,
	// then 100); the attempt's: 10 to look for it, 1 in lookInTrail's
	// check for events not archived, 10 for the last look.
	if q := ops["Query"]; q > 2+10+1+10 {
		t.Errorf("the retry made %d Queries; README: the trail since the claim (2) and, for the attempt, Queries of 100 events, 1,000 at most (10), then a check for events not archived (1) and a last look (10)", q)
	}
}

// Sound: a retry whose receipt keeps its grant reads no trail for the
// attempt, even where the item cannot tell it (a reopen since, then two
// grants, the task still recording a's ending): the receipt's attempt is
// answered.
func TestClaimRetryOfAKeptGrantReadsNoTrailForItsAttempt(t *testing.T) {
	t.Parallel()
	h := newAttemptHist(t)
	c := ctx(t)
	h.co("b")
	h.release("")
	h.e.caughtUp(t)
	first := must[lease.Checkout](t)(h.e.store.Claim(c, h.params("run-k"))) // kept
	h.tick()
	if first.Attempt != 2 {
		t.Fatalf("a's grant: attempt %d, want 2", first.Attempt)
	}
	h.reopenedGrantedTakenOver(0) // a's ending stays the task's record
	h.e.drain(t)
	h.e.count.Take()
	got := must[lease.Checkout](t)(h.e.store.Claim(c, h.params("run-k")))
	ops := h.e.count.Take()
	if got.Fence != first.Fence || got.Attempt != 2 {
		t.Errorf("retry: fence %d attempt %d, want %d, 2", got.Fence, got.Attempt, first.Fence)
	}
	if ops["Query"] != 0 {
		t.Errorf("retry of a kept grant made %d Queries (%v), want none", ops["Query"], ops)
	}
	t.Logf("requests: %v", ops)
}

// syncBuffer is a bytes.Buffer a logger may write to from several
// goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
