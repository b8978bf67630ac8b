// Command health is the Lambda function that answers GET /healthz. It needs
// no AWS client at all.
package main

import (
	"github.com/checkout-dev/checkout/deploy"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/checkout-dev/checkout/functions/internal/wire"
)

func main() {
	env := wire.FromEnv(deploy.Health)
	lambda.Start(wire.HTTP(deploy.Health, nil, env, env.Logger()))
}
