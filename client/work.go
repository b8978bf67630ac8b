package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"sync"
	"time"
	"unicode/utf8"
	"weak"

	"github.com/checkout-dev/checkout/errcode"
)

// Lease is a lease held by WorkOn or ClaimLoop for the function they run.
type Lease struct {
	mu sync.Mutex
	co Checkout
	// mayHold is the latest the lease may be held till by renewals whose
	// answers were lost (ErrUndecided) since co: each may have extended
	// it past co's expiry.
	mayHold time.Time
}

// Checkout is the lease as the server last answered it (after the latest
// renewal).
func (l *Lease) Checkout() Checkout {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.co
}

// TaskID is the leased task.
func (l *Lease) TaskID() string { return l.Checkout().TaskID }

// RunID is the lease's run id.
func (l *Lease) RunID() string { return l.Checkout().RunID }

// Fence is the lease's fencing token: pass it to anything the work writes,
// so that a writer whose lease was lost can be refused.
func (l *Lease) Fence() int64 { return l.Checkout().Fence }

func (l *Lease) set(co Checkout) {
	l.mu.Lock()
	l.co = co
	l.mayHold = time.Time{}
	l.mu.Unlock()
}

// mayBeHeldTill notes that a renewal, whose answer was lost, may have
// extended the lease till t.
func (l *Lease) mayBeHeldTill(t time.Time) {
	l.mu.Lock()
	if t.After(l.mayHold) {
		l.mayHold = t
	}
	l.mu.Unlock()
}

// heldTill is the latest the lease may be held till: its known expiry, or
// later if a renewal whose answer was lost may have extended it.
func (l *Lease) heldTill() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mayHold.After(l.co.ExpiresAt) {
		return l.mayHold
	}
	return l.co.ExpiresAt
}

// presumedLost is the loss of a lease whose known expiry passed while its
// renewals got no answer, one of them at least after it may have taken
// effect: the lease may still be held, and is given back.
type presumedLost struct{ error }

func (e presumedLost) Unwrap() error { return e.error }

// WorkOption configures WorkOn and ClaimLoop.
type WorkOption func(*workConfig)

type workConfig struct {
	timeout      time.Duration
	reason       string
	runID        string
	heartbeatTTL time.Duration
	noHeartbeat  bool
	renewEvery   time.Duration
	idleMin      time.Duration
	idleMax      time.Duration
	onError      func(taskID string, err error)
	lossCheck    time.Duration
	queues       []string
	claimWait    time.Duration
}

// Queues sets the queues ClaimLoop claims from (default, without this
// option: the server's, "default"). Queues naming none (Queues(qs...)
// with qs empty) is refused: ClaimLoop returns an error matching
// ErrInvalid at once, rather than claiming from the default queue.
func Queues(qs ...string) WorkOption {
	return func(c *workConfig) { c.queues = append([]string{}, qs...) }
}

// ClaimWait makes each of ClaimLoop's claims wait up to d (at most 20s) on
// the server for a task to become available, before the loop backs off.
func ClaimWait(d time.Duration) WorkOption { return func(c *workConfig) { c.claimWait = d } }

// LeaseTimeout sets the lease length (default: the server's, 30m).
func LeaseTimeout(d time.Duration) WorkOption { return func(c *workConfig) { c.timeout = d } }

// Reason is recorded with the checkout.
func Reason(s string) WorkOption { return func(c *workConfig) { c.reason = s } }

// RunID sets the run id of WorkOn's checkout (default: a fresh one).
func RunID(s string) WorkOption { return func(c *workConfig) { c.runID = s } }

// HeartbeatTTL sets the heartbeat ttl (0: the default, 90s); heartbeats are
// sent every ttl/3, and after a failed one sooner (from half a second,
// doubling up to ttl/3), so that an outage shorter than the ttl does not
// leave the agent dead.
func HeartbeatTTL(d time.Duration) WorkOption { return func(c *workConfig) { c.heartbeatTTL = d } }

// NoHeartbeats turns heartbeats off: the leases then end only by time.
func NoHeartbeats() WorkOption { return func(c *workConfig) { c.noHeartbeat = true } }

// RenewEvery sets how often the lease is renewed (default: a third of its
// timeout, so two renewals can fail before it runs out).
func RenewEvery(d time.Duration) WorkOption { return func(c *workConfig) { c.renewEvery = d } }

// CheckLossEvery makes WorkOn and ClaimLoop look in the agent's inbox every
// d, between renewals, for a lease_lost message about the lease they hold:
// a force release, a cancel, an admin's release or completion for the
// agent, a timeout or the agent's death then cancels
// the work within about d plus a second, rather than at the next renewal
// (a third of the lease's timeout by default). Each look is one GET
// /api/inbox. Off by default: the renewal alone finds the loss.
//
// With it, the inbox's lease_lost messages about the leases WorkOn and
// ClaimLoop held are theirs: each is deleted once read, and one about a
// loss found otherwise (a renewal or completion refused) is deleted then,
// or by a later look of the same Client if it comes after. The server
// answers only the oldest 1,000 messages: while the inbox holds that many
// (task_available messages left unread, say), a look that does not see the
// message asks for the lease's status instead (one GET more), and the
// loss's reason then reads "no longer held".
func CheckLossEvery(d time.Duration) WorkOption { return func(c *workConfig) { c.lossCheck = d } }

