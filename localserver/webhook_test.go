package localserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
	"github.com/checkout-dev/checkout/internal/webhook"
	"github.com/checkout-dev/checkout/internal/webhook/webhooktest"
	"github.com/checkout-dev/checkout/lease"
)

// recorder remembers every notice the stream hands over, and can fail the
// first calls (a bus that is down), which makes the poller hand the same
// batch again.
type recorder struct {
	mu       sync.Mutex
	ids      []string
	failNext int
}

func (r *recorder) Notify(_ context.Context, n lease.Notice) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, n.ID)
	if r.failNext > 0 {
		r.failNext--
		return errors.New("the bus is down")
	}
	return nil
}

func (r *recorder) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ids...)
}

// With a webhook configured, every notice of the change stream reaches a
// real receiver, signed, at least once, through a receiver that fails for
// a while and a batch that is handed again; repeats happen only under
// those retries and carry the same event id and body. The fleet feed then
// lists every transition once, in order per task, as each task's trail
// does.
func TestWebhooksAndFeed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	recv := webhooktest.New("whsec_local")
	defer recv.Close()
	dead := filepath.Join(t.TempDir(), webhook.DeadLetterFile)
	hooks, err := webhook.New(webhook.Config{
		URLs: []string{recv.URL}, Secret: "whsec_local", DeadLetters: &webhook.FileDeadLetters{Path: dead},
		InitialBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, MaxElapsed: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	srv, err := Start(ctx, Config{
		Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: testenv.Prefix(),
		SweepInterval: -1, StreamPollInterval: -1, FeedSettle: -1,
		Notifier: webhook.Multi(rec, hooks),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base, key := srv.URL(), srv.AdminKey()
	start := time.Now().Add(-time.Second)

	tasks := []string{"h1", "h2", "h3", "h4", "h5", "h6"}
	for i, id := range tasks {
		if code, m := call(t, "POST", base+"/api/tasks", key, fmt.Sprintf(`{"task_id":%q}`, id)); code != 201 {
			t.Fatalf("create %s: %d %v", id, code, m)
		}
		timeout := "1h"
		if i%3 == 2 {
			timeout = "1s"
		}
		if code, m := call(t, "POST", base+"/api/tasks/"+id+"/checkout", key, fmt.Sprintf(`{"timeout":%q}`, timeout)); code != 200 {
			t.Fatalf("checkout %s: %d %v", id, code, m)
		}
	}
	// The receiver fails its next five deliveries; the first batch's
	// notices are handed over once more because the bus fails once.
	recv.FailNext(5, 503)
	rec.failNext = 1
	for i, id := range tasks {
		switch i % 3 {
		case 0:
			call(t, "POST", base+"/api/tasks/"+id+"/release", key, `{"reason":"done for now"}`)
		case 1:
			call(t, "POST", base+"/api/tasks/"+id+"/complete", key, `{}`)
		}
	}
	if err := srv.Drain(ctx); err == nil {
		t.Fatal("the bus failed, yet the batch was applied")
	}
	if err := srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	// Wall time: the server runs on the real clock, and the two leases of
	// 1s must have expired before the sweep.
	time.Sleep(1100 * time.Millisecond)
	if res, err := srv.Sweep(ctx); err != nil || res.Timeouts != 2 {
		t.Fatalf("sweep %+v %v", res, err)
	}
	recv.FailFor(300*time.Millisecond, 500, 0)
	if err := srv.Drain(ctx); err != nil {
		t.Fatal(err)
	}

	// Every notice, delivered at least once; more than once only when its
	// batch was handed again; always the same body under the same id.
	handed := map[string]int{}
	for _, id := range rec.seen() {
		handed[id]++
	}
	got := recv.Delivered()
	// Releases: LeaseEnded and TaskAvailable; timeouts: those and LeaseLost
	// to the former holder; completions: LeaseEnded.
	if len(handed) != 2*2+2*3+2*1 {
		t.Fatalf("%d notices: %v", len(handed), handed)
	}
	for id, n := range handed {
		if got[id] < 1 {
			t.Fatalf("notice %s never delivered (delivered: %v)", id, got)
		}
		if got[id] > n {
			t.Fatalf("notice %s delivered %d times but handed over %d", id, got[id], n)
		}
		ps := recv.Payloads(id)
		for _, p := range ps {
			if !reflect.DeepEqual(p, ps[0]) || p.ID != id {
				t.Fatalf("deliveries of %s differ: %+v", id, ps)
			}
		}
	}
	for id := range got {
		if handed[id] == 0 {
			t.Fatalf("delivered %s, which the stream never produced", id)
		}
	}
	if recv.Rejected() != 0 {
		t.Fatalf("%d deliveries with a bad signature", recv.Rejected())
	}
	if d, _ := webhook.ReadDeadLetters(dead); len(d) != 0 {
		t.Fatalf("dead letters %+v", d)
	}

	// The feed, through the API, a page of three at a time.
	var feed []map[string]any
	q := "since=" + url.QueryEscape(start.UTC().Format(time.RFC3339Nano)) + "&limit=3"
	for range 100 {
		code, m := call(t, "GET", base+"/api/events?"+q, key, "")
		if code != 200 {
			t.Fatalf("GET /api/events: %d %v", code, m)
		}
		evs, _ := m["events"].([]any)
		cur, _ := m["next_cursor"].(string)
		if cur == "" {
			t.Fatalf("no next_cursor: %v", m)
		}
		for _, e := range evs {
			feed = append(feed, e.(map[string]any))
		}
		if len(evs) == 0 {
			break
		}
		q = "cursor=" + url.QueryEscape(cur) + "&limit=3"
		if len(feed)%2 == 0 {
			q = "since=" + url.QueryEscape(cur) + "&limit=3" // since takes a cursor too
		}
	}
	perTask := map[string][]string{}
	for _, e := range feed {
		perTask[e["task_id"].(string)] = append(perTask[e["task_id"].(string)], fmt.Sprint(e["type"], e["fence"], e["at"]))
	}
	for _, id := range tasks {
		_, m := call(t, "GET", base+"/api/tasks/"+id+"/events", key, "")
		var want []string
		for _, e := range m["events"].([]any) {
			e := e.(map[string]any)
			want = append(want, fmt.Sprint(e["type"], e["fence"], e["at"]))
		}
		if !slices.Equal(perTask[id], want) {
			t.Fatalf("task %s: feed %v, trail %v", id, perTask[id], want)
		}
	}
	if code, m := call(t, "GET", base+"/api/events?type=timeout", key, ""); code != 200 || len(m["events"].([]any)) != 2 {
		t.Fatalf("type=timeout: %d %v", code, m)
	}
	for _, bad := range []string{"since=yesterday", "cursor=abc", "limit=0", "limit=1001", "type=explode"} {
		if code, m := call(t, "GET", base+"/api/events?"+bad, key, ""); code != 400 || m["code"] != "invalid_request" {
			t.Fatalf("%s: %d %v", bad, code, m)
		}
	}
}
