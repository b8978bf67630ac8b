// Package setup builds what every Lambda function of the service shares: the
// settings from the environment, the DynamoDB store with its EventBridge
// notifier, and the handler of one route group. Each functions/<name>/main.go
// is then environment -> store -> handler -> lambda.Start.
package setup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/checkout-dev/checkout/auth"
	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/functions/internal/apigw"
	"github.com/checkout-dev/checkout/httpapi"
	"github.com/checkout-dev/checkout/internal/notify"
	"github.com/checkout-dev/checkout/internal/webhook"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/ui"
)

// Environment variables the functions read. The stack sets the first two,
// and the shard counts (schema.EnvLeaseShards, EnvStatusShards,
// EnvClaimShards, EnvFeedShards: CHECKOUT_LEASE_SHARDS and so on) on every
// function alike.
const (
	EnvTablePrefix     = schema.EnvTablePrefix // CHECKOUT_TABLE_PREFIX
	EnvEventBus        = notify.EnvEventBus    // CHECKOUT_EVENT_BUS
	EnvAutoCreateTasks = "CHECKOUT_AUTO_CREATE_TASKS"
	EnvLogLevel        = "LOG_LEVEL"
	// EnvSweepStay is how long a sweeper run stays after its sweep to
	// sweep what falls due meanwhile (a Go duration; unset: DefaultSweepStay,
	// "0s": one sweep a run). See Sweep.
	EnvSweepStay = "CHECKOUT_SWEEP_STAY"
	// The notices function's webhooks (the stack sets them from the CDK
	// context webhookUrls and webhookSecretName).
	EnvWebhookURL    = webhook.EnvURL    // CHECKOUT_WEBHOOK_URL
	EnvWebhookSecret = webhook.EnvSecret // CHECKOUT_WEBHOOK_SECRET
)

// TrailWait is how long GET /api/tasks/{task_id}/events waits for the
// stream function to archive the events of transitions already answered
// (about a second behind them), so that a client reads its own; a hole
// still open then is answered as pending.
const TrailWait = 3 * time.Second

// FeedSettle is how far behind now the fleet feed is read in AWS
// (lease.Config.FeedSettle): an event reaches the feed once the stream
// function has archived it and the feed index has caught up, and a
// cursor must never pass one still on its way. Each event is keyed no
// earlier than the second its write landed (lease.Config.FeedAtLanding),
// up to a second before it landed, so this leaves the stream's delay and
// the index's lag about four seconds together; the stream function
// archives within about one. An event it archives more than half of this
// after its time (a batch retried) is listed when it is archived instead
// (lease, feed.go, "Events archived late").
const FeedSettle = 5 * time.Second

// WebhookRetryFor is how long the notices function retries a webhook
// delivery before it writes it to the dead-letter table. A receiver that
// is down holds a batch of notices up for this long, once: the URL is then
// down, and later notices to it are dead-lettered untried, but for one
// probe attempt (WebhookAttemptTimeout at most) every
// webhook.DefaultProbeInterval, until it answers. It holds up nothing
// else: the stream function, which writes the messages and the archive,
// reads the stream on its own.
const WebhookRetryFor = 10 * time.Second

// WebhookAttemptTimeout bounds one delivery attempt in the notices
// function.
const WebhookAttemptTimeout = 5 * time.Second

// WebhookDeadlineMargin is the part of a notices invocation that webhook
// deliveries leave alone (webhook.Config.DeadlineMargin): a receiver that
// is slow but answers cannot make the invocation time out, which would
// hand the whole batch again and delay its EventBridge notices with it.
// Once only the margin is left, the batch's later deliveries are
// dead-lettered untried, and the margin covers what remains: for each of
// up to 200 notices (a batch of 100 changes) one EventBridge PutEvents and
// one dead letter's PutItem, tens of milliseconds each. The stack gives
// the notices function 300 s with webhooks (infra/stack.go,
// streamWebhookTimeout).
const WebhookDeadlineMargin = 60 * time.Second

