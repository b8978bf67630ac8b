// Command bench measures the checkout service's lease engine against
// cirello.io/dynamolock/v2 on one DynamoDB-compatible server, and the
// service's Lambda packages, and prints the figures as Markdown.
//
//	go run ./cmd/bench [-quick] [-drain-only | -sweep-only] [-out FILE] [-root DIR]
//
// DYNAMODB_ENDPOINT names the server; without it a local dynalite is
// started for the run.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/checkout-dev/checkout/bench"
	"github.com/checkout-dev/checkout/localstack"
)

func main() {
	quick := flag.Bool("quick", false, "small counts (well under a minute)")
	out := flag.String("out", "", "also write the report to this file")
	root := flag.String("root", "..", "the repository root (for functions/)")
	lambdas := flag.Bool("lambdas", true, "measure the Lambda packages")
	drainOnly := flag.Bool("drain-only", false, "run only the queue-drain benchmark")
	drainMode := flag.String("drain-mode", "both", "with -drain-only: both, process (one store) or agent (one store per agent)")
	sweepOnly := flag.Bool("sweep-only", false, "run only the sweep benchmark, on a fresh server")
	noDrain := flag.Bool("no-drain", false, "leave out the queue-drain benchmark")
	flag.Parse()
	log.SetFlags(log.Ltime)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	endpoint, stop, err := localstack.Endpoint(ctx)
	if err != nil {
		log.Fatalf("dynamodb: %v", err)
	}
	defer stop()

	cfg := bench.Full()
	mode := "full"
	if *quick {
		cfg, mode = bench.Quick(), "quick"
	}
	if !*lambdas {
		cfg.LambdaRuns = 0
	}
	cfg.DrainOnly = *drainOnly
	cfg.DrainMode = *drainMode
	cfg.SweepOnly = *sweepOnly
	if *noDrain {
		cfg.DrainTasks = 0
	}
	cfg.Endpoint = endpoint
	cfg.Root, _ = filepath.Abs(*root)
	cfg.Log = func(format string, args ...any) { log.Printf(format, args...) }
	res, err := bench.Run(ctx, cfg)
	if err != nil {
		stop()
		log.Fatalf("bench: %v", err)
	}
	w := io.Writer(os.Stdout)
	var f *os.File
	if *out != "" {
		if f, err = os.Create(*out); err != nil {
			log.Fatal(err)
		}
		w = io.MultiWriter(os.Stdout, f)
	}
	fmt.Fprintf(w, "## Run: %s mode, %s\n\n", mode, res.Started.UTC().Format(time.RFC3339))
	fmt.Fprintf(w, "Machine: %s\n\n", machine(endpoint))
	fmt.Fprintf(w, "DynamoDB-compatible server: %s\n\n", server(cfg.Root))
	res.Markdown(w)
	if f != nil {
		if err := f.Close(); err != nil {
			log.Fatal(err)
		}
	}
}

// server names the node and dynalite versions.
func server(root string) string {
	node := "node ?"
	if out, err := exec.Command("node", "--version").Output(); err == nil {
		node = "node " + strings.TrimSpace(string(out))
	}
	dyn := "dynalite ?"
	if b, err := os.ReadFile(filepath.Join(root, "localstack", "node_modules", "dynalite", "package.json")); err == nil {
		var pkg struct{ Version string }
		if json.Unmarshal(b, &pkg) == nil {
			dyn = "dynalite " + pkg.Version
		}
	}
	return dyn + " on " + node + " (in memory)"
}

// machine describes where the figures were taken.
func machine(endpoint string) string {
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "MemTotal:") {
				mem = strings.TrimSpace(strings.TrimPrefix(l, "MemTotal:"))
			}
		}
	}
	cpu := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				cpu = strings.TrimSpace(l[strings.Index(l, ":")+1:])
				break
			}
		}
	}
	return fmt.Sprintf("%s/%s, %d CPUs (%s), memory %s, %s, DynamoDB at %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), cpu, mem, runtime.Version(), endpoint)
}
