// Command infra is the CDK app that deploys the checkout service: DynamoDB
// tables from lease/schema, one Lambda per route group plus the authorizer and
// the sweeper, the HTTP API, the EventBridge bus and schedule, least-privilege
// IAM, the alarm topic, alarms and dashboard, all checked by cdk-nag. Run it
// through the CDK CLI (`make synth`, `make deploy`); cdk.json at the
// repository root points here.
package main

import (
	"fmt"
	"os"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"
)

func main() {
	defer jsii.Close()
	app := awscdk.NewApp(nil)
	cfg, err := ConfigFromContext(app.Node())
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkout infra:", err)
		os.Exit(1)
	}
	if _, err := NewCheckoutStack(app, cfg.StackName, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "checkout infra:", err)
		os.Exit(1)
	}
	// cdk-nag: an unsuppressed error stops `cdk synth` and `cdk deploy`;
	// its reports land in the cloud assembly (cdk.out/).
	Checks(app, true, false)
	app.Synth(nil)
}
