package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/lease/schema"
)

// alarmIDs is every alarm the stack must have.
func alarmIDs() []string {
	ids := []string{AlarmAPI5xx, AlarmAPILatency, AlarmAPIThrottled,
		AlarmSweeperErrors, AlarmSweepRuleFailed, AlarmSweepDeadLetters, AlarmNoticesFailed,
		AlarmStreamIteratorAge, AlarmStreamErrors, AlarmNoticesIteratorAge, AlarmNoticesErrors, AlarmStreamDeadLetters}
	for _, a := range splitAlarms(AlarmLambdaThrottles, deploy.Functions) {
		ids = append(ids, a.id)
	}
	ops := TableOperations()
	for _, t := range schema.Tables() {
		th, se := DynamoAlarms(t.Name)
		for _, a := range append(splitAlarms(th, ops[t.Name]), splitAlarms(se, ops[t.Name])...) {
			ids = append(ids, a.id)
		}
	}
	sort.Strings(ids)
	return ids
}

// metricStats returns the metrics of a math alarm, by metric name, each as
// its dimensions rendered "Name=value".
func (s *synthesized) metricStats(p map[string]any) (expressions []string, metrics map[string][]map[string]string) {
	metrics = map[string][]map[string]string{}
	list, _ := p["Metrics"].([]any)
	for _, m := range list {
		q := m.(map[string]any)
		if e, ok := q["Expression"].(string); ok {
			expressions = append(expressions, e)
			continue
		}
		metric := q["MetricStat"].(map[string]any)["Metric"].(map[string]any)
		dims := map[string]string{}
		for _, d := range asList(metric["Dimensions"]) {
			dm := d.(map[string]any)
			dims[dm["Name"].(string)] = s.render(dm["Value"])
		}
		name := metric["Namespace"].(string) + "/" + metric["MetricName"].(string)
		metrics[name] = append(metrics[name], dims)
	}
	return expressions, metrics
}

