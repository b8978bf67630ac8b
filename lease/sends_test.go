package lease_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"

	"github.com/checkout-dev/checkout/lease"
	"github.com/checkout-dev/checkout/lease/schema"
)

// retryer is the SDK's standard retryer with attempts attempts, a
// backoff of delay and, when quota is false, an empty retry quota.
func retryer(attempts int, delay time.Duration, quota bool) aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = attempts
		o.Backoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return delay, nil })
		if !quota {
			o.RateLimiter = ratelimit.NewTokenRateLimit(0)
		} else {
			o.RateLimiter = ratelimit.None
		}
	})
}

// A write the store sends again itself (an ending naming no lease) is
// sent again as the SDK's retry step would send it: within the client's
// attempts, for an error it retries, out of its retry quota; and a wait
// cut short by the caller ends with the caller's error.
func TestTheStoreSendsAWriteAgainAsTheClientsRetryerSays(t *testing.T) {
	timeout := &smithy.GenericAPIError{Code: "RequestTimeoutException", Message: "timed out"}
	invalid := &smithy.GenericAPIError{Code: "ValidationException", Message: "bad"}
	bg := context.Background()
	cancelled, cancel := context.WithCancel(bg)
	cancel()
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		r       aws.Retryer
		attempt int
		err     error
		again   bool
		want    error
	}{
		{"a retried error within the attempts", bg, retryer(3, 0, true), 2, timeout, true, nil},
		{"the last attempt", bg, retryer(3, 0, true), 3, timeout, false, timeout},
		{"no bound on the attempts", bg, retry.AddWithMaxAttempts(retryer(3, 0, true), 0), 50, timeout, true, nil},
		{"an error the retryer does not retry", bg, retryer(3, 0, true), 1, invalid, false, invalid},
		{"the retry quota spent", bg, retryer(3, 0, false), 1, timeout, false, timeout},
		{"the caller gone during the wait", cancelled, retryer(3, time.Hour, true), 1, timeout, false, context.Canceled},
		{"no retryer", bg, nil, 1, timeout, false, timeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			again, err := lease.SendAgain(tc.ctx, tc.r, tc.attempt, tc.err)
			if again != tc.again || !errors.Is(err, tc.want) {
				t.Errorf("sent again %v with error %v, want %v with %v", again, err, tc.again, tc.want)
			}
		})
	}
}

// An attempt DynamoDB throttled, or one never sent, was not applied: the
// store's next sending of an ending naming no lease is made as the first
// (sentAgainWith). Any other failure may have been applied.
func TestOnlyAThrottledOrUnsentAttemptIsKnownUnapplied(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"throttled", &smithy.GenericAPIError{Code: "ProvisionedThroughputExceededException"}, true},
		{"throttled, by the request rate", &smithy.GenericAPIError{Code: "ThrottlingException"}, true},
		{"no connection", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, true},
		{"a connection reset", &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}, false},
		{"an internal error", &smithy.GenericAPIError{Code: "InternalServerError"}, false},
		{"timed out", &smithy.GenericAPIError{Code: "RequestTimeoutException"}, false},
	} {
		if got := lease.Unapplied(tc.err); got != tc.want {
			t.Errorf("%s: unapplied %v, want %v", tc.name, got, tc.want)
		}
	}
}

// sendingsDoer is the HTTP client of a store: it keeps the attempt and
// max of each sending of the requests match picks, as its Amz-Sdk-Request
// header numbers them, and loses the first lose of those sendings before
// DynamoDB sees them (answered 500, as a reset connection would be).
type sendingsDoer struct {
	match func(target, body string) bool
	lose  int

	mu       sync.Mutex
	numbered []string
}

func (d *sendingsDoer) Do(r *http.Request) (*http.Response, error) {
	if !d.match(r.Header.Get("X-Amz-Target"), requestBody(r)) {
		return http.DefaultClient.Do(r)
	}
	var parts []string
	for part := range strings.SplitSeq(r.Header.Get("Amz-Sdk-Request"), ";") {
		if part = strings.TrimSpace(part); strings.HasPrefix(part, "attempt=") || strings.HasPrefix(part, "max=") {
			parts = append(parts, part)
		}
	}
	d.mu.Lock()
	d.numbered = append(d.numbered, strings.Join(parts, "; "))
	lost := len(d.numbered) <= d.lose
	d.mu.Unlock()
	if !lost {
		return http.DefaultClient.Do(r)
	}
	if r.Body != nil {
		r.Body.Close()
	}
	return internalError(r, "sending lost"), nil
}

// The sendings of a write the store sends again itself (an ending naming
// no lease) are numbered as the SDK numbers the sendings of a write it
// sends again (Amz-Sdk-Request: "attempt=2; max=4" on the second), so that
// whatever reads the header sees one request sent again, not several
// first sendings. They all said attempt=1; max=1: a client that loses
// only first sendings (the lossy linearizability runs) lost every one.
func TestTheStoresOwnSendingsAreNumberedAsTheSDKNumbersItsOwn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	c := ctx(t)
	e.task(t, "sdk", "own")
	tasks := e.names.Table(schema.TasksTable)
	updates := func(target, body string) bool {
		return strings.HasSuffix(target, ".UpdateItem") && strings.Contains(body, tasks)
	}
	// A checkout, which the SDK sends again.
	sdk := &sendingsDoer{match: updates, lose: 2}
	must[lease.Checkout](t)(e.over(sdk).Checkout(c, lease.CheckoutParams{TaskID: "sdk", AgentID: "a", Timeout: time.Hour}))
	// A release naming no lease, which the store sends again itself.
	must[lease.Checkout](t)(e.store.Checkout(c, lease.CheckoutParams{TaskID: "own", AgentID: "a", Timeout: time.Hour}))
	own := &sendingsDoer{match: updates, lose: 2}
	must[lease.Released](t)(e.over(own).Release(c, lease.ReleaseParams{TaskID: "own", AgentID: "a"}))

	if len(sdk.numbered) != 3 || !strings.HasPrefix(sdk.numbered[2], "attempt=3; max=") {
		t.Fatalf("the SDK numbered a checkout's sendings %q, want attempts 1 to 3", sdk.numbered)
	}
	if strings.Join(own.numbered, ", ") != strings.Join(sdk.numbered, ", ") {
		t.Fatalf("the store numbered its own sendings of a release naming no lease %q; the SDK numbers its own %q", own.numbered, sdk.numbered)
	}
}
