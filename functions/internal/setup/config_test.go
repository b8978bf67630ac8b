package setup

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// standardChain clears the static keys from the environment and gives
// credentials only through a shared credentials file, as a profile, SSO or
// container credentials would: the standard chain must find them.
func standardChain(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	creds := filepath.Join(dir, "credentials")
	if err := os.WriteFile(creds, []byte("[default]\naws_access_key_id = AKIDPROFILE\naws_secret_access_key = profile-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_ENDPOINT_URL_EVENTBRIDGE"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_REGION", "eu-west-1")
}

// deadEndpoint is a local address nothing listens on.
func deadEndpoint(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

// The functions' AWS configuration is the SDK's standard one: credentials
// from the whole provider chain (not only static keys in the environment),
// and AWS_ENDPOINT_URL_DYNAMODB sends DynamoDB calls to a local server. A
// dead endpoint fails there, instead of the call going to AWS.
func TestAWSConfigUsesTheStandardChainAndEndpointVariables(t *testing.T) {
	standardChain(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	cfg, err := AWSConfig(ctx)
	if err != nil {
		t.Fatalf("configuration without static keys in the environment: %v", err)
	}
	if cfg.Region != "eu-west-1" {
		t.Errorf("region %q", cfg.Region)
	}
	creds, err := cfg.Credentials.Retrieve(ctx)
	if err != nil || creds.AccessKeyID != "AKIDPROFILE" {
		t.Fatalf("credentials %+v, %v: want the profile's", creds, err)
	}

	// AWS_ENDPOINT_URL_DYNAMODB: the very client the functions build reaches
	// the local server.
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", testenv.Endpoint())
	t.Setenv("AWS_ENDPOINT_URL", deadEndpoint(t)) // the service variable wins
	cfg, err = AWSConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := schema.Names{Prefix: testenv.Prefix()}
	if err := lease.EnsureTables(ctx, dynamodb.NewFromConfig(cfg), names); err != nil {
		t.Fatalf("tables through AWS_ENDPOINT_URL_DYNAMODB=%s: %v", testenv.Endpoint(), err)
	}
	store := NewStore(dynamodb.NewFromConfig(cfg), nil, Env{TablePrefix: names.Prefix}, nil)
	if err := store.EnsureAgent(ctx, "admin", "admin", true, adminKey); err != nil {
		t.Fatalf("a store call through AWS_ENDPOINT_URL_DYNAMODB: %v", err)
	}

	// A dead endpoint: the call fails against that address, never AWS.
	dead := deadEndpoint(t)
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", dead)
	cfg, err = AWSConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = dynamodb.NewFromConfig(cfg).DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: new(names.Table(schema.TasksTable))})
	if err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(dead, "http://")) || strings.Contains(err.Error(), "amazonaws.com") {
		t.Fatalf("call to a dead AWS_ENDPOINT_URL_DYNAMODB: err = %v, want a failure naming %s", err, dead)
	}
}
