package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

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
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdadestinations"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/lease/schema"
)

// Environment variables every function receives.
const (
	EnvEventBus = "CHECKOUT_EVENT_BUS"
	// The notices function's webhooks (package webhook reads them).
	EnvWebhookURL    = "CHECKOUT_WEBHOOK_URL"
	EnvWebhookSecret = "CHECKOUT_WEBHOOK_SECRET"
	EnvLogLevel      = "LOG_LEVEL"
	// The checkouts function's auto-creation (context autoCreateTasks).
	EnvAutoCreateTasks = "CHECKOUT_AUTO_CREATE_TASKS"
	// The sweeper's stay (context sweepStay).
	EnvSweepStay = "CHECKOUT_SWEEP_STAY"
)

// The service's metrics (see deploy/metrics.go), and the authorizer's cache.
const (
	MetricNamespace = deploy.MetricNamespace
	MetricThrottled = deploy.MetricAPIThrottled
	// The functions rely on it (deploy.AuthorizerCacheTTL): they refuse
	// to register a removed id again within it.
	authorizerCacheSecs = int(deploy.AuthorizerCacheTTL / time.Second)
)

// Sweeper invocation limits. A sweep that cannot start within
// sweepMaxEventAge is superseded by the next scheduled one, so it is not
// kept longer; a failed sweep is not retried by Lambda, because the next
// run a minute later does the same work.
//
// A run stays up to 55 s after its start to sweep what falls due
// (setup.DefaultSweepStay), and no later than 5 s before its timeout
// (setup.SweepDeadlineMargin and SweepRoom): with sweepTimeoutSecs, it
// ends before the schedule's next run starts.
const (
	sweepMaxEventAgeSecs = 120
	sweepRuleRetries     = 2
	sweepTimeoutSecs     = 60
	// maxSweepStay is the longest stay the sweeper's timeout leaves.
	maxSweepStay = (sweepTimeoutSecs - 5) * time.Second

	// The stream readers' event source mappings (streamMapping): up to 100 changes a
	// batch, handed over as soon as they are read (no batching window, so
	// watchers are told within the stream's own delay, about a second),
	// ten retries of a failing batch, bisected. `checkout-server migrate`
	// relies on batches of at most 100 (stream.BatchSize) when it finds,
	// from the event archive, where a replaced mapping had got to
	// (stream.Poller.ResumeAfterApplied): do not raise it.
	streamBatchSize = 100
	streamRetries   = 10
	// streamWindowMinutes is the mapping's tumbling window. The window's
	// state is not used: the window is what makes each event name its
	// shard, which the queue counters key their exactly-once positions
	// by (lease/doc.go, "Queue counts"). Records are still handed over as
	// they are read; a window adds one empty invocation per shard when it
	// closes, so the longest (15 minutes) adds the fewest.
	streamWindowMinutes = 15
	// streamParallelization is the mapping's concurrent batches per shard.
	// It must stay 1: the queue counters keep one position per shard, so
	// two batches of one shard at once would apply changes out of order.
	streamParallelization = 1
	// streamWebhookTimeout is the notices function's timeout with
	// webhooks: a batch may wait out one receiver's retries (10 s), then a
	// probe (5 s at most) every 30 s while it stays down, and a receiver
	// that is slow but answers as long as the deliveries may run, which is
	// until 60 s before this timeout (setup.WebhookDeadlineMargin): the rest
	// is dead-lettered untried, so an invocation never times out on a
	// receiver. Only the notices wait: the stream function reads the stream
	// on its own.
	streamWebhookTimeout = 300
)

