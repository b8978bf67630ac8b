// Command checkouts is the Lambda function that serves the API's checkouts routes
// (see deploy.Routes) behind the Lambda authorizer: checkout, renew, release
// and complete. POST /api/claim, which may wait, is the claim function's.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/functions/internal/setup"
)

func main() {
	env := setup.FromEnv(deploy.Checkouts)
	log := env.Logger()
	store, db := setup.MustStore(env, log)
	lambda.Start(setup.HTTP(deploy.Checkouts, store, db, env, log))
}
