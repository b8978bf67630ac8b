package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

func opsString(o Ops) string {
	if o == nil {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(o)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, o[k]))
	}
	return strings.Join(parts, ", ")
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func ratio(a, b float64) string {
	if b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

// Markdown writes the results as Markdown tables.
func (r *Results) Markdown(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	if r.Config.SweepOnly {
		r.sweepMarkdown(p)
		p("\nWhole run: %s.\n", r.Took.Round(time.Second))
		return
	}
	if r.Config.DrainOnly {
		r.drainMarkdown(p)
		p("\nWhole run: %s.\n", r.Took.Round(time.Second))
		return
	}
	p("### DynamoDB requests per operation\n\n")
	p("Counted by an SDK middleware on each client, on the request path: the stream function is held off while an operation runs (its batched share is in the throughput's requests per cycle). \"On DynamoDB\" leaves out the read the store makes only because dynalite ignores `ReturnValuesOnConditionCheckFailure`.\n\n")
	p("| operation | checkout (on dynalite) | checkout (on DynamoDB) | dynamolock | checkout requests | dynamolock requests | note |\n|---|---|---|---|---|---|---|\n")
	for _, c := range r.Requests {
		o, d, pe := "n/a", "n/a", "n/a"
		if c.Ours >= 0 {
			o, d = fmt.Sprint(c.Ours), fmt.Sprint(c.OursOnDynamoDB)
		}
		if c.Peer >= 0 {
			pe = fmt.Sprint(c.Peer)
		}
		p("| %s | %s | %s | %s | %s | %s | %s |\n", c.Op, o, d, pe, opsString(c.OursOps), opsString(c.PeerOps), c.Note)
	}
	if r.Sweep != nil {
		s := r.Sweep
		per := float64(s.Requests.Total()) / float64(max(s.Leases, 1))
		p("| per expired lease in a sweep | %.2f | %.2f | n/a | %s (for %d leases) | | dynamolock has no sweep: an expired lock stays until the next acquirer waits a lease; ours: the stream function's consequences below, under Sweep |\n",
			per, per, opsString(s.Requests), s.Leases)
	}

	r.unitsMarkdown(p)

	p("\n### Acquire-then-release throughput\n\n")
	p("Each worker acquires its key (distinct keys, or one shared key when contended), releases it and repeats for %v. Latency is of a whole cycle (acquire + release); contended, \"attempt\" is one acquire try, won or lost. An attempt still running a second after the end is abandoned (not counted).\n\n", r.Config.Throughput)
	p("| system | scenario | workers | cycles/s | cycle p50 | cycle p99 | attempt p50 | attempt p99 | conflicts | abandoned | requests/cycle |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, t := range r.Throughput {
		rpc := "-"
		if t.Cycles > 0 {
			rpc = fmt.Sprintf("%.2f", float64(t.Requests)/float64(t.Cycles))
		}
		p("| %s | %s | %d | %.0f | %s | %s | %s | %s | %d | %d | %s |\n", t.System, t.Scenario, t.Workers, t.CyclesPerSec(),
			ms(t.CycleP50), ms(t.CycleP99), ms(t.AttemptP50), ms(t.AttemptP99), t.Conflicts, t.Abandoned, rpc)
	}
	p("\nRatio checkout / dynamolock (cycles/s; above 1 means this project is faster):\n\n")
	for i := 0; i+1 < len(r.Throughput); i += 2 {
		a, b := r.Throughput[i], r.Throughput[i+1]
		p("- %s, workers %d: %s (cycle p50 %s vs %s)\n", a.Scenario, a.Workers, ratio(a.CyclesPerSec(), b.CyclesPerSec()), ms(a.CycleP50), ms(b.CycleP50))
	}
	r.floorMarkdown(p)
	r.cpuMarkdown(p)

	p("\n### Taking over the task of a dead holder\n\n")
	p("The holder takes the task and dies at once; a new agent arrives at that moment or later and tries every %v. \"Waited\" runs from the death.\n\n", pollEvery)
	p("| system | setup | waited | expected |\n|---|---|---|---|\n")
	for _, t := range r.Takeover {
		p("| %s | %s | %s | %s |\n", t.System, t.Setup, ms(t.Waited), t.Expect)
	}

	r.sweepMarkdown(p)

	if u := r.Unblocking; u != nil {
		p("\n### Unblocking a dependent\n\n")
		p("A blocker and its dependent, alone in a queue; the blocker is checked out and completed, and an agent claims from the dependent's queue every %v until it gets it. From the completion's answer to the claim's, over %d dependents; the change stream is polled every 200 ms, as the local server polls it. Write units: \"create a dependent\" and \"complete a blocker of 4 dependents\" in the units table above (the dependents' unblocking is the stream's part).\n\n", u.ClaimEvery, u.Rounds)
		p("| dependents | p50 | p99 | max |\n|---|---|---|---|\n| %d | %s | %s | %s |\n", u.Rounds, ms(u.P50), ms(u.P99), ms(u.Max))
	}

	r.drainMarkdown(p)
	p("\n### Lambda packages\n\n")
	if r.LambdaErr != "" {
		p("Not measured: %s\n", r.LambdaErr)
	} else if len(r.Lambdas) == 0 {
		p("Not measured (skipped).\n")
	} else {
		p("`bootstrap` built for linux/arm64 with `-tags lambda.norpc -trimpath -ldflags \"-s -w\"`, CGO off; zip as deployed. Start-up: the same code built for this host, run against an emulated Lambda Runtime API; median of %d starts.\n\n", r.Lambdas[0].Runs)
		p("| function | bootstrap | zip | start -> first /next | start -> first event answered | first answer |\n|---|---|---|---|---|---|\n")
		for _, l := range r.Lambdas {
			p("| %s | %.2f MB | %.2f MB | %s | %s | %s |\n", l.Name, float64(l.Bootstrap)/1e6, float64(l.Zipped)/1e6, ms(l.Init), ms(l.FirstEvent), l.Outcome)
		}
	}
	p("\nWhole run: %s.\n", r.Took.Round(time.Second))
}

// drainMarkdown reports the queue-drain runs.
func (r *Results) drainMarkdown(p func(format string, args ...any)) {
	if len(r.Drains) > 0 {
		p("\n### Draining a queue with claim\n\n")
		p("Agents claim from one queue (tasks in batches of 25, priorities 0 to 9), complete what they get and claim again until a claim finds nothing. \"claims per grant\" counts every claim request, the agents' final 404s included; \"grant writes per grant\" every conditional write a claim made to take a task, won or lost. Requests are the claims' DynamoDB requests (completions left out).\n\n")
		p("| agents | tasks | store | granted | claims per grant | grant writes per grant | lost writes | time to drain | grants/s | claim requests per grant | claimed twice |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, d := range r.Drains {
			p("| %d | %d | %s | %d | %.3f | %.3f | %d | %s | %.0f | %.1f (%s) | %d |\n", d.Agents, d.Tasks, d.Mode, d.Granted,
				d.ClaimsPerGrant(), d.WritesPerGrant(), d.Lost, ms(d.Elapsed), float64(d.Granted)/d.Elapsed.Seconds(),
				float64(d.Requests.Total())/float64(max(d.Granted, 1)), opsString(d.Requests), len(d.Twice))
		}
		p("\n(Creating the %d tasks took %s.)\n", r.Drains[0].Tasks, ms(r.Drains[0].Setup))
	}
}

// u formats units: whole numbers plainly, fractions to two places.
func u(v float64) string {
	if v == float64(int64(v)) {
		return fmt.Sprint(int64(v))
	}
	return fmt.Sprintf("%.2f", v)
}

// peerOp is the dynamolock operation that does what one of ours does.
var peerOp = map[string]string{
	"checkout":          "acquire",
	"conflict (409)":    "conflict",
	"renew":             "heartbeat (per held lock)",
	"release":           "release",
	"checkout+complete": "acquire+release",
	"heartbeat":         "heartbeat (per held lock)",
}

// unitsMarkdown reports the write and read units per operation, the fleet's
// busiest partitions and what a million cycles cost.
func (r *Results) unitsMarkdown(p func(format string, args ...any)) {
	if r.Units == nil {
		return
	}
	ur := r.Units
	p("\n### Write and read units per operation\n\n")
	p("What DynamoDB bills, as the local DynamoDB's meter counts it by AWS's rules (item size; 1 KB write units of the larger image; each index entry put, deleted or updated, sized by its projection plus 100 bytes; failed conditions by the item; 4 KB read units, half when eventually consistent): `localstack/shim/meter.js`. \"Request\" is the operation's own requests, with the stream function held off; \"stream\" is what the stream function then writes and reads for its consequences (archived events, messages, queue counts). The small task has a title only; the 12 KB task a full 8 KiB description and 3.5 KiB of metadata. The sweep's figures are per lease, for %d expired leases in one sweep.\n\n", unitSweepLeases)
	var sizes []string
	for _, z := range TaskSizes {
		sizes = append(sizes, z.Name)
	}
	peer := map[string]PeerCost{}
	for _, c := range ur.Peer {
		peer[c.Op] = c
	}
	p("| operation |")
	for _, z := range sizes {
		p(" %s: request WU / RU | %s: stream WU / RU | %s: total WU / RU |", z, z, z)
	}
	p(" dynamolock, same meter: WU / RU |\n|---|")
	for range sizes {
		p("---|---|---|")
	}
	p("---|\n")
	var ops []string
	byOp := map[string]map[string]UnitCost{}
	for _, c := range ur.Ops {
		if byOp[c.Op] == nil {
			byOp[c.Op] = map[string]UnitCost{}
			ops = append(ops, c.Op)
		}
		byOp[c.Op][c.Size] = c
	}
	for _, op := range ops {
		p("| %s |", op)
		for _, z := range sizes {
			c := byOp[op][z]
			p(" %s / %s | %s / %s | **%s / %s** |", u(c.Request.Write), u(c.Request.Read), u(c.Stream.Write), u(c.Stream.Read), u(c.Total().Write), u(c.Total().Read))
		}
		if pc, ok := peer[peerOp[op]]; ok {
			p(" %s: %s / %s |\n", pc.Op, u(pc.Units.Write), u(pc.Units.Read))
		} else {
			p(" n/a |\n")
		}
	}
	p("\ndynamolock v2.0.2 runs on its own table on the same meter; its lock item holds no task, so its figures are the same for both sizes, and it has no task state, audit trail, queues, watchers or sweep.\n")
	if len(ur.Fleets) > 0 {
		f0 := ur.Fleets[0]
		p("\n### The busiest partition of a fleet\n\n")
		p("%d agents each run checkout+complete cycles on tasks of their own (%d cycles in all), the stream function alongside. Every partition of a table or index takes about %d write units a second, so the busiest index partition caps the fleet at %d / (its write units per cycle) cycles a second, however much the table could take.\n\n",
			f0.Agents, f0.Cycles, PartitionWriteUnits, PartitionWriteUnits)
		p("| task | table or index | busiest partition key | WU per cycle |\n|---|---|---|---|\n")
		for _, f := range ur.Fleets {
			for _, b := range f.Busiest {
				name := b.Table
				if b.Index != "" {
					name += " / " + b.Index
				}
				p("| %s | %s | `%s` | %s |\n", f.Size, name, b.Key, u(f.PerCycle(b.Units).Write))
			}
		}
		p("\n| task | cycle WU / RU (fleet average) | busiest index partition | its WU per cycle | fleet ceiling, cycles/s | cost per million cycles |\n|---|---|---|---|---|---|\n")
		for _, f := range ur.Fleets {
			top, pc := f.Top(), f.PerCycle(f.Units)
			p("| %s | %s / %s | %s / %s = `%s` | %s | %.0f | $%.2f |\n", f.Size, u(pc.Write), u(pc.Read), top.Table, top.Index, top.Key,
				u(f.PerCycle(top.Units).Write), f.Ceiling(), CostPerMillion(pc))
		}
		for _, c := range ur.Peer {
			if c.Op == "acquire+release" {
				p("| dynamolock acquire+release | %s / %s | (no index) | 0 | (table partitions only) | $%.2f |\n", u(c.Units.Write), u(c.Units.Read), CostPerMillion(c.Units))
			}
		}
		p("\nPrice: %s.\n", PriceNote)
	}
}

// floorPaired reports whether the floor ran every throughput scenario, so
// that its i-th run stands beside this project's and dynamolock's
// (Throughput[2i] and [2i+1]).
func (r *Results) floorPaired() bool {
	return len(r.Floor) > 0 && 2*len(r.Floor) == len(r.Throughput)
}

// floorMarkdown reports the floor's runs (floor.go) beside the two systems'.
func (r *Results) floorMarkdown(p func(string, ...any)) {
	if !r.floorPaired() {
		return
	}
	p("\n### The floor: the same writes on a minimal item\n\n")
	p("The least any design with this project's three indexes, change stream and audit trail asks of the server: a checkout and a release that each make one conditional write of a task item holding only its keys, holder and fence, moving the same index entries, with a stream function archiving one event per transition (`bench/floor.go`). It is not a product; it shows how much of a cycle the task item's width and expressions cost, and what the indexes and the trail cost on their own. Same server, same run, same scenarios.\n\n")
	p("| scenario | workers | floor cycles/s | floor requests/cycle | checkout / floor | floor / dynamolock |\n|---|---|---|---|---|---|\n")
	for i, f := range r.Floor {
		ours, peer := r.Throughput[2*i], r.Throughput[2*i+1]
		rpc := "-"
		if f.Cycles > 0 {
			rpc = fmt.Sprintf("%.2f", float64(f.Requests)/float64(f.Cycles))
		}
		p("| %s | %d | %.0f | %s | %s | %s |\n", f.Scenario, f.Workers, f.CyclesPerSec(), rpc,
			ratio(ours.CyclesPerSec(), f.CyclesPerSec()), ratio(f.CyclesPerSec(), peer.CyclesPerSec()))
	}
}

// cpuMarkdown reports what a cycle cost the local DynamoDB's process and
// the clients, for each system of each throughput scenario, and the most
// cycles a second the server's one thread allows each at that cost.
func (r *Results) cpuMarkdown(p func(string, ...any)) {
	if !r.floorPaired() || r.Throughput[0].CPU.Server == 0 {
		return
	}
	p("\n### Where a cycle's time goes: CPU per cycle\n\n")
	p("The CPU time each system's runs above cost the local DynamoDB's process (read from the shim, `DynamoDBShim.ProcessUsage`) and this benchmark's process (its clients and their stream functions), divided by the cycles completed. The server runs every request on one thread, so it can serve at most 1 s / (its CPU per cycle) cycles a second, however many clients ask; on a machine of few cores the clients' CPU also takes from the server's. Where a system's bound is below dynamolock's measured rate, no client of that system could match dynamolock on this server.\n\n")
	p("| scenario | workers | system | server CPU per cycle | client CPU per cycle | server's bound, cycles/s | dynamolock measured, cycles/s |\n|---|---|---|---|---|---|---|\n")
	for i, f := range r.Floor {
		ours, peer := r.Throughput[2*i], r.Throughput[2*i+1]
		for _, t := range []Throughput{ours, f, peer} {
			bound := "-"
			if sp := t.ServerPerCycle(); sp > 0 {
				bound = fmt.Sprintf("%.0f", float64(time.Second)/float64(sp))
			}
			p("| %s | %d | %s | %s | %s | %s | %.0f |\n", t.Scenario, t.Workers, t.System, ms2(t.ServerPerCycle()), ms2(t.ClientPerCycle()), bound, peer.CyclesPerSec())
		}
	}
}

// ms2 is d in milliseconds to two places, or "-" for zero.
func ms2(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000)
}

