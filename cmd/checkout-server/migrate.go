package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

// migrate is `checkout-server migrate`: it copies the tasks of a table of
// the earlier schema into today's (lease.Migrate), on the same database the
// server would use: CHECKOUT_DATA_DIR (a dynalite started for the copy),
// DYNAMODB_ENDPOINT, or, with -aws, the AWS account and region of the
// default configuration (for a deployed stack: run it after `cdk deploy`,
// with the stack's table prefix and status shard count,
// CHECKOUT_STATUS_SHARDS). Running it again is safe.
func migrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("checkout-server migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	useAWS := fs.Bool("aws", false, "migrate the tables in AWS (default configuration: AWS_REGION, AWS_PROFILE, ...)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("checkout-server migrate takes no arguments, got %q", fs.Args())
	}
	names := schema.Names{Prefix: getenv("CHECKOUT_TABLE_PREFIX")}
	shards, err := schema.ShardsFromEnv(getenv)
	if err != nil {
		return err
	}
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
		db, earlier = c, applyEarlier(c, dynamodbstreams.NewFromConfig(cfg), names, shards)
	case endpoint != "":
		c := lease.NewLocalClient(endpoint)
		db, earlier = c, applyEarlier(c, stream.NewLocalClient(endpoint), names, shards)
	case dir != "":
		d, err := localstack.Start(ctx, localstack.Options{Path: dir})
		if err != nil {
			return err
		}
		defer func() { _ = d.Stop() }()
		c := lease.NewLocalClient(d.Endpoint)
		db, earlier = c, applyEarlier(c, stream.NewLocalClient(d.Endpoint), names, shards)
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
	default:
		_, err = fmt.Fprintf(stdout, "copied %d tasks from %s into %s (%d were there already); %s can be deleted\n",
			res.Copied, res.From, res.To, res.Present, res.From)
	}
	return err
}

// applyEarlier returns what applies the changes the earlier tasks table's
// stream still holds, as the stream function would have: the handler, from
// the checkpoint "#stream#<table>" in the agents table. The local server
// saved that checkpoint as it read the stream, so locally the migration
// resumes where the server stopped. In AWS the stack's event source
// mapping read it, and the upgrade deploy replaced that mapping, dropping
// what it had not yet applied (the last writes before the functions
// switched); its position cannot be read, so each shard is first given a
// checkpoint just before the first change whose events are not archived
// (stream.Poller.ResumeAfterApplied). Either way each change is applied at
// least once, and the handler writes each consequence once. Notices
// (webhooks, EventBridge) are not sent for these changes. The checkpoint
// is saved as batches are applied, so a migration cut short resumes.
func applyEarlier(db *dynamodb.Client, streams stream.StreamsAPI, names schema.Names, shards schema.ShardCounts) func(context.Context) error {
	return func(ctx context.Context) error {
		table := names.Table(schema.TasksTableV1)
		arn, err := localstack.StreamARN(ctx, db, table)
		if errors.Is(err, localstack.ErrNoStream) {
			return nil
		}
		if err != nil {
			return err
		}
		store := lease.New(lease.Config{DB: db, Tables: names, Shards: shards})
		p := &stream.Poller{
			Streams:   streams,
			StreamARN: arn,
			Handle:    stream.Handler(store),
			Saved:     stream.TableCheckpoints{DB: db, Table: names.Table(schema.AgentsTable), KeyName: "agent_id", Key: "#stream#" + table},
		}
		if err := p.ResumeAfterApplied(ctx, store.Archived); err != nil {
			return err
		}
		_, err = p.Poll(ctx)
		return err
	}
}
