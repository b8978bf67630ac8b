// Command infra is the CDK app that deploys the checkout service: DynamoDB
// tables from lease/schema, one Lambda per route group plus the authorizer and
// the sweeper, the HTTP API, the EventBridge bus and schedule, least-privilege
// IAM, the alarm topic, alarms and dashboard, all checked by cdk-nag. Run it
// through the CDK CLI (`make synth`, `make deploy`); cdk.json at the
// repository root points here.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/jsii-runtime-go"

	"github.com/checkout-dev/checkout/lease/schema"
)

func main() {
	defer jsii.Close()
	app := awscdk.NewApp(nil)
	cfg, err := ConfigFromContext(app.Node())
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkout infra:", err)
		os.Exit(1)
	}
	cs, err := NewCheckoutStack(app, cfg.StackName, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "checkout infra:", err)
		os.Exit(1)
	}
	// cdk-nag: an unsuppressed error stops `cdk synth` and `cdk deploy`;
	// its reports land in the cloud assembly (cdk.out/).
	Checks(app, true, false)
	app.Synth(nil)
	if err := writeTableImport(filepath.Join(*app.Outdir(), TableImportFile), cs); err != nil {
		fmt.Fprintln(os.Stderr, "checkout infra:", err)
		os.Exit(1)
	}
}

// TableImportFile is written into the cloud assembly at every synthesis:
// the resource mapping with which `cdk import` (make adopt-tables) takes
// tables retained by a destroyed stack into a new one.
const TableImportFile = "tables-import.json"

// TableImport maps each table's logical id to its physical name, in the form
// of cdk import's --resource-mapping.
func TableImport(cs *CheckoutStack) map[string]map[string]string {
	out := map[string]map[string]string{}
	names := schema.Names{Prefix: cs.Config.TablePrefix}
	for name, t := range cs.Tables {
		id, _ := cs.Stack.Resolve(cs.Stack.GetLogicalId(t.Node().DefaultChild().(awscdk.CfnElement))).(string)
		out[id] = map[string]string{"TableName": names.Table(name)}
	}
	return out
}

func writeTableImport(path string, cs *CheckoutStack) error {
	b, err := json.MarshalIndent(TableImport(cs), "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
