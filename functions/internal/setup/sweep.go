package setup

// The sweeper function's handler: a sweep per scheduled run, then, for the
// rest of the run's minute, a sweep as each lease or heartbeat falls due;
// one line of counts per sweep.

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/lease"
)

// SweepDeadlineMargin is how long before the invocation's deadline (the
// function's timeout) a run stops sweeping, so that it writes its line.
const SweepDeadlineMargin = time.Second

// DefaultSweepStay is how long after its start a sweeper run stays to
// sweep what falls due, when EnvSweepStay does not say: most of the
// minute until the schedule's next run, which then takes over.
const DefaultSweepStay = 55 * time.Second

// SweepRoom is the time a run's stay leaves for its last sweep: no sweep
// of the stay starts later than SweepDeadlineMargin + SweepRoom before the
// invocation's deadline. With the stack's 60 s timeout that is 55 s after
// the start, DefaultSweepStay.
const SweepRoom = 4 * time.Second

// While a run stays, its sweeps start at least sweepGap apart (so that
// leases falling due one after another cost a sweep a second at most, not
// one each), further apart after a failure (doubling up to sweepRelook),
// and it looks again at least every sweepRelook while it waits, so that
// a lease granted meanwhile that expires sooner than the one it waits for
// is swept no more than that late.
const (
	sweepGap    = time.Second
	sweepRelook = 10 * time.Second
)

// sweepAgentsEvery is the least time between two whole sweeps of a run
// (lease.Store.Sweep, which judges the agents whose heartbeat expired):
// each reads every live lease, so a run that stays sweeps for deaths at
// most that often, and for leases' timeouts (lease.Store.SweepExpired) as
// they fall due.
const sweepAgentsEvery = 10 * time.Second

// SweepHandler is the sweeper's handler type.
type SweepHandler = func(context.Context) (lease.SweepResult, error)