// CheckoutStack is the synthesized stack and the constructs that tests and
// outputs refer to.
type CheckoutStack struct {
	Stack     awscdk.Stack
	Config    Config
	Tables    map[string]awsdynamodb.Table
	Functions map[string]awslambda.Function
	Roles     map[string]awsiam.Role
	LogGroups map[string]awslogs.LogGroup
	API       awsapigatewayv2.HttpApi
	Stage     awsapigatewayv2.HttpStage
	EventBus  awsevents.EventBus
	// SweepRule runs the sweeper; SweepDeadLetters holds the sweeps that
	// could not be delivered (by EventBridge) or failed (in Lambda).
	SweepRule        awsevents.Rule
	SweepDeadLetters awssqs.Queue
	// StreamDeadLetters holds the change batches the stream function could
	// not apply.
	StreamDeadLetters awssqs.Queue
	// AlarmTopic receives every alarm's state changes.
	AlarmTopic awssns.Topic
	Alarms     map[string]awscloudwatch.Alarm
	Dashboard  awscloudwatch.Dashboard
	// Suppressions lists every cdk-nag finding the stack accepts, and why.
	Suppressions []Suppression
	// Placeholders lists the functions whose bootstrap was missing and were
	// given a placeholder asset (synthesis before `make build`).
	Placeholders []string
}

