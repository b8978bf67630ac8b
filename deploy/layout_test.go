package deploy

import (
	"os/exec"
	"strings"
	"testing"
)

// The arrows of the layout point down: the route table, the error codes,
// the HTTP layer, the local server, the client and the MCP server import
// nothing of the Lambda functions (functions/...), which import them.
func TestNoPackageImportsTheFunctions(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	const module = "github.com/checkout-dev/checkout/"
	for _, pkg := range []string{"deploy", "errcode", "httpapi", "localserver", "client", "mcpserver", "cmd/checkout", "cmd/checkout-server"} {
		out, err := exec.Command("go", "list", "-deps", "../"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if strings.HasPrefix(dep, module+"functions/") {
				t.Errorf("%s imports %s", pkg, dep)
			}
		}
	}
}
