package client

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countingTransport counts the requests that reach it and answers none.
type countingTransport struct{ n atomic.Int64 }

func (c *countingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	c.n.Add(1)
	return nil, errors.New("no network in this test")
}

// A base URL that is not an absolute http(s) URL, such as an unset
// CHECKOUT_URL or one without its scheme, fails every call at once, in
// words that name it, instead of "cannot reach the server at : Get
// \"/api/checkouts\": unsupported protocol scheme" after retries; a
// ClaimLoop does not retry it for ever.
func TestBaseURLNotAbsoluteFailsEveryCallAtOnce(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:3223", "localhost:3100", "ftp://example.com", "http://", "http://:3100", "/api"} {
		t.Run(strconv.Quote(u), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			tr := &countingTransport{}
			c := New(u, "ck_x", WithHTTPClient(&http.Client{Transport: tr}))
			for name, call := range map[string]func() error{
				"list":     func() error { _, err := c.ListCheckouts(ctx, ""); return err },
				"checkout": func() error { _, err := c.Checkout(ctx, "t", CheckoutRequest{}); return err },
				"health":   func() error { return c.Health(ctx) },
				"claim loop": func() error {
					return c.ClaimLoop(ctx, func(context.Context, *Lease) error { return nil }, NoHeartbeats())
				},
				"work on": func() error {
					return c.WorkOn(ctx, "t", func(context.Context, *Lease) error { return nil })
				},
			} {
				err := call()
				var be *BaseURLError
				if !errors.Is(err, ErrInvalidBaseURL) || !errors.As(err, &be) || be.URL != u {
					t.Fatalf("%s: %v, want a *BaseURLError naming %q", name, err, u)
				}
				if want := strconv.Quote(u) + " is not an absolute http:// or https:// URL"; !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %q lacks %q", name, err, want)
				}
			}
			if n := tr.n.Load(); n != 0 {
				t.Errorf("%d requests sent", n)
			}
		})
	}
	// Absolute http(s) URLs are tried.
	ctx := context.Background()
	for _, u := range []string{"http://127.0.0.1:1", "https://example.invalid/", "HTTP://127.0.0.1:1/api"} {
		tr := &countingTransport{}
		err := New(u, "k", WithHTTPClient(&http.Client{Transport: tr}), WithRetryPolicy(RetryPolicy{MaxAttempts: 1})).Health(ctx)
		if errors.Is(err, ErrInvalidBaseURL) || tr.n.Load() == 0 {
			t.Errorf("%s: %v after %d requests, want it tried", u, err, tr.n.Load())
		}
	}
}
