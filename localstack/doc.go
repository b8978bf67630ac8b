// Package localstack runs a DynamoDB-compatible server on the local machine
// for development and tests.
//
// The server is dynalite (MIT licensed, pure JavaScript, in memory or on disk
// with LevelDB), pinned to an exact version by package.json and
// package-lock.json in this directory. Start installs it with `npm ci` on
// first use (the install is serialised across processes with a lock file, so
// the parallel test binaries of `go test ./...` can all ask for it at once)
// and runs it as a child process that dies with its parent.
//
// DYNAMODB_ENDPOINT overrides all of this: when it is set, Endpoint returns it
// untouched, so any DynamoDB-compatible server (LocalStack, a shared dynalite
// started by `make test`, or a user's own) can be used instead.
// CHECKOUT_LOCALSTACK_DIR overrides where this directory is found.
//
// dynalite has no transactions, no UpdateTimeToLive and ignores
// ReturnValuesOnConditionCheckFailure; code that must run against it avoids
// them on the hot path.
//
// A test package that needs DynamoDB shares one server per test binary and
// isolates each test with its own table prefix:
//
//	var endpoint string
//
//	func TestMain(m *testing.M) {
//		var stop func()
//		endpoint, stop = localstack.MustEndpoint()
//		code := m.Run()
//		stop()
//		os.Exit(code)
//	}
//
// Each test then creates its tables under a random prefix, for example
// schema.Names{Prefix: "t" + rand.Text()[:8] + "-"} with lease.EnsureTables.
package localstack