// IdleBackoff sets how ClaimLoop waits while no task is available, or while
// the server cannot be reached: from min, doubling up to max, each wait
// randomised between half and all of it (default 1s to 30s; a zero or
// negative min or max is its default).
func IdleBackoff(min, max time.Duration) WorkOption {
	return func(c *workConfig) { c.idleMin, c.idleMax = min, max }
}

// OnError receives the errors that do not stop the work: failed heartbeats,
// renewals, completions and releases that will be tried again, in
// ClaimLoop failed claims that will be, and the error of each task's
// function. Within one WorkOn or ClaimLoop call, f is called by one
// goroutine at a time.
func OnError(f func(taskID string, err error)) WorkOption {
	return func(c *workConfig) { c.onError = f }
}

func newWorkConfig(opts []WorkOption) workConfig {
	cfg := workConfig{heartbeatTTL: defaultHeartbeatTTL, idleMin: time.Second, idleMax: 30 * time.Second,
		onError: func(string, error) {}}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.heartbeatTTL <= 0 {
		cfg.heartbeatTTL = defaultHeartbeatTTL
	}
	if cfg.idleMin <= 0 {
		cfg.idleMin = time.Second
	}
	if cfg.idleMax <= 0 {
		cfg.idleMax = 30 * time.Second
	}
	if cfg.idleMax < cfg.idleMin {
		cfg.idleMax = cfg.idleMin
	}
	// The heartbeat loop, the renewals, the loss checks and the call's own
	// goroutine all report to OnError: one at a time.
	var mu sync.Mutex
	onError := cfg.onError
	cfg.onError = func(taskID string, err error) {
		mu.Lock()
		defer mu.Unlock()
		onError(taskID, err)
	}
	return cfg
}

// WorkOn checks taskID out and runs fn while it holds the lease.
//
// In the background it renews the lease well before it expires and sends
// heartbeats (one heartbeat loop per Client, shared by the WorkOn and
// ClaimLoop calls running on it with the same HeartbeatTTL), until fn
// returns: when ctx is done, fn's context is cancelled, and the lease is
// still renewed while fn winds down. If the lease
// is lost (force-released, cancelled, expired while renewals failed, or
// ended because the agent was declared dead), fn's context is cancelled
// with a cause matching ErrLeaseLost: at the next renewal, which the
// server refuses, or sooner with CheckLossEvery, which looks for the
// lease_lost message the server sends the former holder (the error then
// names the reason it gives). When fn returns nil the task is completed;
// when it returns an error the lease is released with the error as the
// reason.
//
// A renewal whose answer was lost (ErrUndecided: a gateway's 5xx, a
// dropped connection) may have renewed the lease. When the lease's last
// known expiry passes with renewals failing so, fn's context is still
// cancelled (ErrLeaseLost: nothing vouches for the lease), but the lease
// is then given back as above, naming it: completed when fn returns nil
// (WorkOn then returns nil), released otherwise (plainly when fn returns
// the cancellation), so that a lease a lost renewal kept is not left
// held by nobody at work until it times out.
//
// The completion or release is made even when ctx is done, and through a
// server restart: a failure that asking again can mend (the server
// unreachable, a 5xx, a 429) is tried again with backoff for up to 30
// seconds, or until the lease expires if that is sooner. Each try names
// the lease (run id and fence), so a try whose answer was lost after it
// took effect is answered as the first was.
//
// When fn returns an error, the release is a failed attempt (outcome
// failed), with the error's text, cut to MaxErrorLen bytes, as its error:
// the task's LastError. The server then holds the task back for its retry
// delay, or marks it failed once it has used its MaxAttempts. An error
// that is only the cancellation of ctx (the caller stopping, not the work
// failing) is released plainly, without counting as a failure. A server
// older than API version 1.1, which does not know outcomes, gets a plain
// release. When fn panics, the renewals stop, the lease is released as a
// failed attempt whose error names the panic, and the panic goes on.
//
// WorkOn returns fn's error, an error matching ErrLeaseLost (and fn's error,
// if any) when the lease was lost, or the checkout's error: a
// *ConflictError when another agent holds the task.
func (c *Client) WorkOn(ctx context.Context, taskID string, fn func(ctx context.Context, l *Lease) error, opts ...WorkOption) error {
	cfg := newWorkConfig(opts)
	stopBeats, err := c.startHeartbeats(ctx, cfg, false)
	if err != nil {
		return err
	}
	defer stopBeats()
	runID := cfg.runID
	if runID == "" {
		runID = NewRunID()
	}
	co, err := c.checkoutDecided(ctx, taskID, CheckoutRequest{Timeout: cfg.timeout, Reason: cfg.reason, RunID: runID}, cfg)
	if err != nil {
		return err
	}
	return c.hold(ctx, co, fn, cfg)
}

