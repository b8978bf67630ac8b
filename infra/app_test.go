package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The app command of cdk.json, run as the CDK CLI runs it: from the
// repository root, with the cloud assembly directory and the files the CLI
// asks the app to write given relative to that root. This is `make synth`:
// the CLI names its performance counters file relative to its own working
// directory, and the app, which runs in infra/, must still find it. The app
// runs cdk-nag and writes its reports.
func TestCdkJSONAppSynthesizes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole app")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(root, "cdk.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cdk struct {
		App     string         `json:"app"`
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(raw, &cdk); err != nil {
		t.Fatal(err)
	}
	tmp, err := os.MkdirTemp(root, ".cdk-app-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	rel, _ := filepath.Rel(root, tmp)
	ctx, _ := json.Marshal(cdk.Context)
	cmd := exec.Command("sh", "-c", cdk.App)
	cmd.Dir = root
	cmd.Env = append(os.Environ(),
		"CDK_OUTDIR="+rel,
		"CDK_ERROR_FILE="+filepath.Join(rel, "error.txt"),
		"CDK_PERF_COUNTERS_FILE="+filepath.Join(rel, "performance-counters.json"),
		"CDK_CONTEXT_JSON="+string(ctx),
		"JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION=20",
	)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cdk.json's app: %v\n%s", err, out)
	}
	for _, f := range []string{"Checkout.template.json", "manifest.json", "AwsSolutions--Checkout-NagReport.csv", "Serverless--Checkout-NagReport.csv", TableImportFile} {
		if _, err := os.Stat(filepath.Join(tmp, f)); err != nil {
			t.Errorf("the app did not write %s: %v", f, err)
		}
	}
}

// The mapping make adopt-tables hands to cdk import names every table by
// its logical id in the template and its name in the deployment.
func TestTableImportNamesEveryTable(t *testing.T) {
	s := synth(t, map[string]any{"tablePrefix": "prod-"})
	got := TableImport(s.stack)
	if len(got) != len(s.tableID) {
		t.Fatalf("%d tables in the mapping, %d in the stack", len(got), len(s.tableID))
	}
	for name, id := range s.tableID {
		if got[id]["TableName"] != "prod-"+name || s.resources[id]["Type"] != "AWS::DynamoDB::Table" {
			t.Errorf("%s: mapping %v for %s", name, got[id], id)
		}
	}
}
