// Command health is the Lambda function that answers GET /healthz (503
// {"ok": false} while DynamoDB cannot be reached: it describes the tasks
// table, cached for a few seconds; and while a tasks table of the earlier
// schema awaits `checkout-server migrate -aws`), serves the dashboard's
// files, and takes API Gateway's $default route.
package main

import (
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/functions/internal/setup"
)

func main() {
	env := setup.FromEnv(deploy.Health)
	log := env.Logger()
	lambda.Start(setup.HTTP(deploy.Health, nil, setup.MustDB(log), env, log))
}
