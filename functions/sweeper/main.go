// Command sweeper runs on a schedule and ends the leases that expired or
// whose holder died and that nobody has taken over yet. Each run sweeps,
// then stays up to CHECKOUT_SWEEP_STAY (default 55 s) after its start to
// sweep each lease and heartbeat as it falls due (setup.Sweep); each sweep
// writes one line with its counts. While the tasks table of the earlier
// schema waits for `checkout-server migrate -aws`, a run sweeps nothing and
// says so.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/functions/internal/setup"
)

func main() {
	env := setup.FromEnv(deploy.Sweeper)
	store, db := setup.MustStore(env, env.Logger())
	lambda.Start(setup.Sweep(store, db, env))
}
