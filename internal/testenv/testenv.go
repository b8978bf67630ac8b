// Package testenv is the scaffolding the module's tests share: one local
// DynamoDB per test binary, tables of a test's own under a unique prefix, a
// lease.Store over them, request counters, notice recorders, a log buffer
// safe for servers' goroutines, and binaries built once per test run.
//
// A package's tests start with
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// and then take what they need:
//
//	s := testenv.NewStore(t, testenv.WithClock(clock.Now))
//	s.CreateTask(ctx, lease.CreateTaskParams{TaskID: "t"})
//
// The clock tests inject is internal/testclock; a running local server with
// its admin key is testenv/testserver.
package testenv

import (
	"context"
	"crypto/rand"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/localstack"
)

var endpoint string

// Main is the whole of a package's TestMain: it finds the DynamoDB
// endpoint ($DYNAMODB_ENDPOINT, or else a dynalite started for this test
// binary), runs the tests, stops what it started and exits with the tests'
// code.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main for a TestMain with more to do before it exits: it returns
// the tests' exit code instead of exiting.
func Run(m *testing.M) int {
	var stop func()
	endpoint, stop = localstack.MustEndpoint()
	defer stop()
	return m.Run()
}

// Endpoint is the DynamoDB endpoint that Main found. It panics before Main
// has run, so that a package without the TestMain fails at once.
func Endpoint() string {
	if endpoint == "" {
		panic("testenv: no DynamoDB endpoint: the package's TestMain must call testenv.Main or testenv.Run")
	}
	return endpoint
}

// Prefix returns a table prefix no other test uses: "t", ten random
// lower-case letters and digits, and "-".
func Prefix() string { return "t" + strings.ToLower(rand.Text()[:10]) + "-" }

// Tables creates the service's tables under a fresh prefix and returns
// their names.
func Tables(t testing.TB) schema.Names {
	t.Helper()
	names := schema.Names{Prefix: Prefix()}
	if err := lease.EnsureTables(Context(t), lease.NewLocalClient(Endpoint()), names); err != nil {
		t.Fatalf("testenv: create tables under %s: %v", names.Prefix, err)
	}
	return names
}

// IndexLag makes the global secondary indexes of every table whose name
// starts with tablePrefix trail its writes by d (zero: no lag), on the
// project's own dynalite.
func IndexLag(t testing.TB, tablePrefix string, d time.Duration) {
	t.Helper()
	if err := localstack.SetIndexLag(Context(t), Endpoint(), tablePrefix, d); err != nil {
		t.Fatalf("testenv: index lag on %s: %v", tablePrefix, err)
	}
}

// CaughtUp waits until the global secondary indexes of every table whose
// name starts with tablePrefix show every write answered so far (the
// project's own dynalite counts what its index lag still holds), for up to
// a minute: however busy the machine, and with no sleep guessed at.
func CaughtUp(t testing.TB, tablePrefix string) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; {
		n, err := localstack.IndexLagPending(Context(t), Endpoint(), tablePrefix)
		if err != nil {
			t.Fatalf("testenv: index lag pending on %s: %v", tablePrefix, err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testenv: %d index updates of %s still pending after a minute", n, tablePrefix)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// FreeAddr returns a 127.0.0.1 address with a port that was free a moment
// ago, for a server the test starts as another process.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	return ln.Addr().String()
}

// Context is a context for one test's requests: it ends three minutes
// after it is made, or when the test ends. The bound is for a test that
// hangs; the race tests on a machine whose two cores every package's tests
// share take up to a minute.
func Context(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
