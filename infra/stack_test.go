package main

import (
	"github.com/checkout-dev/checkout/deploy"

	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/checkout-dev/checkout/lease/schema"
)

// synthesized is one synthesized stack: the assertions template, its JSON,
// and the logical ids of the stack's constructs.
type synthesized struct {
	template  assertions.Template
	json      map[string]any
	stack     *CheckoutStack
	fnID      map[string]string // function name -> logical id
	tableID   map[string]string // logical table name -> logical id
	resources map[string]map[string]any
}

func synth(t *testing.T, ctx map[string]any) *synthesized {
	t.Helper()
	s, _ := synthesize(t, ctx, false)
	return s
}

// synthesize builds the stack from the context; with checks, cdk-nag's
// packs run on it (suppressed findings recorded as info annotations) and
// its annotations are returned too.
func synthesize(t *testing.T, ctx map[string]any, checks bool) (*synthesized, assertions.Annotations) {
	t.Helper()
	app := awscdk.NewApp(&awscdk.AppProps{Context: &ctx})
	cfg, err := ConfigFromContext(app.Node())
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	cs, err := NewCheckoutStack(app, "Test", cfg)
	if err != nil {
		t.Fatalf("stack: %v", err)
	}
	if checks {
		Checks(app, false, true)
	}
	tmpl := assertions.Template_FromStack(cs.Stack, nil)
	raw, err := json.Marshal(tmpl.ToJSON())
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	s := &synthesized{template: tmpl, json: doc, stack: cs, fnID: map[string]string{}, tableID: map[string]string{},
		resources: map[string]map[string]any{}}
	for id, r := range doc["Resources"].(map[string]any) {
		s.resources[id] = r.(map[string]any)
	}
	for name, fn := range cs.Functions {
		s.fnID[name] = *cs.Stack.GetLogicalId(fn.Node().DefaultChild().(awscdk.CfnElement))
	}
	for name, tb := range cs.Tables {
		s.tableID[name] = *cs.Stack.GetLogicalId(tb.Node().DefaultChild().(awscdk.CfnElement))
	}
	var notes assertions.Annotations
	if checks {
		notes = assertions.Annotations_FromStack(cs.Stack)
	}
	return s, notes
}

// id is the logical id of a construct's resource.
func (s *synthesized) id(c interface{ Node() constructs.Node }) string {
	return *s.stack.Stack.GetLogicalId(c.Node().DefaultChild().(awscdk.CfnElement))
}

var (
	defaultOnce  sync.Once
	defaultSynth *synthesized
)

// defaultStack synthesizes the stack with no context once per test binary
// (the jsii runtime makes each synthesis take seconds).
func defaultStack(t *testing.T) *synthesized {
	t.Helper()
	defaultOnce.Do(func() { defaultSynth = synth(t, map[string]any{}) })
	if defaultSynth == nil {
		t.Fatal("default synthesis failed")
	}
	return defaultSynth
}

func (s *synthesized) ofType(typ string) map[string]map[string]any {
	out := map[string]map[string]any{}
	for id, r := range s.resources {
		if r["Type"] == typ {
			out[id] = r
		}
	}
	return out
}

func props(r map[string]any) map[string]any {
	p, _ := r["Properties"].(map[string]any)
	return p
}

// getAtt returns the logical id of {"Fn::GetAtt": [id, attr]}.
func getAtt(v any, attr string) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	ga, ok := m["Fn::GetAtt"].([]any)
	if !ok || len(ga) != 2 || ga[1] != attr {
		return ""
	}
	id, _ := ga[0].(string)
	return id
}

func ref(v any) string {
	m, ok := v.(map[string]any)
	if !ok {
		return ""
	}
	id, _ := m["Ref"].(string)
	return id
}

