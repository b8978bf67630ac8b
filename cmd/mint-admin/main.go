// Command mint-admin creates the first admin API key of a deployed checkout
// service. With AWS credentials (the usual environment, profile or SSO
// configuration), it generates a key, stores it hashed in the agents table
// and prints the plaintext key once on standard output. Nothing else ever
// holds the plaintext: not the CloudFormation template, its outputs, or any
// log.
//
//	go run ./cmd/mint-admin --table-prefix checkout- --region eu-west-1
//
// Running it again for the same agent replaces that agent's key (the old key
// stops working once the authorizer's cache expires, 30 s at most), so it
// also rotates a lost admin key. The default agent, "admin", is the built-in
// admin that the API refuses to remove (409 cannot_remove_admin); an admin
// minted under another --agent-id is an ordinary, removable agent.
//
// Credentials and region come from the SDK's standard chain (environment,
// AWS_PROFILE and the shared files, SSO, container or instance
// credentials). AWS_ENDPOINT_URL_DYNAMODB or AWS_ENDPOINT_URL, or the
// --endpoint flag, which wins over both, point it at a local
// DynamoDB-compatible server instead of AWS.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/httpapi"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, awsClient)
	cancel()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mint-admin:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	TablePrefix string
	AgentID     string
	Name        string
	Region      string
	Endpoint    string
}

// newClient builds the DynamoDB client from the options.
type newClient func(ctx context.Context, o options) (lease.DB, error)

// awsClient uses the default AWS configuration (credential chain, region,
// AWS_ENDPOINT_URL_DYNAMODB / AWS_ENDPOINT_URL); --region and --endpoint
// override the configured region and endpoint.
func awsClient(ctx context.Context, o options) (lease.DB, error) {
	var opts []func(*config.LoadOptions) error
	if o.Region != "" {
		opts = append(opts, config.WithRegion(o.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New("no AWS region: pass --region or set AWS_REGION")
	}
	return dynamodb.NewFromConfig(cfg, func(do *dynamodb.Options) {
		if o.Endpoint != "" {
			do.BaseEndpoint = aws.String(o.Endpoint)
		}
	}), nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, connect newClient) error {
	fs := flag.NewFlagSet("mint-admin", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.TablePrefix, "table-prefix", schema.DefaultPrefix, "prefix of the deployed table names (the stack's TablePrefix output)")
	fs.StringVar(&o.AgentID, "agent-id", httpapi.DefaultAdminID, "agent id of the admin (the default is the built-in admin, which cannot be removed)")
	fs.StringVar(&o.Name, "name", "admin", "display name of the admin")
	fs.StringVar(&o.Region, "region", "", "AWS region (default: from the AWS configuration)")
	fs.StringVar(&o.Endpoint, "endpoint", "", "DynamoDB endpoint URL (default: AWS_ENDPOINT_URL_DYNAMODB, AWS_ENDPOINT_URL, or the region's; set for LocalStack or another local server)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: mint-admin --table-prefix checkout- [--agent-id admin] [--name admin] [--region R] [--endpoint URL]")
		fmt.Fprintln(stderr, "Creates (or replaces) an admin's API key and prints it once on standard output.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.TablePrefix == "" {
		return errors.New("--table-prefix must not be empty")
	}
	if !lease.ValidID(o.AgentID) {
		return fmt.Errorf("--agent-id %q is not a valid id", o.AgentID)
	}
	if o.Name == "" {
		return errors.New("--name must not be empty")
	}
	db, err := connect(ctx, o)
	if err != nil {
		return err
	}
	names := schema.Names{Prefix: o.TablePrefix}
	store := lease.New(lease.Config{DB: db, Tables: names})
	key := lease.NewAPIKey()
	if err := store.EnsureAgent(ctx, o.AgentID, o.Name, true, key); err != nil {
		return fmt.Errorf("store the admin key in %s: %w", names.Table(schema.AgentsTable), err)
	}
	fmt.Fprintf(stderr, "admin %q now has a new API key (stored hashed in %s); it is shown once, below:\n",
		o.AgentID, names.Table(schema.AgentsTable))
	fmt.Fprintln(stdout, key)
	return nil
}
