// Command checkout-server runs the checkout service on this machine: every
// route of the HTTP API, the dashboard at / (package ui), the sweep on a
// ticker, and (unless DYNAMODB_ENDPOINT names one) its own dynalite, in
// memory or on disk. `make run` starts it.
//
// Environment:
//
//	CHECKOUT_ADDR               listen address (default 127.0.0.1:3100)
//	DYNAMODB_ENDPOINT           use this DynamoDB-compatible endpoint instead of starting dynalite
//	CHECKOUT_DATA_DIR           keep dynalite's data in this directory (default: in memory)
//	CHECKOUT_TABLE_PREFIX       table name prefix (default checkout-)
//	CHECKOUT_ADMIN_KEY          the admin's API key (default: generated and logged once)
//	CHECKOUT_SWEEP_INTERVAL     how often the sweep runs (default 15s)
//	CHECKOUT_AUTO_CREATE_TASKS  true: checking out an unknown task creates it
//	LOG_LEVEL                   debug, info (default), warn or error
//
// Logs are JSON lines on standard error. SIGINT or SIGTERM stops the server
// gracefully, then dynalite.
//
// If its dynalite dies, the server does not: it answers 503 unavailable (and
// /healthz 503) until it has started a new one, on the same CHECKOUT_DATA_DIR
// with the data intact, or empty in memory with the tables and the admin
// agent created again.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/checkout-dev/checkout/localserver"
	"github.com/checkout-dev/checkout/localstack"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel(os.Getenv("LOG_LEVEL"))}))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Getenv, log)
	stop()
	if err != nil {
		log.Error("checkout-server", "error", err.Error())
		os.Exit(1)
	}
}

// run serves until ctx ends.
func run(ctx context.Context, getenv func(string) string, log *slog.Logger) error {
	cfg, err := configFrom(getenv)
	if err != nil {
		return err
	}
	cfg.Logger = log

	// Without DYNAMODB_ENDPOINT the server starts and supervises its own
	// dynalite.
	srv, err := localserver.Start(ctx, cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	log.Info("shutting down")
	return srv.Close()
}

// configFrom reads the server's settings from the environment.
func configFrom(getenv func(string) string) (localserver.Config, error) {
	cfg := localserver.Config{
		Addr:           getenv("CHECKOUT_ADDR"),
		DynamoEndpoint: getenv(localstack.EnvEndpoint),
		TablePrefix:    getenv("CHECKOUT_TABLE_PREFIX"),
		AdminKey:       getenv("CHECKOUT_ADMIN_KEY"),
		DataDir:        getenv("CHECKOUT_DATA_DIR"),
	}
	if v := getenv("CHECKOUT_SWEEP_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return cfg, fmt.Errorf("CHECKOUT_SWEEP_INTERVAL=%q: want a positive duration such as 15s", v)
		}
		cfg.SweepInterval = d
	}
	if v := getenv("CHECKOUT_AUTO_CREATE_TASKS"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return cfg, fmt.Errorf("CHECKOUT_AUTO_CREATE_TASKS=%q: want true or false", v)
		}
		cfg.AutoCreateTasks = b
	}
	return cfg, nil
}

func logLevel(s string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo
	}
	return l
}
