package main

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/aws-cdk-go/awscdk/v2/interfaces/interfacesawscloudwatch"
	"github.com/aws/jsii-runtime-go"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/lease/schema"
)

// Alarm ids. Each alarm is named <tablePrefix><name>, with name the id in
// kebab case (see AlarmName); DEPLOY.md says what each means and what to do.
const (
	AlarmAPI5xx              = "Api5xx"
	AlarmAPILatency          = "ApiLatencyP99"
	AlarmAPIThrottled        = "ApiThrottled"
	AlarmLambdaThrottles     = "LambdaThrottles"
	AlarmSweeperErrors       = "SweeperErrors"
	AlarmSweepRuleFailed     = "SweepRuleFailedInvocations"
	AlarmSweepDeadLetters    = "SweepDeadLetters"
	AlarmNoticesFailed       = "NoticesFailed"
	AlarmStreamIteratorAge   = "StreamIteratorAge"
	AlarmStreamDeadLetters   = "StreamDeadLetters"
	AlarmStreamErrors        = "StreamErrors"
	AlarmNoticesIteratorAge  = "NoticesIteratorAge"
	AlarmNoticesErrors       = "NoticesErrors"
	alarmDynamoThrottlesOf   = "DynamoThrottles"    // + title(table)
	alarmDynamoSystemErrorOf = "DynamoSystemErrors" // + title(table)
)

// DynamoAlarms returns the ids of the two DynamoDB alarms of table.
func DynamoAlarms(table string) (throttles, systemErrors string) {
	return alarmDynamoThrottlesOf + title(table), alarmDynamoSystemErrorOf + title(table)
}

var kebab = regexp.MustCompile(`([a-z0-9])([A-Z])`)

// AlarmName is the CloudWatch name of the alarm id in a deployment.
func AlarmName(prefix, id string) string {
	return prefix + kebabCase(id)
}

