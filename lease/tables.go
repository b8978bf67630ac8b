package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease/schema"
)

// NewLocalClient returns a DynamoDB client for a local DynamoDB-compatible
// endpoint (dynalite, LocalStack, DynamoDB Local), with dummy credentials.
func NewLocalClient(endpoint string, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	cfg := aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
	}
	return dynamodb.NewFromConfig(cfg, append([]func(*dynamodb.Options){func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String(endpoint)
	}}, optFns...)...)
}

// TableAdmin lists the calls EnsureTables makes.
type TableAdmin interface {
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
	UpdateTable(ctx context.Context, in *dynamodb.UpdateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTableOutput, error)
	// GetItem reads the marker a finished migration leaves (migrate.go).
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
}

// streamSpec is the change stream of a table with schema.Table.Stream.
var streamSpec = &types.StreamSpecification{StreamEnabled: aws.Bool(true), StreamViewType: types.StreamViewTypeNewAndOldImages}

// EnsureTables creates every table of schema.Tables that does not exist yet,
// waits until each is active, and turns on TTL where the server supports it
// (dynalite does not; TTL only collects garbage, so nothing depends on it).
// It is idempotent. In AWS the CDK app creates the tables instead.
//
// It refuses (ErrMigrationNeeded) while a tasks table of the earlier schema
// holds tasks not yet copied into today's: `checkout-server migrate` copies
// them (Migrate).
func EnsureTables(ctx context.Context, db TableAdmin, names schema.Names) error {
	old := names.Table(schema.TasksTableV1)
	if done, found, err := migrationState(ctx, db, old); err != nil {
		return err
	} else if found && !done {
		return fmt.Errorf("%w: the table %s was written by an earlier version, whose indexes copied whole tasks; "+
			"run `checkout-server migrate` (with the same CHECKOUT_DATA_DIR or DYNAMODB_ENDPOINT, and CHECKOUT_TABLE_PREFIX) "+
			"to copy its tasks, leases and fences into %s, then start the server again",
			ErrMigrationNeeded, old, names.Table(schema.TasksTable))
	}
	return ensureTables(ctx, db, names)
}

func ensureTables(ctx context.Context, db TableAdmin, names schema.Names) error {
	for _, t := range schema.Tables() {
		name := names.Table(t.Name)
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &name})
		var notFound *types.ResourceNotFoundException
		switch {
		case err == nil:
			if spec := out.Table.StreamSpecification; t.Stream && (spec == nil || !aws.ToBool(spec.StreamEnabled)) {
				// A table made before it had a stream.
				if _, err := db.UpdateTable(ctx, &dynamodb.UpdateTableInput{TableName: &name, StreamSpecification: streamSpec}); err != nil {
					return fmt.Errorf("turn on the stream of %s: %w", name, err)
				}
			}
			if err := addMissingIndexes(ctx, db, t, name, out.Table); err != nil {
				return err
			}
			continue
		case !errors.As(err, &notFound):
			return fmt.Errorf("describe %s: %w", name, err)
		}
		if _, err := db.CreateTable(ctx, CreateTableInput(t, name)); err != nil {
			var inUse *types.ResourceInUseException
			if !errors.As(err, &inUse) {
				return fmt.Errorf("create %s: %w", name, err)
			}
		}
		if err := waitActive(ctx, db, name); err != nil {
			return err
		}
		if t.TTLAttribute != "" {
			_, _ = db.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
				TableName: &name,
				TimeToLiveSpecification: &types.TimeToLiveSpecification{
					AttributeName: aws.String(t.TTLAttribute), Enabled: aws.Bool(true),
				},
			})
		}
	}
	return nil
}

