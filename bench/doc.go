// Package bench measures the checkout service's lease engine side by side
// with cirello.io/dynamolock/v2, on the same DynamoDB-compatible server, and
// measures the Lambda packages. It is its own module so that the peer's
// dependency never enters the product's go.mod.
//
// Run it with `make bench` (full) or `make bench-quick` (small counts);
// cmd/bench prints the report as Markdown. BENCHMARKS.md holds a full run.
package bench