// NewCheckoutStack builds the whole service into one stack.
func NewCheckoutStack(scope constructs.Construct, id string, cfg Config) (*CheckoutStack, error) {
	for _, r := range deploy.Routes {
		if r.Access == deploy.Public && PublicRouteReasons[r.Key()] == "" {
			return nil, fmt.Errorf("public route %s has no reason in PublicRouteReasons", r.Key())
		}
	}
	stack := awscdk.NewStack(scope, jsii.String(id), &awscdk.StackProps{
		Description: jsii.String("checkout: task checkout service for agents (HTTP API, Lambda, DynamoDB)"),
	})
	s := &CheckoutStack{
		Stack:     stack,
		Config:    cfg,
		Tables:    map[string]awsdynamodb.Table{},
		Functions: map[string]awslambda.Function{},
		Roles:     map[string]awsiam.Role{},
		LogGroups: map[string]awslogs.LogGroup{},
		Alarms:    map[string]awscloudwatch.Alarm{},
	}
	names := schema.Names{Prefix: cfg.TablePrefix}

	// Tables, from the single schema definition. Their names are fixed by
	// the prefix, so a stack destroyed with its tables retained is deployed
	// again either with a new prefix or after `make adopt-tables` (see
	// DEPLOY.md, "Destroy and redeploy").
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
		if t.Stream {
			props.Stream = awsdynamodb.StreamViewType_NEW_AND_OLD_IMAGES
		}
		table := awsdynamodb.NewTable(stack, jsii.String(title(t.Name)+"Table"), props)
		for _, ix := range t.Indexes {
			gsi := &awsdynamodb.GlobalSecondaryIndexProps{
				IndexName:      jsii.String(ix.Name),
				PartitionKey:   attr(ix.PartitionKey),
				ProjectionType: awsdynamodb.ProjectionType(ix.ProjectionType()),
			}
			if len(ix.Include) > 0 {
				gsi.NonKeyAttributes = jsii.Strings(ix.Include...)
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

	// Where sweeps that could not run end up: EventBridge puts an event it
	// could not deliver here, and Lambda the record of a run that failed or
	// could not start in time.
	s.SweepDeadLetters = awssqs.NewQueue(stack, jsii.String("SweepDeadLetters"), &awssqs.QueueProps{
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
		RetentionPeriod: awscdk.Duration_Days(jsii.Number(14)),
	})
	s.suppress(s.SweepDeadLetters, "Serverless-SQSRedrivePolicy",
		"This queue is itself the dead-letter queue of the sweep rule and of the sweeper's failed runs; a dead-letter queue behind it would only move the same records again. Its depth has an alarm.")
	s.suppress(s.SweepDeadLetters, "AwsSolutions-SQS3",
		"This queue is a dead-letter queue: the sweep rule's target DLQ and the sweeper's on-failure destination. cdk-nag recognises a DLQ only through a queue's redrive policy or a function's DeadLetterConfig.")

	// Where changes end up that the stream or notices function could not
	// handle after its event source mapping's retries: the batch's shard
	// and sequence numbers, and the function (requestContext.functionArn),
	// to replay from the stream (kept 24 hours) or the table.
	s.StreamDeadLetters = awssqs.NewQueue(stack, jsii.String("StreamDeadLetters"), &awssqs.QueueProps{
		Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
		EnforceSSL:      jsii.Bool(true),
		RetentionPeriod: awscdk.Duration_Days(jsii.Number(14)),
	})
	s.suppress(s.StreamDeadLetters, "Serverless-SQSRedrivePolicy",
		"This queue is itself the on-failure destination of the stream readers' event source mappings; a dead-letter queue behind it would only move the same records again. Its depth has an alarm.")
	s.suppress(s.StreamDeadLetters, "AwsSolutions-SQS3",
		"This queue is a dead-letter queue: the on-failure destination of the stream readers' event source mappings, which cdk-nag does not recognise as one.")

	// Functions: each with its own role, which carries no managed policy,
	// only writes to the function's own log group, its DynamoDB grants from
	// deploy.Grants and, where it publishes, PutEvents on the bus.
	for _, name := range deploy.Functions {
		code, placeholder, err := functionCode(name, cfg)
		if err != nil {
			return nil, err
		}
		if placeholder {
			s.Placeholders = append(s.Placeholders, name)
		}
		role := awsiam.NewRole(stack, jsii.String(title(name)+"Role"), &awsiam.RoleProps{
			AssumedBy:   awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
			Description: jsii.String("checkout " + name + ": its log group, its DynamoDB grants from deploy/access.go"),
		})
		logs := awslogs.NewLogGroup(stack, jsii.String(title(name)+"Logs"), &awslogs.LogGroupProps{
			Retention:     awslogs.RetentionDays_ONE_MONTH,
			RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
		})
		logs.GrantWrite(role)
		timeout := 10.0
		switch name {
		case deploy.Sweeper:
			timeout = sweepTimeoutSecs
		case deploy.Stream, deploy.Notices:
			timeout = 30
		case deploy.Claim:
			// A claim may wait up to 20 s (lease.MaxClaimWait) for a task;
			// API Gateway answers 503 after 30 s in any case. The checkouts
			// function, which serves no claim, keeps the default.
			timeout = 28
		}
		tracing := awslambda.Tracing_DISABLED
		if cfg.Tracing {
			tracing = awslambda.Tracing_ACTIVE
		}
		props := &awslambda.FunctionProps{
			Description:  jsii.String("checkout " + name),
			Runtime:      awslambda.Runtime_PROVIDED_AL2023(),
			Architecture: awslambda.Architecture_ARM_64(),
			Handler:      jsii.String("bootstrap"),
			Code:         code,
			MemorySize:   jsii.Number(256),
			Timeout:      awscdk.Duration_Seconds(jsii.Number(timeout)),
			Role:         role,
			LogGroup:     logs,
			// The functions write JSON lines already; JSON makes Lambda's
			// own START/END/REPORT lines JSON too. The functions filter
			// their own lines by LOG_LEVEL, so no application log level is
			// set here (Lambda would drop the metric lines, which have none).
			LoggingFormat:    awslambda.LoggingFormat_JSON,
			SystemLogLevelV2: awslambda.SystemLogLevel_INFO,
			Tracing:          tracing,
			Environment: &map[string]*string{
				schema.EnvTablePrefix: jsii.String(cfg.TablePrefix),
				EnvEventBus:           s.EventBus.EventBusName(),
				EnvLogLevel:           jsii.String(cfg.LogLevel),
			},
		}
		// Every function shards alike: a writer and a reader that
		// disagreed would lose items between them.
		for k, v := range cfg.Shards.Env() {
			(*props.Environment)[k] = jsii.String(v)
		}
		if name == deploy.Sweeper {
			// One sweep at a time; overlapping sweeps are safe (every ending
			// is a conditional write) but only cost. A run's stay ends before
			// the next run is due; one that still ran would hold the next
			// back (throttled, and retried by Lambda's queue) rather than
			// run beside it. A run that fails or cannot start within two
			// minutes goes to the dead-letter queue.
			if cfg.ReservedConcurrency != nil {
				props.ReservedConcurrentExecutions = jsii.Number(1)
			}
			props.MaxEventAge = awscdk.Duration_Seconds(jsii.Number(sweepMaxEventAgeSecs))
			props.RetryAttempts = jsii.Number(0)
			props.OnFailure = awslambdadestinations.NewSqsDestination(s.SweepDeadLetters)
			if cfg.SweepStay != "" {
				(*props.Environment)[EnvSweepStay] = jsii.String(cfg.SweepStay)
			}
		} else if n, ok := cfg.ReservedConcurrency[name]; ok {
			props.ReservedConcurrentExecutions = jsii.Number(float64(n))
		}
		if name == deploy.Checkouts && cfg.AutoCreateTasks {
			(*props.Environment)[EnvAutoCreateTasks] = jsii.String("true")
		}
		if name == deploy.Notices && cfg.WebhookURLs != "" {
			// The same notifier as the local server's signs and retries
			// each delivery; a batch may wait out a receiver's retries,
			// never past the end of its invocation.
			(*props.Environment)[EnvWebhookURL] = jsii.String(cfg.WebhookURLs)
			var version *awscdk.SecretsManagerSecretOptions
			if cfg.WebhookSecretVersion != "" {
				// Named in the reference: a new version changes the
				// function, and CloudFormation resolves the key again.
				version = &awscdk.SecretsManagerSecretOptions{VersionId: jsii.String(cfg.WebhookSecretVersion)}
			}
			(*props.Environment)[EnvWebhookSecret] = awscdk.SecretValue_SecretsManager(jsii.String(cfg.WebhookSecretName), version).UnsafeUnwrap()
			props.Timeout = awscdk.Duration_Seconds(jsii.Number(streamWebhookTimeout))
		}
		fn := awslambda.NewFunction(stack, jsii.String(title(name)+"Function"), props)
		for _, st := range Statements(name, s.Tables, s.tableArn) {
			fn.AddToRolePolicy(st)
		}
		if deploy.StreamReaders[name] {
			// The change stream of the tasks table, in order per item, read
			// by each of its readers on a mapping of its own: a batch that
			// fails is split in two and retried, and after its retries its
			// position goes to the dead-letter queue. The mapping grants
			// the role the stream's read actions only.
			fn.AddEventSource(awslambdaeventsources.NewDynamoEventSource(s.Tables[schema.TasksTable], s.streamMapping(name)))
			s.suppress(role, "AwsSolutions-IAM5",
				"dynamodb:ListStreams, which the event source mapping needs, supports no resource-level permission; the stream's own read actions name the tasks table's stream.",
				"Resource::*")
		}
		if deploy.PublishesEvents[name] {
			fn.AddToRolePolicy(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
				Effect:    awsiam.Effect_ALLOW,
				Actions:   jsii.Strings("events:PutEvents"),
				Resources: jsii.Strings(*s.EventBus.EventBusArn()),
			}))
		}
		switch name {
		case deploy.Sweeper:
			s.suppress(fn, "Serverless-LambdaDLQ",
				"The sweeper's failed asynchronous runs go to the SweepDeadLetters queue through its on-failure destination (EventInvokeConfig), which records the error with the event; a DeadLetterConfig as well would deliver each failure twice.")
		case deploy.Stream, deploy.Notices:
			s.suppress(fn, "Serverless-LambdaDLQ",
				"Invoked only by its DynamoDB event source mapping, whose on-failure destination is the StreamDeadLetters queue; a function dead-letter queue applies only to asynchronous invocations.")
		default:
			s.suppress(fn, "Serverless-LambdaDLQ",
				"Invoked only synchronously, by API Gateway (as a route integration or the authorizer): a dead-letter queue applies only to asynchronous invocations. Errors reach the caller and the API 5xx alarm.")
		}
		if cfg.Tracing {
			s.suppress(role, "AwsSolutions-IAM5",
				"Active tracing needs xray:PutTraceSegments and xray:PutTelemetryRecords, which support no resource-level permissions; every other statement of this role names its resources.",
				"Resource::*")
		} else {
			s.suppress(fn, "Serverless-LambdaTracing",
				"Tracing is turned off for this deployment with the context flag tracing=false.")
		}
		s.Roles[name] = role
		s.LogGroups[name] = logs
		s.Functions[name] = fn
	}

	if len(s.Placeholders) > 0 {
		awscdk.Annotations_Of(stack).AddWarningV2(jsii.String("checkout:placeholder"),
			jsii.String(fmt.Sprintf("no build in %s for %s: using a placeholder bootstrap that fails when invoked; run `make build` before deploying",
				cfg.DistDir, strings.Join(s.Placeholders, ", "))), nil)
	}

	accessLogs := s.httpAPI(cfg)

	// The sweeper runs every minute on the default bus's schedule. An
	// invocation EventBridge cannot make is retried and then kept in the
	// dead-letter queue.
	s.SweepRule = awsevents.NewRule(stack, jsii.String("SweepSchedule"), &awsevents.RuleProps{
		Description: jsii.String("run the checkout sweeper"),
		Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(1))),
		Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(s.Functions[deploy.Sweeper], &awseventstargets.LambdaFunctionProps{
			DeadLetterQueue: s.SweepDeadLetters,
			MaxEventAge:     awscdk.Duration_Seconds(jsii.Number(sweepMaxEventAgeSecs)),
			RetryAttempts:   jsii.Number(sweepRuleRetries),
		})},
	})

	s.operations(cfg, accessLogs)
	s.outputs(cfg)
	return s, nil
}

