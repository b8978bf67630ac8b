// Command inbox is the Lambda function that serves the API's inbox routes
// (see deploy.Routes) behind the Lambda authorizer.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/checkout-dev/checkout/functions/internal/wire"
)

func main() {
	env := wire.FromEnv(wire.Inbox)
	log := env.Logger()
	store := wire.MustStore(env, log)
	lambda.Start(wire.HTTP(wire.Inbox, store, env, log))
}