// Env is a function's configuration.
type Env struct {
	// Function is the function's name (one of Functions).
	Function        string
	TablePrefix     string
	EventBus        string // "" logs notices instead of publishing them
	AutoCreateTasks bool
	// WebhookURLs and WebhookSecret: every notice is also POSTed, signed,
	// to each URL (the notices function only).
	WebhookURLs   []string
	WebhookSecret string
	LogLevel      slog.Level
	// Shards are the indexes' shard counts (schema.ShardsFromEnv; zero
	// counts are the defaults).
	Shards schema.ShardCounts
	// SweepStay is how long after its start a sweeper run goes on sweeping
	// what falls due (0: one sweep a run; FromEnv reads EnvSweepStay, and
	// makes it DefaultSweepStay when that is unset). See Sweep.
	SweepStay time.Duration
	// SweepAgentsEvery is the least time between two whole sweeps of a
	// run that stays (0: sweepAgentsEvery; lower in tests).
	SweepAgentsEvery time.Duration
	// Metrics receives the embedded metric format lines (nil: none). The
	// functions write them to standard output, where CloudWatch Logs picks
	// them up.
	Metrics io.Writer
	// Now is the clock (nil: time.Now); tests set it, the environment never
	// does.
	Now func() time.Time
}

// FromEnv reads the configuration of function fn from the process
// environment.
func FromEnv(fn string) Env {
	e := Env{
		Function:    fn,
		TablePrefix: os.Getenv(EnvTablePrefix),
		EventBus:    os.Getenv(EnvEventBus),
		Metrics:     os.Stdout,
	}
	e.AutoCreateTasks, _ = strconv.ParseBool(os.Getenv(EnvAutoCreateTasks))
	e.WebhookURLs, _ = webhook.ParseURLs(os.Getenv(EnvWebhookURL))
	e.WebhookSecret = os.Getenv(EnvWebhookSecret)
	_ = e.LogLevel.UnmarshalText([]byte(strings.TrimSpace(os.Getenv(EnvLogLevel))))
	e.Shards, _ = schema.ShardsFromEnv(os.Getenv) // MustStore refuses a bad one
	e.SweepStay, _ = SweepStayFromEnv(os.Getenv)  // MustStore refuses a bad one
	return e
}

// SweepStayFromEnv reads EnvSweepStay: a Go duration, not negative;
// unset or blank, DefaultSweepStay.
func SweepStayFromEnv(getenv func(string) string) (time.Duration, error) {
	v := strings.TrimSpace(getenv(EnvSweepStay))
	if v == "" {
		return DefaultSweepStay, nil
	}
	d, err := time.ParseDuration(v)
	if err == nil && d < 0 {
		err = errors.New("negative")
	}
	if err != nil {
		return DefaultSweepStay, fmt.Errorf("%s=%q: want a duration such as 55s, or 0s for one sweep a run: %w", EnvSweepStay, v, err)
	}
	return d, nil
}

// Logger writes JSON lines to stdout, which Lambda sends to CloudWatch Logs.
func (e Env) Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stdout, &slog.HandlerOptions{Level: e.LogLevel})).With("function", e.Function)
}

func (e Env) metrics() *Metrics { return NewMetrics(e.Metrics, e.TablePrefix, e.Now) }

func (e Env) clock() func() time.Time {
	if e.Now != nil {
		return e.Now
	}
	return time.Now
}

// MustDB builds the DynamoDB client from the function's AWS configuration,
// or exits: a function that cannot configure its client has nothing to
// serve. It runs once per container, outside the handler.
func MustDB(log *slog.Logger) *dynamodb.Client {
	cfg := mustAWSConfig(log)
	return dynamodb.NewFromConfig(cfg)
}

func mustAWSConfig(log *slog.Logger) aws.Config {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := AWSConfig(ctx)
	if err != nil {
		log.Error("aws configuration", "error", err)
		os.Exit(1)
	}
	return cfg
}

