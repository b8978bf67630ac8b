// Package e2e holds the end-to-end tests of the checkout service: real HTTP
// against the local server (package localserver) with the real lease store
// on dynalite, a test clock the tests move instead of sleeping, and every
// answer validated against httpapi/openapi/openapi.yaml.
//
// Run them with `make test`, or alone with
//
//	go test -race ./e2e/
//
// which starts its own dynalite unless DYNAMODB_ENDPOINT is set. After a full
// run (no -run filter), TestMain also checks that every route was answered
// with a success and that every error code of the API was seen.
package e2e
