package main

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/constructs-go/constructs/v10"

	"github.com/checkout-dev/checkout/deploy"
	"github.com/checkout-dev/checkout/lease/schema"
)

// Config holds the stack's settings. Every field can be set as a CDK context
// value (`cdk deploy -c tablePrefix=dev-checkout- -c deletionProtection=false`)
// or in cdk.json.
type Config struct {
	// TablePrefix is prepended to every table name (context "tablePrefix").
	TablePrefix string
	// DeletionProtection protects the tables against deletion and retains
	// them when the stack is destroyed (context "deletionProtection",
	// default true; set false for development stacks).
	DeletionProtection bool
	// ThrottleRate and ThrottleBurst are the API stage's steady-state request
	// rate (per second) and burst (contexts "throttleRate", "throttleBurst").
	ThrottleRate  float64
	ThrottleBurst float64
	// DistDir holds dist/<name>/bootstrap for every function (context
	// "distDir", default "../dist", relative to infra/).
	DistDir string
	// RequireBuild makes synthesis fail when a function's bootstrap is missing
	// instead of substituting a placeholder (context "requireBuild"; `make
	// deploy` sets it).
	RequireBuild bool
	// PublicThrottleRate and PublicThrottleBurst limit the routes that run
	// without the authorizer (GET /healthz and $default), so that anonymous
	// traffic cannot use up the stage's limit (contexts "publicThrottleRate",
	// "publicThrottleBurst").
	PublicThrottleRate  float64
	PublicThrottleBurst float64
	// ClaimThrottleRate and ClaimThrottleBurst limit POST /api/claim, the
	// costliest route (a Query per queue before its writes) and the one idle
	// agents poll (contexts "claimThrottleRate", "claimThrottleBurst").
	ClaimThrottleRate  float64
	ClaimThrottleBurst float64
	// ReservedConcurrency is each API function's reserved concurrency: at
	// once a guarantee and a cap, so that a flood on one route cannot take
	// the concurrency another needs (context "reservedConcurrency", for
	// example "checkouts=80,health=5", merged over the defaults). The
	// sweeper has exactly 1, one sweep at a time. "off" (a nil map) reserves
	// nothing, the sweeper's 1 included, for accounts whose concurrency
	// limit is too low to reserve any (new accounts start at 10).
	ReservedConcurrency map[string]int
	// Tracing turns on X-Ray active tracing of every function (context
	// "tracing", default true).
	Tracing bool
	// AutoCreateTasks (context "autoCreateTasks", default false): a
	// checkout of an unknown task creates it, as CHECKOUT_AUTO_CREATE_TASKS
	// does on the local server. Only the checkouts function checks out.
	AutoCreateTasks bool
	// SweepStay (context "sweepStay", a Go duration such as "30s"; unset:
	// the sweeper's own default, 55 s) is how long after its start each
	// scheduled sweeper run stays to sweep leases and heartbeats as they
	// fall due, set as CHECKOUT_SWEEP_STAY on the sweeper; "0s" makes each
	// run one sweep, as before the stay. At most 55 s: the sweeper's 60 s
	// timeout leaves no more.
	SweepStay string
	// AlarmEmail, when set, subscribes that address to the alarm topic
	// (context "alarmEmail"; SNS sends a confirmation mail first).
	AlarmEmail string
	// LatencyAlarmMs is the API's p99 latency, in milliseconds, above which
	// the latency alarm fires after three 5-minute periods (context
	// "latencyAlarmMs").
	LatencyAlarmMs float64
	// LogLevel is passed to every function as LOG_LEVEL (context "logLevel").
	LogLevel string
	// StackName is the CloudFormation stack name (context "stackName").
	StackName string
	// WebhookURLs (context "webhookUrls", comma-separated https URLs): the
	// notices function POSTs every notice, signed, to each; what fails for
	// good goes to the deadletters table. WebhookSecretName
	// (context "webhookSecretName") names the Secrets Manager secret that
	// holds the signing key; CloudFormation resolves it into the notices
	// function's environment at deploy time, so it is never in the template.
	// It resolves it again only when the function changes: after rotating
	// the secret, deploy with WebhookSecretVersion (context
	// "webhookSecretVersion", the new version's id), which the reference
	// names, so that the function changes and takes the new key.
	WebhookURLs          string
	WebhookSecretName    string
	WebhookSecretVersion string
	// Shards are the indexes' shard counts (contexts "leaseShards",
	// "statusShards", "claimShards", "feedShards"; defaults
	// schema.DefaultShards: 16, 16, 4, 16), given to every function alike
	// as CHECKOUT_LEASE_SHARDS and the others. They may grow between
	// deploys, never shrink (see schema.ShardCounts).
	Shards schema.ShardCounts
}

