package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/checkout-dev/checkout/errcode"
)

// Lease is a lease held by WorkOn or ClaimLoop for the function they run.
type Lease struct {
	mu sync.Mutex
	co Checkout
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
	l.mu.Unlock()
}

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

// Queues sets the queues ClaimLoop claims from (default: the server's,
// "default").
func Queues(qs ...string) WorkOption { return func(c *workConfig) { c.queues = qs } }

// ClaimWait makes each of ClaimLoop's claims wait up to d (at most 20s) on
// the server for a task to become available, before the loop backs off.
func ClaimWait(d time.Duration) WorkOption { return func(c *workConfig) { c.claimWait = d } }

// LeaseTimeout sets the lease length (default: the server's, 30m).
func LeaseTimeout(d time.Duration) WorkOption { return func(c *workConfig) { c.timeout = d } }

// Reason is recorded with the checkout.
func Reason(s string) WorkOption { return func(c *workConfig) { c.reason = s } }

// RunID sets the run id of WorkOn's checkout (default: a fresh one).
func RunID(s string) WorkOption { return func(c *workConfig) { c.runID = s } }

// HeartbeatTTL sets the heartbeat ttl (default 90s); heartbeats are sent
// every ttl/3.
func HeartbeatTTL(d time.Duration) WorkOption { return func(c *workConfig) { c.heartbeatTTL = d } }

// NoHeartbeats turns heartbeats off: the leases then end only by time.
func NoHeartbeats() WorkOption { return func(c *workConfig) { c.noHeartbeat = true } }

// RenewEvery sets how often the lease is renewed (default: a third of its
// timeout, so two renewals can fail before it runs out).
func RenewEvery(d time.Duration) WorkOption { return func(c *workConfig) { c.renewEvery = d } }

// CheckLossEvery makes WorkOn and ClaimLoop look in the agent's inbox every
// d, between renewals, for a lease_lost message about the lease they hold:
// a force release, a cancel, a timeout or the agent's death then cancels
// the work within about d plus a second, rather than at the next renewal
// (a third of the lease's timeout by default). Each look is one GET
// /api/inbox. Off by default: the renewal alone finds the loss.
func CheckLossEvery(d time.Duration) WorkOption { return func(c *workConfig) { c.lossCheck = d } }

// IdleBackoff sets how ClaimLoop waits while no task is available: from min,
// doubling up to max, each wait randomised between half and all of it
// (default 1s to 30s).
func IdleBackoff(min, max time.Duration) WorkOption {
	return func(c *workConfig) { c.idleMin, c.idleMax = min, max }
}

// OnError receives the errors that do not stop the work: failed heartbeats
// and renewals that will be tried again, and, in ClaimLoop, the error of
// each task's function.
func OnError(f func(taskID string, err error)) WorkOption {
	return func(c *workConfig) { c.onError = f }
}

func newWorkConfig(opts []WorkOption) workConfig {
	cfg := workConfig{heartbeatTTL: 90 * time.Second, idleMin: time.Second, idleMax: 30 * time.Second,
		onError: func(string, error) {}}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.idleMin <= 0 {
		cfg.idleMin = time.Millisecond
	}
	if cfg.idleMax < cfg.idleMin {
		cfg.idleMax = cfg.idleMin
	}
	return cfg
}

