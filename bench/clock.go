package bench

import (
	"time"

	"github.com/checkout-dev/checkout/internal/testclock"
)

// NewClock returns a clock that moves only when told to, starting at the
// current time: the tests' own clock, so that a run's leases expire when
// the run says.
func NewClock() *testclock.Clock { return testclock.New(time.Now().UTC().Truncate(time.Millisecond)) }