// render turns an IAM resource into a readable string: a table's ARN becomes
// "table:<name>", and Fn::Join parts are concatenated, so that an index ARN
// reads "table:tasks/index/by_status".
func (s *synthesized) render(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case map[string]any:
		if id := getAtt(x, "Arn"); id != "" {
			for name, tid := range s.tableID {
				if tid == id {
					return "table:" + name
				}
			}
			return "arn:" + id
		}
		if id := ref(x); id != "" {
			return "ref:" + id
		}
		if j, ok := x["Fn::Join"].([]any); ok && len(j) == 2 {
			sep, _ := j[0].(string)
			parts, _ := j[1].([]any)
			var out []string
			for _, p := range parts {
				out = append(out, s.render(p))
			}
			joined := strings.Join(out, sep)
			// A table the stack does not create, by its ARN in the stack's
			// account and region: "table:<logical name>".
			const own = "arn:ref:AWS::Partition:dynamodb:ref:AWS::Region:ref:AWS::AccountId:table/"
			if name, ok := strings.CutPrefix(joined, own+s.stack.Config.TablePrefix); ok {
				return "table:" + name
			}
			return joined
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func asList(v any) []any {
	if l, ok := v.([]any); ok {
		return l
	}
	return []any{v}
}

func TestEveryRouteExistsAndPointsAtItsFunction(t *testing.T) {
	s := defaultStack(t)
	routes := s.ofType("AWS::ApiGatewayV2::Route")
	authorizers := s.ofType("AWS::ApiGatewayV2::Authorizer")
	if len(authorizers) != 1 {
		t.Fatalf("want 1 authorizer, got %d", len(authorizers))
	}
	var authorizerID string
	for id := range authorizers {
		authorizerID = id
	}
	byKey := map[string]map[string]any{}
	for _, r := range routes {
		p := props(r)
		byKey[p["RouteKey"].(string)] = p
	}
	seen := map[string]bool{}
	for _, rt := range deploy.Routes {
		if seen[rt.Key()] {
			t.Errorf("route %s listed twice", rt.Key())
		}
		seen[rt.Key()] = true
		p, ok := byKey[rt.Key()]
		if !ok {
			t.Errorf("route %s missing from the template", rt.Key())
			continue
		}
		target := s.render(p["Target"])
		integrationID := strings.TrimPrefix(target, "integrations/ref:")
		integ, ok := s.resources[integrationID]
		if !ok || integ["Type"] != "AWS::ApiGatewayV2::Integration" {
			t.Errorf("route %s: target %q is not an integration", rt.Key(), target)
			continue
		}
		ip := props(integ)
		if got := getAtt(ip["IntegrationUri"], "Arn"); got != s.fnID[rt.Function] {
			t.Errorf("route %s integrates %q, want function %s (%s)", rt.Key(), got, rt.Function, s.fnID[rt.Function])
		}
		if ip["PayloadFormatVersion"] != "2.0" || ip["IntegrationType"] != "AWS_PROXY" {
			t.Errorf("route %s: integration %v/%v, want AWS_PROXY 2.0", rt.Key(), ip["IntegrationType"], ip["PayloadFormatVersion"])
		}
		if rt.Access == deploy.Public {
			if p["AuthorizationType"] != "NONE" || p["AuthorizerId"] != nil {
				t.Errorf("public route %s has authorization %v %v", rt.Key(), p["AuthorizationType"], p["AuthorizerId"])
			}
		} else if p["AuthorizationType"] != "CUSTOM" || ref(p["AuthorizerId"]) != authorizerID {
			t.Errorf("route %s: authorization %v %v, want CUSTOM with %s", rt.Key(), p["AuthorizationType"], p["AuthorizerId"], authorizerID)
		}
	}
	// Only /healthz and the dashboard's static files are public.
	for _, rt := range deploy.Routes {
		if (rt.Access == deploy.Public) != (rt.Key() == "GET /healthz" || rt.Dashboard()) {
			t.Errorf("route %s: public=%v", rt.Key(), (rt.Access == deploy.Public))
		}
	}
	// Whatever no route matches goes, without the authorizer, to the health
	// function, which answers with the contract's 404 and 405 bodies.
	def, ok := byKey["$default"]
	if !ok {
		t.Fatal("no $default route")
	}
	if def["AuthorizationType"] != "NONE" || def["AuthorizerId"] != nil {
		t.Errorf("$default route has authorization %v %v", def["AuthorizationType"], def["AuthorizerId"])
	}
	integ := s.resources[strings.TrimPrefix(s.render(def["Target"]), "integrations/ref:")]
	if got := getAtt(props(integ)["IntegrationUri"], "Arn"); got != s.fnID[deploy.Health] {
		t.Errorf("$default integrates %q, want the health function", got)
	}
	if len(routes) != len(deploy.Routes)+1 {
		t.Errorf("%d routes in the template, want the %d of deploy.Routes and $default", len(routes), len(deploy.Routes))
	}
	// Every HTTP function serves at least one route.
	for _, fn := range deploy.Functions {
		if fn == deploy.Authorizer || fn == deploy.Sweeper || deploy.StreamReaders[fn] {
			continue
		}
		found := false
		for _, rt := range deploy.Routes {
			found = found || rt.Function == fn
		}
		if !found {
			t.Errorf("function %s serves no route", fn)
		}
	}
}

// POST /api/claim, which may hold an invocation for 20 s waiting for a
// task, is served by a function other than the one that renews, releases
// and completes leases, and each has a reserved concurrency of its own:
// when they shared one, 40 waiting agents used up the checkouts function's
// 40, and every renewal was throttled (API Gateway answers 500) until
// leases expired for want of it.
func TestClaimsCannotStarveLeaseUpkeep(t *testing.T) {
	s := defaultStack(t)
	integrated := map[string]string{} // route key -> function logical id
	for _, r := range s.ofType("AWS::ApiGatewayV2::Route") {
		p := props(r)
		integ := s.resources[strings.TrimPrefix(s.render(p["Target"]), "integrations/ref:")]
		integrated[p["RouteKey"].(string)] = getAtt(props(integ)["IntegrationUri"], "Arn")
	}
	claim := integrated["POST /api/claim"]
	if claim == "" || s.resources[claim]["Type"] != "AWS::Lambda::Function" {
		t.Fatalf("POST /api/claim integrates %q, want a function", claim)
	}
	upkeep := map[string]bool{}
	for _, key := range []string{"POST " + deploy.TaskCheckoutPath, "POST /api/tasks/{task_id}/renew", "POST /api/tasks/{task_id}/release", "POST /api/tasks/{task_id}/complete"} {
		fn := integrated[key]
		if fn == "" || fn == claim {
			t.Errorf("%s integrates %q, the claim route's function %q", key, fn, claim)
		}
		upkeep[fn] = true
	}
	if len(upkeep) != 1 {
		t.Errorf("checkout, renew, release and complete integrate %v, want one function", upkeep)
	}
	for fn := range upkeep {
		for _, id := range []string{claim, fn} {
			p := props(s.resources[id])
			if n, _ := p["ReservedConcurrentExecutions"].(float64); n < 1 {
				t.Errorf("function %s: reserved concurrency %v, want its own", id, p["ReservedConcurrentExecutions"])
			}
		}
		lc := func(id string) string {
			c, _ := props(s.resources[id])["LoggingConfig"].(map[string]any)
			return ref(c["LogGroup"])
		}
		if lc(claim) == "" || lc(claim) == lc(fn) {
			t.Errorf("claim and checkouts log to %q and %q, want a log group each", lc(claim), lc(fn))
		}
	}
	if claim != s.fnID[deploy.Claim] {
		t.Errorf("POST /api/claim integrates %s, want the claim function %s", claim, s.fnID[deploy.Claim])
	}
	if got := props(s.resources[claim])["Timeout"]; got != float64(28) {
		t.Errorf("claim function timeout %v, want 28 s: a claim waits up to 20 s", got)
	}
}

func TestAuthorizerUsesSimpleResponsesAndShortCache(t *testing.T) {
	s := defaultStack(t)
	for id, r := range s.ofType("AWS::ApiGatewayV2::Authorizer") {
		p := props(r)
		want := map[string]any{
			"AuthorizerType":                 "REQUEST",
			"EnableSimpleResponses":          true,
			"AuthorizerResultTtlInSeconds":   float64(30),
			"AuthorizerPayloadFormatVersion": "2.0",
			"IdentitySource":                 []any{"$request.header.Authorization"},
		}
		for k, v := range want {
			if !reflect.DeepEqual(p[k], v) {
				t.Errorf("authorizer %s: %s = %v, want %v", id, k, p[k], v)
			}
		}
		if uri := s.render(p["AuthorizerUri"]); !strings.Contains(uri, s.fnID[deploy.Authorizer]) {
			t.Errorf("authorizer %s invokes %s, want function %s", id, uri, s.fnID[deploy.Authorizer])
		}
	}
}

func TestTablesFollowTheSchema(t *testing.T) {
	s := defaultStack(t)
	tables := s.ofType("AWS::DynamoDB::Table")
	if len(tables) != len(schema.Tables()) {
		t.Fatalf("template has %d tables, schema %d", len(tables), len(schema.Tables()))
	}
	if n := len(s.ofType("AWS::DynamoDB::GlobalTable")); n != 0 {
		t.Errorf("template has %d global tables", n)
	}
	keySchema := func(pk schema.Key, sk *schema.Key) []any {
		ks := []any{map[string]any{"AttributeName": pk.Name, "KeyType": "HASH"}}
		if sk != nil {
			ks = append(ks, map[string]any{"AttributeName": sk.Name, "KeyType": "RANGE"})
		}
		return ks
	}
	for _, tb := range schema.Tables() {
		r := s.resources[s.tableID[tb.Name]]
		p := props(r)
		if p["TableName"] != "checkout-"+tb.Name {
			t.Errorf("table %s named %v", tb.Name, p["TableName"])
		}
		if p["BillingMode"] != "PAY_PER_REQUEST" {
			t.Errorf("table %s billing %v", tb.Name, p["BillingMode"])
		}
		if p["DeletionProtectionEnabled"] != true || r["DeletionPolicy"] != "Retain" {
			t.Errorf("table %s: deletion protection %v, policy %v", tb.Name, p["DeletionProtectionEnabled"], r["DeletionPolicy"])
		}
		pitr, _ := p["PointInTimeRecoverySpecification"].(map[string]any)
		if pitr["PointInTimeRecoveryEnabled"] != true {
			t.Errorf("table %s: point-in-time recovery %v", tb.Name, pitr)
		}
		if !reflect.DeepEqual(p["KeySchema"], keySchema(tb.PartitionKey, tb.SortKey)) {
			t.Errorf("table %s key schema %v", tb.Name, p["KeySchema"])
		}
		ttl, _ := p["TimeToLiveSpecification"].(map[string]any)
		if tb.TTLAttribute == "" {
			if ttl != nil {
				t.Errorf("table %s has TTL %v, schema has none", tb.Name, ttl)
			}
		} else if ttl["AttributeName"] != tb.TTLAttribute || ttl["Enabled"] != true {
			t.Errorf("table %s TTL %v, want %s", tb.Name, ttl, tb.TTLAttribute)
		}
		// Attribute definitions: every key attribute of the table and its
		// indexes, with its type, exactly once.
		wantAttrs := map[string]string{}
		addKey := func(k *schema.Key) {
			if k != nil {
				wantAttrs[k.Name] = string(k.Type)
			}
		}
		addKey(&tb.PartitionKey)
		addKey(tb.SortKey)
		for _, ix := range tb.Indexes {
			addKey(&ix.PartitionKey)
			addKey(ix.SortKey)
		}
		gotAttrs := map[string]string{}
		for _, a := range p["AttributeDefinitions"].([]any) {
			m := a.(map[string]any)
			gotAttrs[m["AttributeName"].(string)] = m["AttributeType"].(string)
		}
		if !reflect.DeepEqual(gotAttrs, wantAttrs) {
			t.Errorf("table %s attributes %v, want %v", tb.Name, gotAttrs, wantAttrs)
		}
		gsis, _ := p["GlobalSecondaryIndexes"].([]any)
		if len(gsis) != len(tb.Indexes) {
			t.Errorf("table %s has %d GSIs, schema %d", tb.Name, len(gsis), len(tb.Indexes))
		}
		for _, ix := range tb.Indexes {
			var found map[string]any
			for _, g := range gsis {
				if g.(map[string]any)["IndexName"] == ix.Name {
					found = g.(map[string]any)
				}
			}
			if found == nil {
				t.Errorf("table %s: index %s missing", tb.Name, ix.Name)
				continue
			}
			if !reflect.DeepEqual(found["KeySchema"], keySchema(ix.PartitionKey, ix.SortKey)) {
				t.Errorf("index %s key schema %v", ix.Name, found["KeySchema"])
			}
			want := map[string]any{"ProjectionType": ix.ProjectionType()}
			if len(ix.Include) > 0 {
				var attrs []any
				for _, a := range ix.Include {
					attrs = append(attrs, a)
				}
				want["NonKeyAttributes"] = attrs
			}
			if !reflect.DeepEqual(found["Projection"], want) {
				t.Errorf("index %s projection %v", ix.Name, found["Projection"])
			}
		}
	}
}

func TestDevelopmentContextTurnsDeletionProtectionOff(t *testing.T) {
	s := synth(t, map[string]any{"deletionProtection": "false", "tablePrefix": "dev-"})
	for _, tb := range schema.Tables() {
		r := s.resources[s.tableID[tb.Name]]
		p := props(r)
		if p["DeletionProtectionEnabled"] != false || r["DeletionPolicy"] != "Delete" {
			t.Errorf("table %s: deletion protection %v, policy %v", tb.Name, p["DeletionProtectionEnabled"], r["DeletionPolicy"])
		}
		if p["TableName"] != "dev-"+tb.Name {
			t.Errorf("table %s named %v", tb.Name, p["TableName"])
		}
	}
	for name, id := range s.fnID {
		env := props(s.resources[id])["Environment"].(map[string]any)["Variables"].(map[string]any)
		if env["CHECKOUT_TABLE_PREFIX"] != "dev-" {
			t.Errorf("function %s prefix %v", name, env["CHECKOUT_TABLE_PREFIX"])
		}
	}
}

func TestFunctionsAreArmAL2023WithLimitsEnvAndLogs(t *testing.T) {
	s := defaultStack(t)
	fns := s.ofType("AWS::Lambda::Function")
	if len(fns) != len(deploy.Functions) {
		t.Errorf("template has %d functions, want %d", len(fns), len(deploy.Functions))
	}
	busID := *s.stack.Stack.GetLogicalId(s.stack.EventBus.Node().DefaultChild().(awscdk.CfnElement))
	for _, name := range deploy.Functions {
		p := props(s.resources[s.fnID[name]])
		if !reflect.DeepEqual(p["Architectures"], []any{"arm64"}) {
			t.Errorf("%s architectures %v", name, p["Architectures"])
		}
		if p["Runtime"] != "provided.al2023" || p["Handler"] != "bootstrap" {
			t.Errorf("%s runtime %v handler %v", name, p["Runtime"], p["Handler"])
		}
		if p["MemorySize"] != float64(256) {
			t.Errorf("%s memory %v", name, p["MemorySize"])
		}
		wantTimeout := float64(10)
		switch name {
		case deploy.Sweeper:
			wantTimeout = 60
		case deploy.Stream, deploy.Notices:
			wantTimeout = 30
		case deploy.Claim:
			wantTimeout = 28 // a claim's wait (20 s) and its work fit, under API Gateway's 30 s
		}
		if p["Timeout"] != wantTimeout {
			t.Errorf("%s timeout %v, want %v", name, p["Timeout"], wantTimeout)
		}
		env := p["Environment"].(map[string]any)["Variables"].(map[string]any)
		if env["CHECKOUT_TABLE_PREFIX"] != "checkout-" || ref(env["CHECKOUT_EVENT_BUS"]) != busID || env["LOG_LEVEL"] != "info" {
			t.Errorf("%s environment %v", name, env)
		}
		if env["CHECKOUT_LEASE_SHARDS"] != "16" || env["CHECKOUT_STATUS_SHARDS"] != "16" || env["CHECKOUT_CLAIM_SHARDS"] != "4" || env["CHECKOUT_FEED_SHARDS"] != "16" {
			t.Errorf("%s shard counts %v, want the defaults", name, env)
		}
		lc, _ := p["LoggingConfig"].(map[string]any)
		lg := s.resources[ref(lc["LogGroup"])]
		if lg == nil || lg["Type"] != "AWS::Logs::LogGroup" || props(lg)["RetentionInDays"] != float64(30) {
			t.Errorf("%s log group %v", name, lg)
		}
		if lc["LogFormat"] != "JSON" || lc["SystemLogLevel"] != "INFO" || lc["ApplicationLogLevel"] != nil {
			t.Errorf("%s logging config %v, want JSON with system level INFO and no application level", name, lc)
		}
		if tc, _ := p["TracingConfig"].(map[string]any); tc["Mode"] != "Active" {
			t.Errorf("%s tracing %v, want Active", name, p["TracingConfig"])
		}
		want := float64(DefaultReservedConcurrency[name])
		if name == deploy.Sweeper {
			want = 1
		}
		if p["ReservedConcurrentExecutions"] != want {
			t.Errorf("%s reserved concurrency %v, want %v", name, p["ReservedConcurrentExecutions"], want)
		}
	}
	// Each function has a role of its own.
	roles := map[string]string{}
	for _, name := range deploy.Functions {
		role := getAtt(props(s.resources[s.fnID[name]])["Role"], "Arn")
		if other, ok := roles[role]; ok || s.resources[role]["Type"] != "AWS::IAM::Role" {
			t.Errorf("%s role %s (shared with %q)", name, role, other)
		}
		roles[role] = name
	}
}

func TestTracingAndReservedConcurrencyFromContext(t *testing.T) {
	s := synth(t, map[string]any{"tracing": "false", "reservedConcurrency": "checkouts=7,claim=9,health=2"})
	for _, name := range deploy.Functions {
		p := props(s.resources[s.fnID[name]])
		if tc, _ := p["TracingConfig"].(map[string]any); tc != nil && tc["Mode"] != "PassThrough" {
			t.Errorf("%s tracing %v with tracing=false", name, tc)
		}
		want := any(float64(DefaultReservedConcurrency[name]))
		switch name {
		case deploy.Checkouts:
			want = float64(7)
		case deploy.Claim:
			want = float64(9)
		case deploy.Health:
			want = float64(2)
		case deploy.Sweeper:
			want = float64(1)
		}
		if p["ReservedConcurrentExecutions"] != want {
			t.Errorf("%s reserved concurrency %v, want %v", name, p["ReservedConcurrentExecutions"], want)
		}
	}
	// With tracing off no role may write traces.
	for id, r := range s.ofType("AWS::IAM::Policy") {
		if b, _ := json.Marshal(r); strings.Contains(string(b), "xray:") {
			t.Errorf("policy %s grants X-Ray with tracing off", id)
		}
	}

	// off: nothing reserved, for accounts whose limit allows none.
	s = synth(t, map[string]any{"reservedConcurrency": "off"})
	for _, name := range deploy.Functions {
		if got := props(s.resources[s.fnID[name]])["ReservedConcurrentExecutions"]; got != nil {
			t.Errorf("%s reserved concurrency %v with reservedConcurrency=off", name, got)
		}
	}
}

// TestIAMIsExactlyTheAccessMap compares every function's inline policy with
// Access: the same actions on the same tables and indexes, nothing more.
func TestIAMIsExactlyTheAccessMap(t *testing.T) {
	s := defaultStack(t)
	busID := *s.stack.Stack.GetLogicalId(s.stack.EventBus.Node().DefaultChild().(awscdk.CfnElement))
	roleOf := map[string]string{}
	for name, id := range s.fnID {
		roleOf[name] = getAtt(props(s.resources[id])["Role"], "Arn")
	}
	got := map[string][]string{}
	for id, r := range s.ofType("AWS::IAM::Policy") {
		p := props(r)
		var fn string
		for _, role := range asList(p["Roles"]) {
			for name, rid := range roleOf {
				if ref(role) == rid {
					fn = name
				}
			}
		}
		if fn == "" {
			t.Errorf("policy %s is attached to no function's role", id)
			continue
		}
		for _, st := range p["PolicyDocument"].(map[string]any)["Statement"].([]any) {
			m := st.(map[string]any)
			if m["Effect"] != "Allow" {
				t.Errorf("%s: statement effect %v", fn, m["Effect"])
			}
			for _, a := range asList(m["Action"]) {
				for _, res := range asList(m["Resource"]) {
					got[fn] = append(got[fn], a.(string)+" "+s.render(res))
				}
			}
		}
	}
	dlqID := s.id(s.stack.SweepDeadLetters)
	for _, name := range deploy.Functions {
		// Its own log group, its traces, and for the sweeper its failed
		// runs' destination; then exactly its grants of Access.
		logs := "arn:" + s.id(s.stack.LogGroups[name])
		want := []string{"logs:CreateLogStream " + logs, "logs:PutLogEvents " + logs,
			"xray:PutTelemetryRecords *", "xray:PutTraceSegments *"}
		if name == deploy.Sweeper {
			want = append(want, "sqs:GetQueueAttributes arn:"+dlqID, "sqs:GetQueueUrl arn:"+dlqID, "sqs:SendMessage arn:"+dlqID)
		}
		if deploy.StreamReaders[name] {
			// The tasks table's stream alone (ListStreams has no resource
			// level), and the batches it gives up on to its dead-letter queue.
			streamArn := `{"Fn::GetAtt":["` + s.id(s.stack.Tables[schema.TasksTable]) + `","StreamArn"]}`
			sdlq := s.id(s.stack.StreamDeadLetters)
			want = append(want, "dynamodb:DescribeStream "+streamArn, "dynamodb:GetRecords "+streamArn,
				"dynamodb:GetShardIterator "+streamArn, "dynamodb:ListStreams *",
				"sqs:GetQueueAttributes arn:"+sdlq, "sqs:GetQueueUrl arn:"+sdlq, "sqs:SendMessage arn:"+sdlq)
		}
		for _, g := range deploy.Grants[name] {
			for _, a := range g.Actions {
				want = append(want, "dynamodb:"+a+" table:"+g.Table)
			}
			for _, ix := range g.QueryIndexes {
				want = append(want, "dynamodb:Query table:"+g.Table+"/index/"+ix)
			}
		}
		if deploy.PublishesEvents[name] {
			want = append(want, "events:PutEvents arn:"+busID)
		}
		sort.Strings(want)
		sort.Strings(got[name])
		if !reflect.DeepEqual(got[name], want) {
			t.Errorf("%s permissions:\n got  %q\n want %q", name, got[name], want)
		}
	}
	// Roles carry no managed policy at all, not even basic logging (which
	// would let a function write to any log group).
	for name, rid := range roleOf {
		if mp := props(s.resources[rid])["ManagedPolicyArns"]; mp != nil {
			t.Errorf("%s role has managed policies %s", name, s.render(mp))
		}
	}
}

func TestAccessMapNamesRealTablesAndIndexes(t *testing.T) {
	indexes := map[string]map[string]bool{}
	for _, tb := range schema.Tables() {
		indexes[tb.Name] = map[string]bool{}
		for _, ix := range tb.Indexes {
			indexes[tb.Name][ix.Name] = true
		}
	}
	// The tasks table of the earlier schema, which the stack does not
	// create: only the migration guard's read of its marker.
	indexes[schema.TasksTableV1] = map[string]bool{}
	allowed := map[string]bool{"GetItem": true, "PutItem": true, "UpdateItem": true, "DeleteItem": true,
		"Query": true, "BatchGetItem": true, "BatchWriteItem": true, "DescribeTable": true}
	for fn, grants := range deploy.Grants {
		seen := map[string]bool{}
		for _, g := range grants {
			if g.Table == schema.TasksTableV1 && (!reflect.DeepEqual(g.Actions, []string{"GetItem"}) || len(g.QueryIndexes) > 0) {
				t.Errorf("%s: the earlier tasks table is granted %v %v, want GetItem alone", fn, g.Actions, g.QueryIndexes)
			}
			if slices.Contains(g.Actions, "DescribeTable") && fn != deploy.Health {
				t.Errorf("%s: DescribeTable is the health function's alone", fn)
			}
			if indexes[g.Table] == nil {
				t.Errorf("%s: unknown table %q", fn, g.Table)
			}
			if seen[g.Table] {
				t.Errorf("%s: table %s granted twice", fn, g.Table)
			}
			seen[g.Table] = true
			for _, a := range g.Actions {
				if !allowed[a] {
					t.Errorf("%s: action %q on %s is not one the store uses", fn, a, g.Table)
				}
			}
			for _, ix := range g.QueryIndexes {
				if !indexes[g.Table][ix] {
					t.Errorf("%s: table %s has no index %q", fn, g.Table, ix)
				}
			}
		}
	}
}

// TestNoScanOrWildcardAnywhere walks every string of the template.
func TestNoScanOrWildcardAnywhere(t *testing.T) {
	s := defaultStack(t)
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case string:
			l := strings.ToLower(x)
			if strings.Contains(l, "dynamodb:scan") || strings.Contains(l, "dynamodb:*") || strings.Contains(l, "dynamodbfullaccess") {
				t.Errorf("%s = %q", path, x)
			}
			if strings.HasSuffix(path, ".Action") && strings.HasSuffix(x, "*") && !strings.Contains(path, "QueuePolicy") && x != "sqs:*" {
				t.Errorf("%s = %q", path, x)
			}
		case map[string]any:
			for k, e := range x {
				walk(path+"."+k, e)
			}
		case []any:
			for _, e := range x {
				walk(path, e)
			}
		}
	}
	walk("", s.json)
}

