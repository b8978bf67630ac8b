// Command health is the Lambda function that answers GET /healthz. It needs
// no AWS client at all.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/functions/internal/setup"
)

func main() {
	env := setup.FromEnv(deploy.Health)
	lambda.Start(setup.HTTP(deploy.Health, nil, env, env.Logger()))
}
