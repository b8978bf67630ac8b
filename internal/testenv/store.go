package testenv

import (
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// Store is a lease.Store over tables of its own.
type Store struct {
	*lease.Store
	// DB is the store's client; its requests are counted when the store was
	// made WithCounter.
	DB *dynamodb.Client
	// Names are the store's tables.
	Names schema.Names
}

// An Option configures NewStore.
type Option func(*storeOptions)

type storeOptions struct {
	cfg      lease.Config
	counter  *Counter
	indexLag time.Duration
}

// WithClock makes now the store's clock (a testclock.Clock's Now).
func WithClock(now func() time.Time) Option {
	return func(o *storeOptions) { o.cfg.Now = now }
}

// WithNotifier makes n hear the store's notices (a Recorder, say).
func WithNotifier(n lease.Notifier) Option {
	return func(o *storeOptions) { o.cfg.Notifier = n }
}

// WithCounter counts the store's DynamoDB requests into c. Creating the
// tables is not counted.
func WithCounter(c *Counter) Option {
	return func(o *storeOptions) { o.counter = c }
}

// WithIndexLag makes the indexes of the store's tables trail their writes
// by d, as DynamoDB's global secondary indexes do.
func WithIndexLag(d time.Duration) Option {
	return func(o *storeOptions) { o.indexLag = d }
}

// WithShards gives the store these shard counts (zero ones: the defaults).
func WithShards(c schema.ShardCounts) Option {
	return func(o *storeOptions) { o.cfg.Shards = c }
}

// NewStore creates tables under a fresh prefix and returns a store over
// them.
func NewStore(t testing.TB, opts ...Option) *Store {
	t.Helper()
	var o storeOptions
	for _, opt := range opts {
		opt(&o)
	}
	names := Tables(t)
	if o.indexLag != 0 {
		IndexLag(t, names.Prefix, o.indexLag)
	}
	var db *dynamodb.Client
	if o.counter != nil {
		db = o.counter.Client(Endpoint())
	} else {
		db = lease.NewLocalClient(Endpoint())
	}
	o.cfg.DB, o.cfg.Tables = db, names
	return &Store{Store: lease.New(o.cfg), DB: db, Names: names}
}