// MustStore builds the store from the function's AWS configuration, or exits:
// a function that cannot configure its clients, or whose shard counts are
// out of bounds or below those the deployment has used (CheckShards), has
// nothing to serve. It runs once per container, outside
// the handler. The DynamoDB client is returned too, for the checks of HTTP
// and Sweep.
func MustStore(e Env, log *slog.Logger) (*lease.Store, *dynamodb.Client) {
	if _, err := schema.ShardsFromEnv(os.Getenv); err != nil {
		log.Error("shard counts", "error", err)
		os.Exit(1)
	}
	if _, err := SweepStayFromEnv(os.Getenv); err != nil {
		log.Error("sweep stay", "error", err)
		os.Exit(1)
	}
	cfg := mustAWSConfig(log)
	var n lease.Notifier
	if e.EventBus != "" {
		n = notify.NewEventBridge(eventbridge.NewFromConfig(cfg), e.EventBus)
	}
	db := dynamodb.NewFromConfig(cfg)
	if _, err := webhook.ParseURLs(os.Getenv(EnvWebhookURL)); err != nil {
		log.Error("webhooks", "error", err)
		os.Exit(1)
	}
	hooks, err := Webhooks(e, db, log)
	if err != nil {
		log.Error("webhooks", "error", err)
		os.Exit(1)
	}
	if hooks != nil {
		if n == nil {
			n = lease.LogNotifier(log)
		}
		n = webhook.Multi(n, hooks)
	}
	store := NewStore(db, n, e, log)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var shrink *schema.ShrinkError
	if err := CheckShards(ctx, e, db); errors.As(err, &shrink) {
		log.Error("shard counts", "error", err)
		os.Exit(1)
	} else if err != nil {
		// The record could not be read or raised: the counts were
		// checked at the last start that could; serve rather than fail.
		log.Warn("shard counts not checked", "error", err)
	}
	return store, db
}

// CheckShards checks, for a function that reads the sharded indexes (the
// agents, tasks, checkouts, claim and sweeper functions), its shard counts against
// the largest this deployment has used (lease.RecordShards), and raises
// that record when they are larger. A count below it is a
// *schema.ShrinkError: the function would miss the items in the shards
// above it (leases not swept, tasks not listed or claimed, events not in
// the feed), so MustStore refuses to start.
func CheckShards(ctx context.Context, e Env, db lease.DB) error {
	switch e.Function {
	case deploy.Agents, deploy.Tasks, deploy.Checkouts, deploy.Claim, deploy.Sweeper:
		return lease.RecordShards(ctx, db, schema.Names{Prefix: e.TablePrefix}, e.Shards)
	}
	return nil
}

// Webhooks is the notices function's webhook notifier (nil without
// WebhookURLs): deliveries that fail for good go to the dead-letter table.
func Webhooks(e Env, db webhook.PutItemAPI, log *slog.Logger) (*webhook.Notifier, error) {
	if len(e.WebhookURLs) == 0 {
		return nil, nil
	}
	return webhook.New(webhook.Config{
		URLs: e.WebhookURLs, Secret: e.WebhookSecret, MaxElapsed: WebhookRetryFor, AttemptTimeout: WebhookAttemptTimeout,
		DeadlineMargin: WebhookDeadlineMargin,
		DeadLetters:    webhook.TableDeadLetters{DB: db, Table: schema.Names{Prefix: e.TablePrefix}.Table(schema.WebhookDeadLettersTable)},
		Logger:         log, // signed by the wall clock, which receivers check, never a test's
	})
}

// AWSConfig is the SDK's standard configuration: the region and credentials
// from the default provider chain (in Lambda, the execution role's keys in
// the environment; elsewhere also profiles, SSO, container and instance
// credentials), and the endpoints from AWS_ENDPOINT_URL_<SERVICE> or
// AWS_ENDPOINT_URL, so that the very binaries deployed to Lambda can be
// pointed at a local DynamoDB or EventBridge.
func AWSConfig(ctx context.Context) (aws.Config, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return aws.Config{}, errors.New("no AWS region: set AWS_REGION (Lambda sets it)")
	}
	return cfg, nil
}

