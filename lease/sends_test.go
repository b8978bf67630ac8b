package lease_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/smithy-go"

	"github.com/checkout-dev/checkout/lease"
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