// DefaultReservedConcurrency is the reserved concurrency of each API
// function without context. The sum (175, plus the sweeper's 1) leaves
// Lambda's default account limit of 1000 far above the 100 unreserved that
// Lambda requires; at the stage's default 100 requests per second and tens
// of milliseconds per request, each function needs only a few. Claims are
// the exception: one that waits holds an instance for up to 20 s, so they
// have a function of their own (deploy.Claim), whose 40 bound the claims
// running at once, so that however many agents wait, checkouts, renewals,
// releases and completions keep the checkouts function's 40.
var DefaultReservedConcurrency = map[string]int{
	deploy.Health:     5,
	deploy.Authorizer: 20,
	deploy.Agents:     20,
	deploy.Tasks:      20,
	deploy.Checkouts:  40,
	deploy.Claim:      40,
	deploy.Inbox:      10,
	// The stream function runs one batch per shard at a time, so it needs
	// one instance per open shard of the tasks table's stream: 10 cover a
	// stream of up to 10 shards (about as many as the table has
	// partitions); a busier table needs more, or its readers are throttled
	// and fall behind (DEPLOY.md, "Reserved concurrency").
	deploy.Stream: 10,
	// The notices function: likewise, on its own mapping.
	deploy.Notices: 10,
}

var validPrefix = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)

// DefaultConfig is the configuration without any context value.
func DefaultConfig() Config {
	return Config{
		TablePrefix:         schema.DefaultPrefix,
		DeletionProtection:  true,
		ThrottleRate:        100,
		ThrottleBurst:       200,
		PublicThrottleRate:  10,
		PublicThrottleBurst: 20,
		ClaimThrottleRate:   50,
		ClaimThrottleBurst:  100,
		ReservedConcurrency: maps.Clone(DefaultReservedConcurrency),
		Tracing:             true,
		LatencyAlarmMs:      1000,
		DistDir:             "../dist",
		LogLevel:            "info",
		StackName:           "Checkout",
		Shards:              schema.DefaultShards(),
	}
}

