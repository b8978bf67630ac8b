package localserver

// The sweep loop's edges: a sweep the watch started that fails, and
// leases that expired while no server ran. Each is ended within seconds,
// not at the interval's next tick (here an hour away).

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
)

// movedClock is an injected clock tests move.
type movedClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *movedClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *movedClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// watchWithin bounds the tests' waits for what the sweep loop's watch
// does: well below the interval's tick (an hour in these tests), so that
// only the watch can have done it in time, and well above what the watch
// takes on a loaded machine. It is no measure of the watch's promptness:
// there the watch's sweep and the change stream's poll behind it took
// over 6 s against a busy database, though the watch looks every second.
const watchWithin = 30 * time.Second

// lastEventIs waits (real time, bounded by within) for the task's last
// event to be typ, and reports the last event seen.
func lastEventIs(t *testing.T, url, key, id, typ string, within time.Duration) (string, bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	last := ""
	for {
		_, b := call(t, "GET", url+"/api/tasks/"+id+"/events", key, "")
		evs, _ := b["events"].([]any)
		if len(evs) > 0 {
			last, _ = evs[len(evs)-1].(map[string]any)["type"].(string)
		}
		if last == typ {
			return last, true
		}
		if time.Now().After(deadline) {
			return last, false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sweepShows runs the sweep the tick would run, and checks that it ends
// the lease as typ: what the loop should have done by itself.
func sweepShows(t *testing.T, srv *Server, u, key, id, typ string) {
	t.Helper()
	res, err := srv.Sweep(context.Background())
	if last, ok := lastEventIs(t, u, key, id, typ, 2*time.Second); !ok {
		t.Fatalf("a sweep by hand (%+v, %v) did not end it either: last event %q", res, err, last)
	}
	t.Logf("a sweep by hand (the tick's) ends it: %+v", res)
}

// sweepRefusingProxy is a proxy to the test's DynamoDB that, once armed
// (armed set to 1), refuses the next sweep Query of the lease-expiry
// index (not a watch's SELECT COUNT), as a transient database error
// would, counting it in hits.
func sweepRefusingProxy(t *testing.T) (proxy *httptest.Server, armed, hits *atomic.Int32) {
	t.Helper()
	target, err := url.Parse(testenv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	armed, hits = new(atomic.Int32), new(atomic.Int32)
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		if strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".Query") &&
			bytes.Contains(body, []byte(`"IndexName":"by_lease_expiry"`)) && !bytes.Contains(body, []byte(`"COUNT"`)) &&
			armed.CompareAndSwap(1, 0) {
			hits.Add(1)
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"__type":"com.amazonaws.dynamodb.v20120810#ValidationException","message":"a sweep's query refused once by the test"}`)
			return
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	return proxy, armed, hits
}

// A sweep the watch started that fails (here its first Query of the
// lease-expiry index is refused once, as a transient database error
// would be) keeps the watch's window: the next look sweeps again, and the
// lease is ended within seconds, not at the next tick.
func TestAFailedWatchSweepIsTriedAgainAtTheNextLook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	proxy, armed, hits := sweepRefusingProxy(t)
	clock := &movedClock{now: time.Now()}
	swept := make(chan error, 64)
	srv, err := Start(ctx, Config{
		Addr: "127.0.0.1:0", DynamoEndpoint: proxy.URL, TablePrefix: testenv.Prefix(),
		SweepInterval: time.Hour, Now: clock.Now,
		swept: func(err error) {
			select {
			case swept <- err:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	key, u := srv.AdminKey(), srv.URL()
	// The sweep as the server starts ends before the proxy is armed, so
	// the Query refused is a later sweep's: the tick is an hour away, so
	// the watch's.
	select {
	case err := <-swept:
		if err != nil {
			t.Fatalf("the sweep as the server started: %v", err)
		}
	case <-time.After(watchWithin):
		t.Fatalf("no sweep as the server started within %v", watchWithin)
	}
	if st, b := call(t, "POST", u+"/api/tasks", key, `{"task_id":"t1"}`); st != 201 {
		t.Fatalf("create: %d %v", st, b)
	}
	if st, b := call(t, "POST", u+"/api/tasks/t1/checkout", key, `{"timeout":"1s"}`); st != 200 {
		t.Fatalf("checkout: %d %v", st, b)
	}
	armed.Store(1)
	clock.Advance(2 * time.Second) // past the lease: the watch sees it and sweeps, and that sweep fails
	for deadline := time.Now().Add(watchWithin); hits.Load() == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("no sweep queried the lease-expiry index within %v of the lease's expiry", watchWithin)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for failed := false; !failed; {
		select {
		case err := <-swept:
			failed = err != nil && strings.Contains(err.Error(), "refused once by the test")
		case <-time.After(watchWithin):
			t.Fatalf("no sweep failed on the refused Query within %v", watchWithin)
		}
	}
	// The database answers again; the watch keeps looking every second.
	if last, ok := lastEventIs(t, u, key, "t1", "timeout", watchWithin); !ok {
		t.Errorf("t1: last event %q %v after the failed sweep; want timeout (not left to the hourly tick)", last, watchWithin)
		sweepShows(t, srv, u, key, "t1", "timeout")
	}
}

// Leases that expired while the server was stopped (its data kept: a
// DataDir, or an endpoint of its own) are swept as it starts, not at the
// first tick (15 s by default; here an hour): the watch's first window
// starts after their expiries.
func TestALeaseExpiredBeforeTheServerStartedIsSweptAsItStarts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	prefix := testenv.Prefix()
	clock := &movedClock{now: time.Now()}
	cfg := Config{
		Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: prefix,
		SweepInterval: time.Hour, Now: clock.Now, AdminKey: "ck_restart_admin_" + strings.TrimSuffix(prefix, "-"),
	}
	first, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	key, u := first.AdminKey(), first.URL()
	if st, b := call(t, "POST", u+"/api/tasks", key, `{"task_id":"t"}`); st != 201 {
		t.Fatalf("create: %d %v", st, b)
	}
	if st, b := call(t, "POST", u+"/api/tasks/t/checkout", key, `{"timeout":"1s"}`); st != 200 {
		t.Fatalf("checkout: %d %v", st, b)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(2 * time.Second) // the lease expires while no server runs
	second, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if last, ok := lastEventIs(t, second.URL(), key, "t", "timeout", watchWithin); !ok {
		t.Errorf("t: last event %q %v after the restart; want timeout (not left to the first tick, an hour on)", last, watchWithin)
		sweepShows(t, second, second.URL(), key, "t", "timeout")
	}
}