// checkoutDecided is WorkOn's checkout. One whose answer was lost
// (ErrUndecided) may hold the lease, under a run id the caller never
// sees: it is asked again under the same run id, which answers with that
// lease, for up to finishTimeout while ctx lasts, waiting at least what
// an answer's Retry-After asks for. Should the answer stay
// lost, the lease the run may hold is released (naming the run, so that
// nothing else is), even when ctx is done, rather than left held until it
// times out, and the error is the checkout's (a failed release goes to
// OnError, naming the run). A run id the caller gave
// (the RunID option) may hold a lease from before this call, which the
// caller means to resume: that lease is left alone, for the caller, who
// knows the run, to ask again.
func (c *Client) checkoutDecided(ctx context.Context, taskID string, req CheckoutRequest, cfg workConfig) (Checkout, error) {
	co, err := c.Checkout(ctx, taskID, req)
	start := c.now()
	for try := 1; errors.Is(err, ErrUndecided) && ctx.Err() == nil; try++ {
		// The wait an answer's Retry-After asks for, when longer: a
		// server that asks for more rest than is left is not asked again.
		wait := c.finishWait(try)
		if ae := (*APIError)(nil); errors.As(err, &ae) && ae.RetryAfter > wait {
			wait = ae.RetryAfter
		}
		if c.now().Add(wait).Sub(start) >= finishTimeout {
			break
		}
		cfg.onError(taskID, err)
		if c.sleep(ctx, wait) != nil {
			break
		}
		co, err = c.Checkout(ctx, taskID, req)
	}
	if errors.Is(err, ErrUndecided) && cfg.runID == "" {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
		defer cancel()
		_, rerr := c.Release(fctx, taskID, ReleaseRequest{RunID: req.RunID, Reason: "the checkout's answer was lost"})
		if rerr != nil && !errors.Is(rerr, ErrNotCheckedOut) && !errors.Is(rerr, ErrNotHolder) {
			// The run may hold the lease still: say which run, the
			// caller never saw it.
			cfg.onError(taskID, fmt.Errorf("the release of run %s, whose checkout's answer was lost, failed: it may hold the task until its lease times out: %w", req.RunID, rerr))
		}
	}
	return co, err
}

// ClaimLoop works through the pool: it claims the best open task (of the
// Queues option's queues; ClaimWait long-polls), runs fn under its lease as
// WorkOn does, and claims the next. On a conflict it
// claims again at once; while no task is available it backs off with
// jitter. Each fn's error goes to the OnError option, the task is released
// as a failed attempt as WorkOn does, and the loop goes on.
//
// A failure that asking again can mend (the server unreachable or
// restarting, a 5xx, a 429), of a claim or of the first heartbeat, goes to
// OnError and is tried again with the idle backoff. A claim whose answer
// was lost (ErrUndecided) is tried again under the same run id, so that
// the task it may have taken is worked on, not left held until its lease
// times out. ClaimLoop returns nil
// when ctx is done, or the first error that retrying cannot mend: a bad
// key (401), a forbidden request (403), another 4xx, or a URL that is not
// a checkout server's (*NotServerError).
//
// When ctx ends while a claim is on its way, ClaimLoop waits for that
// claim's answer, for at most its ClaimWait and ClaimStopGrace more, and
// gives back (releases) the task it took before it returns: a gateway that
// does not pass the disconnect on (API Gateway) would leave the claim
// waiting on the server, to take a task for an agent that has stopped,
// held by nobody at work until its lease times out.
func (c *Client) ClaimLoop(ctx context.Context, fn func(ctx context.Context, l *Lease) error, opts ...WorkOption) error {
	cfg := newWorkConfig(opts)
	cfg.runID = ""
	if cfg.queues != nil && len(cfg.queues) == 0 {
		return fmt.Errorf("claim loop: %w", noQueuesError())
	}
	stopBeats, err := c.startHeartbeats(ctx, cfg, true)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer stopBeats()
	cfg.noHeartbeat = true // the loop's own heartbeats cover every task
	idle := cfg.idleMin
	// runID is the run of the next claim: a fresh one, or again the run
	// of a claim whose answer was lost (ErrUndecided), which may have
	// taken a task: claimed under the same run, it answers with that
	// lease rather than leaving it held by nobody at work until it
	// times out.
	var runID string
	for ctx.Err() == nil {
		if runID == "" {
			runID = NewRunID()
		}
		co, err := c.ClaimOrGiveBack(ctx, ClaimRequest{Timeout: cfg.timeout, Reason: cfg.reason, Queues: cfg.queues, Wait: cfg.claimWait, RunID: runID})
		if se := (*StoppedClaimError)(nil); errors.As(err, &se) {
			if se.Held != nil {
				cfg.onError(se.TaskID, fmt.Errorf("the claim loop stopped while its claim of run %s was on its way, and %w: it may hold a task until its lease times out", se.RunID, se.Held))
			}
			return nil
		}
		if !errors.Is(err, ErrUndecided) {
			runID = ""
		}
		switch {
		case err == nil && c.ended(ctx, co):
			// The lost claim's lease, answered as it was when it ended
			// (it timed out, or was taken over, meanwhile): nothing to
			// work on. Claim anew.
			continue
		case err == nil:
			idle = cfg.idleMin
			if werr := c.hold(ctx, co, fn, cfg); werr != nil {
				cfg.onError(co.TaskID, werr)
			}
			continue
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, ErrCheckedOut), errors.Is(err, ErrStatusMismatch):
			continue // lost a race for that task: try the next one now
		case !errors.Is(err, ErrNoTaskAvailable) && permanent(err):
			return err
		}
		if !errors.Is(err, ErrNoTaskAvailable) {
			cfg.onError("", err)
		}
		if c.sleep(ctx, c.idleWait(idle)) != nil {
			return nil
		}
		idle = min(idle*2, cfg.idleMax)
	}
	return nil
}

// ClaimStopGrace is how long, past its wait, a claim on its way when its
// ctx ends is waited for (ClaimOrGiveBack, ClaimLoop) before it is given
// up: the claim function's time in AWS (28 s) less the longest wait
// (20 s), and the answer's way back.
const ClaimStopGrace = 10 * time.Second