func TestSweeperRunsEveryMinute(t *testing.T) {
	s := defaultStack(t)
	rules := s.ofType("AWS::Events::Rule")
	if len(rules) != 1 {
		t.Fatalf("want 1 rule, got %d", len(rules))
	}
	for _, r := range rules {
		p := props(r)
		if p["ScheduleExpression"] != "rate(1 minute)" || p["State"] != "ENABLED" {
			t.Errorf("schedule %v state %v", p["ScheduleExpression"], p["State"])
		}
		targets := p["Targets"].([]any)
		if len(targets) != 1 || getAtt(targets[0].(map[string]any)["Arn"], "Arn") != s.fnID[deploy.Sweeper] {
			t.Fatalf("schedule targets %v, want the sweeper", targets)
		}
		target := targets[0].(map[string]any)
		if !reflect.DeepEqual(target["RetryPolicy"], map[string]any{"MaximumEventAgeInSeconds": float64(120), "MaximumRetryAttempts": float64(2)}) {
			t.Errorf("target retry policy %v", target["RetryPolicy"])
		}
		if dlq, _ := target["DeadLetterConfig"].(map[string]any); getAtt(dlq["Arn"], "Arn") != s.id(s.stack.SweepDeadLetters) {
			t.Errorf("target dead-letter config %v, want the sweep queue", target["DeadLetterConfig"])
		}
	}
	// One sweep at a time; a failed or stale run is not retried by Lambda
	// and lands in the same queue.
	if c := props(s.resources[s.fnID[deploy.Sweeper]])["ReservedConcurrentExecutions"]; c != float64(1) {
		t.Errorf("sweeper reserved concurrency %v", c)
	}
	configs := s.ofType("AWS::Lambda::EventInvokeConfig")
	if len(configs) != 1 {
		t.Fatalf("%d event invoke configs, want the sweeper's", len(configs))
	}
	for _, r := range configs {
		p := props(r)
		dest, _ := p["DestinationConfig"].(map[string]any)
		onFailure, _ := dest["OnFailure"].(map[string]any)
		if ref(p["FunctionName"]) != s.fnID[deploy.Sweeper] || p["MaximumRetryAttempts"] != float64(0) ||
			p["MaximumEventAgeInSeconds"] != float64(120) || getAtt(onFailure["Destination"], "Arn") != s.id(s.stack.SweepDeadLetters) {
			t.Errorf("sweeper invoke config %v", p)
		}
	}
	q := props(s.resources[s.id(s.stack.SweepDeadLetters)])
	if q["SqsManagedSseEnabled"] != true || q["MessageRetentionPeriod"] != float64(14*24*3600) {
		t.Errorf("dead-letter queue %v", q)
	}
	invokable := false
	for _, r := range s.ofType("AWS::Lambda::Permission") {
		p := props(r)
		if p["Principal"] == "events.amazonaws.com" && getAtt(p["FunctionName"], "Arn") == s.fnID[deploy.Sweeper] {
			invokable = true
		}
	}
	if !invokable {
		t.Error("EventBridge may not invoke the sweeper")
	}
}

