// Package bench measures the checkout service's lease engine side by side
// with cirello.io/dynamolock/v2, on the same DynamoDB-compatible server, and
// measures the Lambda packages. It is its own module so that the peer's
// dependency never enters the product's go.mod. Each throughput scenario
// also runs the floor (floor.go): the same indexes, stream and audit
// trail on a minimal task item, the least any such design asks of the
// server.
//
// Run it with `make bench` (full) or `make bench-quick` (small counts);
// cmd/bench prints the report as Markdown. BENCHMARKS.md holds a full run.
package bench