func TestAlarms(t *testing.T) {
	s := defaultStack(t)
	topic := s.id(s.stack.AlarmTopic)
	byName := map[string]map[string]any{}
	for _, r := range s.ofType("AWS::CloudWatch::Alarm") {
		p := props(r)
		byName[p["AlarmName"].(string)] = p
	}
	var want []string
	for _, id := range alarmIDs() {
		want = append(want, AlarmName("checkout-", id))
	}
	var got []string
	for name := range byName {
		got = append(got, name)
	}
	sort.Strings(got)
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("alarms\n got  %v\n want %v", got, want)
	}
	alarm := func(id string) map[string]any { return byName[AlarmName("checkout-", id)] }

	for name, p := range byName {
		// Everyone hears about it, going wrong and coming back.
		if len(asList(p["AlarmActions"])) != 1 || ref(asList(p["AlarmActions"])[0]) != topic ||
			len(asList(p["OKActions"])) != 1 || ref(asList(p["OKActions"])[0]) != topic {
			t.Errorf("%s actions %v / %v, want the alarm topic", name, p["AlarmActions"], p["OKActions"])
		}
		if p["TreatMissingData"] != "notBreaching" || !strings.Contains(p["AlarmDescription"].(string), "DEPLOY.md") {
			t.Errorf("%s: missing data %v, description %q", name, p["TreatMissingData"], p["AlarmDescription"])
		}
		// No math alarm adds series that may be missing without filling them.
		exprs, _ := s.metricStats(p)
		for _, e := range exprs {
			if e != sumFilled {
				t.Errorf("%s: expression %q, want %q", name, e, sumFilled)
			}
		}
	}

	dim := func(p map[string]any, name, value string) bool {
		for _, d := range asList(p["Dimensions"]) {
			m, _ := d.(map[string]any)
			if m["Name"] == name && s.render(m["Value"]) == value {
				return true
			}
		}
		return false
	}
	apiID := s.id(s.stack.API)
	if p := alarm(AlarmAPI5xx); p["Namespace"] != "AWS/ApiGateway" || p["MetricName"] != "5xx" || !dim(p, "ApiId", "ref:"+apiID) ||
		p["Threshold"] != float64(1) || p["Statistic"] != "Sum" {
		t.Errorf("5xx alarm %v", p)
	}
	if p := alarm(AlarmAPILatency); p["MetricName"] != "Latency" || p["ExtendedStatistic"] != "p99" || p["Threshold"] != float64(1000) ||
		p["EvaluationPeriods"] != float64(3) || p["DatapointsToAlarm"] != float64(3) || p["ComparisonOperator"] != "GreaterThanThreshold" {
		t.Errorf("latency alarm %v", p)
	}
	for id, metric := range map[string]string{AlarmAPIThrottled: deploy.MetricAPIThrottled, AlarmNoticesFailed: deploy.MetricNoticesFailed} {
		if p := alarm(id); p["Namespace"] != deploy.MetricNamespace || p["MetricName"] != metric || !dim(p, deploy.DimensionDeployment, "checkout-") {
			t.Errorf("%s alarm %v", id, p)
		}
	}
	if p := alarm(AlarmSweeperErrors); p["Namespace"] != "AWS/Lambda" || p["MetricName"] != "Errors" || !dim(p, "FunctionName", "ref:"+s.fnID[deploy.Sweeper]) {
		t.Errorf("sweeper errors alarm %v", p)
	}
	if p := alarm(AlarmSweepRuleFailed); p["Namespace"] != "AWS/Events" || p["MetricName"] != "FailedInvocations" || !dim(p, "RuleName", "ref:"+s.id(s.stack.SweepRule)) {
		t.Errorf("sweep rule alarm %v", p)
	}
	if p := alarm(AlarmSweepDeadLetters); p["Namespace"] != "AWS/SQS" || p["MetricName"] != "ApproximateNumberOfMessagesVisible" ||
		p["Statistic"] != "Maximum" || !dim(p, "QueueName", `{"Fn::GetAtt":["`+s.id(s.stack.SweepDeadLetters)+`","QueueName"]}`) {
		t.Errorf("dead-letter alarm %v", p)
	}

	// Lambda throttles and DynamoDB: every function, and per table exactly
	// the operations the functions make on it, in one alarm each while
	// there are ten or fewer.
	if len(deploy.Functions) <= 10 && len(splitAlarms(AlarmLambdaThrottles, deploy.Functions)) != 1 {
		t.Errorf("Lambda throttles alarms %v for %d functions, want %s alone", splitAlarms(AlarmLambdaThrottles, deploy.Functions), len(deploy.Functions), AlarmLambdaThrottles)
	}
	s.checkSplitAlarms(t, byName)
}

// checkSplitAlarms checks the alarms that add a metric over many series,
// among the alarms by name: the Lambda throttles alarms read every
// function's throttles, the DynamoDB alarms of a table its throttled
// requests and its system errors of every operation the functions make on
// it, each series once and each alarm at most ten of them (CloudWatch's
// limit on the metrics of an alarm).
func (s *synthesized) checkSplitAlarms(t *testing.T, byName map[string]map[string]any) {
	t.Helper()
	check := func(id, metric string, series []string, want []map[string]string) {
		t.Helper()
		var got []string
		for _, a := range splitAlarms(id, series) {
			p, ok := byName[AlarmName("checkout-", a.id)]
			if !ok {
				t.Errorf("no alarm %s", a.id)
				continue
			}
			_, ms := s.metricStats(p)
			if len(ms) != 1 || len(ms[metric]) > 10 {
				t.Errorf("%s: %v, want %s, CloudWatch allows 10 metrics in an alarm", a.id, ms, metric)
			}
			for _, d := range ms[metric] {
				got = append(got, fmt.Sprint(d))
			}
		}
		var wanted []string
		for _, d := range want {
			wanted = append(wanted, fmt.Sprint(d))
		}
		sort.Strings(got)
		sort.Strings(wanted)
		if !reflect.DeepEqual(got, wanted) {
			t.Errorf("%s alarms read %v, want %v", id, got, wanted)
		}
	}

	var fns []map[string]string
	for _, name := range deploy.Functions {
		fns = append(fns, map[string]string{"FunctionName": "ref:" + s.fnID[name]})
	}
	check(AlarmLambdaThrottles, "AWS/Lambda/Throttles", deploy.Functions, fns)

	ops := TableOperations()
	for _, tb := range schema.Tables() {
		var want []map[string]string
		for _, op := range ops[tb.Name] {
			want = append(want, map[string]string{"TableName": "ref:" + s.tableID[tb.Name], "Operation": op})
		}
		th, se := DynamoAlarms(tb.Name)
		check(th, "AWS/DynamoDB/ThrottledRequests", ops[tb.Name], want)
		check(se, "AWS/DynamoDB/SystemErrors", ops[tb.Name], want)
	}
}