func TestStageThrottlingFromContext(t *testing.T) {
	for _, tc := range []struct {
		name        string
		ctx         map[string]any
		rate, burst float64
	}{
		{"defaults", nil, 100, 200},
		{"context", map[string]any{"throttleRate": "7", "throttleBurst": float64(9), "claimThrottleRate": "3", "claimThrottleBurst": "4"}, 7, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s *synthesized
			if tc.ctx == nil {
				s = defaultStack(t)
			} else {
				s = synth(t, tc.ctx)
			}
			stages := s.ofType("AWS::ApiGatewayV2::Stage")
			if len(stages) != 1 {
				t.Fatalf("want 1 stage, got %d", len(stages))
			}
			for _, r := range stages {
				p := props(r)
				if p["StageName"] != "$default" || p["AutoDeploy"] != true {
					t.Errorf("stage %v autodeploy %v", p["StageName"], p["AutoDeploy"])
				}
				rs, _ := p["DefaultRouteSettings"].(map[string]any)
				if rs["ThrottlingRateLimit"] != tc.rate || rs["ThrottlingBurstLimit"] != tc.burst {
					t.Errorf("throttling %v, want rate %v burst %v", rs, tc.rate, tc.burst)
				}
				al, _ := p["AccessLogSettings"].(map[string]any)
				format, _ := al["Format"].(string)
				// Valid JSON as it stands (every value quoted), and so
				// whatever API Gateway substitutes.
				var fields map[string]any
				if err := json.Unmarshal([]byte(format), &fields); err != nil || fields["status"] != "$context.status" ||
					fields["deployment"] != "checkout-" || strings.Contains(strings.ToLower(format), "authorization") {
					t.Errorf("access log format %q (%v)", format, err)
				}
				// Every unauthenticated route (health, $default and the
				// dashboard's files) gets the public limit.
				public := map[string]any{"ThrottlingRateLimit": float64(10), "ThrottlingBurstLimit": float64(20)}
				wantRoutes := map[string]any{
					"GET /healthz":     public,
					"$default":         public,
					"GET /":            public,
					"GET /ui/{proxy+}": public,
					"POST /api/claim":  map[string]any{"ThrottlingRateLimit": float64(50), "ThrottlingBurstLimit": float64(100)},
				}
				if tc.ctx != nil {
					wantRoutes["POST /api/claim"] = map[string]any{"ThrottlingRateLimit": float64(3), "ThrottlingBurstLimit": float64(4)}
				}
				if !reflect.DeepEqual(p["RouteSettings"], wantRoutes) {
					t.Errorf("route settings %v, want %v", p["RouteSettings"], wantRoutes)
				}
				// Route settings name routes, which must exist first.
				deps := map[string]bool{}
				for _, d := range asList(r["DependsOn"]) {
					deps[d.(string)] = true
				}
				for id, route := range s.ofType("AWS::ApiGatewayV2::Route") {
					if !deps[id] {
						t.Errorf("the stage does not wait for route %v", props(route)["RouteKey"])
					}
				}
			}
		})
	}
}

