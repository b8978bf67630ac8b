package localserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go"
	smithyendpoints "github.com/aws/smithy-go/endpoints"
	"github.com/aws/smithy-go/middleware"

	"github.com/checkout-dev/checkout/httpapi"
	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/localstack"
)

// Timeouts of the server's DynamoDB client, per attempt. A database that
// stopped answering (a stopped process, a dead peer) gets each attempt cut
// after requestTimeout; the SDK's retries of them would add up to more than
// the HTTP server's write timeout, so every request also has a deadline of
// its own (Config.RequestTimeout, withDeadline), past which it is 503
// unavailable.
const (
	dialTimeout    = 2 * time.Second
	requestTimeout = 10 * time.Second
	// probeTimeout and probeEvery bound what GET /healthz costs: at most
	// one DescribeTable a second, answered within 2 s.
	probeTimeout = 2 * time.Second
	probeEvery   = time.Second
	// Restarts of a dynalite that keeps dying back off up to this; one that
	// ran for stableAfter restarts at once again when it next dies.
	maxRestartDelay = 5 * time.Second
	stableAfter     = 30 * time.Second
)

// DefaultRestartDelay is how long the server waits before it restarts a
// dynalite that died (Config.RestartDelay).
const DefaultRestartDelay = 100 * time.Millisecond

// errDatabaseDown is what /healthz reports while the server's own dynalite
// is dead and not yet restarted.
var errDatabaseDown = errors.New("dynalite exited; restarting it")

// errTablesMissing is what /healthz reports while the database lacks the
// tables and the server is making them again.
var errTablesMissing = errors.New("the database lacks the tables; creating them and the admin agent again")

// errMending is what the store's calls get while the tables are made again:
// a ResourceNotFoundException, answered 503 unavailable as one from the
// database is (httpapi.TablesMissing).
var errMending = &smithy.GenericAPIError{Code: "ResourceNotFoundException", Message: "the tables are being made again"}

// database is the DynamoDB the server talks to. Given an endpoint, it is that
// endpoint, which the server can only probe. Otherwise it is the server's own
// dynalite, supervised: when the process dies, requests are answered 503
// unavailable (the connection is refused) and /healthz 503 at once, and a new
// dynalite is started on the same data directory (or empty, in memory), on a
// free port. The tables and the admin agent are made sure of (in memory they
// are created again) before the store's client is pointed at it, so no
// request ever sees a database without its tables.
//
// Any endpoint may also lose its tables while the server runs (a
// DynamoDB-compatible server restarted empty, tables deleted): once a
// request, a probe or a poller finds one missing, every request is answered
// 503 unavailable (httpapi.TablesMissing) without reaching the database, and
// /healthz 503, while the tables and the admin agent are made sure of again,
// as at start (mend).
type database struct {
	log      *slog.Logger
	opts     localstack.Options // Path; the port is picked at every start
	delay    time.Duration
	prepare  func(ctx context.Context, endpoint string) error
	replaced func() // after a restart, once the client points at the new server

	endpoint atomic.Pointer[string]
	client   *dynamodb.Client

	supervised bool
	// sole is set when this process is the only writer of the tables (its
	// own dynalite, which no other process is given): its loops then sleep
	// while the database is idle, woken by its writes (wrote).
	sole bool
	// wrote wakes the loops that sleep while the database is idle at each
	// write this process sends (noticeWrites), and at each restart or
	// mending of the tables.
	wrote wakers
	// gen counts the restarts of the own dynalite and the mendings of the
	// tables: a stream ARN read before the last one may be stale.
	gen atomic.Int64
	// releaseDir lets go of the data directory (localstack.HoldDataDir)
	// once the own dynalite is stopped; nil in memory or on an endpoint.
	releaseDir func()
	up         atomic.Bool
	mu         sync.Mutex
	cur        *localstack.Dynalite
	stop       context.CancelFunc
	done       chan struct{}

	// probeTable is the table /healthz describes: the tasks table.
	probeTable string
	probeMu    sync.Mutex
	probedAt   time.Time
	probeErr   error

	// missing is set while the tables found missing are made again; mending
	// (under mu) while the server may start that, which close ends.
	missing   atomic.Bool
	mending   bool
	mendCtx   context.Context
	stopMend  context.CancelFunc
	mendsDone sync.WaitGroup
}

// newClient is the store's DynamoDB client: its endpoint is whatever
// db.endpoint holds at each request, so a restarted dynalite on another
// port is used without a new store.
func (db *database) newClient(endpoint string) {
	db.endpoint.Store(&endpoint)
	httpClient := awshttp.NewBuildableClient().
		WithTimeout(requestTimeout).
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = dialTimeout })
	db.client = lease.NewLocalClient(endpoint, func(o *dynamodb.Options) {
		o.HTTPClient = httpClient
		o.EndpointResolverV2 = currentEndpoint{&db.endpoint}
		o.APIOptions = append(o.APIOptions, db.noticeMissingTables, db.noticeWrites)
	})
}

