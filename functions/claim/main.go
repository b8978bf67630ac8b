// Command claim is the Lambda function that serves POST /api/claim (see
// deploy.Routes) behind the Lambda authorizer: the checkouts function's
// code, deployed apart with a reserved concurrency of its own, so that
// claims that wait for a task cannot take the concurrency that renewals,
// releases and completions need.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/functions/internal/setup"
)

func main() {
	env := setup.FromEnv(deploy.Claim)
	log := env.Logger()
	store, db := setup.MustStore(env, log)
	lambda.Start(setup.HTTP(deploy.Claim, store, db, env, log))
}
