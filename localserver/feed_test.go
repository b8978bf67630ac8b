package localserver

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/checkout-dev/checkout/internal/testenv"
)

// The fleet feed shows a transition as soon as it is answered: the server
// waits for the writes in flight and applies the change stream before it
// reads (the pollers here run once an hour). Before, the feed was read up
// to two seconds (its settle) before now, and a read right after a
// transition showed nothing of it.
func TestFeedShowsAnsweredTransitionsAtOnce(t *testing.T) {
	t.Parallel()
	srv, err := Start(context.Background(), Config{
		Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: testenv.Prefix(),
		SweepInterval: -1, StreamPollInterval: 1 << 62,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base, admin := srv.URL(), srv.AdminKey()
	since := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	for i := range 5 {
		id := fmt.Sprintf("f%d", i)
		if code, m := call(t, "POST", base+"/api/tasks", admin, fmt.Sprintf(`{"task_id":%q}`, id)); code != 201 {
			t.Fatalf("create %s: %d %v", id, code, m)
		}
		if code, m := call(t, "POST", base+"/api/tasks/"+id+"/checkout", admin, `{"run_id":"r"}`); code != 200 {
			t.Fatalf("checkout %s: %d %v", id, code, m)
		}
		if code, m := call(t, "POST", base+"/api/tasks/"+id+"/release", admin, `{"run_id":"r"}`); code != 200 {
			t.Fatalf("release %s: %d %v", id, code, m)
		}
		code, m := call(t, "GET", base+"/api/events?since="+url.QueryEscape(since), admin, "")
		if code != 200 {
			t.Fatalf("feed: %d %v", code, m)
		}
		var mine []string
		for _, e := range m["events"].([]any) {
			if ev := e.(map[string]any); ev["task_id"] == id {
				mine = append(mine, ev["type"].(string))
			}
		}
		if fmt.Sprint(mine) != "[checkout release]" {
			t.Fatalf("the feed right after %s's release shows %v of it, want checkout, release", id, mine)
		}
	}
}

// A follower of the feed, reading with its cursor while agents check
// tasks out and release them, sees every event exactly once, in each
// task's order: reading up to the moment asked for never lets a cursor
// pass an event still on its way.
func TestFeedFollowerSeesEveryEventOnceWhileWritesRace(t *testing.T) {
	t.Parallel()
	srv, err := Start(context.Background(), Config{
		Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: testenv.Prefix(),
		SweepInterval: -1, StreamPollInterval: 20 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	base, admin := srv.URL(), srv.AdminKey()
	since := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	const workers, cycles = 4, 12
	for w := range workers {
		if code, m := call(t, "POST", base+"/api/tasks", admin, fmt.Sprintf(`{"task_id":"w%d"}`, w)); code != 201 {
			t.Fatalf("create: %d %v", code, m)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			id := fmt.Sprintf("w%d", w)
			for c := range cycles {
				run := fmt.Sprintf(`{"run_id":"r%d"}`, c)
				for _, op := range []string{"checkout", "release"} {
					code, err := post(base+"/api/tasks/"+id+"/"+op, admin, run)
					if err != nil {
						errs <- fmt.Errorf("%s %s: %w", op, id, err)
						return
					}
					if code != 200 {
						errs <- fmt.Errorf("%s %s: %d, want 200", op, id, code)
						return
					}
				}
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	seen := map[string][]string{} // task -> "type/fence" in feed order
	cursor := ""
	read := func() {
		t.Helper()
		q := "since=" + url.QueryEscape(since)
		if cursor != "" {
			q = "cursor=" + url.QueryEscape(cursor)
		}
		code, m := call(t, "GET", base+"/api/events?limit=1000&"+q, admin, "")
		if code != 200 {
			t.Fatalf("feed: %d %v", code, m)
		}
		for _, e := range m["events"].([]any) {
			ev := e.(map[string]any)
			id := ev["task_id"].(string)
			seen[id] = append(seen[id], fmt.Sprintf("%s/%v", ev["type"], ev["fence"]))
		}
		cursor = m["next_cursor"].(string)
	}
	for following := true; following; {
		select {
		case <-done:
			following = false
		default:
		}
		read()
	}
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	read() // after the last write was answered: everything, at once
	for w := range workers {
		id := fmt.Sprintf("w%d", w)
		var want []string
		for c := range cycles {
			want = append(want, fmt.Sprintf("checkout/%d", c+1), fmt.Sprintf("release/%d", c+1))
		}
		if got := seen[id]; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: the follower saw %v, want every event once, in order: %v", id, got, want)
		}
	}
}

// Under index lag (DynamoDB's indexes trail their table; the project's
// dynalite does too with DYNALITE_INDEX_LAG), a follower that reads the
// feed right after a transition, before the feed's index shows it, gets
// that event from its cursor once the index does. Before, the server read
// the feed up to the moment asked whatever its index showed: the page was
// caught up, its cursor passed the event, and the follower never saw it.
func TestFeedFollowerGetsAnEventTheIndexShowsLate(t *testing.T) {
	t.Parallel()
	prefix := testenv.Prefix()
	srv, err := Start(context.Background(), Config{
		Addr: "127.0.0.1:0", DynamoEndpoint: testenv.Endpoint(), TablePrefix: prefix,
		SweepInterval: -1, StreamPollInterval: 1 << 62,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	testenv.IndexLag(t, prefix, 500*time.Millisecond)
	base, admin := srv.URL(), srv.AdminKey()
	since := time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	if code, m := call(t, "POST", base+"/api/tasks", admin, `{"task_id":"late"}`); code != 201 {
		t.Fatalf("create: %d %v", code, m)
	}
	if code, m := call(t, "POST", base+"/api/tasks/late/checkout", admin, `{}`); code != 200 {
		t.Fatalf("checkout: %d %v", code, m)
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
	cursor := read("since=" + url.QueryEscape(since)) // before the index shows the checkout
	testenv.CaughtUp(t, prefix)
	read("cursor=" + url.QueryEscape(cursor))
	if fmt.Sprint(seen) != "[checkout]" {
		t.Fatalf("the follower saw %v, want the checkout once", seen)
	}
}

// post makes one request from any goroutine (call is the test's own).
func post(u, key, body string) (int, error) {
	req, err := http.NewRequest("POST", u, strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return resp.StatusCode, err
	}
	return resp.StatusCode, nil
}