// NewStore is the store of the functions over db (nil notifier: log notices).
// Every notice is counted in the function's metrics.
func NewStore(db lease.DB, n lease.Notifier, e Env, log *slog.Logger) *lease.Store {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if n == nil {
		n = lease.LogNotifier(log)
	}
	if m := e.metrics(); m != nil {
		n = meteredNotifier{next: n, metrics: m, function: e.Function}
	}
	return lease.New(lease.Config{
		DB:        db,
		Tables:    schema.Names{Prefix: e.TablePrefix},
		Notifier:  n,
		Logger:    log,
		Now:       e.Now,
		Shards:    e.Shards,
		TrailWait: TrailWait,
		// See FeedSettle. Landing times are the wall clock's: a clock of
		// the caller's own (tests) is not compared with them.
		FeedSettle:    FeedSettle,
		FeedAtLanding: e.Now == nil,
		// The authorizer's cache keeps a removed agent's key passing as
		// its id for this long: a registration of the id then would hand
		// the new agent's identity to the old key.
		ReRegisterAfter: deploy.AuthorizerCacheTTL,
	})
}

// HTTP is the Lambda handler of the route-group function fn: the API's
// handler restricted to fn's routes, without an authenticator of its own (the
// Lambda authorizer has authenticated the caller, and the adapter passes the
// principal on). svc may be nil for the health function, which also serves
// the dashboard's static files (GET / and GET /ui/{proxy+}, public routes).
//
// db is what the function checks besides its store. The functions of
// deploy.AwaitsMigration answer every request with 503 unavailable while a
// tasks table of the earlier schema waits for `checkout-server migrate -aws`
// (MigrationGuard, checked here, at cold start, first); the health function
// answers GET /healthz with 503 {"ok": false} while DynamoDB cannot be
// reached, and while that migration waits. A nil db leaves both checks out (tests of the routing alone).
//
// API Gateway sends each function only its own routes; a misrouted request
// is answered 404 not_found or 405 method_not_allowed, never by another
// group's handler. The health function also takes API Gateway's $default
// route (every request no route matches, with no authorizer), so it knows
// every route: 405 with Allow for a known path with another method, and 401
// for an API route, since no agent comes with them.
func HTTP(fn string, svc httpapi.Service, db TablesAPI, e Env, log *slog.Logger) func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts := httpapi.Options{AutoCreateTasks: e.AutoCreateTasks, Logger: log, Now: e.Now, Function: fn}
	if a, ok := svc.(auth.Authenticator); ok {
		// The principal is the authorizer's, cached for up to
		// deploy.AuthorizerCacheTTL: a request that uses an admin's power
		// (an admin route, or an admin-only field of an agent route) looks
		// at the key again (one consistent read), so that a removed admin
		// cannot act.
		opts.RecheckAdmin = a
	}
	if fn == deploy.Health {
		opts.Function = ""
		if db != nil {
			// Unhealthy while DynamoDB cannot be reached, and while the
			// tasks await the migration (the task functions answer 503
			// then): a monitor of /healthz sees what agents see.
			hc, g := newHealthCheck(db, e), NewMigrationGuard(db, e, log)
			opts.Health = func(ctx context.Context) error {
				if err := hc.check(ctx); err != nil {
					return err
				}
				return g.Check(ctx)
			}
		}
	}
	h := httpapi.New(svc, opts)
	if fn == deploy.Health {
		h = ui.With(h)
	}
	if deploy.AwaitsMigration[fn] && db != nil {
		g := NewMigrationGuard(db, e, log)
		g.coldStart()
		h = guardHTTP(g, log, h)
	}
	return meterHTTP(e.metrics(), apigw.Handler(h))
}