// ClaimOrGiveBack makes a claim as Claim does, but one that ctx's end does
// not abandon on its way: a gateway that does not pass the disconnect on
// (API Gateway) would leave it waiting on the server, to take a task for a
// caller that has gone, held by nobody at work until its lease times out.
// When ctx ends while the claim is on its way, ClaimOrGiveBack waits for
// its answer (for at most req.Wait and ClaimStopGrace from its start),
// releases the lease it answers, and returns a *StoppedClaimError, which
// matches ctx's error, and ErrUndecided when the claim may still hold a
// task. With ctx already done it sends nothing and returns one too.
func (c *Client) ClaimOrGiveBack(ctx context.Context, req ClaimRequest) (Checkout, error) {
	if req.RunID == "" {
		req.RunID = NewRunID()
	}
	if err := ctx.Err(); err != nil {
		return Checkout{}, &StoppedClaimError{RunID: req.RunID, ctxErr: err}
	}
	bound := time.Now().Add(req.Wait + ClaimStopGrace)
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		// Past the bound no answer is awaited.
		t := time.AfterFunc(time.Until(bound), cancel)
		context.AfterFunc(cctx, func() { t.Stop() })
	})
	defer stop()
	co, err := c.Claim(cctx, req)
	if ctx.Err() == nil {
		return co, err
	}
	se := &StoppedClaimError{RunID: req.RunID, ctxErr: ctx.Err()}
	// The call's answer is the error, not the claim's or the release's
	// (RecordResponse).
	defer record(ctx, 0, nil)
	switch {
	case err == nil:
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), ClaimStopGrace)
		defer rcancel()
		given := co
		se.GivenBack = &given
		_, rerr := c.Release(rctx, co.TaskID, ReleaseRequest{RunID: co.RunID, Fence: co.Fence, AgentID: req.AgentID, Reason: "the claim was stopped before its work began"})
		if rerr != nil && !errors.Is(rerr, ErrNotCheckedOut) && !errors.Is(rerr, ErrNotHolder) {
			// (Ended, or taken over, since: nothing to give back.)
			se.GivenBack = nil
			se.TaskID = co.TaskID
			se.Held = fmt.Errorf("the release of task %s, which it took, failed: %w", co.TaskID, rerr)
		}
	case errors.Is(err, ErrUndecided):
		se.Held = fmt.Errorf("its answer was lost: %w", err)
	}
	return Checkout{}, se
}

// StoppedClaimError is a claim whose ctx ended while it was on its way
// (ClaimOrGiveBack). It matches ctx's error, and ErrUndecided when the
// claim may still hold a task.
type StoppedClaimError struct {
	// RunID is the claim's run: a claim under it answers with the lease
	// the stopped one took, if it still holds one.
	RunID string
	// GivenBack is the lease the claim took and the call released; nil
	// when it took none, or when its release failed.
	GivenBack *Checkout
	// Held, when not nil, says why the claim may still hold a task until
	// its lease times out: its answer was lost (it matches ErrUndecided),
	// or the release of TaskID, the task it took, failed.
	Held   error
	TaskID string
	ctxErr error
}

func (e *StoppedClaimError) Error() string {
	switch {
	case e.Held != nil:
		return fmt.Sprintf("checkout: claim of run %s stopped on its way (%v), and it may hold a task until its lease times out: %v", e.RunID, e.ctxErr, e.Held)
	case e.GivenBack != nil:
		return fmt.Sprintf("checkout: claim of run %s stopped on its way (%v): task %s, which it took (fence %d), was given back", e.RunID, e.ctxErr, e.GivenBack.TaskID, e.GivenBack.Fence)
	}
	return fmt.Sprintf("checkout: claim of run %s stopped (%v): it holds no task", e.RunID, e.ctxErr)
}

func (e *StoppedClaimError) Unwrap() []error {
	if e.Held != nil {
		return []error{e.ctxErr, e.Held}
	}
	return []error{e.ctxErr}
}

// ended reports whether co, a claim's answer, is a lease that has ended:
// the answer to a claim under the run of an earlier one whose lease has
// ended since, with no whole second left. A lease granted a second long
// has none left either once any time has passed: the task's lock tells
// the two apart. A lock that cannot be read counts as ended: work is not
// begun under a lease that may have ended, and a live one of a second
// runs out unused.
func (c *Client) ended(ctx context.Context, co Checkout) bool {
	if co.RemainingSeconds > 0 {
		return false
	}
	s, err := c.Status(ctx, co.TaskID)
	if err != nil {
		return true
	}
	h := s.Checkout
	return !s.Locked || h == nil || h.RunID != co.RunID || h.Fence != co.Fence
}

// idleWait is a wait of between half and all of idle.
func (c *Client) idleWait(idle time.Duration) time.Duration {
	return idle/2 + time.Duration(c.jitter(int64(idle/2)+1))
}

// permanent reports whether err is an answer that asking again will not
// change: a 4xx other than 429, a base URL no request can go to, or a
// URL that answers, but not as a checkout server. (A proxy in front of a
// server that is restarting answers a 5xx, which is an *APIError: its
// /healthz answers a 5xx too, or, once the server is back, as a checkout
// server.)
func permanent(err error) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.Status >= 400 && ae.Status < 500 && ae.Status != http.StatusTooManyRequests
	}
	if errors.Is(err, ErrInvalidBaseURL) {
		return true
	}
	var nse *NotServerError
	return errors.As(err, &nse)
}