func TestAlarmsSplitTenMetricsEach(t *testing.T) {
	// Each alarm is named once and reads at most ten series; the first
	// keeps the id of the one alarm of ten series or fewer, so a deployed
	// stack's alarm is updated, not replaced. A table whose name ends in a
	// digit (tasks2) keeps its alarms' names apart from their numbers.
	throttles, _ := DynamoAlarms(schema.TasksTable)
	names := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("s%d", i))
		}
		return out
	}
	for _, id := range []string{AlarmLambdaThrottles, throttles} {
		for _, tc := range []struct {
			series int
			want   []string
		}{
			{1, []string{id}},
			{10, []string{id}},
			{11, []string{id, id + "Part2"}},
			{25, []string{id, id + "Part2", id + "Part3"}},
		} {
			series := names(tc.series)
			var ids, covered []string
			for _, a := range splitAlarms(id, series) {
				ids = append(ids, a.id)
				covered = append(covered, a.series...)
				if len(a.series) == 0 || len(a.series) > 10 {
					t.Errorf("%d series: %s reads %d", tc.series, a.id, len(a.series))
				}
			}
			if !reflect.DeepEqual(ids, tc.want) || !reflect.DeepEqual(covered, series) {
				t.Errorf("%d series: alarms %v reading %v, want %v reading each once", tc.series, ids, covered, tc.want)
			}
		}
	}
	if got := AlarmName("checkout-", throttles+"Part2"); got != "checkout-dynamo-throttles-tasks2-part2" {
		t.Errorf("second throttles alarm of tasks2 named %q", got)
	}
}

func TestAlarmsSplitPastTenFunctionsOrOperations(t *testing.T) {
	// A stack of eleven functions, and eleven operations on the inbox
	// table, synthesizes with two alarms for each.
	savedFns, savedGrants := deploy.Functions, deploy.Grants
	t.Cleanup(func() { deploy.Functions, deploy.Grants = savedFns, savedGrants })
	deploy.Functions = append(slices.Clone(savedFns), "extra")
	deploy.Grants = maps.Clone(savedGrants)
	deploy.Grants[deploy.Tasks] = append(slices.Clone(savedGrants[deploy.Tasks]), deploy.Grant{Table: schema.InboxTable,
		Actions: []string{"ConditionCheckItem", "PartiQLSelect", "TransactGetItems", "TransactWriteItems"}})
	if n := len(TableOperations()[schema.InboxTable]); n != 11 {
		t.Fatalf("%d operations on %s, want 11", n, schema.InboxTable)
	}

	s := synth(t, map[string]any{})
	byName := map[string]map[string]any{}
	for _, r := range s.ofType("AWS::CloudWatch::Alarm") {
		p := props(r)
		byName[p["AlarmName"].(string)] = p
	}
	throttles, errs := DynamoAlarms(schema.InboxTable)
	for _, id := range []string{AlarmLambdaThrottles, throttles, errs} {
		if _, ok := byName[AlarmName("checkout-", id+"Part2")]; !ok {
			t.Errorf("no alarm %sPart2", id)
		}
	}
	s.checkSplitAlarms(t, byName)

	// The dashboard graphs the throttled requests of every operation.
	for _, r := range s.ofType("AWS::CloudWatch::Dashboard") {
		body := s.render(props(r)["DashboardBody"])
		for _, op := range TableOperations()[schema.InboxTable] {
			if !strings.Contains(body, `"ThrottledRequests","Operation","`+op+`","TableName","ref:`+s.tableID[schema.InboxTable]+`"`) {
				t.Errorf("the dashboard does not graph throttled %s on %s", op, schema.InboxTable)
			}
		}
		for _, label := range []string{schema.InboxTable + " throttled requests", schema.InboxTable + " throttled requests (2)"} {
			if !strings.Contains(body, `"label":"`+label+`"`) {
				t.Errorf("the dashboard has no line labelled %q", label)
			}
		}
	}
}

