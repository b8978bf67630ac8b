// Command notices is the tasks table's notices function. Its event source
// mapping, the stream's second reader beside the stream function's, hands
// it the table's changes in order, in batches; it publishes each
// transition's notices (LeaseEnded, LeaseLost, TaskAvailable, TaskFailed)
// to EventBridge and, when the stack sets them, to the webhooks, and
// writes nothing else. Every notice has a stable id, so a batch that fails
// and is handed again (retried, bisected, and after the mapping's retries
// sent to the dead-letter queue) sends some notices twice, never none.
// A receiver that is slow or down holds up only this function.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/functions/internal/setup"
	"github.com/checkout-dev/checkout/lease/stream"
)

func main() {
	env := setup.FromEnv(deploy.Notices)
	store, _ := setup.MustStore(env, env.Logger())
	lambda.Start(stream.NoticesHandler(store))
}
