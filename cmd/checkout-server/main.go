// Command checkout-server runs the checkout service on this machine: every
// route of the HTTP API, the dashboard at / (package ui), the sweep on a
// ticker, and (unless DYNAMODB_ENDPOINT names one) its own dynalite, in
// memory or on disk. `make run` starts it.
//
// Environment:
//
//	CHECKOUT_ADDR               listen address (default 127.0.0.1:3100)
//	DYNAMODB_ENDPOINT           use this DynamoDB-compatible endpoint instead of starting dynalite
//	CHECKOUT_DATA_DIR           keep dynalite's data in this directory (default: in memory); created if missing,
//	                            refused if not a writable directory or in use by another server
//	CHECKOUT_TABLE_PREFIX       table name prefix: letters, digits, _ . - (default checkout-)
//	CHECKOUT_ADMIN_KEY          the admin's API key, 16 to 512 visible ASCII characters (default: generated and logged once)
//	                            (unset: a new one at every start, replacing the one kept in CHECKOUT_DATA_DIR)
//	CHECKOUT_SWEEP_INTERVAL     how often the sweep runs (default 15s, at least 100ms)
//	CHECKOUT_AUTO_CREATE_TASKS  true: checking out an unknown task creates it (unless the checkout's expected_statuses leave out todo)
//	CHECKOUT_LEASE_SHARDS       partitions of the lease-expiry and heartbeats indexes (default 16, 1 to 256)
//	CHECKOUT_STATUS_SHARDS      partitions of each status group of the status index (default 16, 1 to 20)
//	CHECKOUT_CLAIM_SHARDS       partitions of each queue in the claim index (default 4, 1 to 16)
//	CHECKOUT_FEED_SHARDS        partitions of each hour of the fleet feed (default 16, 1 to 256)
//	                            (the shard counts may grow between runs over the same data,
//	                            never shrink; see lease/schema.ShardCounts)
//	CHECKOUT_WEBHOOK_URL        POST every notice, signed, to these URLs (comma-separated)
//	CHECKOUT_WEBHOOK_SECRET     the webhooks' HMAC-SHA256 key (required with a URL)
//	CHECKOUT_WEBHOOK_RETRY_FOR  how long a delivery is retried before it is dead-lettered (default 30s)
//	CHECKOUT_WEBHOOK_DEAD_LETTERS  the JSON-lines file of deliveries that failed for good (must be writable)
//	                            (default CHECKOUT_DATA_DIR/webhook-dead-letters.jsonl, or one
//	                            in the temporary directory without a data directory)
//	LOG_LEVEL                   debug, info (default), warn or error; anything else is refused
//
// A CHECKOUT_ variable a letter or two away from one of these
// (CHECKOUT_ADMN_KEY) is logged as a warning naming the setting it is close
// to, and ignored.
//
// Logs are JSON lines on standard error. SIGINT or SIGTERM stops the server
// gracefully (the requests in flight are answered first, within 30 s), then
// dynalite; a second signal stops both at once.
//
// `checkout-server migrate` copies the tasks of a data directory or
// endpoint written by an earlier version, whose tasks table the server
// refuses to start over, into today's tasks table (-aws: the deployed
// tables); see README, "Upgrading". `checkout-server recount` counts every
// queue's tasks again and mends the queue counts that are off; see README,
// `GET /api/queues` under "Quick start". `checkout-server bodies` deletes
// the task bodies, and the failed releases' errors, no task names; see
// README, "Task bodies no task names".
//
// If its dynalite dies, the server does not: it answers 503 unavailable (and
// /healthz 503) until it has started a new one, on the same CHECKOUT_DATA_DIR
// with the data intact, or empty in memory with the tables and the admin
// agent created again. With DYNAMODB_ENDPOINT it supervises nothing, but a
// table found missing there (the endpoint restarted empty, or the tables
// deleted) makes it create the tables and the admin agent again, as at
// start, answering 503 meanwhile; it then serves again without a restart
// (everything else is gone: only the admin key works).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/checkout-dev/checkout/auth"
	"github.com/checkout-dev/checkout/internal/envcheck"
	"github.com/checkout-dev/checkout/internal/webhook"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/localserver"
	"github.com/checkout-dev/checkout/localstack"
)