// ConfigFromContext reads the configuration from the CDK context of node.
// Values given with -c arrive as strings; values in cdk.json may be JSON
// booleans or numbers. Both are accepted.
func ConfigFromContext(node constructs.Node) (Config, error) {
	c := DefaultConfig()
	get := func(key string) (any, bool) {
		v := node.TryGetContext(&key)
		if v == nil {
			return nil, false
		}
		return v, true
	}
	var err error
	str := func(key string, dst *string) {
		if v, ok := get(key); ok && err == nil {
			s, isStr := v.(string)
			if !isStr {
				err = fmt.Errorf("context %s: want a string, got %v", key, v)
				return
			}
			*dst = s
		}
	}
	boolean := func(key string, dst *bool) {
		if v, ok := get(key); ok && err == nil {
			switch b := v.(type) {
			case bool:
				*dst = b
			case string:
				p, perr := strconv.ParseBool(b)
				if perr != nil {
					err = fmt.Errorf("context %s: want true or false, got %q", key, b)
					return
				}
				*dst = p
			default:
				err = fmt.Errorf("context %s: want true or false, got %v", key, v)
			}
		}
	}
	number := func(key string, dst *float64) {
		if v, ok := get(key); ok && err == nil {
			var f float64
			switch n := v.(type) {
			case float64:
				f = n
			case string:
				p, perr := strconv.ParseFloat(n, 64)
				if perr != nil {
					err = fmt.Errorf("context %s: want a number, got %q", key, n)
					return
				}
				f = p
			default:
				err = fmt.Errorf("context %s: want a number, got %v", key, v)
				return
			}
			if f <= 0 {
				err = fmt.Errorf("context %s: want a positive number, got %v", key, f)
				return
			}
			*dst = f
		}
	}
	str("tablePrefix", &c.TablePrefix)
	boolean("deletionProtection", &c.DeletionProtection)
	number("throttleRate", &c.ThrottleRate)
	number("throttleBurst", &c.ThrottleBurst)
	str("distDir", &c.DistDir)
	boolean("requireBuild", &c.RequireBuild)
	number("publicThrottleRate", &c.PublicThrottleRate)
	number("publicThrottleBurst", &c.PublicThrottleBurst)
	number("claimThrottleRate", &c.ClaimThrottleRate)
	number("claimThrottleBurst", &c.ClaimThrottleBurst)
	number("latencyAlarmMs", &c.LatencyAlarmMs)
	boolean("tracing", &c.Tracing)
	boolean("autoCreateTasks", &c.AutoCreateTasks)
	str("sweepStay", &c.SweepStay)
	str("alarmEmail", &c.AlarmEmail)
	str("logLevel", &c.LogLevel)
	str("stackName", &c.StackName)
	str("webhookUrls", &c.WebhookURLs)
	str("webhookSecretName", &c.WebhookSecretName)
	str("webhookSecretVersion", &c.WebhookSecretVersion)
	count := func(key string, dst *int, most int) {
		f := float64(*dst)
		number(key, &f)
		if err == nil && (f != float64(int(f)) || f < 1 || f > float64(most)) {
			err = fmt.Errorf("context %s: want a whole number from 1 to %d, got %v (shard counts may grow between deploys, never shrink)", key, most, f)
		}
		*dst = int(f)
	}
	count("leaseShards", &c.Shards.Lease, schema.MaxShards)
	count("statusShards", &c.Shards.Status, schema.MaxStatusShards)
	count("claimShards", &c.Shards.Claim, schema.MaxClaimShards)
	count("feedShards", &c.Shards.Feed, schema.MaxShards)
	if v, ok := get("reservedConcurrency"); ok && err == nil {
		c.ReservedConcurrency, err = reservedConcurrency(v, c.ReservedConcurrency)
	}
	if err != nil {
		return Config{}, err
	}
	if c.TablePrefix == "" {
		return Config{}, fmt.Errorf("context tablePrefix: must not be empty")
	}
	// Table names allow only these; the prefix also names the bus, the API,
	// the alarms and the metrics' Deployment dimension.
	if !validPrefix.MatchString(c.TablePrefix) {
		return Config{}, fmt.Errorf("context tablePrefix: %q may hold only letters, digits, '.', '_' and '-'", c.TablePrefix)
	}
	if c.SweepStay != "" {
		d, perr := time.ParseDuration(c.SweepStay)
		if perr != nil || d < 0 || d > maxSweepStay {
			return Config{}, fmt.Errorf("context sweepStay: want a duration from 0s to %v, got %q", maxSweepStay, c.SweepStay)
		}
	}
	if c.AlarmEmail != "" && !strings.Contains(c.AlarmEmail, "@") {
		return Config{}, fmt.Errorf("context alarmEmail: %q is not an e-mail address", c.AlarmEmail)
	}
	var urls []string
	for _, u := range strings.Split(c.WebhookURLs, ",") {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		if !strings.HasPrefix(u, "https://") || strings.ContainsAny(u, " \t\n") {
			return Config{}, fmt.Errorf("context webhookUrls: %q is not an https URL", u)
		}
		urls = append(urls, u)
	}
	c.WebhookURLs = strings.Join(urls, ",")
	if c.WebhookSecretVersion != "" && c.WebhookSecretName == "" {
		return Config{}, fmt.Errorf("context webhookSecretVersion: given without webhookSecretName")
	}
	if c.WebhookURLs != "" && c.WebhookSecretName == "" {
		return Config{}, fmt.Errorf("context webhookSecretName: required with webhookUrls (the Secrets Manager secret that holds the signing key)")
	}
	return c, nil
}

// reservedConcurrency reads the context value v over base: "off" (or false)
// for none (nil), "name=N,name=N" from the command line, or an object
// {"name": N} in cdk.json. Only API functions can be named; N is at least 1
// (0 would stop the function altogether).
func reservedConcurrency(v any, base map[string]int) (map[string]int, error) {
	out := maps.Clone(base)
	set := func(name string, n float64) error {
		if _, ok := DefaultReservedConcurrency[name]; !ok {
			return fmt.Errorf("context reservedConcurrency: %q is not an API function (%s)", name, strings.Join(slices.Sorted(maps.Keys(DefaultReservedConcurrency)), ", "))
		}
		if n < 1 || n != float64(int(n)) {
			return fmt.Errorf("context reservedConcurrency: %s=%v, want a whole number of at least 1", name, n)
		}
		out[name] = int(n)
		return nil
	}
	switch x := v.(type) {
	case bool:
		if x {
			return out, nil
		}
		return nil, nil
	case string:
		x = strings.TrimSpace(x)
		if x == "off" || x == "false" || x == "none" {
			return nil, nil
		}
		for _, part := range strings.Split(x, ",") {
			name, num, ok := strings.Cut(strings.TrimSpace(part), "=")
			n, perr := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if !ok || perr != nil {
				return nil, fmt.Errorf("context reservedConcurrency: %q, want name=N,name=N or off", x)
			}
			if err := set(strings.TrimSpace(name), n); err != nil {
				return nil, err
			}
		}
		return out, nil
	case map[string]any:
		for name, n := range x {
			f, ok := n.(float64)
			if !ok {
				return nil, fmt.Errorf("context reservedConcurrency: %s=%v, want a number", name, n)
			}
			if err := set(name, f); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("context reservedConcurrency: want name=N,name=N, an object or off, got %v", v)
}