func TestOutputs(t *testing.T) {
	s := defaultStack(t)
	outputs := s.json["Outputs"].(map[string]any)
	want := []string{"ApiUrl", "TablePrefix", "EventBusName", "MintAdminCommand", "AlarmTopicArn", "DashboardName", "SweepDeadLetterQueueUrl", "StreamDeadLetterQueueUrl"}
	for _, tb := range schema.Tables() {
		want = append(want, title(tb.Name)+"TableName")
	}
	for _, k := range want {
		if outputs[k] == nil {
			t.Errorf("output %s missing", k)
		}
	}
	mint := s.render(outputs["MintAdminCommand"].(map[string]any)["Value"])
	if mint != "go run ./cmd/mint-admin --table-prefix checkout- --region ref:AWS::Region" {
		t.Errorf("MintAdminCommand = %q", mint)
	}
	if url := s.render(outputs["ApiUrl"].(map[string]any)["Value"]); !strings.HasPrefix(url, "https://ref:Api") {
		t.Errorf("ApiUrl = %q", url)
	}
	// No API key, hashed or not, is in the template.
	raw, _ := json.Marshal(s.json)
	if strings.Contains(string(raw), "ck_") {
		t.Error("template contains an API key")
	}
}

// Shard counts come from the context, over the defaults, as numbers from
// -c (strings) or cdk.json (numbers), and every function gets the same.
func TestShardCountsFromContext(t *testing.T) {
	app := awscdk.NewApp(&awscdk.AppProps{Context: &map[string]any{"leaseShards": "32", "claimShards": float64(8)}})
	cfg, err := ConfigFromContext(app.Node())
	if err != nil {
		t.Fatal(err)
	}
	want := schema.ShardCounts{Lease: 32, Status: schema.StatusShards, Claim: 8, Feed: schema.FeedShards}
	if cfg.Shards != want {
		t.Fatalf("shards %+v, want %+v", cfg.Shards, want)
	}
	if DefaultConfig().Shards != schema.DefaultShards() {
		t.Fatalf("default shards %+v", DefaultConfig().Shards)
	}
	s := synth(t, map[string]any{"leaseShards": "32", "statusShards": "20", "claimShards": "8", "feedShards": "64"})
	for _, name := range deploy.Functions {
		env := props(s.resources[s.fnID[name]])["Environment"].(map[string]any)["Variables"].(map[string]any)
		for k, v := range map[string]string{"CHECKOUT_LEASE_SHARDS": "32", "CHECKOUT_STATUS_SHARDS": "20", "CHECKOUT_CLAIM_SHARDS": "8", "CHECKOUT_FEED_SHARDS": "64"} {
			if env[k] != v {
				t.Errorf("%s: %s=%v, want %s", name, k, env[k], v)
			}
		}
	}
}

