package bench

import (
	"context"
	"time"

	"github.com/checkout-dev/checkout/localstack"
)

// CPUMeter reads the CPU time used so far by the local DynamoDB's process
// (through the shim's ProcessUsage) and by this process (the clients of
// every system, their stream functions included). The difference between
// two readings is what the work between them cost each side: on a machine
// of few cores the two share, and the server runs on one thread, so its
// CPU time per cycle bounds the cycles a second any client can get from it.
type CPUMeter struct {
	Endpoint string
}

// CPU is one reading; a side that cannot be read is zero.
type CPU struct {
	Server, Client time.Duration
}

// Read takes a reading. The server's side is zero on a DynamoDB-compatible
// server other than this project's local one.
func (m *CPUMeter) Read(ctx context.Context) CPU {
	var c CPU
	if m == nil {
		return c
	}
	if d, err := localstack.ProcessUsage(ctx, m.Endpoint); err == nil {
		c.Server = d
	}
	c.Client = selfCPU()
	return c
}

// Sub is c - d.
func (c CPU) Sub(d CPU) CPU { return CPU{c.Server - d.Server, c.Client - d.Client} }

// perCycle is d over n cycles, or 0.
func perCycle(d time.Duration, n int) time.Duration {
	if n <= 0 || d <= 0 {
		return 0
	}
	return d / time.Duration(n)
}
