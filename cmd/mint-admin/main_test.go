package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func mint(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	// The real AWS client path, pointed at the local server through
	// --endpoint, with static credentials from the environment.
	t.Setenv("AWS_ACCESS_KEY_ID", "local")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "local")
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", os.DevNull)
	err = run(context.Background(), args, &out, &errOut, awsClient)
	return out.String(), errOut.String(), err
}

func TestMintedKeyAuthenticatesAsAdmin(t *testing.T) {
	store := testenv.NewStore(t)
	prefix := store.Names.Prefix
	out, errOut, err := mint(t, "--table-prefix", prefix, "--region", "us-east-1", "--endpoint", testenv.Endpoint(), "--agent-id", "root", "--name", "Root")
	if err != nil {
		t.Fatalf("mint: %v (%s)", err, errOut)
	}
	key := strings.TrimSpace(out)
	if !strings.HasPrefix(key, "ck_") || strings.Count(out, "\n") != 1 {
		t.Fatalf("stdout %q: want exactly one key line", out)
	}
	if strings.Contains(errOut, key) {
		t.Error("the key was also written to stderr")
	}
	p, err := store.Authenticate(context.Background(), key)
	if err != nil {
		t.Fatalf("authenticate: %v", err)
	}
	if p.AgentID != "root" || p.Name != "Root" || !p.Admin {
		t.Errorf("principal %+v", p)
	}

	// Minting again replaces the key: the old one stops working.
	out2, _, err := mint(t, "--table-prefix", prefix, "--region", "us-east-1", "--endpoint", testenv.Endpoint(), "--agent-id", "root", "--name", "Root")
	if err != nil {
		t.Fatal(err)
	}
	key2 := strings.TrimSpace(out2)
	if key2 == key {
		t.Fatal("same key minted twice")
	}
	if _, err := store.Authenticate(context.Background(), key); !errors.Is(err, lease.ErrUnauthorized) {
		t.Errorf("old key: err = %v, want unauthorized", err)
	}
	if _, err := store.Authenticate(context.Background(), key2); err != nil {
		t.Errorf("new key: %v", err)
	}
}

func TestMissingTablesFailWithoutPrintingAKey(t *testing.T) {
	out, _, err := mint(t, "--table-prefix", "absent-", "--region", "us-east-1", "--endpoint", testenv.Endpoint())
	if err == nil || !strings.Contains(err.Error(), "absent-agents") {
		t.Errorf("err = %v, want one naming the table", err)
	}
	if out != "" {
		t.Errorf("stdout %q, want nothing", out)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--table-prefix", ""},
		{"--agent-id", "bad id"},
		{"--name", ""},
		{"extra"},
		{"--nope"},
	} {
		out, _, err := mint(t, append(args, "--endpoint", testenv.Endpoint(), "--region", "us-east-1")...)
		if err == nil || out != "" {
			t.Errorf("%v: err %v, stdout %q", args, err, out)
		}
	}
	if _, _, err := mint(t, "-h"); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// profileOnly leaves credentials only in a shared credentials file (a
// profile, as `aws configure` writes it): no static keys in the environment.
func profileOnly(t *testing.T) {
	t.Helper()
	creds := filepath.Join(t.TempDir(), "credentials")
	if err := os.WriteFile(creds, []byte("[ops]\naws_access_key_id = AKIDPROFILE\naws_secret_access_key = profile-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", creds)
	t.Setenv("AWS_CONFIG_FILE", os.DevNull)
	t.Setenv("AWS_PROFILE", "ops")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// The standard chain and AWS_ENDPOINT_URL_DYNAMODB, without --endpoint: a
// profile's credentials reach the local server the variable names, and a
// dead one fails there (naming it) rather than going to AWS, with no key
// printed.
func TestEndpointVariableAndProfileCredentials(t *testing.T) {
	profileOnly(t)
	store := testenv.NewStore(t)
	prefix := store.Names.Prefix
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", testenv.Endpoint())
	var out, errOut bytes.Buffer
	if err := run(context.Background(), []string{"--table-prefix", prefix, "--region", "us-east-1"}, &out, &errOut, awsClient); err != nil {
		t.Fatalf("mint through AWS_ENDPOINT_URL_DYNAMODB: %v (%s)", err, errOut.String())
	}
	if _, err := store.Authenticate(context.Background(), strings.TrimSpace(out.String())); err != nil {
		t.Fatalf("the minted key: %v", err)
	}

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	t.Setenv("AWS_ENDPOINT_URL_DYNAMODB", "http://"+dead)
	out.Reset()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = run(ctx, []string{"--table-prefix", prefix, "--region", "us-east-1"}, &out, &errOut, awsClient)
	if err == nil || !strings.Contains(err.Error(), dead) || strings.Contains(err.Error(), "amazonaws.com") {
		t.Fatalf("dead AWS_ENDPOINT_URL_DYNAMODB: err = %v, want a failure naming %s", err, dead)
	}
	if out.Len() != 0 {
		t.Errorf("a key was printed after a failure: %q", out.String())
	}
}
