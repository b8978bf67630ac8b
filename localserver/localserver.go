// Package localserver runs the whole checkout service as one process: the
// HTTP API of every Lambda function, the dashboard (package ui) at / and
// /ui/, authentication as middleware with an in-process key cache, and the
// sweep on a ticker, all against a DynamoDB-compatible endpoint (dynalite by
// default).
//
// Without an endpoint the server runs its own dynalite and supervises it: if
// the process dies, every route answers 503 unavailable (with Retry-After)
// and /healthz 503 {"ok": false} until a new one is up, which is started at
// once on the same data directory (Config.DataDir), or empty in memory, where
// the tables and the admin agent are created again. The server itself never
// exits for it. Any endpoint whose tables go missing (restarted empty) is
// answered the same way while the server creates them and the admin agent
// again. See database.go.
//
// cmd/checkout-server is its command; tests of the CLI, the client and the
// MCP server start it in-process:
//
//	srv, err := localserver.Start(ctx, localserver.Config{Addr: "127.0.0.1:0", DynamoEndpoint: endpoint})
//	...
//	defer srv.Close()
//	resp, err := http.Get(srv.URL() + "/healthz")
package localserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/checkout-dev/checkout/auth"
	"github.com/checkout-dev/checkout/httpapi"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/localstack"
	"github.com/checkout-dev/checkout/ui"
)

// Defaults.
const (
	DefaultAddr          = "127.0.0.1:3100"
	DefaultSweepInterval = 15 * time.Second
	// AuthCacheTTL is how long a key that worked is trusted without a
	// look-up. Removing an agent clears its entries at once.
	AuthCacheTTL = 30 * time.Second
	// AdminID is the agent id of the admin that exists from the start. It
	// cannot be removed (409 cannot_remove_admin).
	AdminID = httpapi.DefaultAdminID
	// DefaultRequestTimeout is how long an API request may take, the
	// database's retries included, before it is answered 503 unavailable
	// (Config.RequestTimeout): room for a claim's longest wait
	// (lease.MaxClaimWait, 20 s) and its last look.
	DefaultRequestTimeout = 25 * time.Second
	// writeTimeoutMargin is how much longer than the request timeout the
	// HTTP server gives a request to be answered, so that the 503 of a
	// request out of time is still written rather than the connection cut.
	writeTimeoutMargin = 5 * time.Second
)

