package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
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
	switch endpoint, dir := getenv(localstack.EnvEndpoint), getenv("CHECKOUT_DATA_DIR"); {
	case *useAWS:
		cfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return fmt.Errorf("load AWS configuration: %w", err)
		}
		if cfg.Region == "" {
			return errors.New("no AWS region: set AWS_REGION")
		}
		db = dynamodb.NewFromConfig(cfg)
	case endpoint != "":
		db = lease.NewLocalClient(endpoint)
	case dir != "":
		d, err := localstack.Start(ctx, localstack.Options{Path: dir})
		if err != nil {
			return err
		}
		defer func() { _ = d.Stop() }()
		db = lease.NewLocalClient(d.Endpoint)
	default:
		return errors.New("nothing to migrate: without CHECKOUT_DATA_DIR, DYNAMODB_ENDPOINT or -aws the server keeps its data in memory")
	}
	res, err := lease.Migrate(ctx, db, names, shards)
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