// writeOps are the DynamoDB operations that may change an item: a lease's
// expiry, a heartbeat's, a delayed task's, or the tasks table's stream.
var writeOps = map[string]bool{
	"PutItem": true, "UpdateItem": true, "DeleteItem": true, "BatchWriteItem": true,
	"TransactWriteItems": true, "ExecuteStatement": true, "BatchExecuteStatement": true, "ExecuteTransaction": true,
}

// noticeWrites adds to the client's stack what wakes the idle loops
// (db.wrote) once a write has been sent, whatever its answer: one that
// failed or was cut short may still have been applied.
func (db *database) noticeWrites(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("noticeWrites",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			out, md, err := next.HandleInitialize(ctx, in)
			if writeOps[middleware.GetOperationName(ctx)] {
				db.wrote.wake()
			}
			return out, md, err
		}), middleware.Before)
}

// wakers are the channels of the loops that sleep while nothing is
// written: wake tells each, without waiting, that something may have been.
type wakers struct {
	mu    sync.Mutex
	chans []chan struct{}
}

// add is a new loop's channel: it holds one wake-up until taken.
func (w *wakers) add() <-chan struct{} {
	c := make(chan struct{}, 1)
	w.mu.Lock()
	w.chans = append(w.chans, c)
	w.mu.Unlock()
	return c
}

func (w *wakers) wake() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.chans {
		select {
		case c <- struct{}{}:
		default:
		}
	}
}

// noticeMissingTables adds to the client's stack what sees a call answered
// ResourceNotFoundException, and then has the tables made again (lost).
// Until they are, it answers every call errMending without sending it: the
// tables still there may not match the ones made again (a key cached from
// a lost agents table would read and write the tasks), so nothing is
// served from them meanwhile.
func (db *database) noticeMissingTables(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("noticeMissingTables",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			if db.missing.Load() {
				return middleware.InitializeOutput{}, middleware.Metadata{}, errMending
			}
			out, md, err := next.HandleInitialize(ctx, in)
			if httpapi.TablesMissing(err) {
				db.lost(middleware.GetOperationName(ctx), err)
			}
			return out, md, err
		}), middleware.After)
}

// mendTables arms lost: from now until close, tables found missing are
// made again. Start calls it once the server is set up; before, a missing
// table fails Start.
func (db *database) mendTables() {
	db.mu.Lock()
	defer db.mu.Unlock()
	db.mendCtx, db.stopMend = context.WithCancel(context.Background())
	db.mending = true
}

// lost has the tables and the admin agent made sure of again (mend),
// unless that is under way already or not armed (mendTables).
func (db *database) lost(op string, cause error) {
	db.mu.Lock()
	defer db.mu.Unlock()
	if !db.mending || db.missing.Load() {
		return
	}
	db.missing.Store(true)
	db.log.Error("the database lacks the tables; creating them and the admin agent again",
		"endpoint", *db.endpoint.Load(), "operation", op, "error", cause.Error())
	db.mendsDone.Add(1)
	go db.mend(db.mendCtx)
}

// mend makes sure of the tables and the admin agent, as at start, retrying
// with the restarts' back-off until it has, then clears the key cache (the
// database may be another, empty one) and serves again.
func (db *database) mend(ctx context.Context) {
	defer db.mendsDone.Done()
	lost := time.Now()
	delay := db.delay
	for {
		err := db.prepare(ctx, *db.endpoint.Load())
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		db.log.Error("make the tables again", "error", err.Error(), "retry_in", delay.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, maxRestartDelay)
	}
	db.probeMu.Lock()
	db.probedAt = time.Time{}
	db.probeMu.Unlock()
	if db.replaced != nil {
		db.replaced()
	}
	db.gen.Add(1)
	db.missing.Store(false)
	db.wrote.wake()
	db.log.Info("the tables and the admin agent are made again", "endpoint", *db.endpoint.Load(),
		"down_for", time.Since(lost).Round(time.Millisecond).String())
}

type currentEndpoint struct{ p *atomic.Pointer[string] }

func (c currentEndpoint) ResolveEndpoint(context.Context, dynamodb.EndpointParameters) (smithyendpoints.Endpoint, error) {
	u, err := url.Parse(*c.p.Load())
	if err != nil {
		return smithyendpoints.Endpoint{}, err
	}
	return smithyendpoints.Endpoint{URI: *u}, nil
}

func (db *database) storage() string {
	if db.opts.Path == "" {
		return "memory"
	}
	return db.opts.Path
}

// startOwn starts the server's own dynalite and the supervisor that
// restarts it. prepare must then be run on it by the caller.
func (db *database) startOwn(ctx context.Context) error {
	d, err := localstack.Start(ctx, db.opts)
	if err != nil {
		return err
	}
	db.supervised, db.sole = true, true
	db.cur = d
	db.newClient(d.Endpoint)
	db.up.Store(true)
	db.log.Info("dynalite started", "endpoint", d.Endpoint, "storage", db.storage(), "pid", d.Pid())
	return nil
}