// Config configures Start. The zero value serves on DefaultAddr against a
// fresh in-memory dynalite (or DYNAMODB_ENDPOINT).
type Config struct {
	// Addr is the listen address; "127.0.0.1:0" or ":0" picks a free port
	// (see URL). Default DefaultAddr.
	Addr string
	// DynamoEndpoint is the DynamoDB-compatible endpoint. Empty: the
	// server starts its own dynalite, supervises it (restarting it when it
	// dies) and stops it on Close. (cmd/checkout-server fills this from
	// DYNAMODB_ENDPOINT.)
	DynamoEndpoint string
	// DataDir keeps the own dynalite's data on disk in this directory, so
	// that it survives a restart of dynalite or of the server. Empty: in
	// memory; a dynalite restarted after a crash is then empty, and the
	// server creates its tables and the admin agent again.
	DataDir string
	// RestartDelay is how long the server waits before restarting a dead
	// dynalite (default DefaultRestartDelay); it doubles, up to 5 s, while
	// the new one keeps dying.
	RestartDelay time.Duration
	// TablePrefix is prepended to table names (default "checkout-").
	TablePrefix string
	// AdminKey is the admin agent's API key. Empty: one is generated and
	// logged once at start-up (see AdminKey).
	AdminKey string
	// SweepInterval is how often the sweep runs (default 15s; negative
	// disables the ticker, leaving Sweep to the caller).
	SweepInterval time.Duration
	// StreamPollInterval is how often the tasks table's change stream is
	// read and its changes applied (default DefaultStreamPollInterval;
	// negative disables the poller, leaving Drain to the caller). Over
	// the server's own dynalite, polls that find nothing grow apart up to
	// a second, and the server's own writes wake them (idleLoop).
	StreamPollInterval time.Duration
	// Notifier hears the notices the change stream produces (nil: logged),
	// from a consumer of the stream of their own: a slow one delays only
	// the notices.
	// cmd/checkout-server adds webhooks (package webhook) to the log.
	Notifier lease.Notifier
	// FeedSettle is how far behind now the fleet feed (GET /api/events)
	// is read (default lease.DefaultFeedSettle; negative: not at all).
	FeedSettle time.Duration
	// AutoCreateTasks makes a checkout of an unknown task create it.
	AutoCreateTasks bool
	// RequestTimeout bounds each request, the database's retries
	// included: a database that stalls for longer gets the request
	// answered 503 unavailable with Retry-After (default
	// DefaultRequestTimeout). The HTTP server's write timeout is 5 s more.
	RequestTimeout time.Duration
	// Shards are the indexes' shard counts (zero counts: the defaults;
	// see schema.ShardCounts). They may grow between runs over the same
	// data, never shrink. cmd/checkout-server reads them from
	// CHECKOUT_LEASE_SHARDS, CHECKOUT_STATUS_SHARDS, CHECKOUT_CLAIM_SHARDS
	// and CHECKOUT_FEED_SHARDS.
	Shards schema.ShardCounts
	// Logger receives request and sweep logs (nil: discarded).
	Logger *slog.Logger
	// Now is the clock of every lease decision and of the key cache (nil:
	// time.Now). Tests move it instead of sleeping.
	Now func() time.Time

	// after is the notices consumer's timer (nil: time.After); tests see
	// its back-off through it.
	after func(time.Duration) <-chan time.Time
	// started, when set, hears each request as its handler starts: tests
	// know a request is in flight by it.
	started func(*http.Request)
	// swept, when set, hears the end of each of the sweep loop's sweeps,
	// with its error: tests know by it which sweep failed.
	swept func(error)
	// soleWriter says that no other process writes the tables (as of the
	// own dynalite, where it is always so): the loops then sleep while
	// the database is idle, woken by this process's writes. Tests set it
	// with an endpoint and tables of their own.
	soleWriter bool
}

// Server is a running local server.
type Server struct {
	url      string
	adminKey string
	// shutdownTimeout bounds how long Close waits for the requests in
	// flight: as long as one may take to be answered (the request timeout
	// and the write timeout's margin), so that none is cut, a waiting
	// claim included.
	shutdownTimeout time.Duration
	store           *lease.Store
	log             *slog.Logger
	http            *http.Server
	served          chan struct{}

	db          *database
	tablePrefix string
	changes     *changes
	writes      *writers // the writes of task items in flight (writers)
	stopSweep   context.CancelFunc
	sweepDone   chan struct{}
	closeOnce   sync.Once
	closeErr    error
}