// httpAPI builds the HTTP API: one route per entry of deploy.Routes, each behind
// the authorizer unless public, the $default route, and the stage with its
// limits and access log, which it returns.
func (s *CheckoutStack) httpAPI(cfg Config) awslogs.LogGroup {
	stack := s.Stack
	// The stage is created here (not as the API's implicit default stage)
	// so that it carries throttling and access logging.
	s.API = awsapigatewayv2.NewHttpApi(stack, jsii.String("Api"), &awsapigatewayv2.HttpApiProps{
		ApiName:            jsii.String(cfg.TablePrefix + "api"),
		CreateDefaultStage: jsii.Bool(false),
	})
	authorizer := awsapigatewayv2authorizers.NewHttpLambdaAuthorizer(jsii.String("ApiKeyAuthorizer"), s.Functions[deploy.Authorizer],
		&awsapigatewayv2authorizers.HttpLambdaAuthorizerProps{
			AuthorizerName:  jsii.String("api-key"),
			IdentitySource:  jsii.Strings("$request.header.Authorization"),
			ResponseTypes:   &[]awsapigatewayv2authorizers.HttpLambdaResponseType{awsapigatewayv2authorizers.HttpLambdaResponseType_SIMPLE},
			ResultsCacheTtl: awscdk.Duration_Seconds(jsii.Number(authorizerCacheSecs)),
		})
	integrations := map[string]awsapigatewayv2integrations.HttpLambdaIntegration{}
	var routes []constructs.IDependable
	for _, r := range deploy.Routes {
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
		if !(r.Access == deploy.Public) {
			opts.Authorizer = authorizer
		}
		for _, route := range *s.API.AddRoutes(opts) {
			routes = append(routes, route)
			if r.Access == deploy.Public {
				s.suppress(route, "AwsSolutions-APIG4", PublicRouteReasons[r.Key()])
			}
		}
	}
	// Everything no route matches (an unknown path, or a known path with
	// another method) goes to the health function, which answers with the
	// contract's 404 not_found or 405 method_not_allowed body instead of
	// API Gateway's own {"message":"Not Found"}. It carries no authorizer and
	// serves no API route: with no agent in the context, it can only answer
	// 404, 405 or 401.
	def := awsapigatewayv2.NewHttpRoute(stack, jsii.String("DefaultRoute"), &awsapigatewayv2.HttpRouteProps{
		HttpApi:     s.API,
		RouteKey:    awsapigatewayv2.HttpRouteKey_DEFAULT(),
		Integration: integrations[deploy.Health],
	})
	routes = append(routes, def)
	s.suppress(def, "AwsSolutions-APIG4",
		"The $default route only answers requests that match no API route, with the contract's 404 or 405 body; it reaches no data. It is throttled like /healthz and served by the health function, whose reserved concurrency caps it.")

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
	cfn := s.Stage.Node().DefaultChild().(awsapigatewayv2.CfnStage)
	// Access log without headers or bodies: never holds an API key.
	cfn.SetAccessLogSettings(&awsapigatewayv2.CfnStage_AccessLogSettingsProperty{
		DestinationArn: accessLogs.LogGroupArn(),
		Format:         jsii.String(AccessLogFormat(cfg.TablePrefix)),
	})
	// Route limits below the stage's: the routes that run without the
	// authorizer, and claim. API Gateway checks route settings against the
	// routes that exist, so the stage waits for them.
	cfn.SetRouteSettings(RouteThrottles(cfg))
	s.Stage.Node().AddDependency(routes...)
	return accessLogs
}

