package setup

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/errcode"
	"github.com/checkout-dev/checkout/lease"
)

// Metrics writes the service's business metrics in CloudWatch's embedded
// metric format (EMF): one JSON line on standard output per document, with
// an "_aws" member naming the metrics it carries. CloudWatch Logs extracts
// them from the function's log group, so counting costs no API call and no
// wait. The lines are ordinary structured log lines too (time, level, msg
// and fields), written whatever LOG_LEVEL says: a sweep's line, for one, is
// the record of that run.
//
// A nil *Metrics writes nothing.
type Metrics struct {
	log        *slog.Logger
	deployment string
	now        func() time.Time
}

// NewMetrics writes EMF lines to w (nil: nowhere) for the deployment, the
// value of every metric's Deployment dimension.
func NewMetrics(w io.Writer, deployment string, now func() time.Time) *Metrics {
	if w == nil {
		return nil
	}
	if now == nil {
		now = time.Now
	}
	// Below every level: metrics are never filtered out.
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug - 4})
	return &Metrics{log: slog.New(h), deployment: deployment, now: now}
}

// Metric is one value of a document.
type Metric struct {
	Name  string
	Value float64
	Unit  string // "" is Count
}

type emfMetric struct {
	Name string `json:"Name"`
	Unit string `json:"Unit"`
}

type emfDirective struct {
	Namespace  string      `json:"Namespace"`
	Dimensions [][]string  `json:"Dimensions"`
	Metrics    []emfMetric `json:"Metrics"`
}

type emfMetadata struct {
	Timestamp         int64          `json:"Timestamp"`
	CloudWatchMetrics []emfDirective `json:"CloudWatchMetrics"`
}

// Emit writes one line: msg and attrs as a log line at level, and ms as its
// metrics. With no metric it is a plain log line.
func (m *Metrics) Emit(ctx context.Context, level slog.Level, msg string, ms []Metric, attrs ...slog.Attr) {
	if m == nil {
		return
	}
	if len(ms) > 0 {
		dir := emfDirective{Namespace: deploy.MetricNamespace, Dimensions: [][]string{{deploy.DimensionDeployment}}}
		for _, v := range ms {
			unit := v.Unit
			if unit == "" {
				unit = "Count"
			}
			dir.Metrics = append(dir.Metrics, emfMetric{Name: v.Name, Unit: unit})
			attrs = append(attrs, slog.Float64(v.Name, v.Value))
		}
		attrs = append(attrs,
			slog.String(deploy.DimensionDeployment, m.deployment),
			slog.Any("_aws", emfMetadata{Timestamp: m.now().UnixMilli(), CloudWatchMetrics: []emfDirective{dir}}))
	}
	m.log.LogAttrs(ctx, level, msg, attrs...)
}

// count is a Count metric of value 1.
func count(name string) Metric { return Metric{Name: name, Value: 1} }

// meteredNotifier counts the notices the store hands to the bus, and the
// lease endings they report. In the checkouts function an expiry or a death
// is always a takeover: only a checkout ends leases there without a holder's
// request.
type meteredNotifier struct {
	next     lease.Notifier
	metrics  *Metrics
	function string
}

func (n meteredNotifier) Notify(ctx context.Context, nt lease.Notice) error {
	err := n.next.Notify(ctx, nt)
	var ms []Metric
	if err != nil {
		ms = append(ms, count(deploy.MetricNoticesFailed))
	} else {
		ms = append(ms, count(deploy.MetricNoticesPublished))
	}
	if nt.Kind == lease.NoticeLeaseEnded {
		switch nt.Event.Type {
		case lease.EventTimeout:
			ms = append(ms, count(deploy.MetricLeaseTimeouts))
		case lease.EventAgentDeath:
			ms = append(ms, count(deploy.MetricAgentDeaths))
		}
		if nt.Takeover {
			ms = append(ms, count(deploy.MetricTakeovers))
		}
	}
	level, attrs := slog.LevelInfo, []slog.Attr{
		slog.String("kind", nt.Kind), slog.String("type", string(nt.Event.Type)),
		slog.String("task_id", nt.Event.TaskID), slog.Int64("fence", nt.Event.Fence),
	}
	if err != nil {
		level = slog.LevelWarn
		attrs = append(attrs, slog.String("error", err.Error()))
	}
	n.metrics.Emit(ctx, level, "notice", ms, attrs...)
	return err
}

// The operations whose answers are counted (deploy.Route's Op).
const (
	opCheckout = "checkout"
	opClaim    = "claim"
)

// meterHTTP counts what the answers of the business routes say: grants and
// conflicts. It reads only the answer, never the store.
func meterHTTP(m *Metrics, next func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)) func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	if m == nil {
		return next
	}
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		resp, err := next(ctx, ev)
		route := ev.RouteKey
		if route == "" {
			route = ev.RequestContext.RouteKey
		}
		rt, _ := deploy.ByKey(route)
		var ms []Metric
		switch {
		case (rt.Op == opCheckout || rt.Op == opClaim) && resp.StatusCode == http.StatusOK:
			ms = append(ms, count(deploy.MetricCheckouts))
		case rt.Op == opCheckout && resp.StatusCode == http.StatusConflict && errorCode(resp.Body) == errcode.CheckedOut:
			ms = append(ms, count(deploy.MetricConflicts))
		}
		if len(ms) > 0 {
			m.Emit(ctx, slog.LevelInfo, "metrics", ms,
				slog.String("route", route), slog.Int("status", resp.StatusCode),
				slog.String("request_id", ev.RequestContext.RequestID))
		}
		return resp, err
	}
}

func errorCode(body string) string {
	var e struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal([]byte(body), &e)
	return e.Code
}
