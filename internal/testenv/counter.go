package testenv

import (
	"context"
	"maps"
	"sync"
	"sync/atomic"

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
func NewCounter() *Counter { return &Counter{ops: Ops{}, resent: Ops{}} }

// sendingsKey keys a call's count of its sendings in its context.
type sendingsKey struct{ c *Counter }

// Middleware adds the counter to a client's stack; append it to
// dynamodb.Options.APIOptions.
func (c *Counter) Middleware(stack *middleware.Stack) error {
	err := stack.Initialize.Add(middleware.InitializeMiddlewareFunc("countRequests",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			c.mu.Lock()
			c.ops[middleware.GetOperationName(ctx)]++
			c.mu.Unlock()
			return next.HandleInitialize(context.WithValue(ctx, sendingsKey{c}, new(atomic.Int32)), in)
		}), middleware.After)
	if err != nil {
		return err
	}
	// Inside the SDK's retry loop: once per sending.
	return stack.Finalize.Insert(middleware.FinalizeMiddlewareFunc("countResendings",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			if n, ok := ctx.Value(sendingsKey{c}).(*atomic.Int32); ok && n.Add(1) > 1 {
				c.mu.Lock()
				c.resent[middleware.GetOperationName(ctx)]++
				c.mu.Unlock()
			}
			return next.HandleFinalize(ctx, in)
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

// Count is the number of op requests since the last Take.
func (c *Counter) Count(op string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops[op]
}
