package testenv

import (
	"strings"
	"sync"
	"testing"

	"github.com/checkout-dev/checkout/localstack"
)

// Meter reads the units DynamoDB would bill for the requests on one set of
// tables (every client's, failed conditional writes included), from the
// meter of the project's own dynalite, so that a test can hold an
// operation to a budget of write and read units, as Counter holds it to
// a number of requests. It is safe for concurrent use; it fails the test
// on a DynamoDB-compatible server without the meter.
type Meter struct {
	t      testing.TB
	prefix string

	mu   sync.Mutex
	last localstack.Capacity
}

// NewMeter meters the tables whose names start with prefix (a
// schema.Names.Prefix), from now on.
func NewMeter(t testing.TB, prefix string) *Meter {
	t.Helper()
	m := &Meter{t: t, prefix: prefix}
	m.last = m.read()
	return m
}

func (m *Meter) read() localstack.Capacity {
	m.t.Helper()
	c, err := localstack.ReadCapacity(Context(m.t), Endpoint(), m.prefix)
	if err != nil {
		m.t.Fatalf("testenv: read the units of %s*: %v", m.prefix, err)
	}
	return c
}

// Take returns the units billed since the last Take (or NewMeter), with
// table names relative to the prefix: "tasks", index "tasks/by_status",
// Partition{Table: "tasks", Index: "by_status", Key: "in_progress"}.
func (m *Meter) Take() localstack.Capacity {
	m.t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.read()
	d := now.Sub(m.last)
	m.last = now
	return Unprefixed(d, m.prefix)
}

// Unprefixed returns c with prefix taken off every table name.
func Unprefixed(c localstack.Capacity, prefix string) localstack.Capacity {
	out := localstack.Capacity{Tables: map[string]localstack.Units{}, Indexes: map[string]localstack.Units{}, Partitions: map[localstack.Partition]localstack.Units{}}
	for k, v := range c.Tables {
		out.Tables[strings.TrimPrefix(k, prefix)] = v
	}
	for k, v := range c.Indexes {
		out.Indexes[strings.TrimPrefix(k, prefix)] = v
	}
	for k, v := range c.Partitions {
		k.Table = strings.TrimPrefix(k.Table, prefix)
		out.Partitions[k] = v
	}
	return out
}
