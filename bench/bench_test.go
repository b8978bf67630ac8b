package bench

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/localstack"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func TestQuantile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	if q := quantile(ds, 0.5); q != 5 {
		t.Errorf("p50 = %v, want 5", q)
	}
	if q := quantile(ds, 0.99); q != 10 {
		t.Errorf("p99 = %v, want 10", q)
	}
	if q := quantile(nil, 0.5); q != 0 {
		t.Errorf("p50 of nothing = %v", q)
	}
}

// A tiny run of every scenario: both systems must run, each operation must
// be counted, and this project must stay within its request budget on the
// wire (DynamoDB's figures, without the emulator's fallback reads).
func TestTinyRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := Config{Endpoint: testenv.Endpoint(), Throughput: 100 * time.Millisecond, Workers: []int{1, 4}, Contended: 4,
		TTL: time.Second, PeerLease: time.Second, SweepLeases: 20, FleetAgents: 4, FleetCycles: 2, UnblockRounds: 3}
	r, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if u := r.Unblocking; u == nil || u.Rounds != 3 || u.P50 <= 0 || u.Max < u.P99 || u.P99 < u.P50 {
		t.Errorf("unblocking: %+v", r.Unblocking)
	}
	budget := map[string][2]int{ // operation -> {ours on DynamoDB, dynamolock}
		"successful checkout / acquire": {2, 2},
		"conflict (task held)":          {2, 1},
		"release":                       {2, 1},
		"heartbeat (agent alive)":       {1, 1},
	}
	for _, c := range r.Requests {
		want, ok := budget[c.Op]
		if !ok {
			continue
		}
		delete(budget, c.Op)
		if c.OursOnDynamoDB > want[0] || c.OursOnDynamoDB < 1 {
			t.Errorf("%s: checkout made %d requests (%v), budget %d", c.Op, c.OursOnDynamoDB, c.OursOps, want[0])
		}
		if c.Peer != want[1] {
			t.Errorf("%s: dynamolock made %d requests (%v), documented %d", c.Op, c.Peer, c.PeerOps, want[1])
		}
	}
	if len(budget) > 0 {
		t.Errorf("operations not measured: %v", budget)
	}
	if len(r.Throughput) != 8 {
		t.Fatalf("%d throughput results, want 8", len(r.Throughput))
	}
	for _, x := range r.Throughput {
		if x.Cycles == 0 {
			t.Errorf("%s %s x%d: no cycle completed", x.System, x.Scenario, x.Workers)
		}
	}
	// The floor runs every scenario too, with one write per transition.
	if len(r.Floor) != 4 {
		t.Fatalf("%d floor results, want 4", len(r.Floor))
	}
	for i, x := range r.Floor {
		if x.Cycles == 0 || x.Scenario != r.Throughput[2*i].Scenario || x.Workers != r.Throughput[2*i].Workers {
			t.Errorf("floor %s x%d: %d cycles, beside %s x%d", x.Scenario, x.Workers, x.Cycles, r.Throughput[2*i].Scenario, r.Throughput[2*i].Workers)
		}
		if x.Conflicts == 0 && x.Requests < 2*x.Cycles {
			t.Errorf("floor %s x%d: %d requests for %d cycles; each cycle makes two writes", x.Scenario, x.Workers, x.Requests, x.Cycles)
		}
	}
	// The server's and the clients' CPU per cycle, where the server is this
	// project's local one (the shim answers ProcessUsage).
	if _, err := localstack.ProcessUsage(ctx, cfg.Endpoint); err == nil {
		for _, x := range append(slices.Clone(r.Throughput), r.Floor...) {
			if x.Cycles > 0 && (x.ServerPerCycle() <= 0 || x.ClientPerCycle() <= 0) {
				t.Errorf("%s %s x%d: CPU %+v for %d cycles, want both sides measured", x.System, x.Scenario, x.Workers, x.CPU, x.Cycles)
			}
		}
	}
	if len(r.Takeover) != 4 {
		t.Fatalf("takeovers: %+v", r.Takeover)
	}
	if r.Sweep == nil || r.Sweep.Ended != 20 {
		t.Fatalf("sweep: %+v", r.Sweep)
	}
	// Units: every operation measured on both sizes; a checkout bills at
	// least its table write and an index write, and creating a 12 KB task
	// more than a small one; dynamolock's acquire+release is on the same
	// meter.
	if r.Units == nil || len(r.Units.Ops) != 2*16 {
		t.Fatalf("units: %+v", r.Units)
	}
	written := map[string]float64{}
	for _, c := range r.Units.Ops {
		written[c.Op+", "+c.Size] = c.Request.Write
	}
	if written["checkout, small"] < 2 || written["checkout, 12 KB"] < 2 || written["create, 12 KB"] <= written["create, small"] ||
		written["create, a queue new to the process, small"] <= written["create, small"] {
		t.Errorf("write units on the request path: %v", written)
	}
	var peer bool
	for _, c := range r.Units.Peer {
		if c.Op == "acquire+release" {
			peer = c.Units.Write == 2 && c.Units.Read == 1
		}
	}
	if !peer {
		t.Errorf("dynamolock acquire+release: %+v, want 2 WU and 1 RU (a PutItem each, a GetItem)", r.Units.Peer)
	}
	if len(r.Units.Fleets) != 2 || r.Units.Fleets[0].Cycles != 8 || r.Units.Fleets[0].Top().Write == 0 || r.Units.Fleets[0].Ceiling() <= 0 {
		t.Errorf("fleets: %+v", r.Units.Fleets)
	}
	var b strings.Builder
	r.Markdown(&b)
	for _, want := range []string{"dynamolock v2.0.2", "checkout (lease.Store)", "### Sweep", "Not measured (skipped)",
		"### Write and read units per operation", "### The busiest partition of a fleet", "cost per million cycles",
		"### Where a cycle's time goes: CPU per cycle", "server's bound, cycles/s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

// A small drain: every task is granted once, and the claims' figures add
// up.
func TestTinyDrain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, perAgent := range []bool{false, true} {
		d, err := RunDrain(ctx, testenv.Endpoint(), 8, 60, perAgent)
		if err != nil {
			t.Fatal(err)
		}
		if d.Granted != 60 || len(d.Twice) > 0 || d.Claims < 60+8 || d.Writes < 60 || d.Writes-d.Lost != 60 {
			t.Fatalf("%s: %+v", d.Mode, d)
		}
		t.Logf("%s: %.2f claims and %.2f grant writes per grant", d.Mode, d.ClaimsPerGrant(), d.WritesPerGrant())
	}
}
