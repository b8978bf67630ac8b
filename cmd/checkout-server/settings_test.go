package main

import (
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
)

// LOG_LEVEL is one of slog's levels (any case), or unset for info; anything
// else is refused, naming the variable and the values allowed (it used to
// mean info, silently).
func TestLogLevel(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]slog.Level{"": slog.LevelInfo, "debug": slog.LevelDebug, "WARN": slog.LevelWarn, "error": slog.LevelError, "info": slog.LevelInfo} {
		if got, err := logLevel(in); err != nil || got != want {
			t.Errorf("LOG_LEVEL=%q: %v %v, want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"garbage", "verbose", "0"} {
		if _, err := logLevel(bad); err == nil || !strings.Contains(err.Error(), "LOG_LEVEL") || !strings.Contains(err.Error(), "debug, info, warn or error") {
			t.Errorf("LOG_LEVEL=%q: %v", bad, err)
		}
	}
}

// The built server refuses a bad LOG_LEVEL in one line before it starts
// anything.
func TestBadLogLevelStopsTheServer(t *testing.T) {
	t.Parallel()
	refused(t, []string{"LOG_LEVEL=garbage"}, `LOG_LEVEL=\"garbage\": want debug, info, warn or error`)
}

// CHECKOUT_SWEEP_INTERVAL has a floor of 100ms: 1ns was accepted and kept
// more than a core busy sweeping an idle server.
func TestSweepIntervalFloor(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"1ns", "99ms", "0s"} {
		_, err := configFrom(func(k string) string { return map[string]string{"CHECKOUT_SWEEP_INTERVAL": v}[k] })
		if err == nil || !strings.Contains(err.Error(), "CHECKOUT_SWEEP_INTERVAL") || !strings.Contains(err.Error(), "100ms or more") {
			t.Errorf("CHECKOUT_SWEEP_INTERVAL=%s: %v", v, err)
		}
	}
	cfg, err := configFrom(func(k string) string { return map[string]string{"CHECKOUT_SWEEP_INTERVAL": "100ms"}[k] })
	if err != nil || cfg.SweepInterval != 100*time.Millisecond {
		t.Errorf("100ms: %v %v", cfg.SweepInterval, err)
	}
}

// A listen address, table prefix or DynamoDB endpoint that cannot work is
// refused by configFrom, naming the variable, so the server stops before
// it starts dynalite. They used to be found later: CHECKOUT_ADDR=bogus
// after dynalite had started and the tables were made ("localserver:
// listen tcp: address bogus: missing port in address"), a prefix with a
// space as the DynamoDB SDK's validation error for "bad prefix!tasks".
func TestBadAddressPrefixAndEndpointAreRefused(t *testing.T) {
	t.Parallel()
	for k, vs := range map[string][]string{
		"CHECKOUT_ADDR":         {"bogus", "127.0.0.1:99999", "127.0.0.1:", "127.0.0.1:-1", "[::1", "localhost:port"},
		"CHECKOUT_TABLE_PREFIX": {"bad prefix!", "dev/", "dév-", strings.Repeat("p", 250)},
		"DYNAMODB_ENDPOINT":     {"not-a-url", "127.0.0.1:8000", "ftp://127.0.0.1:8000", "http://", "http:///x"},
	} {
		for _, v := range vs {
			_, err := configFrom(func(key string) string { return map[string]string{k: v}[key] })
			if err == nil || !strings.HasPrefix(err.Error(), k+"=") {
				t.Errorf("%s=%q: %v; want refused, naming the variable", k, v, err)
			}
		}
	}
	for k, vs := range map[string][]string{
		"CHECKOUT_ADDR":         {"127.0.0.1:0", "127.0.0.1:3100", ":3100", "localhost:3100", "[::1]:3100"},
		"CHECKOUT_TABLE_PREFIX": {"dev-", "Dev_checkout.1-", strings.Repeat("p", 200)},
		"DYNAMODB_ENDPOINT":     {"http://127.0.0.1:8000", "https://dynamodb.eu-west-1.amazonaws.com", "http://localhost:4566/"},
	} {
		for _, v := range vs {
			if _, err := configFrom(func(key string) string { return map[string]string{k: v}[key] }); err != nil {
				t.Errorf("%s=%q: %v", k, v, err)
			}
		}
	}
}

// A misspelled setting is logged, with the setting it is close to, before
// anything starts: CHECKOUT_ADMN_KEY would otherwise be ignored and a new
// admin key generated in its place.
func TestMisspelledSettingIsLogged(t *testing.T) {
	t.Parallel()
	bin := testenv.Binary(t, "github.com/checkout-dev/checkout/cmd/checkout-server")
	cmd := exec.Command(bin)
	// A bad address stops the server right after its settings are read.
	cmd.Env = append(os.Environ(), "CHECKOUT_ADMN_KEY=ck_misspelled-admin-key", "CHECKOUT_ADDR=bogus", "CHECKOUT_URL=http://127.0.0.1:3100")
	out, _ := cmd.CombinedOutput()
	var found bool
	for line := range strings.Lines(string(out)) {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		if m["variable"] == "CHECKOUT_URL" {
			t.Errorf("the CLI's setting is reported: %s", line)
		}
		if m["level"] == "WARN" && m["variable"] == "CHECKOUT_ADMN_KEY" && m["did_you_mean"] == "CHECKOUT_ADMIN_KEY" {
			found = true
		}
	}
	if !found {
		t.Errorf("no warning naming CHECKOUT_ADMN_KEY and CHECKOUT_ADMIN_KEY in:\n%s", out)
	}
}