// PublicRouteReasons says, for each public route of deploy.Routes, why it
// has no authorizer: the reason of its cdk-nag AwsSolutions-APIG4
// suppression. The stack refuses a public route missing here.
var PublicRouteReasons = map[string]string{
	"GET /healthz": "GET /healthz is public by the API contract: load balancers and uptime checks call it without a key. " +
		"It reads no item (one DescribeTable of the tasks table, cached for seconds), and its own route throttle and the health function's reserved concurrency bound what anonymous callers can spend.",
	"GET /": "GET / serves the dashboard's page, a static file built into the health function: a browser must load it before anyone signs in, " +
		"and the page then calls the API with the key the user types, behind the authorizer. It holds no data or secret and reads nothing; the public route throttle and the health function's reserved concurrency bound its cost.",
	"GET /ui/{proxy+}": "GET /ui/{proxy+} serves the dashboard's scripts, styles and icon, static files built into the health function, which the page loads before anyone signs in. " +
		"They hold no data or secret and read nothing; an unknown file is 404, and the public route throttle and the health function's reserved concurrency bound the cost.",
}

// RouteThrottles is the stage's per-route throttling: every public route and
// $default at the public limits, POST /api/claim at the claim limits.
func RouteThrottles(cfg Config) map[string]any {
	limit := func(rate, burst float64) map[string]any {
		return map[string]any{"ThrottlingRateLimit": rate, "ThrottlingBurstLimit": burst}
	}
	out := map[string]any{"$default": limit(cfg.PublicThrottleRate, cfg.PublicThrottleBurst)}
	for _, r := range deploy.Routes {
		switch {
		case (r.Access == deploy.Public):
			out[r.Key()] = limit(cfg.PublicThrottleRate, cfg.PublicThrottleBurst)
		case r.Key() == "POST /api/claim":
			out[r.Key()] = limit(cfg.ClaimThrottleRate, cfg.ClaimThrottleBurst)
		}
	}
	return out
}