// transient reports whether err is a failure that asking again later may
// mend: no answer, or a 5xx (503 unavailable included) or a 429, the
// server's or a gateway's or proxy's in front of it.
func transient(err error) bool {
	var ue *UnreachableError
	if errors.As(err, &ue) {
		return true
	}
	var ae *APIError
	return errors.As(err, &ae) && (ae.Status >= 500 || ae.Status == http.StatusTooManyRequests)
}

// defaultHeartbeatTTL is the heartbeat ttl of WorkOn and ClaimLoop when
// HeartbeatTTL gives none.
const defaultHeartbeatTTL = 90 * time.Second

// heartbeatRetry is the first wait before a failed heartbeat is sent
// again; it doubles with each failure, up to ttl/3.
const heartbeatRetry = 500 * time.Millisecond

// beatLoop is the heartbeat loop of a Client's WorkOn and ClaimLoop calls
// of one ttl: one loop however many calls run at once.
type beatLoop struct {
	users map[*workConfig]bool // each user's config: OnError gets the loop's failures
	// reporting is held while the users' OnError get a failure, and by a
	// user leaving: no OnError is called once its call has returned.
	reporting sync.Mutex
	cancel    context.CancelFunc
	stopped   chan struct{}
}

// startHeartbeats sends one heartbeat now (so that no lease is taken while
// the agent counts as dead), unless a loop of this client already beats
// with cfg's ttl, and then every ttl/3 until stop is called. A first
// heartbeat that fails is returned, unless patient: then, until it fails
// in a way that retrying cannot mend, it goes to OnError and is tried
// again with the idle backoff.
//
// A heartbeat is the agent's, not the task's: once the agent has sent one,
// its every lease ends when its heartbeats stop. So when the last WorkOn
// or ClaimLoop of this client that heartbeats returns, it sends one more,
// of lastBeatTTL: the agent's other leases (taken by hand, say) end by
// their own timeouts then, not 90 s later by a death nobody died. That
// long heartbeat must never land after the first heartbeat of a call
// starting meanwhile (the agent would count as alive for an hour while
// that call works, not for its ttl): a call counts as heartbeating from
// its start, so that none is sent while one starts, and a call's first
// heartbeat waits for the long one on its way, if any.
func (c *Client) startHeartbeats(ctx context.Context, cfg workConfig, patient bool) (stop func(), err error) {
	if cfg.noHeartbeat {
		return func() {}, nil
	}
	ttl := cfg.heartbeatTTL
	me := &cfg
	hs := c.helperState()
	c.beatMu.Lock()
	c.beating++
	b := hs.beats[ttl]
	if b != nil {
		b.users[me] = true // the agent is alive: the loop says so
	}
	c.beatMu.Unlock()
	if b == nil {
		fail := func(err error) (func(), error) {
			c.beatMu.Lock()
			sent := c.leaveBeats(hs)
			c.beatMu.Unlock()
			c.sendLastBeat(ctx, cfg, hs, sent)
			return nil, err
		}
		idle := cfg.idleMin
		for {
			c.beatMu.Lock()
			last := hs.lastBeat
			c.beatMu.Unlock()
			if last != nil {
				select {
				case <-last:
				case <-ctx.Done():
					return fail(context.Cause(ctx))
				}
			}
			_, err := c.Heartbeat(ctx, ttl)
			if err == nil {
				break
			}
			if !patient || ctx.Err() != nil || permanent(err) {
				return fail(err)
			}
			cfg.onError("", err)
			if serr := c.sleep(ctx, c.idleWait(idle)); serr != nil {
				return fail(serr)
			}
			idle = min(idle*2, cfg.idleMax)
		}
		c.beatMu.Lock()
		hs.beaten = true
		if b = hs.beats[ttl]; b == nil { // another call may have started one meanwhile
			bg, cancel := context.WithCancel(unrecorded(context.WithoutCancel(ctx)))
			b = &beatLoop{users: map[*workConfig]bool{}, cancel: cancel, stopped: make(chan struct{})}
			hs.beats[ttl] = b
			go func() {
				defer close(b.stopped)
				c.beatEvery(bg, ttl, func(err error) {
					b.reporting.Lock()
					defer b.reporting.Unlock()
					c.beatMu.Lock()
					users := make([]*workConfig, 0, len(b.users))
					for u := range b.users {
						users = append(users, u)
					}
					c.beatMu.Unlock()
					for _, u := range users {
						u.onError("", err)
					}
				})
			}()
		}
		b.users[me] = true
		c.beatMu.Unlock()
	}
	return func() {
		b.reporting.Lock()
		c.beatMu.Lock()
		delete(b.users, me)
		ended := len(b.users) == 0
		if ended {
			delete(hs.beats, ttl)
			b.cancel()
		}
		sent := c.leaveBeats(hs)
		c.beatMu.Unlock()
		b.reporting.Unlock()
		if ended {
			<-b.stopped
		}
		c.sendLastBeat(ctx, cfg, hs, sent)
	}, nil
}

// leaveBeats counts a heartbeating call out, with c.beatMu held. When it
// was the last, and a loop has beaten since the last long heartbeat, it
// returns the channel sendLastBeat is to close once it has sent the next
// long heartbeat; the first heartbeat of the next call waits for it.
func (c *Client) leaveBeats(hs *workState) chan struct{} {
	c.beating--
	if c.beating > 0 || !hs.beaten {
		return nil
	}
	hs.beaten = false
	sent := make(chan struct{})
	hs.lastBeat = sent
	return sent
}

