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