// usage is what -h prints: the settings of the doc comment above.
const usage = `usage: checkout-server            serve (settings from the environment)
       checkout-server migrate    copy an earlier version's tasks into today's table (migrate -h)
       checkout-server recount    count every queue's tasks again and mend the queue counts (recount -h)
       checkout-server bodies     delete the task bodies and errors no task names (bodies -h)

Runs the checkout service on this machine: the HTTP API, the dashboard, the
sweep and, unless DYNAMODB_ENDPOINT names one, its own dynalite.

Environment:
  CHECKOUT_ADDR               listen address (default 127.0.0.1:3100)
  DYNAMODB_ENDPOINT           use this DynamoDB-compatible endpoint instead of starting dynalite
  CHECKOUT_DATA_DIR           keep dynalite's data in this directory (default: in memory); created if missing,
                              refused if not a writable directory or in use by another server
  CHECKOUT_TABLE_PREFIX       table name prefix: letters, digits, _ . - (default checkout-)
  CHECKOUT_ADMIN_KEY          the admin's API key, 16 to 512 visible ASCII characters (default: generated and logged once)
                              (unset: a new one at every start, replacing the one kept in CHECKOUT_DATA_DIR)
  CHECKOUT_SWEEP_INTERVAL     how often the sweep runs (default 15s, at least 100ms)
  CHECKOUT_AUTO_CREATE_TASKS  true: checking out an unknown task creates it (unless the checkout's expected_statuses leave out todo)
  CHECKOUT_LEASE_SHARDS       partitions of the lease-expiry and heartbeats indexes (default 16, 1 to 256)
  CHECKOUT_STATUS_SHARDS      partitions of each status group of the status index (default 16, 1 to 20)
  CHECKOUT_CLAIM_SHARDS       partitions of each queue in the claim index (default 4, 1 to 16)
  CHECKOUT_FEED_SHARDS        partitions of each hour of the fleet feed (default 16, 1 to 256)
                              (the shard counts may grow between runs over the same data, never shrink)
  CHECKOUT_WEBHOOK_URL        POST every notice, signed, to these URLs (comma-separated)
  CHECKOUT_WEBHOOK_SECRET     the webhooks' HMAC-SHA256 key (required with a URL)
  CHECKOUT_WEBHOOK_RETRY_FOR  how long a delivery is retried before it is dead-lettered (default 30s)
  CHECKOUT_WEBHOOK_DEAD_LETTERS  the JSON-lines file of deliveries that failed for good (must be writable)
                              (default CHECKOUT_DATA_DIR/webhook-dead-letters.jsonl, or one
                              in the temporary directory without a data directory)
  LOG_LEVEL                   debug, info (default), warn or error; anything else is refused

A CHECKOUT_ variable a letter or two away from one of these (CHECKOUT_ADMN_KEY)
is logged as a warning naming the setting it is close to, and ignored.

Logs are JSON lines on standard error. SIGINT or SIGTERM stops the server
gracefully (the requests in flight are answered first, within 30 s), then
dynalite; a second signal stops both at once.

If its dynalite dies, or DYNAMODB_ENDPOINT is found without the tables (it
restarted empty), the server answers 503 (and /healthz 503) while it starts
a new dynalite or creates the tables and the admin agent again, then serves
by itself; in memory, or on an endpoint restarted empty, only the admin key
works after that. See README.md.
`