// Start creates the tables if missing, makes sure the admin agent has the
// admin key, and serves the API until Close.
func Start(ctx context.Context, cfg Config) (_ *Server, err error) {
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.SweepInterval == 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.RestartDelay <= 0 {
		cfg.RestartDelay = DefaultRestartDelay
	}
	if cfg.StreamPollInterval == 0 {
		cfg.StreamPollInterval = DefaultStreamPollInterval
	}
	if cfg.after == nil {
		cfg.after = time.After
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if err := cfg.Shards.Validate(); err != nil {
		return nil, fmt.Errorf("localserver: %w", err)
	}
	// The address is bound first: one in use (another server on the port)
	// is refused at once, with the bind's own error, before dynalite is
	// started and the tables made for nothing. Connections that come
	// before it serves wait in the listen queue.
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("localserver: %w", err)
	}
	defer func() {
		if err != nil {
			_ = ln.Close()
		}
	}()
	names := schema.Names{Prefix: cfg.TablePrefix}
	s := &Server{log: cfg.Logger, shutdownTimeout: cfg.RequestTimeout + writeTimeoutMargin, tablePrefix: names.Prefix}
	s.adminKey = cfg.AdminKey
	generated := s.adminKey == ""
	if generated {
		s.adminKey = lease.NewAPIKey()
	}
	// prepare makes sure of the tables and the admin agent at endpoint: at
	// start, and on a restarted dynalite before the store uses it.
	prepare := func(ctx context.Context, endpoint string) error {
		client := lease.NewLocalClient(endpoint)
		if err := lease.EnsureTables(ctx, client, names); err != nil {
			return fmt.Errorf("create tables at %s: %w", endpoint, err)
		}
		if err := lease.RecordShards(ctx, client, names, cfg.Shards); err != nil {
			return err
		}
		store := lease.New(lease.Config{DB: client, Tables: names, Now: cfg.Now, Logger: cfg.Logger, Shards: cfg.Shards})
		if err := store.EnsureAgent(ctx, AdminID, AdminID, true, s.adminKey); err != nil {
			return fmt.Errorf("admin agent: %w", err)
		}
		return nil
	}
	s.db = &database{log: cfg.Logger, opts: localstack.Options{Path: cfg.DataDir}, delay: cfg.RestartDelay, prepare: prepare,
		probeTable: names.Table(schema.TasksTable)}
	defer func() {
		if err != nil {
			s.db.close()
		}
	}()
	if cfg.DynamoEndpoint == "" {
		if cfg.DataDir != "" {
			// Held until close, the restarts of dynalite included: a
			// second server is refused it while none runs on it.
			if s.db.releaseDir, err = localstack.HoldDataDir(ctx, cfg.DataDir); err != nil {
				return nil, fmt.Errorf("localserver: dynalite: localstack: data directory %w", err)
			}
		}
		if err := s.db.startOwn(ctx); err != nil {
			return nil, fmt.Errorf("localserver: dynalite: %w", err)
		}
	} else {
		s.db.sole = cfg.soleWriter
		s.db.newClient(cfg.DynamoEndpoint)
		// Another server may lack the Streams API: refuse it before any
		// table is made or changed there (the own dynalite has it).
		if err := checkStreams(ctx, s.db, cfg.DynamoEndpoint); err != nil {
			return nil, fmt.Errorf("localserver: %w", err)
		}
	}
	endpoint := *s.db.endpoint.Load()
	if err := prepare(ctx, endpoint); err != nil {
		return nil, fmt.Errorf("localserver: %w", err)
	}
	if err := checkTableStream(ctx, s.db, endpoint, names.Table(schema.TasksTable)); err != nil {
		return nil, fmt.Errorf("localserver: %w", err)
	}
	// The project's own dynalite, like DynamoDB, returns the item with a
	// failed condition; another server named by DYNAMODB_ENDPOINT may not,
	// and then the store reads the item back.
	honours, err := lease.ReturnsItemOnConditionFailure(ctx, lease.NewLocalClient(endpoint), names.Table(schema.AgentsTable), lease.AgentKey(AdminID))
	if err != nil {
		return nil, fmt.Errorf("localserver: probe %s: %w", endpoint, err)
	}
	if !honours {
		cfg.Logger.Warn("the DynamoDB endpoint ignores ReturnValuesOnConditionCheckFailure; failed conditions cost one read more", "endpoint", endpoint)
	}
	// An event archived after a feed read whose cursor may have passed
	// its time is keyed in the feed at when it is archived, as in AWS: a
	// read that could not apply the stream first keeps the settle time,
	// and records that horizon first (readYourWrites.Feed). An earlier
	// run's such reads stopped a settle time before it did, before now.
	passed := new(atomic.Int64)
	s.store = lease.New(lease.Config{DB: s.db.client, Tables: names, Now: cfg.Now, Logger: cfg.Logger, Notifier: cfg.Notifier, ReadAfterFailedCondition: !honours,
		FeedSettle: cfg.FeedSettle, FeedPassed: passed.Load, Shards: cfg.Shards})
	passed.Store(s.store.FeedHorizon().UnixMilli())
	if s.changes, err = newChanges(ctx, s.db, names, s.store, cfg.Logger); err != nil {
		return nil, fmt.Errorf("localserver: %w", err)
	}
	clock := cfg.Now
	if clock == nil {
		clock = time.Now
	}
	s.writes = newWriters(clock)
	s.changes.writes = s.writes

	cache := auth.NewCache(s.store, AuthCacheTTL, cfg.Now)
	// A restarted dynalite may be another database (in memory: empty but
	// for the admin): nothing the cache remembers about keys holds. So may
	// an endpoint whose tables went missing (restarted empty).
	s.db.replaced = cache.Reset
	s.db.mendTables()
	if s.db.supervised {
		s.db.supervise()
	}
	var svc httpapi.Service = s.store
	if cfg.StreamPollInterval >= 0 {
		// With the pollers on (a test that drives the stream itself turns
		// them off), reads of what the stream writes catch up first.
		svc = readYourWrites{Store: s.store, changes: s.changes, writes: s.writes, passed: passed, log: cfg.Logger,
			indexesCaughtUp: func(ctx context.Context) bool { return s.db.indexesCaughtUp(ctx, names.Prefix) }}
	}
	handler := httpapi.New(svc, httpapi.Options{
		Auth:            cache,
		OnAgentRemoved:  cache.Forget,
		AdminID:         AdminID,
		Health:          s.db.health,
		AutoCreateTasks: cfg.AutoCreateTasks,
		Logger:          cfg.Logger,
		Now:             cfg.Now,
	})

	s.url = "http://" + hostPort(ln.Addr().(*net.TCPAddr))
	served := ui.With(withDate(withDeadline(handler, cfg.RequestTimeout), clock))
	if cfg.started != nil {
		inner := served
		served = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			cfg.started(r)
			inner.ServeHTTP(w, r)
		})
	}
	s.http = &http.Server{
		Handler:           served,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      cfg.RequestTimeout + writeTimeoutMargin,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
	}
	s.served = make(chan struct{})
	go func() {
		defer close(s.served)
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("serve", "error", err)
		}
	}()

	sweepCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stopSweep, s.sweepDone = cancel, make(chan struct{})
	var loops sync.WaitGroup
	loops.Add(3)
	go func() { defer loops.Done(); s.sweepLoop(sweepCtx, cfg.SweepInterval, cfg.swept) }()
	go func() { defer loops.Done(); s.streamLoop(sweepCtx, s.changes.consequences, cfg.StreamPollInterval) }()
	go func() { defer loops.Done(); s.noticesLoop(sweepCtx, cfg.StreamPollInterval, cfg.after) }()
	go func() { loops.Wait(); close(s.sweepDone) }()

	attrs := []any{"url", s.url, "dynamodb", endpoint, "table_prefix", names.Table(""),
		"sweep_interval", cfg.SweepInterval.String(), "auto_create_tasks", cfg.AutoCreateTasks}
	if generated {
		// Printed once: it is not stored anywhere in plaintext.
		attrs = append(attrs, "admin_key", s.adminKey, "admin_key_generated", true)
	}
	s.log.Info("checkout server listening", attrs...)
	return s, nil
}

