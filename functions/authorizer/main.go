// Command authorizer is the HTTP API's Lambda authorizer: it turns the
// bearer API key into the caller's agent id, name and role, which API Gateway
// caches and passes to the route functions.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/functions/internal/setup"
)

func main() {
	env := setup.FromEnv(deploy.Authorizer)
	log := env.Logger()
	store, _ := setup.MustStore(env, log)
	lambda.Start(setup.KeyAuthorizer(store, env, log))
}
