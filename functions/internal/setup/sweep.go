package setup

// The sweeper function's handler: one sweep per scheduled run, with one
// line of its counts.

import (
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

// SweepHandler is the sweeper's handler type.
type SweepHandler = func(context.Context) (lease.SweepResult, error)

// Sweep is the sweeper function's handler. Every run writes exactly one
// line, whether it succeeded or failed: its counts, its duration, and as
// metrics the backlog it ended and the time it took. A run that is still
// sweeping SweepDeadlineMargin before the function's timeout stops there
// ("sweep ran out of time", with what it ended); the next run goes on.
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
		if d, ok := ctx.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, d.Add(-SweepDeadlineMargin))
			defer cancel()
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
		start := now()
		res, err := store.Sweep(ctx)
		took := now().Sub(start)
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
		return res, err
	}
}
