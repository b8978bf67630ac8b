// Command dynalite runs the local DynamoDB-compatible server in the
// foreground until SIGINT or SIGTERM:
//
//	go run ./cmd/dynalite [--path DIR] [--port N] [--index-lag D] [--endpoint-file FILE]
//
// It prints the endpoint on stdout once the server answers, and writes it to
// FILE as well when asked (localstack/with-dynamodb.sh waits for that file).
// Without --path the data lives in memory and is gone when it stops.
// --index-lag (default $DYNALITE_INDEX_LAG) makes every table's global
// secondary indexes trail its writes by D, as DynamoDB's may; tests refine
// it per table prefix with localstack.SetIndexLag.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/checkout-dev/checkout/localstack"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "dynalite:", err)
		os.Exit(1)
	}
}

func run() error {
	path := flag.String("path", "", "keep data on disk in this `directory` (default: in memory)")
	port := flag.Int("port", 0, "listen on this `port` at 127.0.0.1 (default: a free one)")
	endpointFile := flag.String("endpoint-file", "", "also write the endpoint to this `file` once ready")
	verbose := flag.Bool("v", false, "copy the server's own output to stderr")
	lagDefault := time.Duration(0)
	if v := os.Getenv(localstack.EnvIndexLag); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("%s=%q: not a duration", localstack.EnvIndexLag, v)
		}
		lagDefault = d
	}
	indexLag := flag.Duration("index-lag", lagDefault, "global secondary indexes trail writes by this `duration` (default $"+localstack.EnvIndexLag+", else none)")
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	if *indexLag < 0 {
		return fmt.Errorf("negative --index-lag %v", *indexLag)
	}
	lag := *indexLag
	if lag == 0 {
		lag = -1 // none, even if the server would read a default from the environment
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	var log io.Writer
	if *verbose {
		log = os.Stderr
	}
	d, err := localstack.Start(ctx, localstack.Options{Path: *path, Port: *port, Log: log, IndexLag: lag})
	if err != nil {
		return err
	}
	defer func() { _ = d.Stop() }() // it is going away either way

	fmt.Println(d.Endpoint)
	if *endpointFile != "" {
		// Write then rename, so a reader never sees half an endpoint.
		tmp := *endpointFile + ".tmp"
		if err := os.WriteFile(tmp, []byte(d.Endpoint+"\n"), 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, *endpointFile); err != nil {
			return err
		}
	}

	select {
	case <-ctx.Done():
		return d.Stop()
	case <-d.Done():
		if err := d.Stop(); err != nil {
			return err
		}
		return fmt.Errorf("server at %s exited", d.Endpoint)
	}
}
