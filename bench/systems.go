package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"cirello.io/dynamolock/v2"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
	"github.com/checkout-dev/checkout/lease/stream"
	"github.com/checkout-dev/checkout/localstack"
)

// System is one lock service under test, seen as acquire-then-release.
type System interface {
	Name() string
	// Prepare makes keys ready to be acquired (this project: tasks exist).
	Prepare(ctx context.Context, keys []string) error
	// Acquire tries once to take key for worker; held=false means someone
	// else holds it (a conflict).
	Acquire(ctx context.Context, worker int, key string) (release func(context.Context) error, held bool, err error)
}

func randomPrefix(tag string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "b" + tag + hex.EncodeToString(b[:]) + "-"
}

// Ours is this project's lease.Store on its own tables.
type Ours struct {
	Store *lease.Store
	Names schema.Names
	Count *Counter
	DB    *dynamodb.Client
	// Endpoint is the DynamoDB endpoint, whose meter Units reads.
	Endpoint string

	// streamMu is held by each poll of the change stream, so that Quiet
	// can keep the stream function's requests out of a measurement.
	streamMu sync.Mutex
	stream   *stream.Poller
}

// NewOurs creates fresh tables under a random prefix. now may be nil
// (time.Now).
func NewOurs(ctx context.Context, endpoint string, now func() time.Time) (*Ours, error) {
	o := &Ours{Names: schema.Names{Prefix: randomPrefix("o")}, Count: NewCounter(), Endpoint: endpoint}
	o.DB = o.Count.Client(endpoint)
	if err := lease.EnsureTables(ctx, o.DB, o.Names); err != nil {
		return nil, err
	}
	o.Store = lease.New(lease.Config{DB: o.DB, Tables: o.Names, Now: now, Notifier: nopNotifier{}})
	// The stream function runs alongside, as the local server runs it; its
	// writes (the archived events) go through the same counted client, so
	// the figures include them. Its reads of the stream are the event
	// source mapping's, which Lambda does not bill as DynamoDB requests.
	arn, err := localstack.StreamARN(ctx, o.DB, o.Names.Table(schema.TasksTable))
	if err != nil {
		return nil, err
	}
	o.stream = &stream.Poller{Streams: stream.NewLocalClient(endpoint), StreamARN: arn, Saved: stream.MemoryCheckpoints{},
		Handle: stream.Handler(lease.New(lease.Config{DB: o.DB, Tables: o.Names, Now: now, Notifier: nopNotifier{}}))}
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				o.streamMu.Lock()
				_, _ = o.stream.Poll(ctx) // a failed poll keeps its place
				o.streamMu.Unlock()
			}
		}
	}()
	o.Count.Take()
	return o, nil
}

// Quiet runs fn with the stream function held off: it first hands every
// change so far to the stream function, then holds it until fn returns, so
// that the requests counted during fn are fn's own, on the request path.
// The stream function's share (archived events, messages, queue counts)
// is batched across transitions and counted in the throughput runs.
func (o *Ours) Quiet(ctx context.Context, fn func() error) error {
	o.streamMu.Lock()
	defer o.streamMu.Unlock()
	if _, err := o.stream.Poll(ctx); err != nil {
		return fmt.Errorf("drain the change stream: %w", err)
	}
	o.Count.Take()
	return fn()
}

// CatchUp hands every change so far to the stream function, and returns
// the requests it made for them.
func (o *Ours) CatchUp(ctx context.Context) (Ops, error) {
	o.streamMu.Lock()
	defer o.streamMu.Unlock()
	o.Count.Take()
	_, err := o.stream.Poll(ctx)
	return o.Count.Take(), err
}

type nopNotifier struct{}

func (nopNotifier) Notify(context.Context, lease.Notice) error { return nil }

func (*Ours) Name() string { return "checkout (lease.Store)" }

func (o *Ours) Prepare(ctx context.Context, keys []string) error {
	return parallel(ctx, 16, len(keys), func(i int) error {
		_, err := o.Store.CreateTask(ctx, lease.CreateTaskParams{TaskID: keys[i], Title: keys[i]})
		if errors.Is(err, lease.ErrTaskExists) {
			return nil
		}
		return err
	})
}

