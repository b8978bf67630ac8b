package setup

// The sweeper function's handler: one sweep per scheduled run, with one
// line of its counts.

import (
	"context"
	"errors"
	"log/slog"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/lease"
)

// SweepHandler is the sweeper's handler type.
type SweepHandler = func(context.Context) (lease.SweepResult, error)

// Sweep is the sweeper function's handler. Every run writes exactly one
// line, whether it succeeded or failed: its counts, its duration, and as
// metrics the backlog it ended and the time it took.
func Sweep(store *lease.Store, e Env) SweepHandler {
	m := e.metrics()
	now := e.clock()
	return func(ctx context.Context) (lease.SweepResult, error) {
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
