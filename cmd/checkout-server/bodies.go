package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/localstack"
)

// bodies is `checkout-server bodies`: it deletes the task bodies, and the
// failed releases' errors, no task names (lease.DeleteStrayBodies), on the
// database the server would use: over DYNAMODB_ENDPOINT, or with -aws the
// deployed tables (the stack's table prefix), while the service runs;
// over CHECKOUT_DATA_DIR with the server stopped (the directory is refused
// otherwise). There the stream keeps its records, however old, until the
// server starts again and reads them on, errors included: the command
// first applies the consequences the server left unapplied
// (stoppedServerStream), and keeps the errors of the notices it left
// unpublished (unpublishedErrors), which it publishes when it starts
// again. -dry-run lists them and writes nothing, nor applies the stream:
// applying it reads errors and names none, so the list is the same. now
// is the command's clock; ages are judged by the database's when it is
// earlier (lease.ServerClock).
func bodies(ctx context.Context, args []string, getenv func(string) string, now func() time.Time, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("checkout-server bodies", flag.ContinueOnError)
	fs.SetOutput(stderr)
	useAWS := fs.Bool("aws", false, "clean the tables in AWS (default configuration: AWS_REGION, AWS_PROFILE, ...)")
	dryRun := fs.Bool("dry-run", false, "list the bodies and errors no task names, and write nothing")
	olderThan := fs.Duration("older-than", lease.StrayBodyAge, fmt.Sprintf("delete only bodies written longer ago than this (at least %v): a younger one may be a request's, not named yet; errors a day longer ago (the stream may still read them)", lease.MinStrayBodyAge))
	if err := fs.Parse(args); err != nil {
		return flagError{err}
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("checkout-server bodies takes no arguments, got %q", fs.Args())
	}
	if *olderThan < lease.MinStrayBodyAge {
		return fmt.Errorf("-older-than must be at least %v", lease.MinStrayBodyAge)
	}
	names := schema.Names{Prefix: getenv("CHECKOUT_TABLE_PREFIX")}
	var db lease.StrayBodiesDB
	var unread []string // over CHECKOUT_DATA_DIR: errors the stopped server's notices have yet to read
	server := &lease.ServerClock{}
	switch endpoint, dir := getenv(localstack.EnvEndpoint), getenv("CHECKOUT_DATA_DIR"); {
	case *useAWS:
		cfg, err := config.LoadDefaultConfig(ctx)
		if err != nil {
			return fmt.Errorf("load AWS configuration: %w", err)
		}
		if cfg.Region == "" {
			return errors.New("no AWS region: set AWS_REGION")
		}
		db = dynamodb.NewFromConfig(cfg, server.Options)
	case endpoint != "":
		db = lease.NewLocalClient(endpoint, server.Options)
	case dir != "":
		if err := localstack.CheckDataDir(dir); err != nil {
			return fmt.Errorf("stop the server first: %w", err)
		}
		d, err := localstack.Start(ctx, localstack.Options{Path: dir})
		if err != nil {
			return err
		}
		defer func() { _ = d.Stop() }()
		c := lease.NewLocalClient(d.Endpoint, server.Options)
		if unread, err = unpublishedErrors(ctx, d, c, names, dir); err != nil {
			return err
		}
		if !*dryRun {
			poller, err := stoppedServerStream(ctx, d, c, names, getenv, dir)
			if err != nil {
				return err
			}
			n, err := poller.Poll(ctx)
			if err != nil {
				return fmt.Errorf("apply the changes the server left unapplied: %w", err)
			}
			if _, err := fmt.Fprintf(stdout, "applied %d changes the server left unapplied\n", n); err != nil {
				return err
			}
		}
		db = c
	default:
		return errors.New("nothing to clean: without CHECKOUT_DATA_DIR, DYNAMODB_ENDPOINT or -aws the server keeps its data in memory")
	}
	res, err := lease.DeleteStrayBodies(ctx, db, names, lease.StrayBodiesParams{OlderThan: *olderThan, DryRun: *dryRun, Unread: unread, Now: now, ServerNow: server.Now})
	deleted, timed := "deleted", "timed"
	if *dryRun {
		deleted, timed = "stray", "untimed"
	}
	for _, key := range res.Deleted {
		if _, err := fmt.Fprintf(stdout, "%s %s\n", deleted, key); err != nil {
			return err
		}
	}
	for _, key := range res.Timed {
		if _, err := fmt.Fprintf(stdout, "%s %s\n", timed, key); err != nil {
			return err
		}
	}
	if err != nil {
		return err
	}
	summary := fmt.Sprintf("read %d items, %d bodies and %d errors: %d %s, %d %s, kept %d younger than %v (errors %v) and %d named since the scan",
		res.Items, res.Bodies, res.Errors, len(res.Deleted), deleted, len(res.Timed), timed, res.Young, *olderThan, *olderThan+lease.StrayErrorMargin, res.Changed)
	if res.Uncopied > 0 {
		summary += fmt.Sprintf(", and %d of tasks a migration has not copied yet", res.Uncopied)
	}
	if res.Unread > 0 {
		summary += fmt.Sprintf(", and %d errors the server's notices have yet to read (start it, then run again)", res.Unread)
	}
	if *dryRun {
		summary += " (dry run: nothing written)"
	}
	_, err = fmt.Fprintln(stdout, summary)
	return err
}
