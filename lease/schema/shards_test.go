package schema

import (
	"strings"
	"testing"
)

func TestShardsFromEnv(t *testing.T) {
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	got, err := ShardsFromEnv(env(nil))
	if err != nil || got != DefaultShards() {
		t.Fatalf("no variables: %+v, %v; want the defaults", got, err)
	}
	if d := DefaultShards(); d != (ShardCounts{Lease: 16, Status: 16, Claim: 4, Feed: 16}) {
		t.Fatalf("defaults %+v: changing a default hides the items written with the earlier one", d)
	}
	got, err = ShardsFromEnv(env(map[string]string{EnvLeaseShards: "32", EnvStatusShards: " 20 ", EnvClaimShards: "16", EnvFeedShards: "256"}))
	if err != nil || got != (ShardCounts{Lease: 32, Status: 20, Claim: 16, Feed: 256}) {
		t.Fatalf("%+v, %v", got, err)
	}
	for _, bad := range []map[string]string{
		{EnvLeaseShards: "0"},
		{EnvLeaseShards: "257"},
		{EnvStatusShards: "21"},
		{EnvClaimShards: "17"},
		{EnvClaimShards: "-1"},
		{EnvFeedShards: "many"},
		{EnvFeedShards: "1.5"},
	} {
		_, err := ShardsFromEnv(env(bad))
		for k := range bad {
			if err == nil || !strings.Contains(err.Error(), k) {
				t.Errorf("%v: %v, want an error naming %s", bad, err, k)
			}
		}
	}
}

func TestShardCountsValidateAndDefaults(t *testing.T) {
	if err := (ShardCounts{}).Validate(); err != nil {
		t.Fatalf("zero counts are the defaults: %v", err)
	}
	if (ShardCounts{}).OrDefault() != DefaultShards() || (ShardCounts{Claim: 8}).OrDefault() != (ShardCounts{Lease: 16, Status: 16, Claim: 8, Feed: 16}) {
		t.Fatal("OrDefault")
	}
	for _, bad := range []ShardCounts{{Lease: -1}, {Lease: MaxShards + 1}, {Status: MaxStatusShards + 1}, {Claim: MaxClaimShards + 1}, {Feed: MaxShards + 1}} {
		if bad.Validate() == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	env := (ShardCounts{Claim: 8}).Env()
	if back, err := ShardsFromEnv(func(k string) string { return env[k] }); err != nil || back != (ShardCounts{Lease: 16, Status: 16, Claim: 8, Feed: 16}) || len(env) != 4 {
		t.Fatalf("Env %v read back as %+v, %v", env, back, err)
	}
}