// withDeadline gives every request d to be handled. The database client's
// own timeouts are per attempt, and its retries of a database that stopped
// answering would add up to more than the HTTP server's write timeout, which
// cuts the connection without an answer; with the deadline the store's
// call ends first, and the handler answers it 503 unavailable with
// Retry-After (httpapi.Unavailable counts context.DeadlineExceeded).
// withDate dates h's answers by now, the server's clock (Date), rather
// than by the machine's: clients read a task's times against it.
func withDate(h http.Handler, now func() time.Time) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", now().UTC().Format(http.TimeFormat))
		h.ServeHTTP(w, r)
	})
}

func withDeadline(h http.Handler, d time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

func hostPort(a *net.TCPAddr) string {
	ip := a.IP
	if ip == nil || ip.IsUnspecified() {
		ip = net.IPv4(127, 0, 0, 1)
	}
	return net.JoinHostPort(ip.String(), fmt.Sprint(a.Port))
}

// URL is the server's base URL, "http://127.0.0.1:N".
func (s *Server) URL() string { return s.url }

// AdminKey is the admin agent's API key.
func (s *Server) AdminKey() string { return s.adminKey }

// Store is the lease store the server serves.
func (s *Server) Store() *lease.Store { return s.store }

// Dynalite is the server's own dynalite as it runs now (a new one after a
// restart), or nil when the server was given an endpoint.
func (s *Server) Dynalite() *localstack.Dynalite { return s.db.current() }

// Sweep runs one sweep now, as the ticker does. A database that cannot be
// reached is logged as a warning; the next sweep tries again.
func (s *Server) Sweep(ctx context.Context) (lease.SweepResult, error) {
	return s.sweepBy(ctx, s.store.Sweep)
}

// sweepBy runs one sweep by sweep (the store's whole Sweep, or its first
// pass alone, SweepExpired), logged as Sweep says.
func (s *Server) sweepBy(ctx context.Context, sweep func(context.Context) (lease.SweepResult, error)) (lease.SweepResult, error) {
	defer s.writes.enter()()
	res, err := sweep(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return res, err // stopped (Close): nothing failed
		}
		if httpapi.Unavailable(err) {
			s.log.WarnContext(ctx, "sweep skipped: the database cannot be reached", "error", err.Error())
		} else {
			s.log.ErrorContext(ctx, "sweep", "error", err)
		}
		return res, err
	}
	if res != (lease.SweepResult{}) {
		s.log.InfoContext(ctx, "sweep", "timeouts", res.Timeouts, "agent_deaths", res.AgentDeaths)
	}
	return res, nil
}

