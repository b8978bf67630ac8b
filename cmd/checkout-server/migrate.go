package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/eventbridge"

	"github.com/checkout-dev/checkout/internal/notify"
	"github.com/checkout-dev/checkout/internal/webhook"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

// flagError is a migrate argument the flag package refused, having said
// why: -h or -help asked for the flags (exit 0), anything else is a usage
// error (exit 2). Neither is logged.
type flagError struct{ err error }

func (e flagError) Error() string { return e.err.Error() }
func (e flagError) Unwrap() error { return e.err }

// migrate is `checkout-server migrate`: it copies the tasks of a table of
// the earlier schema into today's (lease.Migrate), on the same database the
// server would use: CHECKOUT_DATA_DIR (a dynalite started for the copy),
// DYNAMODB_ENDPOINT, or, with -aws, the AWS account and region of the
// default configuration (for a deployed stack: run it after `cdk deploy`,
// with the stack's table prefix and its four shard counts,
// CHECKOUT_LEASE_SHARDS, CHECKOUT_STATUS_SHARDS, CHECKOUT_CLAIM_SHARDS and
// CHECKOUT_FEED_SHARDS, which it records, and, so that the changes it applies send their
// notices, the stack's CHECKOUT_EVENT_BUS and webhook settings). Running it
// again is safe.
func migrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("checkout-server migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	useAWS := fs.Bool("aws", false, "migrate the tables in AWS (default configuration: AWS_REGION, AWS_PROFILE, ...)")
	if err := fs.Parse(args); err != nil {
		// The flag package has printed what was wrong, and the flags.
		return flagError{err}
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("checkout-server migrate takes no arguments, got %q", fs.Args())
	}
	names := schema.Names{Prefix: getenv("CHECKOUT_TABLE_PREFIX")}
	shards, err := schema.ShardsFromEnv(getenv)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var db lease.MigrateDB
	var earlier func(context.Context) error
	switch endpoint, dir := getenv(localstack.EnvEndpoint), getenv("CHECKOUT_DATA_DIR"); {
	case *useAWS:
		cfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return fmt.Errorf("load AWS configuration: %w", err)
		}
		if cfg.Region == "" {
			return errors.New("no AWS region: set AWS_REGION")
		}
		c := dynamodb.NewFromConfig(cfg)
		n, err := awsNotices(getenv, cfg, c, names, log)
		if err != nil {
			return err
		}
		db, earlier = c, applyEarlier(c, dynamodbstreams.NewFromConfig(cfg), names, shards, n)
	case endpoint != "":
		c := lease.NewLocalClient(endpoint)
		n, err := localNotices(getenv, dir, log)
		if err != nil {
			return err
		}
		db, earlier = c, applyEarlier(c, stream.NewLocalClient(endpoint), names, shards, n)
	case dir != "":
		d, err := localstack.Start(ctx, localstack.Options{Path: dir})
		if err != nil {
			return err
		}
		defer func() { _ = d.Stop() }()
		c := lease.NewLocalClient(d.Endpoint)
		n, err := localNotices(getenv, dir, log)
		if err != nil {
			return err
		}
		db, earlier = c, applyEarlier(c, stream.NewLocalClient(d.Endpoint), names, shards, n)
	default:
		return errors.New("nothing to migrate: without CHECKOUT_DATA_DIR, DYNAMODB_ENDPOINT or -aws the server keeps its data in memory")
	}
	res, err := lease.Migrate(ctx, db, names, shards, earlier)
	if err != nil {
		return err
	}
	switch {
	case !res.Found:
		_, err = fmt.Fprintf(stdout, "no table %s: nothing to migrate\n", res.From)
	case res.AlreadyDone:
		_, err = fmt.Fprintf(stdout, "%s was migrated into %s before: nothing to do\n", res.From, res.To)
	case len(res.Clashed) > 0:
		_, err = fmt.Fprintf(stdout, "copied %d tasks from %s into %s (%d were there already)\n",
			res.Copied, res.From, res.To, res.Present)
	default:
		_, err = fmt.Fprintf(stdout, "copied %d tasks from %s into %s (%d were there already); %s can be deleted\n",
			res.Copied, res.From, res.To, res.Present, res.From)
	}
	if err == nil && res.Mended > 0 {
		_, err = fmt.Fprintf(stdout, "gave %d delayed tasks of %s their entries in the expiry index (an earlier version left them out)\n", res.Mended, res.To)
	}
	if err == nil && len(res.Clashed) > 0 {
		// Not copied, and no run can copy them: the earlier table is
		// the only copy of their items, leases and fences.
		err = fmt.Errorf("%d tasks of %s were not copied: %s holds tasks of the same ids that no migration wrote (created there since): %s; "+
			"their earlier items, leases and fences are only in %s: do not delete it",
			len(res.Clashed), res.From, res.To, strings.Join(res.Clashed, ", "), res.From)
	}
	return err
}

