// Command stream is the tasks table's stream function. Its event source
// mapping hands it the table's changes in order, in batches; it archives
// every event the writes recorded (and their feed entries), writes the
// watchers' and former holders' messages, unblocks dependents and moves
// the queue counters. The notices (EventBridge, webhooks) are the notices
// function's, on a mapping of its own, so that a slow receiver never
// delays this one. A batch that fails is retried, bisected, and after the
// mapping's retries sent to the dead-letter queue. The mapping has a
// tumbling window so that each event names its shard, which the queue
// counters need to apply each change once (lease/doc.go, "Queue counts").
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/functions/internal/setup"
	"github.com/checkout-dev/checkout/lease/stream"
)

func main() {
	env := setup.FromEnv(deploy.Stream)
	store, _ := setup.MustStore(env, env.Logger())
	lambda.Start(stream.WindowHandler(store))
}