// sweepMarkdown writes the sweep's section.
func (r *Results) sweepMarkdown(p func(string, ...any)) {
	if r.Sweep != nil {
		s := r.Sweep
		p("\n### Sweep\n\n")
		p("The sweep runs with the stream function held off, as in AWS, where the stream function has capacity of its own (here it would share the one local server); the stream function has caught up with the checkouts before, and then applies the endings' consequences (events, the holders' lease_lost messages, queue counts), timed and counted apart.\n\n")
		p("| expired leases | ended | time | leases/s | requests | requests per lease | server CPU per lease | stream function: time | its requests per lease |\n|---|---|---|---|---|---|---|---|---|\n")
		p("| %d | %d | %s | %.0f | %d (%s) | %.2f | %s | %s | %.2f (%s) |\n", s.Leases, s.Ended, ms(s.Elapsed),
			float64(s.Ended)/s.Elapsed.Seconds(), s.Requests.Total(), opsString(s.Requests), float64(s.Requests.Total())/float64(max(s.Leases, 1)),
			ms2(perCycle(s.CPU.Server, s.Ended)), ms(s.StreamElapsed), float64(s.Stream.Total())/float64(max(s.Leases, 1)), opsString(s.Stream))
		p("\n(Setting up the %d leases took %s.)\n", s.Leases, ms(s.Setup))
	}
}