// supervise restarts the dynalite whenever it dies, until close.
func (db *database) supervise() {
	ctx, cancel := context.WithCancel(context.Background())
	db.stop, db.done = cancel, make(chan struct{})
	go func() {
		defer close(db.done)
		delay := db.delay
		for {
			db.mu.Lock()
			d := db.cur
			db.mu.Unlock()
			started := time.Now()
			select {
			case <-ctx.Done():
				return
			case <-d.Done():
			}
			db.up.Store(false)
			died := time.Now()
			db.log.Error("dynalite exited; restarting it", "pid", d.Pid(), "error", fmt.Sprint(d.Err()),
				"storage", db.storage(), "ran_for", died.Sub(started).Round(time.Millisecond).String())
			if died.Sub(started) > stableAfter {
				delay = db.delay
			}
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(delay):
				}
				delay = min(max(2*delay, db.delay), maxRestartDelay)
				nd, err := db.restart(ctx)
				if err != nil {
					if ctx.Err() != nil {
						return
					}
					db.log.Error("restart dynalite", "error", err.Error(), "retry_in", delay.String())
					continue
				}
				db.log.Info("dynalite restarted", "endpoint", nd.Endpoint, "storage", db.storage(), "pid", nd.Pid(),
					"down_for", time.Since(died).Round(time.Millisecond).String())
				break
			}
		}
	}()
}

// restart starts a new dynalite, prepares it, and only then points the
// store's client at it.
func (db *database) restart(ctx context.Context) (*localstack.Dynalite, error) {
	d, err := localstack.Start(ctx, db.opts)
	if err != nil {
		return nil, err
	}
	if err := db.prepare(ctx, d.Endpoint); err != nil {
		_ = d.Stop()
		return nil, fmt.Errorf("prepare the restarted dynalite: %w", err)
	}
	db.mu.Lock()
	db.cur = d
	db.mu.Unlock()
	db.endpoint.Store(&d.Endpoint)
	db.probeMu.Lock()
	db.probedAt = time.Time{}
	db.probeMu.Unlock()
	if db.replaced != nil {
		db.replaced()
	}
	db.gen.Add(1)
	db.up.Store(true)
	db.wrote.wake()
	return d, nil
}

// down reports whether the database is known not to serve just now: the
// own dynalite is being restarted, or the tables are being made again.
func (db *database) down() bool {
	return (db.supervised && !db.up.Load()) || db.missing.Load()
}

// current is the running dynalite, or nil when the endpoint is not ours.
func (db *database) current() *localstack.Dynalite {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.cur
}

// indexesCaughtUp reports whether the global secondary indexes of the
// tables under prefix show every write answered so far. Only the
// project's own dynalite can say (it counts the index updates its lag,
// DYNALITE_INDEX_LAG, still holds); any other endpoint may lag, as
// DynamoDB's indexes do, and is taken to.
func (db *database) indexesCaughtUp(ctx context.Context, prefix string) bool {
	n, err := localstack.IndexLagPending(ctx, *db.endpoint.Load(), prefix)
	return err == nil && n == 0
}

// health is nil when the database answers with its tables: the own
// dynalite is running, no table was found missing since they were made, and
// (for any endpoint) a DescribeTable of the tasks table at most a second
// old succeeded.
func (db *database) health(ctx context.Context) error {
	if db.supervised && !db.up.Load() {
		return errDatabaseDown
	}
	if db.missing.Load() {
		return errTablesMissing
	}
	db.probeMu.Lock()
	defer db.probeMu.Unlock()
	if time.Since(db.probedAt) < probeEvery {
		return db.probeErr
	}
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	_, err := db.client.DescribeTable(pctx, &dynamodb.DescribeTableInput{TableName: &db.probeTable}, func(o *dynamodb.Options) {
		o.RetryMaxAttempts = 1
	})
	if err != nil && ctx.Err() != nil {
		return err // the caller went away: say so, remember nothing
	}
	if httpapi.TablesMissing(err) {
		err = errTablesMissing
	} else if err != nil && !httpapi.Unavailable(err) {
		err = fmt.Errorf("probe %s: %w", *db.endpoint.Load(), err)
	}
	db.probedAt, db.probeErr = time.Now(), err
	return err
}

// close stops the mending of tables and the supervisor, then the own
// dynalite.
func (db *database) close() {
	db.mu.Lock()
	db.mending = false
	stopMend := db.stopMend
	db.mu.Unlock()
	if stopMend != nil {
		stopMend()
		db.mendsDone.Wait()
	}
	if db.stop != nil {
		db.stop()
		<-db.done
	}
	if d := db.current(); d != nil {
		select {
		case <-d.Done(): // died and was not restarted
			db.log.Info("dynalite had exited", "pid", d.Pid())
		default:
			switch err := d.Stop(); {
			case errors.Is(err, localstack.ErrKilled):
				// Hung: what it had not written to CHECKOUT_DATA_DIR is lost.
				db.log.Warn("dynalite killed: it did not stop within 5 s of SIGTERM", "pid", d.Pid(), "storage", db.storage())
			case err != nil:
				db.log.Warn("stop dynalite", "pid", d.Pid(), "error", err.Error())
			default:
				db.log.Info("dynalite stopped", "pid", d.Pid())
			}
		}
	}
	if db.releaseDir != nil {
		db.releaseDir()
		db.releaseDir = nil
	}
}