func TestBadContextIsRefused(t *testing.T) {
	for _, ctx := range []map[string]any{
		{"throttleRate": "fast"},
		{"throttleBurst": "-1"},
		{"deletionProtection": "maybe"},
		{"tablePrefix": ""},
		{"tablePrefix": float64(3)},
		{"tablePrefix": "bad prefix/"},
		{"tracing": "sometimes"},
		{"alarmEmail": "nobody"},
		{"latencyAlarmMs": "0"},
		{"reservedConcurrency": "checkouts=0"},
		{"reservedConcurrency": "sweeper=2"},
		{"reservedConcurrency": "checkouts"},
		{"reservedConcurrency": map[string]any{"tasks": "ten"}},
		{"leaseShards": "0"},
		{"leaseShards": "257"},
		{"statusShards": "21"},
		{"claimShards": "17"},
		{"claimShards": "4.5"},
		{"feedShards": "many"},
		{"feedShards": true},
	} {
		app := awscdk.NewApp(&awscdk.AppProps{Context: &ctx})
		if _, err := ConfigFromContext(app.Node()); err == nil {
			t.Errorf("context %v accepted", ctx)
		}
	}
}

func TestBuiltFunctionsAreUsedAndRequireBuildRefusesMissingOnes(t *testing.T) {
	dist := t.TempDir()
	app := awscdk.NewApp(&awscdk.AppProps{Context: &map[string]any{"distDir": dist, "requireBuild": "true"}})
	cfg, err := ConfigFromContext(app.Node())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewCheckoutStack(app, "Missing", cfg); err == nil || !strings.Contains(err.Error(), "make build") {
		t.Fatalf("missing build: err = %v", err)
	}
	for _, name := range deploy.Functions {
		if err := os.MkdirAll(filepath.Join(dist, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dist, name, "bootstrap"), []byte("built "+name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	app = awscdk.NewApp(&awscdk.AppProps{Context: &map[string]any{"distDir": dist, "requireBuild": "true"}})
	cfg, err = ConfigFromContext(app.Node())
	if err != nil {
		t.Fatal(err)
	}
	cs, err := NewCheckoutStack(app, "Built", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs.Placeholders) != 0 {
		t.Errorf("placeholders %v with a full build", cs.Placeholders)
	}
	// Each function has its own asset (distinct contents, distinct hashes).
	tmpl := assertions.Template_FromStack(cs.Stack, nil)
	keys := map[string]bool{}
	for _, r := range *tmpl.FindResources(jsii.String("AWS::Lambda::Function"), nil) {
		code := (*r)["Properties"].(map[string]any)["Code"].(map[string]any)
		keys[fmt.Sprint(code["S3Key"])] = true
	}
	if len(keys) != len(deploy.Functions) {
		t.Errorf("%d distinct code assets, want %d", len(keys), len(deploy.Functions))
	}
}

// Each reader of the tasks table's change stream (the stream function and
// the notices function) has an event source mapping of its own, and no
// other function has one: two readers, DynamoDB Streams' limit per shard.
// Each takes one batch per shard at a time (ParallelizationFactor 1, set
// and not left to the default: the queue counts apply each shard's changes
// in order, and notices go out in order), from the oldest, retried and
// bisected, into the stream dead-letter queue. Only the stream function's
// has a tumbling window (its events name their shard, for the queue
// counts).
func TestStreamMappingsKeepEachShardInOrder(t *testing.T) {
	s := defaultStack(t)
	mappings := s.ofType("AWS::Lambda::EventSourceMapping")
	if len(mappings) != len(deploy.StreamReaders) || len(deploy.StreamReaders) != 2 {
		t.Fatalf("%d event source mappings, %d stream readers; want 2 of each", len(mappings), len(deploy.StreamReaders))
	}
	byFn := map[string]string{}
	for name, id := range s.fnID {
		byFn[id] = name
	}
	seen := map[string]bool{}
	for id, m := range mappings {
		p := props(m)
		fn := byFn[ref(p["FunctionName"])]
		if !deploy.StreamReaders[fn] || seen[fn] {
			t.Errorf("%s: function %v (%q), want each stream reader once", id, p["FunctionName"], fn)
		}
		seen[fn] = true
		if getAtt(p["EventSourceArn"], "StreamArn") != s.tableID[schema.TasksTable] {
			t.Errorf("%s: source %v", id, p["EventSourceArn"])
		}
		want := map[string]any{
			"ParallelizationFactor": float64(1), "BatchSize": float64(streamBatchSize), "StartingPosition": "TRIM_HORIZON",
			"BisectBatchOnFunctionError": true, "MaximumRetryAttempts": float64(streamRetries),
			"MaximumRecordAgeInSeconds": float64(24 * 3600),
		}
		if fn == deploy.Stream {
			want["TumblingWindowInSeconds"] = float64(streamWindowMinutes * 60)
		} else if w, ok := p["TumblingWindowInSeconds"]; ok {
			t.Errorf("%s (%s): a tumbling window of %v, want none", id, fn, w)
		}
		for k, v := range want {
			if p[k] != v {
				t.Errorf("%s (%s): %s = %v, want %v", id, fn, k, p[k], v)
			}
		}
		onFailure, _ := p["DestinationConfig"].(map[string]any)["OnFailure"].(map[string]any)
		if getAtt(onFailure["Destination"], "Arn") != s.id(s.stack.StreamDeadLetters) {
			t.Errorf("%s: on failure %v", id, p["DestinationConfig"])
		}
	}
}

// Every public route's AwsSolutions-APIG4 suppression, as the template
// carries it for cdk-nag, gives that route's own reason, naming it.
func TestPublicRoutesGiveTheirOwnReasons(t *testing.T) {
	s := defaultStack(t)
	reasons := map[string]string{} // route key -> APIG4 reason
	for id, r := range s.ofType("AWS::ApiGatewayV2::Route") {
		key, _ := props(r)["RouteKey"].(string)
		meta, _ := r["Metadata"].(map[string]any)
		nag, _ := meta["cdk_nag"].(map[string]any)
		for _, rule := range asList(nag["rules_to_suppress"]) {
			if m, _ := rule.(map[string]any); m["id"] == "AwsSolutions-APIG4" {
				if _, dup := reasons[key]; dup {
					t.Errorf("%s (%s): two APIG4 suppressions", key, id)
				}
				reasons[key], _ = m["reason"].(string)
			}
		}
	}
	seen := map[string]string{}
	for _, r := range deploy.Routes {
		if r.Access != deploy.Public {
			continue
		}
		reason := reasons[r.Key()]
		if !strings.HasPrefix(reason, r.Key()+" ") {
			t.Errorf("%s: APIG4 reason %q does not name the route", r.Key(), reason)
		}
		if other, ok := seen[reason]; ok {
			t.Errorf("%s and %s share the reason %q", r.Key(), other, reason)
		}
		seen[reason] = r.Key()
	}
}
