// Command sweeper runs on a schedule and ends the leases that expired or
// whose holder died and that nobody has taken over yet. Each run writes one
// line with its counts.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/functions/internal/setup"
)

func main() {
	env := setup.FromEnv(deploy.Sweeper)
	store := setup.MustStore(env, env.Logger())
	lambda.Start(setup.Sweep(store, env))
}