// Drain applies every change the tasks table's stream holds now (archived
// events, watchers' messages, then notices), as the pollers do every
// StreamPollInterval. Tests call it to wait for a transition's consequences.
// It returns once the notices are delivered or dead-lettered, which a
// webhook receiver that is down makes take its retries' time.
func (s *Server) Drain(ctx context.Context) error {
	return s.changes.poll(ctx)
}

// streamLoop hands the change stream to one of its consumers every
// interval (see changes). A failed poll keeps its place: the next tick
// hands the same changes to the handler again.
func (s *Server) streamLoop(ctx context.Context, to *consumer, every time.Duration) {
	if s.db.sole {
		s.idleLoop(ctx, to, every, time.After)
		return
	}
	s.everyTick(ctx, every, func() {
		if _, err := s.changes.pollOne(ctx, to); err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "change stream", "error", err.Error())
		}
	})
}

// maxIdlePoll bounds how far apart a consumer's polls grow, as the only
// writer (db.sole), while they find nothing: the process's own writes wake
// it at once, so this is a guard, not what tells a watcher.
const maxIdlePoll = time.Second

// idleLoop is the sole writer's loop of one consumer of the stream (the
// notices' one backs off while they fail, as noticesLoop does): a poll
// that finds nothing doubles the wait, from every up to maxIdlePoll, and
// a write of this process (db.wrote) ends the wait, though never sooner
// than every after the last poll began; a poll that applied something
// makes the wait every again.
func (s *Server) idleLoop(ctx context.Context, to *consumer, every time.Duration, after func(time.Duration) <-chan time.Time) {
	if every < 0 {
		return
	}
	wrote := s.db.wrote.add()
	wait, failing := every, false
	var began time.Time
	for {
		woken := wrote
		if failing {
			woken = nil // a write does not cut a failure's back-off short
		}
		select {
		case <-ctx.Done():
			return
		case <-after(wait):
		case <-woken:
			if since := time.Since(began); since < every {
				select {
				case <-ctx.Done():
					return
				case <-after(every - since):
				}
			}
		}
		if s.db.down() {
			wait = every
			continue
		}
		began = time.Now()
		n, err := s.changes.pollOne(ctx, to)
		switch {
		case ctx.Err() != nil:
		case err == nil && n == 0:
			wait, failing = min(2*wait, max(maxIdlePoll, every)), false
		case err == nil:
			wait, failing = every, false
		case to == s.changes.notices:
			failing = true
			wait = max(min(2*wait, maxNoticesBackoff), every)
			s.log.WarnContext(ctx, "change stream: notices", "error", err.Error(), "retry_in", wait.String())
		default:
			wait = every
			s.log.WarnContext(ctx, "change stream", "error", err.Error())
		}
	}
}

