package testenv

import (
	"context"
	"maps"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/checkout-dev/checkout/lease"
)

// Counter counts DynamoDB requests by operation name through an SDK
// middleware, so that a test can hold an operation to its request budget.
// SDK retries of one call are not counted again: the count is of the calls
// the code under test makes. The SDK's own sendings of a call after its
// first (an attempt that got no answer, or a retryable error) are counted
// apart (Resent): the server did, and billed, each one it received. It is
// safe for concurrent use.
type Counter struct {
	mu     sync.Mutex
	ops    Ops
	resent Ops
	// why holds, by operation, the error of the sending the SDK last
	// sent again after.
	why map[string]string
}

// Ops is a request count by operation name ("GetItem": 2).
type Ops map[string]int

// Total is the number of requests.
func (o Ops) Total() int {
	n := 0
	for _, v := range o {
		n += v
	}
	return n
}

// NewCounter returns a Counter that has counted nothing.
func NewCounter() *Counter { return &Counter{ops: Ops{}, resent: Ops{}, why: map[string]string{}} }

// sendingsKey keys a call's sendings in its context.
type sendingsKey struct{ c *Counter }

// sendings are one call's sendings so far, and the error of the last.
type sendings struct {
	mu   sync.Mutex
	n    int
	last error
}

// Middleware adds the counter to a client's stack; append it to
// dynamodb.Options.APIOptions.
func (c *Counter) Middleware(stack *middleware.Stack) error {
	err := stack.Initialize.Add(middleware.InitializeMiddlewareFunc("countRequests",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			c.mu.Lock()
			c.ops[middleware.GetOperationName(ctx)]++
			c.mu.Unlock()
			return next.HandleInitialize(context.WithValue(ctx, sendingsKey{c}, &sendings{}), in)
		}), middleware.After)
	if err != nil {
		return err
	}
	// Inside the SDK's retry loop: once per sending.
	return stack.Finalize.Insert(middleware.FinalizeMiddlewareFunc("countResendings",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			sent, ok := ctx.Value(sendingsKey{c}).(*sendings)
			if !ok {
				return next.HandleFinalize(ctx, in)
			}
			sent.mu.Lock()
			sent.n++
			again, after := sent.n > 1, sent.last
			sent.mu.Unlock()
			if again {
				op := middleware.GetOperationName(ctx)
				c.mu.Lock()
				c.resent[op]++
				if after != nil {
					c.why[op] = after.Error()
				}
				c.mu.Unlock()
			}
			out, md, err := next.HandleFinalize(ctx, in)
			sent.mu.Lock()
			sent.last = err
			sent.mu.Unlock()
			return out, md, err
		}), "Retry", middleware.After)
}

// Client returns a client for the DynamoDB at endpoint whose requests c
// counts.
func (c *Counter) Client(endpoint string) *dynamodb.Client {
	return lease.NewLocalClient(endpoint, func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, c.Middleware)
	})
}

// Take returns the counts since the last Take and starts again from zero.
func (c *Counter) Take() Ops {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.ops
	c.ops = Ops{}
	return out
}

// Resent is how many times, by operation, the SDK has sent a call again
// since NewCounter (Take does not reset it).
func (c *Counter) Resent() Ops {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.resent)
}

// ResentAfter is, by operation, the error of the sending that the SDK
// last sent again after.
func (c *Counter) ResentAfter() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.why)
}

// Count is the number of op requests since the last Take.
func (c *Counter) Count(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops[op]
}