func kebabCase(id string) string {
	b := []byte(kebab.ReplaceAllString(id, "$1-$2"))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// TableOperations returns, per table, the DynamoDB operations the functions
// make on it, from deploy.Grants: the operations its throttle and system
// error metrics are published for. DescribeTable, the health function's
// check, is left out: it reads no item, and /healthz answers 503 when it
// fails.
func TableOperations() map[string][]string {
	ops := map[string]map[string]bool{}
	for _, grants := range deploy.Grants {
		for _, g := range grants {
			if ops[g.Table] == nil {
				ops[g.Table] = map[string]bool{}
			}
			for _, a := range g.Actions {
				if a == controlPlaneCheck {
					continue
				}
				ops[g.Table][a] = true
			}
			if len(g.QueryIndexes) > 0 {
				ops[g.Table]["Query"] = true
			}
		}
	}
	out := map[string][]string{}
	for t, set := range ops {
		for op := range set {
			out[t] = append(out[t], op)
		}
		sort.Strings(out[t])
	}
	return out
}

// controlPlaneCheck is the health function's DynamoDB call.
const controlPlaneCheck = "DescribeTable"

// sumFilled is the metric math that adds series which are often missing: a
// series without data in a period counts 0 there, where a plain a+b+c has no
// value at all in any period one of them misses.
const sumFilled = "SUM(FILL(METRICS(), 0))"

// maxAlarmMetrics is how many metrics CloudWatch lets one alarm read.
const maxAlarmMetrics = 10

// splitAlarm is one of the alarms that add a metric over many series: its
// id and the series (functions, operations) it reads.
type splitAlarm struct {
	id     string
	series []string
}

// splitAlarms shares series out among alarms, maxAlarmMetrics each, in
// order: the first keeps id (the one alarm of ten series or fewer, so a
// deployed stack's alarm is updated in place, not replaced), the next are
// id+"Part2", id+"Part3" and so on ("Part" keeps the number apart from a
// table name that ends in a digit, such as tasks2).
func splitAlarms(id string, series []string) []splitAlarm {
	var out []splitAlarm
	for chunk := range slices.Chunk(series, maxAlarmMetrics) {
		next := id
		if len(out) > 0 {
			next = fmt.Sprintf("%sPart%d", id, len(out)+1)
		}
		out = append(out, splitAlarm{id: next, series: chunk})
	}
	return out
}

// operations builds the alarm topic, the alarms and the dashboard.
func (s *CheckoutStack) operations(cfg Config, accessLogs awslogs.LogGroup) {
	stack := s.Stack
	period := awscdk.Duration_Minutes(jsii.Number(5))
	sum := &awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Sum")}

	// Every alarm notifies this topic, going into ALARM and back to OK.
	s.AlarmTopic = awssns.NewTopic(stack, jsii.String("AlarmTopic"), &awssns.TopicProps{
		DisplayName: jsii.String("checkout alarms (" + cfg.TablePrefix + ")"),
		EnforceSSL:  jsii.Bool(true),
	})
	s.AlarmTopic.AddToResourcePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
		Sid:        jsii.String("CloudWatchAlarmsPublish"),
		Effect:     awsiam.Effect_ALLOW,
		Principals: &[]awsiam.IPrincipal{awsiam.NewServicePrincipal(jsii.String("cloudwatch.amazonaws.com"), nil)},
		Actions:    jsii.Strings("sns:Publish"),
		Resources:  jsii.Strings(*s.AlarmTopic.TopicArn()),
		Conditions: &map[string]any{
			"ArnLike":      map[string]any{"aws:SourceArn": fmt.Sprintf("arn:%s:cloudwatch:%s:%s:alarm:*", *stack.Partition(), *stack.Region(), *stack.Account())},
			"StringEquals": map[string]any{"aws:SourceAccount": *stack.Account()},
		},
	}))
	if cfg.AlarmEmail != "" {
		sub := s.AlarmTopic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(cfg.AlarmEmail), nil))
		s.suppress(sub, "Serverless-SNSRedrivePolicy",
			"An e-mail that SNS cannot deliver after its retries is only a copy of an alarm whose state CloudWatch keeps; a queue of undelivered alarm mails would have no reader.")
	}
	action := awscloudwatchactions.NewSnsAction(s.AlarmTopic)

	type alarmSpec struct {
		id, desc       string
		metric         awscloudwatch.IMetric
		threshold      float64
		periods, outOf float64
		compare        awscloudwatch.ComparisonOperator
	}
	add := func(a alarmSpec) {
		if a.periods == 0 {
			a.periods, a.outOf = 1, 1
		}
		if a.compare == "" {
			a.compare = awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD
		}
		al := awscloudwatch.NewAlarm(stack, jsii.String(a.id+"Alarm"), &awscloudwatch.AlarmProps{
			AlarmName:          jsii.String(AlarmName(cfg.TablePrefix, a.id)),
			AlarmDescription:   jsii.String(a.desc + " See DEPLOY.md, \"Alarms\"."),
			Metric:             a.metric,
			Threshold:          jsii.Number(a.threshold),
			EvaluationPeriods:  jsii.Number(a.outOf),
			DatapointsToAlarm:  jsii.Number(a.periods),
			ComparisonOperator: a.compare,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
		al.AddAlarmAction(action)
		al.AddOkAction(action)
		s.Alarms[a.id] = al
	}
	custom := func(name, stat string) awscloudwatch.Metric {
		return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
			Namespace:     jsii.String(MetricNamespace),
			MetricName:    jsii.String(name),
			DimensionsMap: &map[string]*string{deploy.DimensionDeployment: jsii.String(cfg.TablePrefix)},
			Statistic:     jsii.String(stat),
			Period:        period,
		})
	}
	filled := func(label string, metrics map[string]awscloudwatch.IMetric) awscloudwatch.MathExpression {
		return awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
			Expression:   jsii.String(sumFilled),
			UsingMetrics: &metrics,
			Label:        jsii.String(label),
			Period:       period,
		})
	}

	// The API.
	add(alarmSpec{id: AlarmAPI5xx, desc: "The HTTP API answered 5xx: every 5xx is a bug, a function that failed, or DynamoDB unreachable (503).",
		metric: s.API.MetricServerError(sum), threshold: 1})
	add(alarmSpec{id: AlarmAPILatency, desc: fmt.Sprintf("The HTTP API's p99 latency stayed above %.0f ms for 15 minutes.", cfg.LatencyAlarmMs),
		metric:    s.API.MetricLatency(&awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("p99")}),
		threshold: cfg.LatencyAlarmMs, periods: 3, outOf: 3, compare: awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD})
	// API Gateway has no metric of its own for throttled requests (they are
	// counted in 4xx with every client error), so 429 answers are counted
	// from the access log.
	awslogs.NewMetricFilter(stack, jsii.String("ApiThrottledFilter"), &awslogs.MetricFilterProps{
		LogGroup:        accessLogs,
		FilterPattern:   awslogs.FilterPattern_StringValue(jsii.String("$.status"), jsii.String("="), jsii.String("429")),
		MetricNamespace: jsii.String(MetricNamespace),
		MetricName:      jsii.String(MetricThrottled),
		MetricValue:     jsii.String("1"),
		Dimensions:      &map[string]*string{deploy.DimensionDeployment: jsii.String("$.deployment")},
	})
	add(alarmSpec{id: AlarmAPIThrottled, desc: "The HTTP API stage or a route limit throttled requests (429); raise throttleRate/throttleBurst (or the route limits) if this is legitimate load.",
		metric: custom(MetricThrottled, "Sum"), threshold: 1})

	// Lambda concurrency throttles of any function (reserved concurrency
	// reached, or the account's limit), ten functions an alarm.
	for _, a := range splitAlarms(AlarmLambdaThrottles, deploy.Functions) {
		throttles := map[string]awscloudwatch.IMetric{}
		for i, name := range a.series {
			throttles[fmt.Sprintf("fn%d", i)] = s.Functions[name].MetricThrottles(sum)
		}
		add(alarmSpec{id: a.id, desc: "A checkout function (" + strings.Join(a.series, ", ") + ") was throttled by its reserved concurrency or the account's limit; the dashboard shows which.",
			metric: filled("Throttles", throttles), threshold: 1})
	}

	// DynamoDB, per table: throttled requests and internal errors, each
	// summed over the operations the functions make on the table, ten
	// operations an alarm.
	ops := TableOperations()
	for _, t := range schema.Tables() {
		throttleID, errorID := DynamoAlarms(t.Name)
		// A math expression's metric ids are identifiers: no '-'. They are
		// numbered over all the table's operations, as the dashboard
		// graphs its alarms together.
		metricID := strings.ReplaceAll(t.Name, "-", "_")
		perOperation := func(metric, kind string, operations []string) map[string]awscloudwatch.IMetric {
			out := map[string]awscloudwatch.IMetric{}
			for _, op := range operations {
				dims := &map[string]*string{"TableName": s.Tables[t.Name].TableName(), "Operation": jsii.String(op)}
				out[fmt.Sprintf("%s_%s%d", metricID, kind, slices.Index(ops[t.Name], op))] = awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
					Namespace: jsii.String("AWS/DynamoDB"), MetricName: jsii.String(metric), DimensionsMap: dims, Statistic: jsii.String("Sum"), Period: period})
			}
			return out
		}
		// Each alarm's line on the dashboard is labelled with its table
		// (and, past the first of a split alarm, its part).
		label := func(what string, part int) string {
			if part == 0 {
				return t.Name + " " + what
			}
			return fmt.Sprintf("%s %s (%d)", t.Name, what, part+1)
		}
		for i, a := range splitAlarms(throttleID, ops[t.Name]) {
			add(alarmSpec{id: a.id, desc: "DynamoDB throttled requests (" + strings.Join(a.series, ", ") + ") on table " + t.Name + " (the SDK retried them; answers may have been 503).",
				metric: filled(label("throttled requests", i), perOperation("ThrottledRequests", "t", a.series)), threshold: 1})
		}
		for i, a := range splitAlarms(errorID, ops[t.Name]) {
			add(alarmSpec{id: a.id, desc: "DynamoDB answered requests (" + strings.Join(a.series, ", ") + ") on table " + t.Name + " with internal errors (HTTP 500).",
				metric: filled(label("system errors", i), perOperation("SystemErrors", "e", a.series)), threshold: 1})
		}
	}

	// The sweeper and its schedule.
	add(alarmSpec{id: AlarmSweeperErrors, desc: "A sweep failed; expired leases are still never live, but their events, messages and notices wait for a sweep that succeeds.",
		metric: s.Functions[deploy.Sweeper].MetricErrors(sum), threshold: 1})
	add(alarmSpec{id: AlarmSweepRuleFailed, desc: "EventBridge could not invoke the sweeper (after its retries the event went to the sweep dead-letter queue).",
		metric: awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
			Namespace: jsii.String("AWS/Events"), MetricName: jsii.String("FailedInvocations"),
			DimensionsMap: &map[string]*string{"RuleName": s.SweepRule.RuleName()}, Statistic: jsii.String("Sum"), Period: period,
		}), threshold: 1})
	add(alarmSpec{id: AlarmSweepDeadLetters, desc: "Sweeps are waiting in the sweep dead-letter queue: runs that failed, could not start within two minutes, or could not be delivered.",
		metric: s.SweepDeadLetters.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Maximum")}), threshold: 1})

	// Notices the event bus refused or that could not be sent.
	add(alarmSpec{id: AlarmNoticesFailed, desc: "Notices (TaskAvailable, LeaseEnded, LeaseLost, TaskFailed) could not be put on the event bus; the orchestrator missed them.",
		metric: custom(deploy.MetricNoticesFailed, "Sum"), threshold: 1})

	// The change stream: how far behind its readers are, their failures,
	// and the batches they gave up on.
	add(alarmSpec{id: AlarmStreamIteratorAge, desc: "The stream function is more than a minute behind the tasks table's changes: messages, archived events, unblockings and queue counts are late (never lost while the stream keeps them, 24 hours).",
		metric: s.Functions[deploy.Stream].Metric(jsii.String("IteratorAge"), &awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Maximum")}), threshold: 60_000})
	add(alarmSpec{id: AlarmStreamErrors, desc: "The stream function failed on a batch of changes; the event source mapping retries it, bisected.",
		metric: s.Functions[deploy.Stream].MetricErrors(sum), threshold: 1})
	add(alarmSpec{id: AlarmNoticesIteratorAge, desc: "The notices function is more than a minute behind the tasks table's changes: EventBridge events and webhooks are late (never lost while the stream keeps them, 24 hours); a webhook receiver that is down holds it up.",
		metric: s.Functions[deploy.Notices].Metric(jsii.String("IteratorAge"), &awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Maximum")}), threshold: 60_000})
	add(alarmSpec{id: AlarmNoticesErrors, desc: "The notices function failed on a batch of changes; the event source mapping retries it, bisected.",
		metric: s.Functions[deploy.Notices].MetricErrors(sum), threshold: 1})
	add(alarmSpec{id: AlarmStreamDeadLetters, desc: "Change batches the stream or notices function gave up on are in the stream dead-letter queue: replay them (DEPLOY.md) before the stream's 24 hours pass.",
		metric: s.StreamDeadLetters.MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Maximum")}), threshold: 1})

	s.dashboard(cfg, custom)
}

// dashboard builds the service's CloudWatch dashboard: alarms, the API,
// the business metrics, the sweeper, the functions and the tables.
func (s *CheckoutStack) dashboard(cfg Config, custom func(name, stat string) awscloudwatch.Metric) {
	period := awscdk.Duration_Minutes(jsii.Number(5))
	opt := func(stat string) *awscloudwatch.MetricOptions {
		return &awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String(stat)}
	}
	graph := func(title string, width float64, left ...awscloudwatch.IMetric) awscloudwatch.IWidget {
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{
			Title: jsii.String(title), Width: jsii.Number(width), Height: jsii.Number(6), Left: &left,
		})
	}
	perFunction := func(metric func(name string) awscloudwatch.IMetric) []awscloudwatch.IMetric {
		var out []awscloudwatch.IMetric
		for _, name := range deploy.Functions {
			if m := metric(name); m != nil {
				out = append(out, m)
			}
		}
		return out
	}
	var alarms []interfacesawscloudwatch.IAlarmRef
	ids := make([]string, 0, len(s.Alarms))
	for id := range s.Alarms {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		alarms = append(alarms, s.Alarms[id])
	}
	var tableMetrics, tableThrottles []awscloudwatch.IMetric
	ops := TableOperations()
	for _, t := range schema.Tables() {
		tb := s.Tables[t.Name]
		tableMetrics = append(tableMetrics, tb.MetricConsumedWriteCapacityUnits(opt("Sum")), tb.MetricConsumedReadCapacityUnits(opt("Sum")))
		throttleID, _ := DynamoAlarms(t.Name)
		for _, a := range splitAlarms(throttleID, ops[t.Name]) {
			tableThrottles = append(tableThrottles, s.Alarms[a.id].Metric())
		}
	}
	rows := [][]awscloudwatch.IWidget{
		{
			awscloudwatch.NewTextWidget(&awscloudwatch.TextWidgetProps{Width: jsii.Number(24), Height: jsii.Number(2), Markdown: jsii.String(
				"# checkout (" + cfg.TablePrefix + ")\nWhat each alarm means and what to do: DEPLOY.md, \"Alarms\". Business metrics: namespace `" + MetricNamespace + "`, dimension `" + deploy.DimensionDeployment + "=" + cfg.TablePrefix + "`.")}),
		},
		{awscloudwatch.NewAlarmStatusWidget(&awscloudwatch.AlarmStatusWidgetProps{Title: jsii.String("Alarms"), Width: jsii.Number(24), Height: jsii.Number(4), Alarms: &alarms})},
		{
			graph("API requests and errors", 8, s.API.MetricCount(opt("Sum")), s.API.MetricClientError(opt("Sum")), s.API.MetricServerError(opt("Sum")), custom(MetricThrottled, "Sum")),
			graph("API latency (ms)", 8, s.API.MetricLatency(opt("p50")), s.API.MetricLatency(opt("p99")), s.API.MetricIntegrationLatency(opt("p99"))),
			graph("Keys refused by the authorizer", 8, custom(deploy.MetricUnauthorized, "Sum")),
		},
		{
			graph("Checkouts", 8, custom(deploy.MetricCheckouts, "Sum"), custom(deploy.MetricConflicts, "Sum"), custom(deploy.MetricTakeovers, "Sum")),
			graph("Leases ended without their holder", 8, custom(deploy.MetricLeaseTimeouts, "Sum"), custom(deploy.MetricAgentDeaths, "Sum")),
			graph("Notices", 8, custom(deploy.MetricNoticesPublished, "Sum"), custom(deploy.MetricNoticesFailed, "Sum")),
		},
		{
			graph("Sweep backlog (leases ended per sweep)", 6, custom(deploy.MetricSweepEnded, "Maximum"), custom(deploy.MetricSweepEnded, "Sum")),
			graph("Sweep duration (ms)", 6, custom(deploy.MetricSweepDuration, "Maximum"), custom(deploy.MetricSweepDuration, "Average")),
			graph("Sweeper errors and failed schedule runs", 6, s.Alarms[AlarmSweeperErrors].Metric(), s.Alarms[AlarmSweepRuleFailed].Metric()),
			graph("Sweep dead-letter queue", 6, s.Alarms[AlarmSweepDeadLetters].Metric()),
		},
		{
			graph("Invocations", 8, perFunction(func(n string) awscloudwatch.IMetric { return s.Functions[n].MetricInvocations(opt("Sum")) })...),
			graph("Errors", 8, perFunction(func(n string) awscloudwatch.IMetric { return s.Functions[n].MetricErrors(opt("Sum")) })...),
			graph("Throttles", 8, perFunction(func(n string) awscloudwatch.IMetric { return s.Functions[n].MetricThrottles(opt("Sum")) })...),
		},
		{
			// The sweeper apart: a run that stays for its minute lasts up
			// to 55 s, which would flatten every other line (its sweeps'
			// own times are the "Sweep duration" graph).
			graph("Duration p99 (ms), the sweeper apart", 12, perFunction(func(n string) awscloudwatch.IMetric {
				if n == deploy.Sweeper {
					return nil
				}
				return s.Functions[n].MetricDuration(opt("p99"))
			})...),
			graph("Concurrent executions (max)", 12, perFunction(func(n string) awscloudwatch.IMetric {
				return s.Functions[n].Metric(jsii.String("ConcurrentExecutions"), opt("Maximum"))
			})...),
		},
		{
			graph("DynamoDB consumed capacity units", 12, tableMetrics...),
			graph("DynamoDB throttled requests", 12, tableThrottles...),
		},
	}
	widgets := make([]*[]awscloudwatch.IWidget, len(rows))
	for i := range rows {
		widgets[i] = &rows[i]
	}
	s.Dashboard = awscloudwatch.NewDashboard(s.Stack, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		DashboardName:   jsii.String(DashboardName(cfg.TablePrefix)),
		DefaultInterval: awscdk.Duration_Hours(jsii.Number(3)),
		Widgets:         &widgets,
	})
}

var notDashboardChar = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// DashboardName is the dashboard's name in a deployment (dashboard names
// allow letters, digits, - and _ only).
func DashboardName(prefix string) string {
	return notDashboardChar.ReplaceAllString(prefix, "-") + "dashboard"
}
