package lease

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Sendings. The SDK sends a request again when an attempt gets no answer
// (a timeout, a dropped connection), though that attempt may have been
// applied; the second sending of a conditional write then fails its
// condition on the first's own result. A write that was sent more than
// once may take such a failure for its own (its item as it would leave
// it); one sent once never does, so that a repeat by a client is never
// mistaken for it.
//
// Time, holder and run cannot tell a write from another of the same
// millisecond, so the writes that may meet one carry their own id
// (writeID) on the item, and a second sending knows its own by it: endings
// (end_write; a release or completion naming no lease, force releases, the
// sweep's endings, the endings of expired leases a checkout or PATCH
// makes), grants (grant_write, and prev_write the grant's before it, for a
// grant taken over before it was sent again; a grant of a free task is
// conditioned on neither naming it, since its lease may have ended and
// left the task free again before the second sending; a PATCH of the
// lease's title, queue or priority in between keeps them as granted,
// grant_was, and a reopen the grant's attempt on grant_write, for its
// answer) and renewals (renew_write, renew_prev, kept
// by the lease's ending with its timeout and holder's name until the next
// grant, for a renewal sent again after its lease ended), and
// PATCHes (patch, and patch_was the first characters of the ids of the
// four before it, for one that other PATCHes followed before it was sent
// again: a new body, which no other write names, also says so). An
// ending's id says it is its own whatever landed since (a grant of the
// task it freed); grants and renewals look one step back, PATCHes four, and a grant refused past that
// looks for its checkout in the trail (resentGrantInTrail). The ids cost the task item 45
// to 105 bytes while a lease is held, and 16 more once it has been
// PATCHed, 30 to 45 more once twice or more (patch_was grows by 5 a PATCH
// up to 20 characters). Other
// writes do the same on their items: a message's deletion mark (acked_by)
// and an agent's tombstone (removal).

type sendsKey struct{}

// countSends returns ctx with a count of the sendings of the writes made
// with it (through sendOpts).
func countSends(ctx context.Context) (context.Context, *atomic.Int32) {
	n := new(atomic.Int32)
	return context.WithValue(ctx, sendsKey{}, n), n
}

// sendOpts is the option that counts the sendings of a request made with
// ctx, when ctx counts them: a step inside the SDK's retry loop.
func sendOpts(ctx context.Context) []func(*dynamodb.Options) {
	n, _ := ctx.Value(sendsKey{}).(*atomic.Int32)
	if n == nil {
		return nil
	}
	count := middleware.FinalizeMiddlewareFunc("CountSendings", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
		n.Add(1)
		return next.HandleFinalize(ctx, in)
	})
	return []func(*dynamodb.Options){func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Finalize.Insert(count, "Retry", middleware.After)
		})
	}}
}

type againKey struct{}

// again is what sentAgainWith puts in a ctx: the terms, and whether a
// sending of a write made with the ctx may have applied.
type again struct {
	more    terms
	applied atomic.Bool
}

// sentAgainWith returns ctx so that a task write made with it (write), when
// an attempt fails, is sent again by the store rather than by the SDK, and
// once an attempt of any write made with ctx may have applied (unapplied),
// with more terms in its condition, from its first sending on: what only
// a call whose sending may have applied must meet. The SDK sends the same
// bytes again; this sends them with more. The client's own retryer still
// decides whether, how often and after how long (sendAgain). A sending
// known not to have applied is not counted (sendOpts, unsent).
func sentAgainWith(ctx context.Context, more terms) context.Context {
	return context.WithValue(ctx, againKey{}, &again{more: more})
}

// againOf is what sentAgainWith put in ctx, or nil.
func againOf(ctx context.Context) *again {
	a, _ := ctx.Value(againKey{}).(*again)
	return a
}

// unsent takes back the count of a sending of a write made with ctx that
// is known not to have applied (unapplied): sends > 1 says a sending
// before the last may have applied.
func unsent(ctx context.Context) {
	if n, _ := ctx.Value(sendsKey{}).(*atomic.Int32); n != nil {
		n.Add(-1)
	}
}

// sendOnce is the option that makes one attempt of a request, the call's
// attempt-th, and keeps the client's retryer in *r, for the caller that
// sends it again itself. The attempt is numbered as the SDK numbers its
// own (numbered).
func sendOnce(r *aws.Retryer, attempt int) func(*dynamodb.Options) {
	return func(o *dynamodb.Options) {
		if *r == nil {
			*r = o.Retryer
		}
		maxAttempts := 0
		if *r != nil {
			maxAttempts = (*r).MaxAttempts()
		}
		o.RetryMaxAttempts = 1
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Finalize.Insert(numbered(attempt, maxAttempts), "Retry", middleware.After)
		})
	}
}

// numbered is the step that numbers a sending in its Amz-Sdk-Request
// header as the SDK's retry step numbers the attempts it makes ("attempt=2;
// max=3"; no max when the attempts have no bound): a request the store
// sends again is one operation of one attempt each time, which the SDK
// would number 1 of 1. The rest of the header (ttl) is kept.
func numbered(attempt, maxAttempts int) middleware.FinalizeMiddleware {
	return middleware.FinalizeMiddlewareFunc("NumberSending", func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
		if req, ok := in.Request.(*smithyhttp.Request); ok {
			parts := []string{"attempt=" + strconv.Itoa(attempt)}
			if maxAttempts > 0 {
				parts = append(parts, "max="+strconv.Itoa(maxAttempts))
			}
			for part := range strings.SplitSeq(req.Header.Get(sdkRequestHeader), ";") {
				if part = strings.TrimSpace(part); part != "" && !strings.HasPrefix(part, "attempt=") && !strings.HasPrefix(part, "max=") {
					parts = append(parts, part)
				}
			}
			req.Header.Set(sdkRequestHeader, strings.Join(parts, "; "))
		}
		return next.HandleFinalize(ctx, in)
	})
}

// sdkRequestHeader is the header in which the SDK numbers a request's
// attempts.
const sdkRequestHeader = "Amz-Sdk-Request"

// sendAgain decides, as the SDK's retry step would with the client's
// retryer r, whether a request whose attempt failed with err is sent
// again: within r's attempts (0: no bound), for an error r retries, with
// a token of r's retry quota (release gives it back, or not, after the
// next attempt), after r's delay. It returns the error the request ends
// with when not sent again: err, or ctx's when ctx ends first.
func sendAgain(ctx context.Context, r aws.Retryer, attempt int, err error) (release func(error) error, again bool, _ error) {
	if r == nil || r.MaxAttempts() > 0 && attempt >= r.MaxAttempts() || !r.IsErrorRetryable(err) {
		return nil, false, err
	}
	d, derr := r.RetryDelay(attempt, err)
	if derr != nil {
		return nil, false, err
	}
	release, terr := r.GetRetryToken(ctx, err)
	if terr != nil {
		return nil, false, err // the client's retry quota is spent
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		_ = release(ctx.Err())
		return nil, false, ctx.Err()
	case <-t.C:
		return release, true, nil
	}
}

// unapplied says err tells that the request was not applied: DynamoDB
// throttled it, or it was never sent (no connection). Any other failure
// of an attempt may have been applied, its answer lost.
func unapplied(err error) bool {
	if retry.IsErrorThrottles(retry.DefaultThrottles).IsErrorThrottle(err) == aws.TrueTernary {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
