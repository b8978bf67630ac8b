// Command sweeper runs on a schedule and ends the leases that expired or
// whose holder died and that nobody has taken over yet. Each run writes one
// line with its counts.
package main

import (
	"github.com/checkout-dev/checkout/deploy"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/checkout-dev/checkout/functions/internal/wire"
)

func main() {
	env := wire.FromEnv(deploy.Sweeper)
	store := wire.MustStore(env, env.Logger())
	lambda.Start(wire.Sweep(store, env))
}
