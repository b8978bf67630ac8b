// Package testserver starts the local server (localserver) for a test, on
// tables of its own in the DynamoDB that testenv.Main found. It is apart
// from testenv because the local server imports most of the module, and the
// tests of those packages use testenv.
package testserver

import (
	"context"
	"crypto/rand"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/localserver"
)

// Config is the configuration Start uses before its options: a free port
// on 127.0.0.1, tables under a fresh prefix, a random admin key, and no
// background sweep (tests sweep when they mean to).
func Config() localserver.Config {
	return localserver.Config{
		Addr:           "127.0.0.1:0",
		DynamoEndpoint: testenv.Endpoint(),
		TablePrefix:    testenv.Prefix(),
		AdminKey:       "ck_admin" + strings.ToLower(rand.Text()),
		SweepInterval:  -1,
	}
}

// An Option changes the server's configuration.
type Option func(*localserver.Config)

// WithClock makes now the server's clock (a testclock.Clock's Now).
func WithClock(now func() time.Time) Option {
	return func(c *localserver.Config) { c.Now = now }
}

// Start starts a local server with Config changed by opts, and closes it
// when the test ends. Its admin key is srv.AdminKey(); for a client,
// client.New(srv.URL(), srv.AdminKey()).
func Start(t testing.TB, opts ...Option) *localserver.Server {
	t.Helper()
	srv, err := StartConfig(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// StartConfig is Start for code without a test at hand (examples): the
// caller closes the server.
func StartConfig(opts ...Option) (*localserver.Server, error) {
	cfg := Config()
	for _, o := range opts {
		o(&cfg)
	}
	return localserver.Start(context.Background(), cfg)
}
