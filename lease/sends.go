package lease

import (
	"context"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
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
// and a reopen the grant's attempt, grant_was, for its answer) and renewals (renew_write, renew_prev, kept
// by the lease's ending with its timeout and holder's name until the next
// grant, for a renewal sent again after its lease ended), and
// PATCHes (patch, and patch_prev the PATCH's before it,
// for one that another PATCH followed before it was sent again: a new
// body, which no other write names, also says so). An ending's id says it
// is its own whatever landed since (a grant of the task it freed); grants,
// renewals and PATCHes look one step back, and a grant refused past that
// looks for its checkout in the trail (resentGrantInTrail). The ids cost the task item 45
// to 105 bytes while a lease is held, and 37 more once it has been
// PATCHed twice. Other
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
