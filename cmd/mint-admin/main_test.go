package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/localstack"
)

var endpoint string

func TestMain(m *testing.M) {
	ep, stop := localstack.MustEndpoint()
	endpoint = ep
	code := m.Run()
	stop()
	os.Exit(code)
}

// localTables creates a fresh set of tables and returns their prefix.
func localTables(t *testing.T) string {
	t.Helper()
	prefix := fmt.Sprintf("t%d-", time.Now().UnixNano())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := lease.EnsureTables(ctx, lease.NewLocalClient(endpoint), schema.Names{Prefix: prefix}); err != nil {
		t.Fatal(err)
	}
	return prefix
}

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
	prefix := localTables(t)
	out, errOut, err := mint(t, "--table-prefix", prefix, "--region", "us-east-1", "--endpoint", endpoint, "--agent-id", "root", "--name", "Root")
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
	store := lease.New(lease.Config{DB: lease.NewLocalClient(endpoint), Tables: schema.Names{Prefix: prefix}})
	p, err := store.Authenticate(context.Background(), key)
	if err != nil {
		t.Fatalf("authenticate: %v", err)
	}
	if p.AgentID != "root" || p.Name != "Root" || !p.Admin {
		t.Errorf("principal %+v", p)
	}

	// Minting again replaces the key: the old one stops working.
	out2, _, err := mint(t, "--table-prefix", prefix, "--region", "us-east-1", "--endpoint", endpoint, "--agent-id", "root", "--name", "Root")
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
	out, _, err := mint(t, "--table-prefix", "absent-", "--region", "us-east-1", "--endpoint", endpoint)
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
		out, _, err := mint(t, append(args, "--endpoint", endpoint, "--region", "us-east-1")...)
		if err == nil || out != "" {
			t.Errorf("%v: err %v, stdout %q", args, err, out)
		}
	}
	if _, _, err := mint(t, "-h"); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}