// applyEarlier returns what applies the changes the earlier tasks table's
// stream still holds, as the stream function would have: the handler, from
// the checkpoint "#stream#<table>" in the agents table. The local server
// saved that checkpoint as it read the stream, so locally the migration
// resumes where the server stopped. That one checkpoint covers the notices
// too: the servers (and stacks) of the earlier schema read the stream with
// one consumer, which published the notices with the consequences (the
// notices' consumer of their own, "#stream-notices#", came after today's
// table, whose stream alone it reads), so the earlier table has no notices
// checkpoint to resume from, and stream.Handler does both. In AWS the
// stack's event source mapping read it, and the upgrade deploy replaced
// that mapping, dropping what it had not yet applied (the last writes
// before the functions switched); its position cannot be read, so each
// shard is first given a checkpoint just before the first change whose
// events are not archived (stream.Poller.ResumeAfterApplied). Either way
// each change is applied at least once, and the handler writes each
// consequence once. The notices of these changes go to n (the stack's bus
// and webhooks with -aws, the server's webhooks locally; see awsNotices),
// at least once: some changes the mapping had applied are applied again,
// and their notices repeat under the same ids. The checkpoint is saved as
// batches are applied, so a migration cut short resumes.
func applyEarlier(db *dynamodb.Client, streams stream.StreamsAPI, names schema.Names, shards schema.ShardCounts, n lease.Notifier) func(context.Context) error {
	return func(ctx context.Context) error {
		table := names.Table(schema.TasksTableV1)
		arn, err := localstack.StreamARN(ctx, db, table)
		if errors.Is(err, localstack.ErrNoStream) {
			return nil
		}
		if err != nil {
			return err
		}
		// Keyed in the feed as the functions key them (FeedAtLanding): a
		// change they archived already keeps its keys, and one archived
		// late now is listed when archived, where followers see it.
		store := lease.New(lease.Config{DB: db, Tables: names, Shards: shards, Notifier: n, FeedAtLanding: true})
		p := &stream.Poller{
			Streams:   streams,
			StreamARN: arn,
			Handle:    stream.Handler(store),
			Saved:     stream.TableCheckpoints{DB: db, Table: names.Table(schema.AgentsTable), KeyName: "agent_id", Key: "#stream#" + table},
			// The earlier table takes no more writes: one poll applies
			// all its stream holds.
			ReadOn: true,
		}
		if err := p.ResumeAfterApplied(ctx, store.Archived); err != nil {
			return err
		}
		_, err = p.Poll(ctx)
		return err
	}
}

// awsNotices is where `migrate -aws` sends the notices of the changes it
// applies, as the stack's notices function would have: the bus
// CHECKOUT_EVENT_BUS names (the stack's EventBusName output), and the
// webhooks of CHECKOUT_WEBHOOK_URL and CHECKOUT_WEBHOOK_SECRET (the
// stack's webhookUrls and the secret webhookSecretName names), their
// failures dead-lettered in the stack's deadletters table. Without them
// the notices are only logged, and the orchestrator does not hear of
// those changes.
func awsNotices(getenv func(string) string, cfg aws.Config, db *dynamodb.Client, names schema.Names, log *slog.Logger) (lease.Notifier, error) {
	var ns []lease.Notifier
	if bus := getenv(notify.EnvEventBus); bus != "" {
		ns = append(ns, notify.NewEventBridge(eventbridge.NewFromConfig(cfg), bus))
	}
	urls, err := webhook.ParseURLs(getenv(webhook.EnvURL))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", webhook.EnvURL, err)
	}
	if len(urls) > 0 {
		hooks, err := webhook.New(webhook.Config{
			URLs: urls, Secret: getenv(webhook.EnvSecret), MaxElapsed: 10 * time.Second, AttemptTimeout: 5 * time.Second,
			DeadLetters: webhook.TableDeadLetters{DB: db, Table: names.Table(schema.WebhookDeadLettersTable)},
			Logger:      log,
		})
		if err != nil {
			return nil, err
		}
		ns = append(ns, hooks)
	}
	return notifiers(ns, log), nil
}

// localNotices is where a local migration sends the notices of the changes
// it applies: the server's webhooks (CHECKOUT_WEBHOOK_URL, as the server
// reads it), else the log.
func localNotices(getenv func(string) string, dataDir string, log *slog.Logger) (lease.Notifier, error) {
	hooks, err := webhooksFrom(getenv, dataDir, log)
	if err != nil || hooks == nil {
		return notifiers(nil, log), err
	}
	return notifiers([]lease.Notifier{hooks}, log), nil
}

func notifiers(ns []lease.Notifier, log *slog.Logger) lease.Notifier {
	if len(ns) == 0 {
		return lease.LogNotifier(log)
	}
	return webhook.Multi(ns...)
}