func TestTableOperationsCoverEveryGrant(t *testing.T) {
	ops := TableOperations()
	for fn, grants := range deploy.Grants {
		for _, g := range grants {
			for _, a := range g.Actions {
				if a == controlPlaneCheck {
					continue // the health check: /healthz reports it
				}
				if !contains(ops[g.Table], a) {
					t.Errorf("%s's %s on %s has no alarm metric", fn, a, g.Table)
				}
			}
			if len(g.QueryIndexes) > 0 && !contains(ops[g.Table], "Query") {
				t.Errorf("%s's index queries on %s have no alarm metric", fn, g.Table)
			}
		}
	}
}

func contains(list []string, v string) bool {
	for _, x := range list {
		if x == v {
			return true
		}
	}
	return false
}

func TestAlarmTopic(t *testing.T) {
	s := defaultStack(t)
	if n := len(s.ofType("AWS::SNS::Subscription")); n != 0 {
		t.Errorf("%d subscriptions without alarmEmail", n)
	}
	topic := s.id(s.stack.AlarmTopic)
	policies := s.ofType("AWS::SNS::TopicPolicy")
	if len(policies) != 1 {
		t.Fatalf("%d topic policies", len(policies))
	}
	var sslOnly, cloudwatch bool
	for _, r := range policies {
		for _, st := range props(r)["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			m := st.(map[string]any)
			b, _ := json.Marshal(m)
			switch {
			case m["Effect"] == "Deny" && strings.Contains(string(b), `"aws:SecureTransport":"false"`):
				sslOnly = true
			case m["Effect"] == "Allow":
				principal, _ := m["Principal"].(map[string]any)
				cloudwatch = principal["Service"] == "cloudwatch.amazonaws.com" && m["Action"] == "sns:Publish" &&
					strings.Contains(string(b), "aws:SourceAccount") && ref(m["Resource"]) == topic
			}
		}
	}
	if !sslOnly || !cloudwatch {
		t.Errorf("topic policy: TLS only %v, CloudWatch may publish %v", sslOnly, cloudwatch)
	}

	s = synth(t, map[string]any{"alarmEmail": "ops@example.com"})
	subs := s.ofType("AWS::SNS::Subscription")
	if len(subs) != 1 {
		t.Fatalf("%d subscriptions with alarmEmail", len(subs))
	}
	for _, r := range subs {
		p := props(r)
		if p["Protocol"] != "email" || p["Endpoint"] != "ops@example.com" || ref(p["TopicArn"]) != s.id(s.stack.AlarmTopic) {
			t.Errorf("subscription %v", p)
		}
	}
}

