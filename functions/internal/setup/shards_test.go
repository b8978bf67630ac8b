package setup

import (
	"bytes"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/lease/schema"
)

// The shard counts come from the environment the stack sets, and a store
// built from it has them.
func TestFromEnvReadsShardCounts(t *testing.T) {
	t.Setenv(schema.EnvLeaseShards, "32")
	t.Setenv(schema.EnvStatusShards, "20")
	t.Setenv(schema.EnvClaimShards, "8")
	t.Setenv(schema.EnvFeedShards, "64")
	if e := FromEnv(deploy.Tasks); e.Shards != (schema.ShardCounts{Lease: 32, Status: 20, Claim: 8, Feed: 64}) {
		t.Fatalf("shards %+v", e.Shards)
	}
	os.Unsetenv(schema.EnvClaimShards)
	if e := FromEnv(deploy.Tasks); e.Shards.Claim != schema.ClaimShards {
		t.Fatalf("claim shards unset: %d, want the default %d", e.Shards.Claim, schema.ClaimShards)
	}
}

// A function whose shard count is out of bounds does not start: it logs
// which variable is wrong and exits with status 1, before it serves
// anything (or reaches AWS).
func TestMustStoreRefusesBadShardCounts(t *testing.T) {
	if os.Getenv("SETUP_MUSTSTORE_CHILD") == "1" {
		MustStore(FromEnv(deploy.Checkouts), slog.New(slog.NewJSONHandler(os.Stderr, nil)))
		os.Exit(0) // not reached when the counts are refused
	}
	for _, bad := range []struct{ key, value string }{
		{schema.EnvClaimShards, "17"},
		{schema.EnvLeaseShards, "0"},
		{schema.EnvStatusShards, "sixteen"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestMustStoreRefusesBadShardCounts$")
		cmd.Env = append(os.Environ(), "SETUP_MUSTSTORE_CHILD=1", bad.key+"="+bad.value,
			"AWS_REGION=eu-west-1", "AWS_EC2_METADATA_DISABLED=true")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("%s=%s: %v, want exit status 1; stderr %s", bad.key, bad.value, err, stderr.String())
		}
		if !strings.Contains(stderr.String(), "shard counts") || !strings.Contains(stderr.String(), bad.key) {
			t.Errorf("%s=%s: the error does not say what is wrong: %s", bad.key, bad.value, stderr.String())
		}
	}
}