// sendLastBeat sends the long heartbeat leaveBeats asked for, if any, and
// then closes sent.
func (c *Client) sendLastBeat(ctx context.Context, cfg workConfig, hs *workState, sent chan struct{}) {
	if sent == nil {
		return
	}
	defer func() {
		c.beatMu.Lock()
		if hs.lastBeat == sent {
			hs.lastBeat = nil
		}
		c.beatMu.Unlock()
		close(sent)
	}()
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if _, err := c.Heartbeat(lctx, lastBeatTTL); err != nil {
		cfg.onError("", err)
	}
}

// beatEvery sends a heartbeat of ttl every ttl/3 until bg is done; after a
// failed one it tries again sooner, from heartbeatRetry doubling up to
// ttl/3, and reports the failure.
func (c *Client) beatEvery(bg context.Context, ttl time.Duration, report func(error)) {
	wait := ttl / 3
	for c.sleep(bg, wait) == nil {
		_, err := c.Heartbeat(bg, ttl)
		switch {
		case err == nil:
			wait = ttl / 3
		case bg.Err() != nil:
			return
		default:
			report(err)
			if wait == ttl/3 {
				wait = heartbeatRetry
			} else {
				wait *= 2
			}
			wait = min(wait, ttl/3)
		}
	}
}

// lastBeatTTL is the ttl of the heartbeat a client's last heartbeating
// WorkOn or ClaimLoop sends as it returns: the longest the API takes.
const lastBeatTTL = time.Hour

// helpers is the state WorkOn and ClaimLoop keep per Client between calls
// (its heartbeat loops, the leases they lost), by a weak pointer to the
// Client: the entry goes when the Client does.
var helpers sync.Map // weak.Pointer[Client] → *workState

type workState struct {
	beats map[time.Duration]*beatLoop // guarded by the Client's beatMu
	// beaten says a loop has beaten since the last long heartbeat, and
	// lastBeat, while that long heartbeat is on its way, is closed once it
	// has been answered (both guarded by beatMu).
	beaten   bool
	lastBeat chan struct{}
	mu       sync.Mutex
	lost     []lostLease // the latest leases lost, whose lease_lost message is to go
}

// lostLease is a lease hold learned was lost otherwise than by its
// lease_lost message, which may still come: the loss checks delete it.
type lostLease struct {
	taskID string
	fence  int64
}

// maxLostLeases bounds the leases remembered in workState.lost.
const maxLostLeases = 100

func (c *Client) helperState() *workState {
	key := weak.Make(c)
	if s, ok := helpers.Load(key); ok {
		return s.(*workState)
	}
	s, loaded := helpers.LoadOrStore(key, &workState{beats: map[time.Duration]*beatLoop{}})
	if !loaded {
		runtime.AddCleanup(c, func(k weak.Pointer[Client]) { helpers.Delete(k) }, key)
	}
	return s.(*workState)
}

// finishTimeout bounds how long hold keeps trying to complete or release
// a lease once fn has returned.
const finishTimeout = 30 * time.Second

// hold runs fn under the lease co, renewing it, and completes or releases
// it when fn returns.
func (c *Client) hold(ctx context.Context, co Checkout, fn func(context.Context, *Lease) error, cfg workConfig) error {
	l := &Lease{co: co}
	work, cancelWork := context.WithCancelCause(ctx)
	defer cancelWork(nil)
	// lostErr is this lease's loss, as the renewals or the loss checks
	// found it. It is kept apart from work's cause: ctx may have been
	// cancelled with an ErrLeaseLost cause of its own (this call nested in
	// the function of another WorkOn or ClaimLoop, whose lease was lost),
	// which says nothing of this lease, still to be given back.
	var lostMu sync.Mutex
	var lostErr error
	lose := func(err error) {
		lostMu.Lock()
		if lostErr == nil {
			lostErr = err
		}
		lostMu.Unlock()
		cancelWork(err)
	}
	lost := func() error {
		lostMu.Lock()
		defer lostMu.Unlock()
		return lostErr
	}
	// decided is the lease's loss when the server decided it: a loss
	// presumed by the clock alone, with renewals whose answers were lost
	// (presumedLost), may have left the lease held, and is not.
	decided := func() error {
		if err := lost(); err != nil && !errors.As(err, new(presumedLost)) {
			return err
		}
		return nil
	}
	// The renewals and loss checks run until fn returns, not until ctx is
	// done: a function still winding down after ctx's cancellation works
	// under the lease, which must not expire under it.
	// Nor do they record their answers under RecordResponse: they are not
	// the caller's requests, and they run beside the caller's own.
	bg, stopBG := context.WithCancel(unrecorded(context.WithoutCancel(ctx)))
	var wg sync.WaitGroup
	stop := sync.OnceFunc(func() { stopBG(); wg.Wait() })
	defer stop() // even when fn panics: the lease must not be renewed for ever
	wg.Go(func() { c.keepRenewed(bg, l, cfg, lose) })
	if cfg.lossCheck > 0 {
		wg.Go(func() { c.watchLoss(bg, l, cfg, lose) })
	}

	returned := false
	defer func() {
		if returned {
			return
		}
		// fn panicked (or called runtime.Goexit): release the lease as a
		// failed attempt, then let the panic go on.
		r := recover()
		stop()
		what := "the work function exited without returning (runtime.Goexit)"
		if r != nil {
			what = fmt.Sprintf("the work function panicked: %v", r)
		}
		if decided() == nil {
			_ = c.finish(ctx, l, errors.New(what), cfg)
		}
		if r != nil {
			panic(r)
		}
	}()
	ferr := fn(work, l)
	returned = true
	stop()

	if cause := decided(); cause != nil {
		if ferr != nil && !errors.Is(ferr, context.Canceled) && !errors.Is(ferr, cause) {
			return errors.Join(cause, ferr)
		}
		return cause
	}
	if cause := lost(); cause != nil {
		// The loss is presumed: the lease may be held still, kept by a
		// renewal whose answer was lost. It is given back as it would
		// have been, naming it (one gone meanwhile is answered
		// not_checked_out): completed when fn returned nil, released
		// plainly when fn stopped on the cancellation, as a failed
		// attempt otherwise.
		fin := ferr
		if ferr != nil && (errors.Is(ferr, context.Canceled) || errors.Is(ferr, cause)) {
			fin = errGivenBack
		}
		err := c.finish(ctx, l, fin, cfg)
		switch {
		case ferr == nil && err == nil:
			return nil // completed: the lease was held after all
		case ferr == nil:
			return err
		case errors.Is(ferr, context.Canceled) || errors.Is(ferr, cause):
			if err != nil && !errors.Is(err, ErrLeaseLost) {
				return errors.Join(cause, err)
			}
			return cause
		case err != nil && !errors.Is(err, ErrLeaseLost):
			return errors.Join(cause, ferr, err)
		default:
			return errors.Join(cause, ferr)
		}
	}
	err := c.finish(ctx, l, ferr, cfg)
	if ferr != nil {
		if err != nil {
			return errors.Join(ferr, err)
		}
		return ferr
	}
	return err
}

