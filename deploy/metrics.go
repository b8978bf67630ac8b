package deploy

// The service's own CloudWatch metrics. The functions write them as
// embedded metric format lines on standard output (CloudWatch Logs turns
// them into metrics; no API call is made), and the stack's alarms and
// dashboard read them. Every metric carries one dimension, Deployment, whose
// value is the deployment's table prefix, so that two stacks in one account
// never mix their figures.
const (
	MetricNamespace     = "Checkout"
	DimensionDeployment = "Deployment"
)

// Metric names. Counts unless said otherwise.
const (
	// MetricCheckouts: checkouts and claims answered 200 (a same-run retry
	// included).
	MetricCheckouts = "Checkouts"
	// MetricConflicts: checkouts answered 409 checked_out (the task was held
	// by another live lease).
	MetricConflicts = "Conflicts"
	// MetricTakeovers: checkouts that ended an expired or dead holder's lease
	// in their own write.
	MetricTakeovers = "Takeovers"
	// MetricLeaseTimeouts and MetricAgentDeaths: leases that ended by expiry
	// or by their holder's death, whoever ended them (sweep, takeover, agent
	// removal).
	MetricLeaseTimeouts = "LeaseTimeouts"
	MetricAgentDeaths   = "AgentDeaths"
	// MetricNoticesPublished and MetricNoticesFailed: notices put on the
	// event bus, and notices the bus refused or that could not be sent.
	MetricNoticesPublished = "NoticesPublished"
	MetricNoticesFailed    = "NoticesFailed"
	// MetricUnauthorized: keys the authorizer did not know (malformed,
	// unknown or revoked); each is cached for the authorizer's TTL.
	MetricUnauthorized = "UnauthorizedKeys"
	// MetricSweepEnded: leases one sweep found past their end and ended
	// (its backlog); MetricSweepDuration: how long the sweep took, in
	// milliseconds. Both are written once per sweep: a sweeper run's
	// first, and each it makes as something falls due within its stay.
	MetricSweepEnded    = "SweepEnded"
	MetricSweepDuration = "SweepDuration"
	// MetricAPIThrottled: 429 answers of the API stage, counted from its
	// access log (API Gateway has no metric of its own for them).
	MetricAPIThrottled = "ApiThrottledRequests"
)

// Metrics lists every metric the functions write, for the dashboard and the
// tests.
var Metrics = []string{
	MetricCheckouts, MetricConflicts, MetricTakeovers, MetricLeaseTimeouts, MetricAgentDeaths,
	MetricNoticesPublished, MetricNoticesFailed, MetricUnauthorized, MetricSweepEnded, MetricSweepDuration,
}
