package localserver

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
)

// The sweep as the server starts that fails (its first Query of the
// lease-expiry index refused once, as a transient database error would
// be) must leave its window to the watch, as a failed watch sweep does:
// the leases that expired while no server ran are then ended at the next
// look, not at the interval's first tick (here an hour): until a sweep
// succeeds, the watch's window starts before every expiry.
func TestAFailedStartUpSweepLeavesItsLeasesToTheWatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	proxy, armed, hits := sweepRefusingProxy(t)
	prefix := testenv.Prefix()
	clock := &movedClock{now: time.Now()}
	cfg := Config{
		Addr: "127.0.0.1:0", DynamoEndpoint: proxy.URL, TablePrefix: prefix,
		SweepInterval: time.Hour, Now: clock.Now, AdminKey: "ck_restart_admin_" + strings.TrimSuffix(prefix, "-"),
	}
	first, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	key := first.AdminKey()
	if st, b := call(t, "POST", first.URL()+"/api/tasks", key, `{"task_id":"t"}`); st != 201 {
		t.Fatalf("create: %d %v", st, b)
	}
	if st, b := call(t, "POST", first.URL()+"/api/tasks/t/checkout", key, `{"timeout":"1s"}`); st != 200 {
		t.Fatalf("checkout: %d %v", st, b)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second) // the lease expires while no server runs
	armed.Store(1)                 // and the sweep as the next one starts fails
	second, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	for deadline := time.Now().Add(watchWithin); hits.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("no sweep queried the lease-expiry index within %v of the start", watchWithin)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if last, ok := lastEventIs(t, second.URL(), key, "t", "timeout", watchWithin); !ok {
		t.Errorf("t: last event %q %v after a failed start-up sweep; want timeout (not left to the first tick, an hour on)", last, watchWithin)
		sweepShows(t, second, second.URL(), key, "t", "timeout")
	}
}