// WorkOn checks taskID out and runs fn while it holds the lease.
//
// In the background it renews the lease well before it expires and sends
// heartbeats. If the lease is lost (force-released, cancelled, expired while
// renewals failed, or ended because the agent was declared dead), fn's
// context is cancelled with a cause matching ErrLeaseLost: at the next
// renewal, which the server refuses, or sooner with CheckLossEvery, which
// looks for the lease_lost message the server sends the former holder (the
// error then names the reason it gives). When fn returns nil the task
// is completed; when it returns an error the lease is released with the
// error as the reason.
//
// When fn returns an error, the release is a failed attempt (outcome
// failed), with the error's text, cut to MaxErrorLen bytes, as its error:
// the task's LastError. The server then holds the task back for its retry
// delay, or marks it failed once it has used its MaxAttempts. An error
// that is only the cancellation of ctx (the caller stopping, not the work
// failing) is released plainly, without counting as a failure. A server
// older than API version 1.1, which does not know outcomes, gets a plain
// release.
//
// WorkOn returns fn's error, an error matching ErrLeaseLost (and fn's error,
// if any) when the lease was lost, or the checkout's error: a
// *ConflictError when another agent holds the task.
func (c *Client) WorkOn(ctx context.Context, taskID string, fn func(ctx context.Context, l *Lease) error, opts ...WorkOption) error {
	cfg := newWorkConfig(opts)
	stopBeats, err := c.startHeartbeats(ctx, cfg)
	if err != nil {
		return err
	}
	defer stopBeats()
	runID := cfg.runID
	if runID == "" {
		runID = NewRunID()
	}
	co, err := c.Checkout(ctx, taskID, CheckoutRequest{Timeout: cfg.timeout, Reason: cfg.reason, RunID: runID})
	if err != nil {
		return err
	}
	return c.hold(ctx, co, fn, cfg)
}

// ClaimLoop works through the pool: it claims the best open task (of the
// Queues option's queues; ClaimWait long-polls), runs fn under its lease as
// WorkOn does, and claims the next. On a conflict it
// claims again at once; while no task is available it backs off with
// jitter. Each fn's error goes to the OnError option, the task is released
// as a failed attempt as WorkOn does, and the loop goes on.
// ClaimLoop returns nil when ctx is done, or the first error that retrying
// cannot mend (a bad key, for example).
func (c *Client) ClaimLoop(ctx context.Context, fn func(ctx context.Context, l *Lease) error, opts ...WorkOption) error {
	cfg := newWorkConfig(opts)
	cfg.runID = ""
	stopBeats, err := c.startHeartbeats(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer stopBeats()
	cfg.noHeartbeat = true // the loop's own heartbeats cover every task
	idle := cfg.idleMin
	for ctx.Err() == nil {
		co, err := c.Claim(ctx, ClaimRequest{Timeout: cfg.timeout, Reason: cfg.reason, Queues: cfg.queues, Wait: cfg.claimWait})
		switch {
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
		wait := idle/2 + time.Duration(c.jitter(int64(idle/2)+1))
		if c.sleep(ctx, wait) != nil {
			return nil
		}
		idle = min(idle*2, cfg.idleMax)
	}
	return nil
}

// permanent reports whether err is an answer that asking again will not
// change (a 4xx), or a base URL no request can go to.
func permanent(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 && ae.Status != http.StatusTooManyRequests ||
		errors.Is(err, ErrInvalidBaseURL)
}

// startHeartbeats sends one heartbeat now (so that no lease is taken while
// the agent counts as dead) and then every ttl/3 until stop is called.
//
// A heartbeat is the agent's, not the task's: once the agent has sent one,
// its every lease ends when its heartbeats stop. So when the last WorkOn
// or ClaimLoop of this client that heartbeats returns, it sends one more,
// of lastBeatTTL: the agent's other leases (taken by hand, say) end by
// their own timeouts then, not 90 s later by a death nobody died.
func (c *Client) startHeartbeats(ctx context.Context, cfg workConfig) (stop func(), err error) {
	if cfg.noHeartbeat {
		return func() {}, nil
	}
	if _, err := c.Heartbeat(ctx, cfg.heartbeatTTL); err != nil {
		return nil, err
	}
	c.beatMu.Lock()
	c.beating++
	c.beatMu.Unlock()
	bg, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		for c.sleep(bg, cfg.heartbeatTTL/3) == nil {
			if _, err := c.Heartbeat(bg, cfg.heartbeatTTL); err != nil && bg.Err() == nil {
				cfg.onError("", err)
			}
		}
	})
	return func() {
		cancel()
		wg.Wait()
		c.beatMu.Lock()
		c.beating--
		last := c.beating == 0
		c.beatMu.Unlock()
		if last {
			lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if _, err := c.Heartbeat(lctx, lastBeatTTL); err != nil {
				cfg.onError("", err)
			}
		}
	}, nil
}

// lastBeatTTL is the ttl of the heartbeat a client's last heartbeating
// WorkOn or ClaimLoop sends as it returns: the longest the API takes.
const lastBeatTTL = time.Hour

