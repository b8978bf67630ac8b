package localserver

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
)

// streamFailingProxy passes every request to the DynamoDB endpoint but
// the Streams API's GetRecords, which it refuses while failing is set: the
// server's reads of the change stream fail, as they do while the stream
// is slow or the database hiccups.
func streamFailingProxy(t *testing.T) (*httptest.Server, *atomic.Bool) {
	t.Helper()
	target, err := url.Parse(testenv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	failing := &atomic.Bool{}
	pass := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if failing.Load() && strings.HasSuffix(r.Header.Get("X-Amz-Target"), ".GetRecords") {
			w.Header().Set("Content-Type", "application/x-amz-json-1.0")
			w.WriteHeader(http.StatusBadRequest)
			fmt.Fprint(w, `{"__type":"com.amazon.coral.validate#ValidationException","message":"the stream is held up"}`)
			return
		}
		pass.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, failing
}

// A follower of the feed that reads while the server cannot apply the
// change stream gets a page read up to the feed's settle time before now
// (the server cannot say what is archived), and its cursor passes that.
// A transition made before such a read and archived once the stream is
// applied again, more than the settle time later, must still reach the
// follower: it is keyed in the feed at when it was archived, as in AWS.
// Before, it was keyed at its own time, behind the cursor, and the
// follower never saw it.
func TestFeedFollowerSeesAnEventArchivedAfterAHeldUpStream(t *testing.T) {
	t.Parallel()
	proxy, failing := streamFailingProxy(t)
	prefix := testenv.Prefix()
	var offset atomic.Int64 // how far the server's clock is ahead of the wall clock
	clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	srv, err := Start(context.Background(), Config{
		Addr: "127.0.0.1:0", DynamoEndpoint: proxy.URL, TablePrefix: prefix,
		SweepInterval: -1, StreamPollInterval: 1 << 62, Now: clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base, admin := srv.URL(), srv.AdminKey()
	since := clock().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	if code, m := call(t, "POST", base+"/api/tasks", admin, `{"task_id":"held"}`); code != 201 {
		t.Fatalf("create: %d %v", code, m)
	}
	var seen []string
	read := func(q string) string {
		t.Helper()
		code, m := call(t, "GET", base+"/api/events?"+q, admin, "")
		if code != 200 {
			t.Fatalf("feed: %d %v", code, m)
		}
		for _, e := range m["events"].([]any) {
			seen = append(seen, e.(map[string]any)["type"].(string))
		}
		return m["next_cursor"].(string)
	}
	cursor := read("since=" + url.QueryEscape(since))

	failing.Store(true)
	if code, m := call(t, "POST", base+"/api/tasks/held/checkout", admin, `{}`); code != 200 {
		t.Fatalf("checkout: %d %v", code, m)
	}
	// Three seconds on, the stream still held up: the page reads up to
	// the settle time (2 s) before now, past the checkout.
	offset.Add(int64(3 * time.Second))
	cursor = read("cursor=" + url.QueryEscape(cursor))
	if len(seen) != 0 {
		t.Fatalf("the follower saw %v before the stream was applied", seen)
	}
	// The stream is applied again, by the follower's next read (which
	// reads up to when it was asked, before the archive); the follower
	// follows on once the feed's index shows the archive.
	failing.Store(false)
	cursor = read("cursor=" + url.QueryEscape(cursor))
	testenv.CaughtUp(t, prefix)
	offset.Add(int64(3 * time.Second))
	read("cursor=" + url.QueryEscape(cursor))
	if fmt.Sprint(seen) != "[checkout]" {
		followed := seen
		seen = nil
		read("since=" + url.QueryEscape(since))
		t.Fatalf("the follower saw %v, want the checkout once (a read from the start now shows %v)", followed, seen)
	}
}
