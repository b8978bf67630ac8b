package main

import (
	"fmt"
	"strconv"

	"github.com/aws/constructs-go/constructs/v10"
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
	// LogLevel is passed to every function as LOG_LEVEL (context "logLevel").
	LogLevel string
	// StackName is the CloudFormation stack name (context "stackName").
	StackName string
}

// DefaultConfig is the configuration without any context value.
func DefaultConfig() Config {
	return Config{
		TablePrefix:        schema.DefaultPrefix,
		DeletionProtection: true,
		ThrottleRate:       100,
		ThrottleBurst:      200,
		DistDir:            "../dist",
		LogLevel:           "info",
		StackName:          "Checkout",
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
	str("logLevel", &c.LogLevel)
	str("stackName", &c.StackName)
	if err != nil {
		return Config{}, err
	}
	if c.TablePrefix == "" {
		return Config{}, fmt.Errorf("context tablePrefix: must not be empty")
	}
	return c, nil
}
