package bench

import "github.com/checkout-dev/checkout/internal/testenv"

// Counter counts DynamoDB requests by operation name through an SDK
// middleware: the counter the lease tests hold their request budgets with,
// so that both count alike. SDK retries of one operation call are not
// counted again: the count is of calls the code under test makes.
type Counter = testenv.Counter

// Ops is a request count by operation name.
type Ops = testenv.Ops

// NewCounter returns an empty Counter.
func NewCounter() *Counter { return testenv.NewCounter() }