// addMissingIndexes creates the indexes of t that a table made before them
// lacks (a data directory kept from an older version), one at a time as
// DynamoDB requires, and waits for each. dynalite accepts the request but
// does not build the index: a dynalite data directory from before the
// fleet feed has no feed (see README, "Following the fleet").
func addMissingIndexes(ctx context.Context, db TableAdmin, t schema.Table, name string, desc *types.TableDescription) error {
	have := map[string]bool{}
	for _, g := range desc.GlobalSecondaryIndexes {
		have[aws.ToString(g.IndexName)] = true
	}
	full := CreateTableInput(t, name)
	for _, g := range full.GlobalSecondaryIndexes {
		if have[aws.ToString(g.IndexName)] {
			continue
		}
		var defs []types.AttributeDefinition
		for _, k := range g.KeySchema {
			for _, d := range full.AttributeDefinitions {
				if aws.ToString(d.AttributeName) == aws.ToString(k.AttributeName) {
					defs = append(defs, d)
				}
			}
		}
		create := &types.CreateGlobalSecondaryIndexAction{IndexName: g.IndexName, KeySchema: g.KeySchema, Projection: g.Projection}
		update := func() error {
			_, err := db.UpdateTable(ctx, &dynamodb.UpdateTableInput{
				TableName: &name, AttributeDefinitions: defs,
				GlobalSecondaryIndexUpdates: []types.GlobalSecondaryIndexUpdate{{Create: create}},
			})
			return err
		}
		err := update()
		if err != nil && strings.Contains(err.Error(), "provisionedThroughput") {
			// dynalite wants a throughput even on an on-demand table.
			create.ProvisionedThroughput = &types.ProvisionedThroughput{ReadCapacityUnits: aws.Int64(1), WriteCapacityUnits: aws.Int64(1)}
			err = update()
		}
		if err != nil {
			return fmt.Errorf("add index %s to %s: %w", aws.ToString(g.IndexName), name, err)
		}
		if err := waitActive(ctx, db, name); err != nil {
			return err
		}
	}
	return nil
}

func waitActive(ctx context.Context, db TableAdmin, name string) error {
	for attempt := 1; ; attempt++ {
		out, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &name})
		if err == nil && out.Table.TableStatus == types.TableStatusActive {
			active := true
			for _, g := range out.Table.GlobalSecondaryIndexes {
				active = active && g.IndexStatus == types.IndexStatusActive
			}
			if active {
				return nil
			}
		}
		if attempt > 100 {
			return fmt.Errorf("table %s did not become active", name)
		}
		if err := backoff(ctx, min(attempt, 3)); err != nil {
			return err
		}
	}
}

// projection is the index's DynamoDB projection.
func projection(ix schema.Index) *types.Projection {
	p := &types.Projection{ProjectionType: types.ProjectionType(ix.ProjectionType())}
	if len(ix.Include) > 0 {
		p.NonKeyAttributes = ix.Include
	}
	return p
}

// CreateTableInput is the CreateTable request for one table of the schema,
// on-demand.
func CreateTableInput(t schema.Table, name string) *dynamodb.CreateTableInput {
	attrs := map[string]types.ScalarAttributeType{}
	keySchema := func(pk schema.Key, sk *schema.Key) []types.KeySchemaElement {
		attrs[pk.Name] = types.ScalarAttributeType(pk.Type)
		ks := []types.KeySchemaElement{{AttributeName: aws.String(pk.Name), KeyType: types.KeyTypeHash}}
		if sk != nil {
			attrs[sk.Name] = types.ScalarAttributeType(sk.Type)
			ks = append(ks, types.KeySchemaElement{AttributeName: aws.String(sk.Name), KeyType: types.KeyTypeRange})
		}
		return ks
	}
	in := &dynamodb.CreateTableInput{
		TableName:   &name,
		BillingMode: types.BillingModePayPerRequest,
		KeySchema:   keySchema(t.PartitionKey, t.SortKey),
	}
	if t.Stream {
		in.StreamSpecification = streamSpec
	}
	for _, ix := range t.Indexes {
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, types.GlobalSecondaryIndex{
			IndexName:  aws.String(ix.Name),
			KeySchema:  keySchema(ix.PartitionKey, ix.SortKey),
			Projection: projection(ix),
		})
	}
	for n, typ := range attrs {
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{AttributeName: aws.String(n), AttributeType: typ})
	}
	return in
}
