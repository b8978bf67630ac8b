package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
	"github.com/cdklabs/cdk-nag-go/cdknag/v2"
)

// Suppression is one cdk-nag finding the stack accepts: the rule, on which
// construct (and its children), for which finding when the rule is granular,
// and the reason a reviewer reads.
type Suppression struct {
	Path      string
	Rule      string
	AppliesTo []string
	Reason    string
}

// Checks applies cdk-nag's AwsSolutions and Serverless packs to every
// construct under scope. Their findings become error and warning
// annotations at synthesis: `cdk synth` and `cdk deploy` stop on an error,
// and the infra tests fail on either. logIgnores also records each
// suppressed finding as an info annotation; reports writes cdk-nag's CSV
// reports into the cloud assembly.
func Checks(scope constructs.IConstruct, reports, logIgnores bool) {
	props := func() *cdknag.NagPackProps {
		return &cdknag.NagPackProps{Reports: jsii.Bool(reports), LogIgnores: jsii.Bool(logIgnores)}
	}
	awscdk.Aspects_Of(scope).Add(cdknag.NewAwsSolutionsChecks(props()), nil)
	awscdk.Aspects_Of(scope).Add(cdknag.NewServerlessChecks(props()), nil)
}

// suppress accepts the findings of rule on c and its children, for the
// reason given; appliesTo narrows a granular rule (for example AwsSolutions
// IAM5's "Resource::*") to those findings only.
func (s *CheckoutStack) suppress(c constructs.IConstruct, rule, reason string, appliesTo ...string) {
	sp := &cdknag.NagPackSuppression{Id: jsii.String(rule), Reason: jsii.String(reason)}
	if len(appliesTo) > 0 {
		var at []any
		for _, a := range appliesTo {
			at = append(at, a)
		}
		sp.AppliesTo = &at
	}
	cdknag.NagSuppressions_AddResourceSuppressions(c, &[]*cdknag.NagPackSuppression{sp}, jsii.Bool(true))
	s.Suppressions = append(s.Suppressions, Suppression{Path: *c.Node().Path(), Rule: rule, AppliesTo: appliesTo, Reason: reason})
}