// finish completes the lease l (ferr nil) or releases it (as a failed
// attempt unless ferr is ctx's own cancellation). It does so even when ctx
// is done, since the lease must not linger until timeout, and tries again
// while the failure is transient, for up to finishTimeout or until the
// lease expires, whichever is first. Each try names the lease (run id and
// fence), so a repeat of one that took effect is answered as the first.
func (c *Client) finish(ctx context.Context, l *Lease, ferr error, cfg workConfig) error {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), finishTimeout)
	defer cancel()
	cur := l.Checkout()
	heldTill := l.heldTill()
	rel := ReleaseRequest{RunID: cur.RunID, Fence: cur.Fence}
	if ferr != nil {
		rel.Reason = truncate(ferr.Error(), 512)
		if stopped := errors.Is(ferr, errGivenBack) || ctx.Err() != nil && (errors.Is(ferr, context.Canceled) || errors.Is(ferr, context.DeadlineExceeded)); !stopped {
			rel.Outcome, rel.Error = OutcomeFailed, truncate(ferr.Error(), MaxErrorLen)
		}
	}
	var err error
	for try := 1; ; try++ {
		if ferr == nil {
			_, err = c.Complete(fctx, cur.TaskID, CompleteRequest{RunID: cur.RunID, Fence: cur.Fence})
		} else {
			_, err = c.Release(fctx, cur.TaskID, rel)
			if rel.Outcome != "" && isUnknownField(err) {
				// A server before API 1.1 refuses the outcome: release plainly.
				rel.Outcome, rel.Error = "", ""
				_, err = c.Release(fctx, cur.TaskID, rel)
			}
		}
		expired := !heldTill.IsZero() && !c.now().Before(heldTill)
		if err == nil || !transient(err) || expired || fctx.Err() != nil {
			break
		}
		cfg.onError(cur.TaskID, err)
		if c.sleep(fctx, c.finishWait(try)) != nil {
			break
		}
	}
	if errors.Is(err, ErrNotHolder) || errors.Is(err, ErrNotCheckedOut) {
		c.leaseLost(fctx, cur, cfg, true)
		err = fmt.Errorf("%w: task %s: %w", ErrLeaseLost, cur.TaskID, err)
	}
	return err
}

// errGivenBack is the reason of the release of a lease whose loss was
// presumed (presumedLost) when the work stopped on it: a plain release,
// not a failed attempt.
var errGivenBack = errors.New("its renewals' answers were lost: the lease is given back")

// finishWait is the wait before finish's try number try+1: from a quarter
// of a second, doubling up to 4 s, randomised between half and all of it.
func (c *Client) finishWait(try int) time.Duration {
	d := 250 * time.Millisecond << min(try-1, 4)
	return d/2 + time.Duration(c.jitter(int64(d/2)+1))
}

