// Command stream is the tasks table's stream function. Its event source
// mapping hands it the table's changes in order, in batches; it archives
// every event the writes recorded, writes the watchers' messages and
// publishes the notices to EventBridge. A batch that fails is retried,
// bisected, and after the mapping's retries sent to the dead-letter queue.
package main

import (
	"github.com/checkout-dev/checkout/functions/deploy"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/checkout-dev/checkout/functions/internal/wire"
	"github.com/checkout-dev/checkout/lease/stream"
)

func main() {
	env := wire.FromEnv(deploy.Stream)
	store := wire.MustStore(env, env.Logger())
	lambda.Start(stream.Handler(store))
}
