package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2authorizers"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsapigatewayv2integrations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/checkout-dev/checkout/lease/schema"
)

// Environment variables every function receives.
const (
	EnvEventBus = "CHECKOUT_EVENT_BUS"
	EnvLogLevel = "LOG_LEVEL"
)

// Metric namespace and name of the API's throttled (429) answers, counted
// from the stage's access log.
const (
	MetricNamespace     = "Checkout"
	MetricThrottled     = "ApiThrottledRequests"
	authorizerCacheSecs = 30
)

// CheckoutStack is the synthesized stack and the constructs that tests and
// outputs refer to.
type CheckoutStack struct {
	Stack     awscdk.Stack
	Tables    map[string]awsdynamodb.Table
	Functions map[string]awslambda.Function
	API       awsapigatewayv2.HttpApi
	Stage     awsapigatewayv2.HttpStage
	EventBus  awsevents.EventBus
	// Placeholders lists the functions whose bootstrap was missing and were
	// given a placeholder asset (synthesis before `make build`).
	Placeholders []string
}

// NewCheckoutStack builds the whole service into one stack.
func NewCheckoutStack(scope constructs.Construct, id string, cfg Config) (*CheckoutStack, error) {
	stack := awscdk.NewStack(scope, jsii.String(id), &awscdk.StackProps{
		Description: jsii.String("checkout: task checkout service for agents (HTTP API, Lambda, DynamoDB)"),
	})
	s := &CheckoutStack{
		Stack:     stack,
		Tables:    map[string]awsdynamodb.Table{},
		Functions: map[string]awslambda.Function{},
	}
	names := schema.Names{Prefix: cfg.TablePrefix}

	// Tables, from the single schema definition.
	removal := awscdk.RemovalPolicy_DESTROY
	if cfg.DeletionProtection {
		removal = awscdk.RemovalPolicy_RETAIN
	}
	for _, t := range schema.Tables() {
		props := &awsdynamodb.TableProps{
			TableName:          jsii.String(names.Table(t.Name)),
			PartitionKey:       attr(t.PartitionKey),
			BillingMode:        awsdynamodb.BillingMode_PAY_PER_REQUEST,
			DeletionProtection: jsii.Bool(cfg.DeletionProtection),
			RemovalPolicy:      removal,
			PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
				PointInTimeRecoveryEnabled: jsii.Bool(true),
			},
		}
		if t.SortKey != nil {
			props.SortKey = attr(*t.SortKey)
		}
		if t.TTLAttribute != "" {
			props.TimeToLiveAttribute = jsii.String(t.TTLAttribute)
		}
		table := awsdynamodb.NewTable(stack, jsii.String(title(t.Name)+"Table"), props)
		for _, ix := range t.Indexes {
			gsi := &awsdynamodb.GlobalSecondaryIndexProps{
				IndexName:      jsii.String(ix.Name),
				PartitionKey:   attr(ix.PartitionKey),
				ProjectionType: awsdynamodb.ProjectionType_ALL,
			}
			if ix.SortKey != nil {
				gsi.SortKey = attr(*ix.SortKey)
			}
			table.AddGlobalSecondaryIndex(gsi)
		}
		s.Tables[t.Name] = table
	}

	// The bus that lease endings and available tasks are published on.
	s.EventBus = awsevents.NewEventBus(stack, jsii.String("EventBus"), &awsevents.EventBusProps{
		EventBusName: jsii.String(cfg.TablePrefix + "bus"),
	})

	// Functions.
	for _, name := range Functions {
		code, placeholder, err := functionCode(name, cfg)
		if err != nil {
			return nil, err
		}
		if placeholder {
			s.Placeholders = append(s.Placeholders, name)
		}
		logs := awslogs.NewLogGroup(stack, jsii.String(title(name)+"Logs"), &awslogs.LogGroupProps{
			Retention:     awslogs.RetentionDays_ONE_MONTH,
			RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
		})
		timeout := 10.0
		if name == FnSweeper {
			timeout = 60
		}
		fn := awslambda.NewFunction(stack, jsii.String(title(name)+"Function"), &awslambda.FunctionProps{
			Description:  jsii.String("checkout " + name),
			Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
			Architecture: awslambda.Architecture_ARM_64(),
			Handler:      jsii.String("bootstrap"),
			Code:         code,
			MemorySize:   jsii.Number(256),
			Timeout:      awscdk.Duration_Seconds(jsii.Number(timeout)),
			LogGroup:     logs,
			Environment: &map[string]*string{
				schema.EnvTablePrefix: jsii.String(cfg.TablePrefix),
				EnvEventBus:           s.EventBus.EventBusName(),
				EnvLogLevel:           jsii.String(cfg.LogLevel),
			},
		})
		for _, st := range Statements(name, s.Tables) {
			fn.AddToRolePolicy(st)
		}
		if PublishesEvents[name] {
			fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
				Effect:    awsiam.Effect_ALLOW,
				Actions:   jsii.Strings("events:PutEvents"),
				Resources: jsii.Strings(*s.EventBus.EventBusArn()),
			}))
		}
		s.Functions[name] = fn
	}

	if len(s.Placeholders) > 0 {
		awscdk.Annotations_Of(stack).AddWarningV2(jsii.String("checkout:placeholder"),
			jsii.String(fmt.Sprintf("no build in %s for %s: using a placeholder bootstrap that fails when invoked; run `make build` before deploying",
				cfg.DistDir, strings.Join(s.Placeholders, ", "))), nil)
	}

	// HTTP API: one route per entry of Routes, each behind the authorizer
	// unless public. The stage is created here (not as the API's implicit
	// default stage) so that it carries throttling and access logging.
	s.API = awsapigatewayv2.NewHttpApi(stack, jsii.String("Api"), &awsapigatewayv2.HttpApiProps{
		ApiName:            jsii.String(cfg.TablePrefix + "api"),
		CreateDefaultStage: jsii.Bool(false),
	})
	authorizer := awsapigatewayv2authorizers.NewHttpLambdaAuthorizer(jsii.String("ApiKeyAuthorizer"), s.Functions[FnAuthorizer],
		&awsapigatewayv2authorizers.HttpLambdaAuthorizerProps{
			AuthorizerName:  jsii.String("api-key"),
			IdentitySource:  jsii.Strings("$request.header.Authorization"),
			ResponseTypes:   &[]awsapigatewayv2authorizers.HttpLambdaResponseType{awsapigatewayv2authorizers.HttpLambdaResponseType_SIMPLE},
			ResultsCacheTtl: awscdk.Duration_Seconds(jsii.Number(authorizerCacheSecs)),
		})
	integrations := map[string]awsapigatewayv2integrations.HttpLambdaIntegration{}
	for _, r := range Routes {
		in, ok := integrations[r.Function]
		if !ok {
			in = awsapigatewayv2integrations.NewHttpLambdaIntegration(jsii.String(title(r.Function)+"Integration"), s.Functions[r.Function],
				&awsapigatewayv2integrations.HttpLambdaIntegrationProps{
					PayloadFormatVersion: awsapigatewayv2.PayloadFormatVersion_VERSION_2_0(),
				})
			integrations[r.Function] = in
		}
		opts := &awsapigatewayv2.AddRoutesOptions{
			Path:        jsii.String(r.Path),
			Methods:     &[]awsapigatewayv2.HttpMethod{awsapigatewayv2.HttpMethod(r.Method)},
			Integration: in,
		}
		if !r.Public {
			opts.Authorizer = authorizer
		}
		s.API.AddRoutes(opts)
	}
	// Everything no route matches (an unknown path, or a known path with
	// another method) goes to the health function, which answers with the
	// contract's 404 not_found or 405 method_not_allowed body instead of
	// API Gateway's own {"message":"Not Found"}. It carries no authorizer and
	// serves no API route: with no agent in the context, it can only answer
	// 404, 405 or 401.
	awsapigatewayv2.NewHttpRoute(stack, jsii.String("DefaultRoute"), &awsapigatewayv2.HttpRouteProps{
		HttpApi:     s.API,
		RouteKey:    awsapigatewayv2.HttpRouteKey_DEFAULT(),
		Integration: integrations[FnHealth],
	})
	accessLogs := awslogs.NewLogGroup(stack, jsii.String("ApiAccessLogs"), &awslogs.LogGroupProps{
		Retention:     awslogs.RetentionDays_ONE_MONTH,
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	s.Stage = awsapigatewayv2.NewHttpStage(stack, jsii.String("DefaultStage"), &awsapigatewayv2.HttpStageProps{
		HttpApi:    s.API,
		StageName:  jsii.String("$default"),
		AutoDeploy: jsii.Bool(true),
		Throttle: &awsapigatewayv2.ThrottleSettings{
			RateLimit:  jsii.Number(cfg.ThrottleRate),
			BurstLimit: jsii.Number(cfg.ThrottleBurst),
		},
	})
	// Access log without headers or bodies: never holds an API key.
	s.Stage.Node().DefaultChild().(awsapigatewayv2.CfnStage).SetAccessLogSettings(&awsapigatewayv2.CfnStage_AccessLogSettingsProperty{
		DestinationArn: accessLogs.LogGroupArn(),
		Format:         jsii.String(accessLogFormat),
	})

	// The sweeper runs every minute on the default bus's schedule.
	awsevents.NewRule(stack, jsii.String("SweepSchedule"), &awsevents.RuleProps{
		Description: jsii.String("run the checkout sweeper"),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(1))),
		Targets:     &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(s.Functions[FnSweeper], nil)},
	})

	s.alarms(accessLogs)
	s.outputs(cfg)
	return s, nil
}

