// Command tasks is the Lambda function that serves the API's tasks routes
// (see deploy.Routes) behind the Lambda authorizer.
package main

import (
	"github.com/checkout-dev/checkout/deploy"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/checkout-dev/checkout/functions/internal/wire"
)

func main() {
	env := wire.FromEnv(deploy.Tasks)
	log := env.Logger()
	store := wire.MustStore(env, log)
	lambda.Start(wire.HTTP(deploy.Tasks, store, env, log))
}