func TestDashboardShowsAlarmsAndEveryMetric(t *testing.T) {
	s := defaultStack(t)
	boards := s.ofType("AWS::CloudWatch::Dashboard")
	if len(boards) != 1 {
		t.Fatalf("%d dashboards", len(boards))
	}
	for _, r := range boards {
		p := props(r)
		if p["DashboardName"] != "checkout-dashboard" {
			t.Errorf("dashboard name %v", p["DashboardName"])
		}
		body := s.render(p["DashboardBody"])
		for _, m := range append(deploy.Metrics, deploy.MetricAPIThrottled) {
			if !strings.Contains(body, `"`+m+`"`) {
				t.Errorf("the dashboard does not show %s", m)
			}
		}
		if !strings.Contains(body, `"Deployment","checkout-"`) {
			t.Error("the dashboard's business metrics lack the Deployment dimension")
		}
		for _, id := range alarmIDs() {
			if !strings.Contains(body, "arn:"+s.id(s.stack.Alarms[id])) {
				t.Errorf("the dashboard's alarm widget misses %s", id)
			}
		}
		for _, name := range deploy.Functions {
			if !strings.Contains(body, "ref:"+s.fnID[name]) {
				t.Errorf("the dashboard does not show function %s", name)
			}
		}
		// The p99 durations leave out the sweeper, whose runs stay their
		// minute, and show every other function: the graph's part of the
		// body runs from its title to the next widget.
		start := strings.Index(body, `"title":"Duration p99`)
		found := start >= 0
		if found {
			graph := body[start:]
			if end := strings.Index(graph, `{"type":`); end >= 0 {
				graph = graph[:end]
			}
			for _, name := range deploy.Functions {
				if shown := strings.Contains(graph, "ref:"+s.fnID[name]); shown != (name != deploy.Sweeper) {
					t.Errorf("the p99 duration graph shows %s: %v", name, shown)
				}
			}
		}
		if !found {
			t.Error("the dashboard has no p99 duration graph")
		}
	}
}

func TestNamesOfAlarmsAndDashboard(t *testing.T) {
	for id, want := range map[string]string{
		AlarmAPI5xx: "p-api5xx", AlarmAPILatency: "p-api-latency-p99", AlarmSweepRuleFailed: "p-sweep-rule-failed-invocations",
	} {
		if got := AlarmName("p-", id); got != want {
			t.Errorf("AlarmName(%s) = %q, want %q", id, got, want)
		}
	}
	if got := DashboardName("dev.checkout-"); got != "dev-checkout-dashboard" {
		t.Errorf("DashboardName = %q", got)
	}
}

// The dashboard's graph of DynamoDB throttled requests has a line for each
// table's alarm (each part of a split one), and each line says which table
// it is: before, every line was labelled "Throttled requests" alike.
func TestDashboardNamesEachTablesThrottledRequests(t *testing.T) {
	s := synth(t, map[string]any{})
	var bodies []string
	for _, r := range s.ofType("AWS::CloudWatch::Dashboard") {
		bodies = append(bodies, s.render(props(r)["DashboardBody"]))
	}
	if len(bodies) != 1 {
		t.Fatalf("%d dashboards, want 1", len(bodies))
	}
	graph := bodies[0]
	i := strings.Index(graph, `"title":"DynamoDB throttled requests"`)
	if i < 0 {
		t.Fatal("no graph of DynamoDB throttled requests")
	}
	// The graph's own widget: up to the next widget, or the end.
	graph = graph[i:]
	if end := strings.Index(graph, `{"type":`); end >= 0 {
		graph = graph[:end]
	}
	labels := regexp.MustCompile(`"label":"([^"]*)"`).FindAllStringSubmatch(graph, -1)
	seen := map[string]bool{}
	for _, l := range labels {
		if seen[l[1]] {
			t.Errorf("two lines labelled %q", l[1])
		}
		seen[l[1]] = true
	}
	for _, tb := range schema.Tables() {
		if !seen[tb.Name+" throttled requests"] {
			t.Errorf("no line labelled %q among %d: %v", tb.Name+" throttled requests", len(labels), seen)
		}
	}
}