// AccessLogFormat is the stage's JSON access log line. Every value is a
// string, so the line is JSON whatever API Gateway substitutes (a "-" for a
// missing value included); deployment names the stack's metrics dimension.
func AccessLogFormat(prefix string) string {
	return `{"requestId":"$context.requestId","ip":"$context.identity.sourceIp","requestTime":"$context.requestTime",` +
		`"routeKey":"$context.routeKey","status":"$context.status","responseLength":"$context.responseLength",` +
		`"latencyMs":"$context.responseLatency","integrationLatencyMs":"$context.integrationLatency",` +
		`"integrationError":"$context.integrationErrorMessage","authorizerError":"$context.authorizer.error",` +
		`"deployment":"` + prefix + `"}`
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
	out("EventBusName", "EventBridge bus with TaskAvailable, LeaseEnded, LeaseLost and TaskFailed events (source checkout)", s.EventBus.EventBusName())
	out("MintAdminCommand", "Run from a clone of the repository with AWS credentials to create the first admin key (printed once, stored hashed)",
		jsii.String(MintAdminCommand(cfg.TablePrefix, *s.Stack.Region())))
	out("AlarmTopicArn", "SNS topic every alarm notifies (subscribe with -c alarmEmail=... or your own subscription)", s.AlarmTopic.TopicArn())
	out("DashboardName", "CloudWatch dashboard of the service", s.Dashboard.DashboardName())
	out("SweepDeadLetterQueueUrl", "SQS queue of sweeps that could not be delivered or failed", s.SweepDeadLetters.QueueUrl())
	out("StreamDeadLetterQueueUrl", "SQS queue of change batches the stream or notices function gave up on", s.StreamDeadLetters.QueueUrl())
}