// accessLogFormat is the stage's JSON access log line. status is a bare
// number so that the metric filter can compare it.
const accessLogFormat = `{"requestId":"$context.requestId","ip":"$context.identity.sourceIp","requestTime":"$context.requestTime","routeKey":"$context.routeKey","status":$context.status,"responseLength":"$context.responseLength","latencyMs":"$context.responseLatency","integrationError":"$context.integrationErrorMessage","authorizerError":"$context.authorizer.error"}`

func (s *CheckoutStack) alarms(accessLogs awslogs.LogGroup) {
	period := awscdk.Duration_Minutes(jsii.Number(5))
	alarm := func(id, desc string, m awscloudwatch.IMetric) {
		awscloudwatch.NewAlarm(s.Stack, jsii.String(id), &awscloudwatch.AlarmProps{
			AlarmDescription:   jsii.String(desc),
			Metric:             m,
			Threshold:          jsii.Number(1),
			EvaluationPeriods:  jsii.Number(1),
			ComparisonOperator: awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
			TreatMissingData:   awscloudwatch.TreatMissingData_NOT_BREACHING,
		})
	}

	alarm("Api5xxAlarm", "The HTTP API answered 5xx (every 5xx is a bug).",
		s.API.MetricServerError(&awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Sum")}))

	// API Gateway has no metric of its own for throttled requests (they are
	// counted in 4xx with every client error), so 429 answers are counted
	// from the access log.
	throttled := awslogs.NewMetricFilter(s.Stack, jsii.String("ApiThrottledFilter"), &awslogs.MetricFilterProps{
		LogGroup:        accessLogs,
		FilterPattern:   awslogs.FilterPattern_NumberValue(jsii.String("$.status"), jsii.String("="), jsii.Number(429)),
		MetricNamespace: jsii.String(MetricNamespace),
		MetricName:      jsii.String(MetricThrottled),
		MetricValue:     jsii.String("1"),
	})
	alarm("ApiThrottledAlarm", "The HTTP API stage throttled requests (429); raise throttleRate/throttleBurst if this is legitimate load.",
		throttled.Metric(&awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Sum")}))

	// Lambda concurrency throttles, summed over every function.
	using := map[string]awscloudwatch.IMetric{}
	var terms []string
	for i, name := range Functions {
		key := fmt.Sprintf("t%d", i)
		using[key] = s.Functions[name].MetricThrottles(&awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Sum")})
		terms = append(terms, key)
	}
	alarm("LambdaThrottlesAlarm", "A checkout function was throttled by Lambda concurrency limits.",
		awscloudwatch.NewMathExpression(&awscloudwatch.MathExpressionProps{
			Expression:   jsii.String(strings.Join(terms, "+")),
			UsingMetrics: &using,
			Label:        jsii.String("Throttles"),
			Period:       period,
		}))

	alarm("SweeperErrorsAlarm", "The sweeper failed; expired leases are still never live, but their events and notices are delayed.",
		s.Functions[FnSweeper].MetricErrors(&awscloudwatch.MetricOptions{Period: period, Statistic: jsii.String("Sum")}))
}

func (s *CheckoutStack) outputs(cfg Config) {
	out := func(id, desc string, v *string) {
		awscdk.NewCfnOutput(s.Stack, jsii.String(id), &awscdk.CfnOutputProps{Description: jsii.String(desc), Value: v})
	}
	out("ApiUrl", "Base URL of the checkout API (CHECKOUT_URL for agents)", s.Stage.Url())
	out("TablePrefix", "Prefix of every table name (CHECKOUT_TABLE_PREFIX)", jsii.String(cfg.TablePrefix))
	for _, t := range schema.Tables() {
		out(title(t.Name)+"TableName", "DynamoDB table "+t.Name, s.Tables[t.Name].TableName())
	}
	out("EventBusName", "EventBridge bus with TaskAvailable and LeaseEnded events (source checkout)", s.EventBus.EventBusName())
	out("MintAdminCommand", "Run from a clone of the repository with AWS credentials to create the first admin key (printed once, stored hashed)",
		jsii.String(MintAdminCommand(cfg.TablePrefix, *s.Stack.Region())))
}

// MintAdminCommand is the command that creates the first admin key.
func MintAdminCommand(prefix, region string) string {
	return fmt.Sprintf("go run ./cmd/mint-admin --table-prefix %s --region %s", prefix, region)
}

// Statements returns the IAM statements of one function from Access: per
// grant, one statement for the table's item actions and one for Query on its
// indexes.
func Statements(function string, tables map[string]awsdynamodb.Table) []awsiam.PolicyStatement {
	var out []awsiam.PolicyStatement
	for _, g := range Access[function] {
		table := tables[g.Table]
		if len(g.Actions) > 0 {
			out = append(out, awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
				Effect:    awsiam.Effect_ALLOW,
				Actions:   dynamo(g.Actions),
				Resources: jsii.Strings(*table.TableArn()),
			}))
		}
		if len(g.QueryIndexes) > 0 {
			var arns []string
			for _, ix := range g.QueryIndexes {
				arns = append(arns, *table.TableArn()+"/index/"+ix)
			}
			out = append(out, awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
				Effect:    awsiam.Effect_ALLOW,
				Actions:   jsii.Strings("dynamodb:Query"),
				Resources: jsii.Strings(arns...),
			}))
		}
	}
	return out
}

func dynamo(actions []string) *[]*string {
	out := make([]string, len(actions))
	for i, a := range actions {
		out[i] = "dynamodb:" + a
	}
	sort.Strings(out)
	return jsii.Strings(out...)
}

// functionCode returns the asset of a function: dist/<name> when its
// bootstrap exists, otherwise (unless cfg.RequireBuild) a placeholder
// directory whose bootstrap only reports that the build is missing. The
// placeholder lets `cdk synth` and the template tests run before `make build`.
func functionCode(name string, cfg Config) (awslambda.Code, bool, error) {
	dir, err := filepath.Abs(filepath.Join(cfg.DistDir, name))
	if err != nil {
		return nil, false, err
	}
	if st, err := os.Stat(filepath.Join(dir, "bootstrap")); err == nil && st.Mode().IsRegular() {
		return awslambda.Code_FromAsset(jsii.String(dir), nil), false, nil
	}
	if cfg.RequireBuild {
		return nil, false, fmt.Errorf("%s/bootstrap is missing: run `make build` first", dir)
	}
	ph, err := placeholderDir()
	if err != nil {
		return nil, false, err
	}
	return awslambda.Code_FromAsset(jsii.String(ph), nil), true, nil
}

const placeholderBootstrap = "#!/bin/sh\necho 'checkout: this function was deployed without its build; run make build and deploy again' >&2\nexit 1\n"

// placeholderDir writes the placeholder asset under the cloud assembly
// directory (CDK_OUTDIR, set by the CDK CLI) or the temporary directory.
func placeholderDir() (string, error) {
	base := os.Getenv("CDK_OUTDIR")
	if base == "" {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "checkout-placeholder-bootstrap")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("placeholder asset: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bootstrap"), []byte(placeholderBootstrap), 0o755); err != nil {
		return "", fmt.Errorf("placeholder asset: %w", err)
	}
	return dir, nil
}

func attr(k schema.Key) *awsdynamodb.Attribute {
	t := awsdynamodb.AttributeType_STRING
	if k.Type == schema.Number {
		t = awsdynamodb.AttributeType_NUMBER
	}
	return &awsdynamodb.Attribute{Name: jsii.String(k.Name), Type: t}
}

// title turns a logical name into a construct id part: "tasks" -> "Tasks".
func title(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