// maxNoticesBackoff bounds how far apart the notices consumer's tries grow
// while it fails: a notice that can be neither delivered nor dead-lettered
// (a dead-letter file that cannot be written) was handed again every poll,
// 200 ms, for as long as it lasted.
const maxNoticesBackoff = 10 * time.Second

// noticesLoop is streamLoop for the notices, backing off while they fail:
// the wait doubles from every up to maxNoticesBackoff, and is every again
// once a poll succeeds. A failed poll keeps its place, so the notice is
// held, and the ones after it, until it goes out or is dead-lettered.
func (s *Server) noticesLoop(ctx context.Context, every time.Duration, after func(time.Duration) <-chan time.Time) {
	if s.db.sole {
		s.idleLoop(ctx, s.changes.notices, every, after)
		return
	}
	if every < 0 {
		return
	}
	wait := every
	for {
		select {
		case <-ctx.Done():
			return
		case <-after(wait):
		}
		if s.db.down() {
			continue
		}
		_, err := s.changes.pollOne(ctx, s.changes.notices)
		if err == nil || ctx.Err() != nil {
			wait = every
			continue
		}
		wait = max(min(2*wait, maxNoticesBackoff), every)
		s.log.WarnContext(ctx, "change stream: notices", "error", err.Error(), "retry_in", wait.String())
	}
}

// sweepWatch is how often the sweep loop asks whether anything fell due
// since its last sweep (lease.Store.DueSince: a Query of one key per
// shard of each expiry index, 32 with the default shard counts): a
// lease's timeout, a delayed task's readiness, a holder's death. It then
// sweeps at once, so that those are recorded, and their former holders
// and watchers told, within about a second, not at the next of the
// interval's sweeps. As the only writer of its tables (its own
// dynalite), the loop asks only when the next expiry it knows of has
// come, or when it has written since (lookAhead).
const sweepWatch = time.Second

