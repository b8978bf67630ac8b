// Package lambdatest runs the service's real Lambda bootstraps, built for
// this machine exactly as `make build` builds them for arm64, each under the
// AWS Lambda Runtime Interface Emulator (pinned in tools/go.mod), against a
// local DynamoDB reached only through AWS_ENDPOINT_URL_DYNAMODB and a local
// stand-in for EventBridge reached through AWS_ENDPOINT_URL.
//
// The functions are invoked with payload format 2.0 events captured from
// API Gateway (in testdata/), each carrying the
// authorizer context that the authorizer bootstrap itself answered for the
// caller's key, the way API Gateway passes it on; the sweeper gets an
// EventBridge scheduled event. The test checks every route function's
// answers, the authorizer's allow and deny, the sweep, the metric lines the
// functions write, and that a dead endpoint fails there instead of reaching
// AWS; it prints each function's cold start and peak memory.
//
// The test is behind the build tag lambdatest: `make lambda-test` (part of
// `make test`) builds the bootstraps and the emulator and runs it.
// CHECKOUT_LAMBDA_BIN (a directory of <function>/bootstrap) and CHECKOUT_RIE
// (the emulator) name prebuilt binaries; without them the test builds its
// own.
package lambdatest