// hold runs fn under the lease co, renewing it, and completes or releases
// it when fn returns.
func (c *Client) hold(ctx context.Context, co Checkout, fn func(context.Context, *Lease) error, cfg workConfig) error {
	l := &Lease{co: co}
	work, cancelWork := context.WithCancelCause(ctx)
	defer cancelWork(nil)
	bg, stopBG := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { c.keepRenewed(bg, l, cfg, cancelWork) })
	if cfg.lossCheck > 0 {
		wg.Go(func() { c.watchLoss(bg, l, cfg, cancelWork) })
	}

	ferr := fn(work, l)
	stopBG()
	wg.Wait()

	if cause := context.Cause(work); errors.Is(cause, ErrLeaseLost) {
		if ferr != nil && !errors.Is(ferr, context.Canceled) && !errors.Is(ferr, cause) {
			return errors.Join(cause, ferr)
		}
		return cause
	}
	// Finish even when ctx is done: the lease must not linger until timeout.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	cur := l.Checkout()
	var err error
	if ferr == nil {
		_, err = c.Complete(fctx, cur.TaskID, CompleteRequest{RunID: cur.RunID, Fence: cur.Fence})
	} else {
		rel := ReleaseRequest{RunID: cur.RunID, Fence: cur.Fence, Reason: truncate(ferr.Error(), 512)}
		if stopped := ctx.Err() != nil && (errors.Is(ferr, context.Canceled) || errors.Is(ferr, context.DeadlineExceeded)); !stopped {
			rel.Outcome, rel.Error = OutcomeFailed, truncate(ferr.Error(), MaxErrorLen)
		}
		_, err = c.Release(fctx, cur.TaskID, rel)
		if rel.Outcome != "" && isUnknownField(err) {
			// A server before API 1.1 refuses the outcome: release plainly.
			rel.Outcome, rel.Error = "", ""
			_, err = c.Release(fctx, cur.TaskID, rel)
		}
	}
	if errors.Is(err, ErrNotHolder) || errors.Is(err, ErrNotCheckedOut) {
		err = fmt.Errorf("%w: task %s: %w", ErrLeaseLost, cur.TaskID, err)
	}
	if ferr != nil {
		if err != nil {
			return errors.Join(ferr, err)
		}
		return ferr
	}
	return err
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
		switch {
		case err == nil:
			l.set(co)
		case bg.Err() != nil:
			return
		case permanent(err):
			lose(fmt.Errorf("%w: task %s: %w", ErrLeaseLost, cur.TaskID, err))
			return
		case !c.now().Before(cur.ExpiresAt):
			lose(fmt.Errorf("%w: task %s: expired while renewals failed: %w", ErrLeaseLost, cur.TaskID, err))
			return
		default:
			cfg.onError(cur.TaskID, err)
		}
	}
}

// watchLoss looks in the inbox every cfg.lossCheck for a lease_lost message
// about l, and cancels the work with an ErrLeaseLost cause when it finds
// one. A failed look is tried again at the next; the renewals still run.
func (c *Client) watchLoss(bg context.Context, l *Lease, cfg workConfig, lose context.CancelCauseFunc) {
	for c.sleep(bg, cfg.lossCheck) == nil {
		cur := l.Checkout()
		if m, ok := c.lostMessage(bg, cur); ok {
			lose(fmt.Errorf("%w: task %s (%s at %s)", ErrLeaseLost, cur.TaskID, m.Reason, m.At.Format(time.RFC3339)))
			return
		}
	}
}

// lostMessage finds, and deletes, the inbox's lease_lost message about the
// lease co (its task and fence). Any failure is no message.
func (c *Client) lostMessage(ctx context.Context, co Checkout) (Message, bool) {
	msgs, err := c.Inbox(ctx)
	if err != nil {
		return Message{}, false
	}
	for _, m := range msgs {
		if m.Type == MessageLeaseLost && m.TaskID == co.TaskID && m.Fence == co.Fence {
			_ = c.DeleteMessage(ctx, m.MessageID) // read: its news is in the error
			return m, true
		}
	}
	return Message{}, false
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
