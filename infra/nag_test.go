package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/jsii-runtime-go"
)

// cdk-nag's AwsSolutions and Serverless packs find nothing that the stack
// does not accept with a reason, in the default deployment and with every
// option turned the other way; and every suppression the stack declares is
// used, so none outlives its finding.
func TestCdkNagFindsNothingUnsuppressed(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  map[string]any
	}{
		{"defaults", map[string]any{}},
		{"every option", map[string]any{"alarmEmail": "ops@example.com", "tracing": "false", "reservedConcurrency": "off",
			"deletionProtection": "false", "tablePrefix": "dev-checkout-"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, notes := synthesize(t, tc.ctx, true)
			any := assertions.Match_AnyValue()
			var findings []string
			for _, m := range append(*notes.FindError(jsii.String("*"), any), *notes.FindWarning(jsii.String("*"), any)...) {
				data := fmt.Sprint(m.Entry.Data) //nolint:staticcheck // SA1019: the Go bindings have no replacement type yet
				if strings.HasPrefix(data, "AwsSolutions-") || strings.HasPrefix(data, "Serverless-") || strings.HasPrefix(data, "CdkNagValidationFailure") {
					findings = append(findings, *m.Id+": "+strings.TrimSpace(data)) //nolint:staticcheck // SA1019, as above
				}
			}
			if len(findings) > 0 {
				t.Errorf("%d unsuppressed cdk-nag findings:\n%s", len(findings), strings.Join(findings, "\n"))
			}
			suppressed := *notes.FindInfo(jsii.String("*"), assertions.Match_StringLikeRegexp(jsii.String("was triggered but suppressed")))
			for _, sp := range s.stack.Suppressions {
				if len(sp.Reason) < 60 || !strings.HasSuffix(sp.Reason, ".") {
					t.Errorf("%s on %s: reason %q is too thin to review", sp.Rule, sp.Path, sp.Reason)
				}
				used := false
				for _, m := range suppressed {
					id, data := *m.Id, fmt.Sprint(m.Entry.Data) //nolint:staticcheck // SA1019: the Go bindings have no replacement type yet
					used = used || (strings.HasPrefix(id, "/"+sp.Path+"/") || id == "/"+sp.Path) &&
						strings.Contains(data, sp.Rule+" was triggered")
				}
				if !used {
					t.Errorf("suppression of %s on %s suppresses nothing: remove it", sp.Rule, sp.Path)
				}
			}
		})
	}
}