// Sweep is the sweeper function's handler. A run sweeps (lease.Store.Sweep),
// then stays until e.SweepStay after its start, sweeping each lease
// expiry, delayed task's not_before and heartbeat expiry as it falls due:
// it asks lease.Store.NextDue for the earliest in the rest of its stay,
// returns at once when there is none, and otherwise waits until then
// (looking again at least every sweepRelook), sweeps (the first pass
// alone, SweepExpired, for leases and delays; the whole Sweep for a
// heartbeat, at most once each sweepAgentsEvery, since it reads every
// live lease) and asks again. So in AWS a lease's timeout is recorded
// within about a second of it, as the local server's sweep loop records
// it, and a holder's death within about ten seconds; a run with nothing
// due within its minute costs one sweep and one NextDue, as before but
// for the look. A lease granted after a look and expiring before the next
// is swept at that next look, at most sweepRelook later; one a dead agent
// takes has no expiry to wait for, and the next run's sweep ends it.
//
// The stay never passes the invocation's deadline less SweepDeadlineMargin
// and SweepRoom, so it ends before the schedule's next run starts; runs
// that overlap anyway are safe, since each lease ends once whoever sweeps
// it. Like the local server's loop, the window looked at moves only with a
// sweep that succeeded: a failed sweep is logged and its window looked at
// again.
//
// Every sweep writes exactly one line, whether it succeeded or failed: its
// counts, its duration, and as metrics the backlog it ended and the time
// it took. A sweep still running SweepDeadlineMargin before the function's
// timeout stops there ("sweep ran out of time", with what it ended); the
// next run goes on. The run answers the totals of its sweeps, and the
// error of its last sweep, if that one failed, or else of its last whole
// sweep, if that one failed (a leases' pass after it judges no agent).
//
// While a tasks table of the earlier schema waits for `checkout-server
// migrate -aws` (MigrationGuard over db, checked at cold start first), a
// run sweeps nothing and its line says so: the leases to end are in the
// earlier table, and the migration copies them as they are. A nil db skips
// the check (tests of the sweep alone).
func Sweep(store *lease.Store, db GetItemAPI, e Env) SweepHandler {
	m := e.metrics()
	now := e.clock()
	var guard *MigrationGuard
	if db != nil {
		guard = NewMigrationGuard(db, e, nil) // the run's own line says what it found
		guard.coldStart()
	}
	return func(ctx context.Context) (lease.SweepResult, error) {
		began, wallBegan := now(), time.Now()
		stay, agentsEvery := e.SweepStay, cmp.Or(e.SweepAgentsEvery, sweepAgentsEvery)
		if d, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, d.Add(-SweepDeadlineMargin))
			defer cancel()
			stay = min(stay, time.Until(d)-SweepDeadlineMargin-SweepRoom)
		}
		if err := guard.Check(ctx); err != nil {
			level, msg := slog.LevelWarn, "sweep skipped: the earlier tasks table has not been migrated; run `checkout-server migrate -aws`"
			if !errors.Is(err, ErrNotMigrated) {
				level, msg = slog.LevelError, "sweep skipped: the migration check failed"
			}
			m.Emit(ctx, level, msg, nil, slog.String("table", guard.Table()), slog.String("error", err.Error()))
			if errors.Is(err, ErrNotMigrated) {
				return lease.SweepResult{}, nil // not a failure: no dead letter, no error alarm
			}
			return lease.SweepResult{}, err
		}
		var total lease.SweepResult
		// since holds, for each kind, the clock at the start of the last
		// sweep that succeeded for it (the whole Sweep for agents; either
		// for leases): what fell due after it is yet to sweep. Until one
		// succeeds, the window starts before every expiry. lastStart is
		// the last sweep's start, lastFull the last whole Sweep's.
		var since lease.Expiries
		lastStart, lastFull := began, began
		// agentsErr is the last whole Sweep's error (nil once one
		// succeeds): a leases' pass after it judges no agent, so it does
		// not make the run's failure good.
		var agentsErr error
		sweep := func(full bool) error {
			by := store.SweepExpired
			if full {
				by = store.Sweep
			}
			start := now()
			lastStart = start
			if full {
				lastFull = start
			}
			res, err := by(ctx)
			took := now().Sub(start)
			total.Timeouts += res.Timeouts
			total.AgentDeaths += res.AgentDeaths
			total.Ready += res.Ready
			if full {
				agentsErr = err
			}
			if err == nil {
				since.Leases = start
				if full {
					since.Agents = start
				}
			}
			level, msg := slog.LevelInfo, "sweep"
			attrs := []slog.Attr{
				slog.Int("timeouts", res.Timeouts),
				slog.Int("agent_deaths", res.AgentDeaths),
				slog.Float64("duration_ms", float64(took.Microseconds())/1000),
			}
			if err != nil {
				level, msg = slog.LevelError, "sweep failed"
				if errors.Is(err, context.DeadlineExceeded) {
					msg = "sweep ran out of time"
				}
				attrs = append(attrs, slog.String("error", err.Error()))
			}
			m.Emit(ctx, level, msg, []Metric{
				{Name: deploy.MetricSweepEnded, Value: float64(res.Timeouts + res.AgentDeaths)},
				{Name: deploy.MetricSweepDuration, Value: float64(took.Milliseconds()), Unit: "Milliseconds"},
			}, attrs...)
			return err
		}
		err := sweep(true)
		if stay <= 0 {
			return total, err
		}
		// The stay, by the store's clock (stayEnd) and, in case that clock
		// is not the wall's (tests), by the wall's too (stayCtx).
		stayEnd := began.Add(stay)
		stayCtx, cancel := context.WithTimeout(ctx, stay-time.Since(wallBegan))
		defer cancel()
		gap := sweepGap // between sweeps: longer after a failure
		if err != nil {
			gap = min(2*gap, sweepRelook)
		}
		for stayCtx.Err() == nil {
			_, next, lookErr := store.NextDue(stayCtx, since, stayEnd)
			if lookErr != nil {
				if stayCtx.Err() != nil {
					break
				}
				m.Emit(ctx, slog.LevelWarn, "sweep look failed", nil, slog.String("error", lookErr.Error()))
				gap = min(2*gap, sweepRelook)
				if !sleep(stayCtx, gap) {
					break
				}
				continue
			}
			// A death waits for the whole Sweep, at most one each
			// sweepAgentsEvery: it reads every live lease.
			if !next.Agents.IsZero() && next.Agents.Before(lastFull.Add(agentsEvery)) {
				next.Agents = lastFull.Add(agentsEvery)
			}
			wake := next.Leases
			if wake.IsZero() || (!next.Agents.IsZero() && next.Agents.Before(wake)) {
				wake = next.Agents
			}
			if wake.IsZero() {
				break // nothing falls due in the rest of the stay
			}
			if after := lastStart.Add(gap); after.After(wake) {
				wake = after
			}
			if wake.After(stayEnd) {
				break // the next run's sweep takes it
			}
			if wait := wake.Sub(now()); wait > 0 {
				if !sleep(stayCtx, min(wait, sweepRelook)) {
					break
				}
				if wait > sweepRelook {
					continue // look again: a lease granted meanwhile may expire sooner
				}
			}
			full := !next.Agents.IsZero() && !next.Agents.After(wake)
			if err = sweep(full); err != nil {
				gap = min(2*gap, sweepRelook)
			} else {
				gap = sweepGap
			}
		}
		if err == nil {
			err = agentsErr // the deaths are not swept: no whole sweep succeeded since
		}
		return total, err
	}
}

// sleep waits d, or until ctx ends (false).
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
