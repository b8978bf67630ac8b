package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/localstack"
)

// recount is `checkout-server recount`: it counts every queue's tasks
// again and writes the queue counts that are off (lease.RecountQueues),
// on the database the server would use. Over CHECKOUT_DATA_DIR the server
// must be stopped (the directory is refused otherwise): the command
// applies the stream's changes itself, from the server's checkpoint, so
// its settle is exact. Over DYNAMODB_ENDPOINT, or with -aws the deployed
// tables (the stack's table prefix), the service's own consumer of the
// stream applies them, and the command waits -settle for it: the server,
// or the stack's stream function, must be running and caught up.
func recount(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("checkout-server recount", flag.ContinueOnError)
	fs.SetOutput(stderr)
	useAWS := fs.Bool("aws", false, "recount the tables in AWS (default configuration: AWS_REGION, AWS_PROFILE, ...)")
	settle := fs.Duration("settle", lease.RecountSettle, "with -aws or DYNAMODB_ENDPOINT, how long the service's stream consumer is given to apply the changes written before the count")
	if err := fs.Parse(args); err != nil {
		return flagError{err}
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("checkout-server recount takes no arguments, got %q", fs.Args())
	}
	if *settle <= 0 {
		return errors.New("-settle must be positive")
	}
	names := schema.Names{Prefix: getenv("CHECKOUT_TABLE_PREFIX")}
	p := lease.RecountParams{Settle: lease.Wait(*settle)}
	var db lease.RecountDB
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
		if err := localstack.CheckDataDir(dir); err != nil {
			return fmt.Errorf("stop the server first: %w", err)
		}
		d, err := localstack.Start(ctx, localstack.Options{Path: dir})
		if err != nil {
			return err
		}
		defer func() { _ = d.Stop() }()
		c := lease.NewLocalClient(d.Endpoint)
		poller, err := stoppedServerStream(ctx, d, c, names, getenv, dir)
		if err != nil {
			return err
		}
		p.Settle = func(ctx context.Context) error {
			_, err := poller.Poll(ctx)
			return err
		}
		db = c
	default:
		return errors.New("nothing to recount: without CHECKOUT_DATA_DIR, DYNAMODB_ENDPOINT or -aws the server keeps its data in memory")
	}
	res, err := lease.RecountQueues(ctx, db, names, p)
	if err != nil {
		return err
	}
	mended := "none"
	if len(res.Mended) > 0 {
		mended = strings.Join(res.Mended, ", ")
	}
	if _, err := fmt.Fprintf(stdout, "counted %d tasks: %d queues right, mended: %s\n", res.Tasks, len(res.Checked), mended); err != nil {
		return err
	}
	if len(res.Busy) > 0 {
		return fmt.Errorf("queues changing throughout, not recounted (run again when they are quieter): %s", strings.Join(res.Busy, ", "))
	}
	return nil
}