func main() {
	if code, done := command(os.Args[1:], os.Stdout, os.Stderr); done {
		os.Exit(code)
	}
	level, levelErr := logLevel(os.Getenv("LOG_LEVEL"))
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if levelErr != nil {
		log.Error("checkout-server", "error", levelErr.Error())
		os.Exit(1)
	}
	for _, s := range envcheck.Slips(os.Environ(), envcheck.Server) {
		log.Warn("not a setting: ignored", "variable", s.Name, "did_you_mean", s.Meant)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	// The first signal stops the server gracefully, which may take as long
	// as the requests in flight; a second one, as signals do by default:
	// at once.
	go func() {
		<-ctx.Done()
		stop()
	}()
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "migrate":
		err = migrate(ctx, os.Args[2:], os.Getenv, os.Stdout, os.Stderr)
	case len(os.Args) > 1 && os.Args[1] == "recount":
		err = recount(ctx, os.Args[2:], os.Getenv, os.Stdout, os.Stderr)
	case len(os.Args) > 1 && os.Args[1] == "bodies":
		err = bodies(ctx, os.Args[2:], os.Getenv, time.Now, os.Stdout, os.Stderr)
	default:
		err = run(ctx, os.Getenv, log)
	}
	stop()
	if errors.As(err, new(flagError)) {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if err != nil {
		log.Error("checkout-server", "error", err.Error())
		os.Exit(1)
	}
}

// command handles the arguments that are not a server to run: -h or
// --help prints the usage (exit 0), and anything but migrate, recount or
// bodies is refused with it (exit 2). done is false when the server or one
// of those is to run.
func command(args []string, stdout, stderr io.Writer) (code int, done bool) {
	if len(args) == 0 || args[0] == "migrate" || args[0] == "recount" || args[0] == "bodies" {
		return 0, false
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		_, _ = io.WriteString(stdout, usage)
		return 0, true
	}
	_, _ = fmt.Fprintf(stderr, "checkout-server: unknown argument %q (settings are environment variables)\n\n%s", args[0], usage)
	return 2, true
}

// run serves until ctx ends.
func run(ctx context.Context, getenv func(string) string, log *slog.Logger) error {
	cfg, err := configFrom(getenv)
	if err != nil {
		return err
	}
	cfg.Logger = log
	if cfg.DataDir != "" && cfg.DynamoEndpoint == "" {
		// Refused in one line before dynalite starts: a file, a directory
		// that cannot be written, or one another server holds.
		// A signal during its wait for another holder stops it at once.
		if err := localstack.CheckDataDirContext(ctx, cfg.DataDir); err != nil {
			if ctx.Err() != nil {
				log.Info("stopped during start-up", "error", err.Error())
				return nil
			}
			return fmt.Errorf("CHECKOUT_DATA_DIR %w", err)
		}
	}
	hooks, err := webhooksFrom(getenv, cfg.DataDir, log)
	if err != nil {
		return err
	}
	if hooks != nil {
		// Every notice is logged, as without webhooks, and delivered.
		cfg.Notifier = webhook.Multi(lease.LogNotifier(log), hooks)
	}

	// Without DYNAMODB_ENDPOINT the server starts and supervises its own
	// dynalite.
	srv, err := localserver.Start(ctx, cfg)
	if err != nil {
		if ctx.Err() != nil {
			// SIGINT or SIGTERM during start-up: a stop asked for, not a
			// failure (Start has stopped whatever it had started).
			log.Info("stopped during start-up", "error", err.Error())
			return nil
		}
		return err
	}
	<-ctx.Done()
	log.Info("shutting down: answering the requests in flight (a second signal stops at once)")
	return srv.Close()
}

// minSweepInterval is the shortest CHECKOUT_SWEEP_INTERVAL: a sweep Queries
// every lease shard, and 1ns kept a core and more busy sweeping nothing.
const minSweepInterval = 100 * time.Millisecond

// configFrom reads the server's settings from the environment.
func configFrom(getenv func(string) string) (localserver.Config, error) {
	cfg := localserver.Config{
		Addr:           getenv("CHECKOUT_ADDR"),
		DynamoEndpoint: getenv(localstack.EnvEndpoint),
		TablePrefix:    getenv("CHECKOUT_TABLE_PREFIX"),
		AdminKey:       getenv("CHECKOUT_ADMIN_KEY"),
		DataDir:        getenv("CHECKOUT_DATA_DIR"),
	}
	if err := checkAddr(cfg.Addr); err != nil {
		return cfg, fmt.Errorf("CHECKOUT_ADDR=%q: %w", cfg.Addr, err)
	}
	if err := checkTablePrefix(cfg.TablePrefix); err != nil {
		return cfg, fmt.Errorf("CHECKOUT_TABLE_PREFIX=%q: %w", cfg.TablePrefix, err)
	}
	if err := checkEndpoint(cfg.DynamoEndpoint); err != nil {
		return cfg, fmt.Errorf("%s=%q: %w", localstack.EnvEndpoint, cfg.DynamoEndpoint, err)
	}
	if k := cfg.AdminKey; k != "" && !usableKey(k) {
		// Not shown: it is a secret.
		return cfg, fmt.Errorf("CHECKOUT_ADMIN_KEY: want 16 to %d characters, letters, digits and punctuation without spaces (the one given has %d); or leave it unset, and one is generated", auth.MaxKeyLen, utf8.RuneCountInString(k))
	}
	if v := getenv("CHECKOUT_SWEEP_INTERVAL"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < minSweepInterval {
			return cfg, fmt.Errorf("CHECKOUT_SWEEP_INTERVAL=%q: want a duration of %v or more, such as 15s", v, minSweepInterval)
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
	shards, err := schema.ShardsFromEnv(getenv)
	if err != nil {
		return cfg, err
	}
	cfg.Shards = shards
	return cfg, nil
}

// checkAddr refuses a listen address that net.Listen would, before
// anything starts (empty: the default).
func checkAddr(addr string) error {
	if addr == "" {
		return nil
	}
	_, port, err := net.SplitHostPort(addr)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil || port == "" {
		return errors.New("want host:port, such as 127.0.0.1:3100 (port 0 picks a free one)")
	}
	return nil
}

// tablePrefixChars are the characters of a DynamoDB table name.
var tablePrefixChars = regexp.MustCompile(`^[A-Za-z0-9_.-]*$`)

// checkTablePrefix refuses a prefix that makes a table name DynamoDB
// refuses: other characters than letters, digits, '_', '.' and '-', or a
// name over 255 characters.
func checkTablePrefix(prefix string) error {
	if !tablePrefixChars.MatchString(prefix) {
		return errors.New("want letters, digits, '_', '.' and '-' only, such as dev-checkout-")
	}
	for _, t := range schema.Tables() {
		if len(prefix)+len(t.Name) > 255 {
			return fmt.Errorf("too long: table %s would pass DynamoDB's 255 characters", t.Name)
		}
	}
	return nil
}

// checkEndpoint refuses an endpoint that is not an http or https URL with
// a host (empty: none, the server starts its own dynalite).
func checkEndpoint(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return errors.New("want an http or https URL, such as http://127.0.0.1:8000")
	}
	return nil
}

// webhooksFrom is the webhook notifier that CHECKOUT_WEBHOOK_URL asks for,
// or nil without one. What fails for good is appended to a JSON-lines file.
func webhooksFrom(getenv func(string) string, dataDir string, log *slog.Logger) (*webhook.Notifier, error) {
	urls, err := webhook.ParseURLs(getenv(webhook.EnvURL))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", webhook.EnvURL, err)
	}
	if len(urls) == 0 {
		return nil, nil
	}
	cfg := webhook.Config{URLs: urls, Secret: getenv(webhook.EnvSecret), Logger: log}
	if v := getenv("CHECKOUT_WEBHOOK_RETRY_FOR"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("CHECKOUT_WEBHOOK_RETRY_FOR=%q: want a positive duration such as 30s", v)
		}
		cfg.MaxElapsed = d
	}
	path := getenv("CHECKOUT_WEBHOOK_DEAD_LETTERS")
	switch {
	case path != "":
	case dataDir != "":
		path = filepath.Join(dataDir, webhook.DeadLetterFile)
	default:
		path = filepath.Join(os.TempDir(), "checkout-"+webhook.DeadLetterFile)
	}
	if err := writable(path); err != nil {
		// Found now, not when a delivery has failed for good.
		return nil, fmt.Errorf("CHECKOUT_WEBHOOK_DEAD_LETTERS %s cannot be written: %w", path, err)
	}
	cfg.DeadLetters = &webhook.FileDeadLetters{Path: path}
	n, err := webhook.New(cfg)
	if err != nil {
		return nil, err
	}
	log.Info("webhooks on", "urls", len(urls), "dead_letters", path)
	return n, nil
}

// logLevel reads LOG_LEVEL: empty is info. Anything slog does not know is
// refused (it used to mean info, silently).
func logLevel(s string) (slog.Level, error) {
	var l slog.Level
	if s == "" {
		return slog.LevelInfo, nil
	}
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return slog.LevelInfo, fmt.Errorf("LOG_LEVEL=%q: want debug, info, warn or error", s)
	}
	return l, nil
}

// writable makes sure that the file at path can be appended to, creating
// it (and its directory) as a dead letter would; a file it created is
// removed again.
func writable(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return errors.Unwrap(err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	if errors.Is(statErr, os.ErrNotExist) {
		return os.Remove(path)
	}
	return nil
}

// usableKey says whether k can be an API key sent as a bearer token: at
// least 16 characters (as the store asks of every key), each visible
// ASCII.
func usableKey(k string) bool {
	if len(k) < 16 || len(k) > auth.MaxKeyLen {
		return false // too long to be sent as a bearer token (auth.BearerKey)
	}
	for i := range len(k) {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}
