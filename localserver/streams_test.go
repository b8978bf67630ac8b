package localserver

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/localstack"
)

// plainDynalite starts dynalite as its own cli.js does, without the shim
// that gives this project's dynalite the DynamoDB Streams API: a
// DynamoDB-compatible server without Streams, such as a user may name with
// DYNAMODB_ENDPOINT.
func plainDynalite(t *testing.T) string {
	t.Helper()
	dir, err := localstack.FindDir()
	if err != nil {
		t.Fatal(err)
	}
	// A fresh clone has no node_modules until the first dynalite starts.
	if err := localstack.Install(context.Background(), dir); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("node", filepath.Join(dir, "node_modules", "dynalite", "cli.js"), "--port", fmt.Sprint(port))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", port)
	for deadline := time.Now().Add(20 * time.Second); ; {
		resp, err := http.Get(endpoint)
		if err == nil {
			resp.Body.Close()
			return endpoint
		}
		if time.Now().After(deadline) {
			t.Fatalf("plain dynalite did not answer at %s: %v", endpoint, err)
		}
		time.Sleep(50 * time.Millisecond) // polls for the process to listen
	}
}

// An endpoint without the DynamoDB Streams API would serve, but lose every
// audit event, watcher message and notice (and, over tables made by an
// earlier start, fail on a raw UpdateTable error): the server refuses to
// start, and says what is missing and what to use instead. Both a first
// start and a start over existing tables are refused the same way.
func TestStartRefusesAnEndpointWithoutStreams(t *testing.T) {
	t.Parallel()
	endpoint := plainDynalite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	check := func(t *testing.T, prefix string) {
		t.Helper()
		srv, err := Start(ctx, Config{Addr: "127.0.0.1:0", DynamoEndpoint: endpoint, TablePrefix: prefix})
		if err == nil {
			srv.Close()
			t.Fatal("the server started on an endpoint without the Streams API")
		}
		for _, want := range []string{endpoint, "DynamoDB Streams", "DYNAMODB_ENDPOINT"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the refusal does not name %q: %v", want, err)
			}
		}
	}
	t.Run("first start", func(t *testing.T) { check(t, testenv.Prefix()) })
	t.Run("over tables an earlier start made", func(t *testing.T) {
		names := schema.Names{Prefix: testenv.Prefix()}
		if err := lease.EnsureTables(ctx, lease.NewLocalClient(endpoint), names); err != nil {
			t.Fatal(err)
		}
		check(t, names.Prefix)
	})
}