func (o *Ours) Acquire(ctx context.Context, worker int, key string) (func(context.Context) error, bool, error) {
	agent := fmt.Sprintf("agent-%d", worker)
	c, err := o.Store.Checkout(ctx, lease.CheckoutParams{TaskID: key, AgentID: agent, Timeout: time.Minute})
	if errors.Is(err, lease.ErrCheckedOut) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return func(ctx context.Context) error {
		_, err := o.Store.Release(ctx, lease.ReleaseParams{TaskID: key, AgentID: agent, RunID: c.RunID, Fence: c.Fence})
		return err
	}, true, nil
}

// Peer is cirello.io/dynamolock/v2 on its own table, one client (owner) per
// worker, as separate agents would run it.
type Peer struct {
	Table string
	Count *Counter
	DB    *dynamodb.Client
	lease time.Duration

	mu      sync.Mutex
	clients map[int]*dynamolock.Client
}

// NewPeer creates the peer's lock table. Clients send no background
// heartbeats; leaseDuration is their lease.
func NewPeer(ctx context.Context, endpoint string, leaseDuration time.Duration) (*Peer, error) {
	p := &Peer{Table: randomPrefix("p") + "locks", Count: NewCounter(), lease: leaseDuration, clients: map[int]*dynamolock.Client{}}
	p.DB = p.Count.Client(endpoint)
	c, err := p.NewClient(-1, leaseDuration, 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()
	if _, err := c.CreateTableWithContext(ctx, p.Table); err != nil {
		return nil, fmt.Errorf("dynamolock create table: %w", err)
	}
	// Poll rather than use the SDK's waiter, whose first retry is 20s away.
	for {
		out, err := p.DB.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(p.Table)})
		if err != nil {
			return nil, err
		}
		if out.Table.TableStatus == types.TableStatusActive {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	p.Count.Take()
	return p, nil
}

// NewClient returns a dynamolock client named owner-<worker>. heartbeat 0
// disables its background heartbeat.
func (p *Peer) NewClient(worker int, leaseDuration, heartbeat time.Duration) (*dynamolock.Client, error) {
	opts := []dynamolock.ClientOption{
		dynamolock.WithLeaseDuration(leaseDuration),
		dynamolock.WithOwnerName(fmt.Sprintf("owner-%d", worker)),
	}
	if heartbeat > 0 {
		opts = append(opts, dynamolock.WithHeartbeatPeriod(heartbeat))
	} else {
		opts = append(opts, dynamolock.DisableHeartbeat())
	}
	return dynamolock.New(p.DB, p.Table, opts...)
}

func (p *Peer) client(worker int) (*dynamolock.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if c, ok := p.clients[worker]; ok {
		return c, nil
	}
	c, err := p.NewClient(worker, p.lease, 0)
	if err != nil {
		return nil, err
	}
	p.clients[worker] = c
	return c, nil
}

// Close closes the workers' clients.
func (p *Peer) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.clients {
		_ = c.Close()
	}
	p.clients = map[int]*dynamolock.Client{}
}

func (*Peer) Name() string { return "dynamolock v2.0.2" }

func (*Peer) Prepare(context.Context, []string) error { return nil }

func (p *Peer) Acquire(ctx context.Context, worker int, key string) (func(context.Context) error, bool, error) {
	c, err := p.client(worker)
	if err != nil {
		return nil, false, err
	}
	l, err := c.AcquireLockWithContext(ctx, key, dynamolock.FailIfLocked())
	var ng *dynamolock.LockNotGrantedError
	if errors.As(err, &ng) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	return func(ctx context.Context) error {
		ok, err := c.ReleaseLockWithContext(ctx, l)
		if err == nil && !ok {
			err = errors.New("dynamolock: lock was not released")
		}
		return err
	}, true, nil
}

// parallel runs fn(0..n-1) on at most workers goroutines and returns the
// first error.
func parallel(ctx context.Context, workers, n int, fn func(i int) error) error {
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	next := make(chan int)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := fn(i); err != nil {
					once.Do(func() { first = err; cancel() })
				}
			}
		}()
	}
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	return first
}
