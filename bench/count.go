package bench

import (
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"

	"github.com/checkout-dev/checkout/lease"
)

// Counter counts DynamoDB requests by operation name through an SDK
// middleware. SDK retries of one operation call are not counted again: the
// count is of calls the code under test makes.
type Counter struct {
	mu  sync.Mutex
	ops map[string]int
}

// NewCounter returns an empty Counter.
func NewCounter() *Counter { return &Counter{ops: map[string]int{}} }

// Middleware adds the counter to a client's stack.
func (c *Counter) Middleware(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("benchCountRequests",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			c.mu.Lock()
			c.ops[middleware.GetOperationName(ctx)]++
			c.mu.Unlock()
			return next.HandleInitialize(ctx, in)
		}), middleware.After)
}

// Take returns the counts since the last Take and resets them.
func (c *Counter) Take() Ops {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.ops
	c.ops = map[string]int{}
	return out
}

// Ops is a request count by operation name.
type Ops map[string]int

// Total is the number of requests.
func (o Ops) Total() int {
	n := 0
	for _, v := range o {
		n += v
	}
	return n
}

// Client returns a DynamoDB client for endpoint that counts into c.
func (c *Counter) Client(endpoint string) *dynamodb.Client {
	return lease.NewLocalClient(endpoint, func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, c.Middleware)
	})
}