// sweepLoop sweeps as it starts (leases may have expired while the server
// was stopped), every interval, and in between as soon as something falls
// due (sweepWatch): the first pass alone (SweepExpired) when only leases
// did, so that a dead agent in the heartbeat index does not make each of
// those sweeps read every live lease. A lease a dead agent takes has no
// expiry in the window: the interval's sweep ends it. Errors are logged
// and never end the loop; the window of a sweep that failed is looked at
// again. swept, when set, hears each sweep's end.
func (s *Server) sweepLoop(ctx context.Context, every time.Duration, swept func(error)) {
	if every < 0 {
		return
	}
	// last is the clock at the start of the last sweep that succeeded:
	// what fell due after it is yet to sweep.
	// Nothing is swept yet: until a sweep succeeds, the watch's window
	// starts before every expiry (those from while no server ran too).
	last := time.UnixMilli(0)
	sweep := func(at time.Time, by func(context.Context) (lease.SweepResult, error)) {
		_, err := s.sweepBy(ctx, by)
		if err == nil {
			last = at
		}
		if swept != nil {
			swept(err)
		}
	}
	if !s.db.down() {
		sweep(s.store.Now(), s.store.Sweep)
	}
	tick, watch := time.NewTicker(every), time.NewTicker(min(sweepWatch, every))
	defer tick.Stop()
	defer watch.Stop()
	// As the only writer (db.sole), the loop knows when the next expiry
	// is (next, zero for none) from its last look at the indexes, and
	// looks again only when that moment has come, or when the process
	// has written since (wrote: a lease, a heartbeat or a delay may have
	// been set), at most once a second: an idle server sends nothing.
	var wrote <-chan struct{}
	if s.db.sole {
		wrote = s.db.wrote.add()
	}
	dirty := true
	var next time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if s.db.down() {
				dirty = true
				continue
			}
			sweep(s.store.Now(), s.store.Sweep)
			dirty = true
		case <-watch.C:
			if s.db.down() {
				dirty = true
				continue
			}
			if !s.db.sole {
				now, due, err := s.store.DueSince(ctx, last)
				switch {
				case err != nil: // the next look, or the next tick, tries again
				case due.Agents:
					sweep(now, s.store.Sweep)
				case due.Leases:
					sweep(now, s.store.SweepExpired)
				}
				continue
			}
			select {
			case <-wrote:
				dirty = true
			default:
			}
			if !dirty && (next.IsZero() || s.store.Now().Before(next)) {
				continue
			}
			var due lease.Due
			dirty, next, due = s.lookAhead(ctx, last)
			switch {
			case due.Agents:
				sweep(s.store.Now(), s.store.Sweep)
			case due.Leases:
				sweep(s.store.Now(), s.store.SweepExpired)
			}
		}
	}
}

// lookAhead is the sole writer's look at the expiry indexes
// (lease.Store.NextDue) for what falls due after since: what is due now,
// else the earliest moment to come (zero: none), and whether to look
// again at the next second whatever that moment (again: the look failed,
// found something due, whose sweep changes the indexes, or ran while they
// lagged behind the writes, which it may then have missed).
func (s *Server) lookAhead(ctx context.Context, since time.Time) (again bool, next time.Time, due lease.Due) {
	caughtUp := s.db.indexesCaughtUp(ctx, s.tablePrefix)
	now, nx, err := s.store.NextDue(ctx, lease.Expiries{Leases: since, Agents: since}, s.store.Now().Add(lookAheadFor))
	if err != nil {
		return true, time.Time{}, due
	}
	due = lease.Due{
		Leases: !nx.Leases.IsZero() && !nx.Leases.After(now),
		Agents: !nx.Agents.IsZero() && !nx.Agents.After(now),
	}
	if due.Any() {
		return true, time.Time{}, due
	}
	next = nx.Leases
	if next.IsZero() || (!nx.Agents.IsZero() && nx.Agents.Before(next)) {
		next = nx.Agents
	}
	return !caughtUp, next, due
}

// lookAheadFor is how far ahead lookAhead reads the expiry indexes: as
// far as any lease, heartbeat or delay reaches (and any clock a test
// moves), at the same cost as a second.
const lookAheadFor = 100 * 365 * 24 * time.Hour

// everyTick runs fn every interval until ctx ends (never for a negative
// interval), skipping the ticks while the supervised dynalite is being
// restarted or the tables made again (no need to log that each tick).
func (s *Server) everyTick(ctx context.Context, every time.Duration, fn func()) {
	if every < 0 {
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if s.db.down() {
				continue
			}
			fn()
		}
	}
}

// Close stops accepting requests, waits for those in flight to be answered
// (as long as a request may take: the request timeout and 5 s; a waiting
// claim is answered 503 unavailable at once), then stops the sweep and, if
// Start started it, the server's own dynalite.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.shutdownTimeout)
		defer cancel()
		s.store.EndWaits() // waiting claims are answered 503 at once
		s.closeErr = s.http.Shutdown(ctx)
		<-s.served
		s.stopSweep()
		<-s.sweepDone
		s.db.close()
		s.log.Info("checkout server stopped")
	})
	return s.closeErr
}