// keepRenewed renews l every interval until bg is done, and cancels the work
// with an ErrLeaseLost cause once the lease is gone.
func (c *Client) keepRenewed(bg context.Context, l *Lease, cfg workConfig, lose context.CancelCauseFunc) {
	every := cfg.renewEvery
	if every <= 0 {
		every = l.Checkout().Timeout() / 3
	}
	if every <= 0 {
		every = time.Second
	}
	for c.sleep(bg, every) == nil {
		cur := l.Checkout()
		co, err := c.Renew(bg, cur.TaskID, RenewRequest{RunID: cur.RunID, Fence: cur.Fence})
		var ae *APIError
		switch {
		case err == nil:
			l.set(co)
			continue
		case bg.Err() != nil:
			return
		case errors.As(err, &ae) && permanent(ae):
			lose(fmt.Errorf("%w: task %s: %w", ErrLeaseLost, cur.TaskID, err))
			c.leaseLost(bg, cur, cfg, true)
			return
		}
		if errors.Is(err, ErrUndecided) {
			// The server may have renewed the lease: till now, at the
			// latest, plus its timeout.
			l.mayBeHeldTill(c.now().Add(cur.Timeout()))
		}
		switch {
		case c.now().Before(cur.ExpiresAt):
			cfg.onError(cur.TaskID, err)
		case l.heldTill().After(cur.ExpiresAt):
			// A renewal that lost its answer may have kept the lease:
			// nothing vouches for it now, so the work stops, and hold
			// gives the lease back (naming it) rather than leave it held
			// by nobody at work.
			lose(presumedLost{fmt.Errorf("%w: task %s: its last known expiry passed while renewals failed (one may have renewed it: it is given back): %w", ErrLeaseLost, cur.TaskID, err)})
			return
		default:
			lose(fmt.Errorf("%w: task %s: expired while renewals failed: %w", ErrLeaseLost, cur.TaskID, err))
			c.leaseLost(bg, cur, cfg, true)
			return
		}
	}
}

// leaseLost notes that the lease co was lost, found otherwise than by its
// lease_lost message: with CheckLossEvery, which reads those messages,
// that message is deleted now if it is there, or by a later loss check of
// this client when it comes (the server sends it within about a second of
// the lease's end, which for an expiry may be a sweep later). Without
// CheckLossEvery the inbox is the caller's and is left alone.
func (c *Client) leaseLost(ctx context.Context, co Checkout, cfg workConfig, scan bool) {
	if cfg.lossCheck <= 0 {
		return
	}
	hs := c.helperState()
	hs.mu.Lock()
	hs.lost = append(hs.lost, lostLease{co.TaskID, co.Fence})
	if len(hs.lost) > maxLostLeases {
		hs.lost = hs.lost[len(hs.lost)-maxLostLeases:]
	}
	hs.mu.Unlock()
	if !scan {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	c.lostMessage(ctx, Checkout{}) // deletes the message if it came already
}

// watchLoss looks in the inbox every cfg.lossCheck for a lease_lost message
// about l, and cancels the work with an ErrLeaseLost cause when it finds
// one. A failed look is tried again at the next; the renewals still run.
func (c *Client) watchLoss(bg context.Context, l *Lease, cfg workConfig, lose context.CancelCauseFunc) {
	for c.sleep(bg, cfg.lossCheck) == nil {
		cur := l.Checkout()
		if m, ok := c.lostMessage(bg, cur); ok {
			if m.MessageID == "" { // found without its message: delete it once it shows
				c.leaseLost(bg, cur, cfg, false)
			}
			lose(fmt.Errorf("%w: task %s (%s at %s)", ErrLeaseLost, cur.TaskID, m.Reason, m.At.Format(time.RFC3339)))
			return
		}
	}
}

// maxInbox is the most messages GET /api/inbox answers: the oldest.
const maxInbox = 1000

// lostMessage finds, and deletes, the inbox's lease_lost message about the
// lease co (its task and fence); it also deletes the lease_lost messages
// of the leases this client's holds lost otherwise (leaseLost). Any
// failure is no message.
//
// The server answers only the oldest maxInbox messages: when the inbox is
// that full and co's message is not among them, the lease's status says
// whether it is still co; if not, the loss is reported without the
// message (its reason then reads "no longer held"), which stays behind
// the older messages.
func (c *Client) lostMessage(ctx context.Context, co Checkout) (Message, bool) {
	msgs, err := c.Inbox(ctx)
	if err != nil {
		return Message{}, false
	}
	hs := c.helperState()
	hs.mu.Lock()
	lost := slices.Clone(hs.lost)
	hs.mu.Unlock()
	var mine Message
	found := false
	for _, m := range msgs {
		if m.Type != MessageLeaseLost {
			continue
		}
		if co.TaskID != "" && m.TaskID == co.TaskID && m.Fence == co.Fence {
			_ = c.DeleteMessage(ctx, m.MessageID) // read: its news is in the error
			mine, found = m, true
			continue
		}
		if i := slices.Index(lost, lostLease{m.TaskID, m.Fence}); i >= 0 {
			if err := c.DeleteMessage(ctx, m.MessageID); err == nil || errors.Is(err, ErrMessageNotFound) {
				hs.mu.Lock()
				hs.lost = slices.DeleteFunc(hs.lost, func(x lostLease) bool { return x == lost[i] })
				hs.mu.Unlock()
			}
		}
	}
	if found || co.TaskID == "" || len(msgs) < maxInbox {
		return mine, found
	}
	st, err := c.Status(ctx, co.TaskID)
	if err != nil || st.Locked && st.Checkout != nil && st.Checkout.Fence == co.Fence && st.Checkout.RunID == co.RunID {
		return Message{}, false
	}
	return Message{Type: MessageLeaseLost, TaskID: co.TaskID, Fence: co.Fence, RunID: co.RunID,
		Reason: "no longer held", At: c.now()}, true
}

// truncate cuts s to at most n bytes, at the start of a character, so
// that the text stays valid UTF-8.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// isUnknownField reports whether err is the answer of a server that does
// not know a field of the body (400 invalid_json).
func isUnknownField(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == errcode.InvalidJSON
}