// MintAdminCommand is the command that creates the first admin key.
func MintAdminCommand(prefix, region string) string {
	return fmt.Sprintf("go run ./cmd/mint-admin --table-prefix %s --region %s", prefix, region)
}

// Statements returns the IAM statements of one function from Access: per
// grant, one statement for the table's item actions and one for Query on its
// indexes. A grant on a table the stack does not create (the tasks table of
// the earlier schema, which the migration guard reads) names it by the ARN
// that other gives.
func Statements(function string, tables map[string]awsdynamodb.Table, other func(logical string) string) []awsiam.PolicyStatement {
	var out []awsiam.PolicyStatement
	for _, g := range deploy.Grants[function] {
		var arn string
		if table, ok := tables[g.Table]; ok {
			arn = *table.TableArn()
		} else {
			arn = other(g.Table)
		}
		if len(g.Actions) > 0 {
			out = append(out, awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
				Effect:    awsiam.Effect_ALLOW,
				Actions:   dynamo(g.Actions),
				Resources: jsii.Strings(arn),
			}))
		}
		if len(g.QueryIndexes) > 0 {
			var arns []string
			for _, ix := range g.QueryIndexes {
				arns = append(arns, arn+"/index/"+ix)
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

// tableArn is the ARN of the table logical in the stack's account and
// region, whether the stack creates it or not.
func (s *CheckoutStack) tableArn(logical string) string {
	return *s.Stack.FormatArn(&awscdk.ArnComponents{
		Service:      jsii.String("dynamodb"),
		Resource:     jsii.String("table"),
		ResourceName: jsii.String(schema.Names{Prefix: s.Config.TablePrefix}.Table(logical)),
	})
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

// streamMapping is the event source mapping of the stream reader name on
// the tasks table's stream: from the oldest record, up to streamBatchSize
// changes a batch handed over as they are read, one batch per shard at a
// time, a failing batch bisected and retried, its position sent after
// streamRetries to the dead-letter queue. The stream function's has a
// tumbling window too, so that each event names its shard, which the
// queue counts need (lease/doc.go, "Queue counts"); the notices function
// keeps no positions and needs none.
func (s *CheckoutStack) streamMapping(name string) *awslambdaeventsources.DynamoEventSourceProps {
	p := &awslambdaeventsources.DynamoEventSourceProps{
		StartingPosition: awslambda.StartingPosition_TRIM_HORIZON,
		BatchSize:        jsii.Number(streamBatchSize),
		// One batch per shard at a time, explicitly: the queue counts
		// apply each shard's changes in order, keyed by the shard, and
		// notices go out in the order of their transitions.
		ParallelizationFactor: jsii.Number(streamParallelization),
		BisectBatchOnError:    jsii.Bool(true),
		RetryAttempts:         jsii.Number(streamRetries),
		MaxRecordAge:          awscdk.Duration_Hours(jsii.Number(24)),
		OnFailure:             awslambdaeventsources.NewSqsDlq(s.StreamDeadLetters),
	}
	if name == deploy.Stream {
		p.TumblingWindow = awscdk.Duration_Minutes(jsii.Number(streamWindowMinutes))
	}
	return p
}
