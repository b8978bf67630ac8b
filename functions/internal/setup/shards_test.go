package setup

import (
	"errors"
	"testing"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// The functions that read the sharded indexes check their counts against
// those the deployment has used at start (MustStore exits on a shrink);
// the others do not read them and are not held to them.
func TestCheckShardsRefusesAShrink(t *testing.T) {
	t.Parallel()
	ctx := testenv.Context(t)
	names := testenv.Tables(t)
	db := lease.NewLocalClient(testenv.Endpoint())
	grown := schema.ShardCounts{Lease: 32, Status: schema.StatusShards, Claim: 8, Feed: schema.FeedShards}
	if err := CheckShards(ctx, Env{Function: deploy.Tasks, TablePrefix: names.Prefix, Shards: grown}, db); err != nil {
		t.Fatalf("the tasks function with grown counts: %v", err)
	}
	for _, fn := range []string{deploy.Agents, deploy.Tasks, deploy.Checkouts, deploy.Claim, deploy.Sweeper} {
		err := CheckShards(ctx, Env{Function: fn, TablePrefix: names.Prefix, Shards: schema.DefaultShards()}, db)
		if shrink := (*schema.ShrinkError)(nil); !errors.As(err, &shrink) || shrink.Name != "lease" || shrink.Recorded != 32 {
			t.Errorf("the %s function with the default counts after the grown: %v, want the lease count refused", fn, err)
		}
	}
	for _, fn := range []string{deploy.Inbox, deploy.Stream, deploy.Authorizer, deploy.Health} {
		if err := CheckShards(ctx, Env{Function: fn, TablePrefix: names.Prefix, Shards: schema.DefaultShards()}, db); err != nil {
			t.Errorf("the %s function, which reads no sharded index: %v", fn, err)
		}
	}
}
