// Command health is the Lambda function that answers GET /healthz. It needs
// no AWS client at all.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/checkout-dev/checkout/functions/internal/wire"
)

func main() {
	env := wire.FromEnv(wire.Health)
	lambda.Start(wire.HTTP(wire.Health, nil, env, env.Logger()))
}
